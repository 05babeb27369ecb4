/* SPDX-License-Identifier: Apache-2.0 */
/*
 * direct: device delivery straight from a pipeline's data file (a pipeline
 * with `direct = on`). Part of the GPU threads: only they call these (one direct_scratch per thread).
 *
 * Why: in staging delivery every byte crosses host memory three times (the
 * worker reads the page cache and writes the staging slot, then the GPU's
 * DMA reads the slot). On the H100 host, 15 threads copying leave the bus
 * 42-44 of its 54 GB/s, and staging delivery reaches 66-72% of it. When a
 * sample is a plain byte range of the file (raw records; tokens delivered
 * in their stored dtype), nothing needs the CPU: the file is mapped
 * read-only and page-locked once (cudaHostRegister), and each batch is one
 * batched copy, one DMA per sample, from the page cache into the client's
 * device slot. Workers are not involved.
 *
 * The cost: the whole file is read into memory and stays locked there for
 * the daemon's life, so direct_register refuses a file larger than half of
 * the machine's memory. Host delivery from the same pipeline is unchanged
 * (workers, staging slots). Samples under 64 KiB copy below staging speed
 * (one DMA per sample; 4 KiB samples measured 4-7 GB/s).
 */
#ifndef LDR_DAEMON_DIRECT_H
#define LDR_DAEMON_DIRECT_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon/source/source.h"

#define DIRECT_WHY_MAX 320

struct direct_source {
	const struct source *src;
	const uint8_t *base; /* the file's read-only mapping, page-locked */
	uint64_t bytes;      /* bytes mapped and locked */
	bool ok;
	char why[DIRECT_WHY_MAX]; /* when !ok: why the pipeline goes through staging */
};

/* Maps and page-locks src's file. Returns true, or false with d->why
 * naming the pipeline, the file and the reason. */
bool direct_register(struct direct_source *d, const struct source *src);
void direct_unregister(struct direct_source *d);

/* Scratch for direct_copy's per-sample address lists, kept between batches. */
struct direct_scratch {
	void **dsts;
	const void **srcs;
	size_t *sizes;
	uint32_t cap;
	bool no_batch_api; /* the driver lacks cudaMemcpyBatchAsync: one call per sample */
};

/* Enqueues on `stream` the copy of `rows` samples, sample i from file byte
 * offsets[i], into consecutive rows at dst; samples adjacent in both go as
 * one copy. On failure, text says which
 * sample or call failed. */
cudaError_t direct_copy(const struct direct_source *d, struct direct_scratch *sc,
			cudaStream_t stream, uint8_t *dst, const uint64_t *offsets, uint32_t rows,
			char *text, size_t cap);
void direct_scratch_free(struct direct_scratch *sc);

#endif
