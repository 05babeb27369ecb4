/* SPDX-License-Identifier: Apache-2.0 */
/* direct: device delivery straight from a pipeline's data file (direct.h). */
#include "daemon/gpu/direct.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cudaerr.h"

static bool refuse(struct direct_source *d, const char *fmt, const char *detail)
{
	int n = snprintf(d->why, sizeof(d->why), "pipeline \"%s\": %.200s: ", d->src->cfg->name,
			 d->src->data_path);
	if (n > 0 && (size_t)n < sizeof(d->why))
		snprintf(d->why + n, sizeof(d->why) - (size_t)n, fmt, detail);
	return false;
}

bool direct_register(struct direct_source *d, const struct source *src)
{
	memset(d, 0, sizeof(*d));
	d->src = src;
	char text[160];
	uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	if (src->file_bytes > mem / 2) {
		snprintf(text, sizeof(text), "%" PRIu64 " bytes, more than half of this machine's %"
			 PRIu64 " bytes of memory", src->file_bytes, mem);
		return refuse(d, "direct = on locks the whole file in memory; it is %s", text);
	}
	int fd = open(src->data_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return refuse(d, "cannot open it for direct delivery: %s", strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < src->file_bytes) {
		snprintf(text, sizeof(text), "%" PRIu64 " bytes at start, %lld now", src->file_bytes,
			 (long long)st.st_size);
		close(fd);
		return refuse(d, "the file shrank (%s)", text);
	}
	void *map = mmap(NULL, src->file_bytes, PROT_READ, MAP_SHARED, fd, 0);
	int saved = errno;
	close(fd);
	if (map == MAP_FAILED)
		return refuse(d, "mmap: %s", strerror(saved));
	/* Read-only: the GPU only reads the file, and a write pin of a
	 * file-backed mapping is refused by recent kernels. */
	cudaError_t e = cudaHostRegister(map, src->file_bytes,
					 cudaHostRegisterReadOnly | cudaHostRegisterPortable);
	if (e != cudaSuccess) {
		munmap(map, src->file_bytes);
		return refuse(d, "cudaHostRegister of the file's read-only mapping: %s",
			      cudaerr_text(e, text, sizeof(text)));
	}
	d->base = map;
	d->bytes = src->file_bytes;
	d->ok = true;
	return true;
}

void direct_unregister(struct direct_source *d)
{
	if (!d->ok)
		return;
	cudaHostUnregister((void *)d->base);
	munmap((void *)d->base, d->bytes);
	d->ok = false;
	d->base = NULL;
}

static bool scratch_reserve(struct direct_scratch *sc, uint32_t rows)
{
	if (rows <= sc->cap)
		return true;
	void **dsts = realloc(sc->dsts, rows * sizeof(*dsts));
	if (dsts)
		sc->dsts = dsts;
	const void **srcs = realloc(sc->srcs, rows * sizeof(*srcs));
	if (srcs)
		sc->srcs = srcs;
	size_t *sizes = realloc(sc->sizes, rows * sizeof(*sizes));
	if (sizes)
		sc->sizes = sizes;
	if (!dsts || !srcs || !sizes)
		return false;
	sc->cap = rows;
	return true;
}

/* One call for the whole batch where the runtime has it (CUDA 12.8+; the
 * failIdx argument went away in 13.0); a single run is a plain copy. */
static cudaError_t copy_batch(struct direct_scratch *sc, uint32_t rows, cudaStream_t stream)
{
#if CUDART_VERSION >= 12080
	if (!sc->no_batch_api && rows > 1) {
		struct cudaMemcpyAttributes attr;
		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
		size_t attr_index = 0;
#if CUDART_VERSION >= 13000
		cudaError_t e = cudaMemcpyBatchAsync(sc->dsts, sc->srcs, sc->sizes, rows, &attr,
						     &attr_index, 1, stream);
#else
		size_t fail_index = 0;
		cudaError_t e = cudaMemcpyBatchAsync(sc->dsts, (void **)sc->srcs, sc->sizes, rows, &attr,
						     &attr_index, 1, &fail_index, stream);
#endif
		if (e != cudaErrorNotSupported && e != cudaErrorCallRequiresNewerDriver)
			return e;
		cudaGetLastError();
		sc->no_batch_api = true;
	}
#endif
	for (uint32_t i = 0; i < rows; i++) {
		cudaError_t e = cudaMemcpyAsync(sc->dsts[i], sc->srcs[i], sc->sizes[i],
						cudaMemcpyHostToDevice, stream);
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

cudaError_t direct_copy(const struct direct_source *d, struct direct_scratch *sc,
			cudaStream_t stream, uint8_t *dst, const uint64_t *offsets, uint32_t rows,
			char *text, size_t cap)
{
	uint64_t len = d->src->desc.sample_read_bytes, stride = d->src->row_bytes[0];
	if (!scratch_reserve(sc, rows)) {
		snprintf(text, cap, "out of memory for a batch of %u samples", rows);
		return cudaErrorMemoryAllocation;
	}
	for (uint32_t i = 0; i < rows; i++) {
		if (offsets[i] > d->bytes || d->bytes - offsets[i] < len) {
			snprintf(text, cap, "pipeline \"%s\": %.300s: bytes %" PRIu64 "..%" PRIu64
				 " lie beyond the %" PRIu64 " bytes locked at start", d->src->cfg->name,
				 d->src->data_path, offsets[i], offsets[i] + len, d->bytes);
			return cudaErrorInvalidValue;
		}
	}
	/* Samples that follow each other in the file and in the slot (rows
	 * without padding, read in file order) go as one copy. */
	uint32_t n = 0;
	for (uint32_t i = 0; i < rows; i++) {
		uint8_t *to = dst + i * stride;
		const uint8_t *from = d->base + offsets[i];
		if (n > 0 && (uint8_t *)sc->dsts[n - 1] + sc->sizes[n - 1] == to &&
		    (const uint8_t *)sc->srcs[n - 1] + sc->sizes[n - 1] == from) {
			sc->sizes[n - 1] += len;
			continue;
		}
		sc->dsts[n] = to;
		sc->srcs[n] = from;
		sc->sizes[n++] = len;
	}
	cudaError_t e = copy_batch(sc, n, stream);
	char why[256];
	if (e != cudaSuccess)
		snprintf(text, cap, "copying a batch of %u samples from %.300s: %s", rows,
			 d->src->data_path, cudaerr_text(e, why, sizeof(why)));
	return e;
}

void direct_scratch_free(struct direct_scratch *sc)
{
	free(sc->dsts);
	free(sc->srcs);
	free(sc->sizes);
	memset(sc, 0, sizeof(*sc));
}
