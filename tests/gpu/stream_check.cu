/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stream_check: checks, on a real GPU, that device delivery orders the
 * client's kernels against the daemon's copies with the ready and released
 * events alone, the host never waiting for the GPU.
 *
 *   stream_check --socket PATH --pipeline NAME --data FILE --record-bytes N
 *                --batches N (--busy | --idle) [--depth D] [--spin-us US]
 *                [--no-ready-wait] [--release-elsewhere]
 *
 * It attaches to a raw pipeline with device "0" and, for every batch, on one
 * non-blocking stream of its own: ldr_stream_wait, (--busy: a kernel that
 * spins for --spin-us, default 2000), a checksum kernel that reads the whole
 * slot, ldr_release_stream. The host does not synchronise per batch, so the
 * daemon refills the ring as fast as the released events let it. Each row's
 * checksum lands in a device array; at the end one copy brings them back and
 * they are compared with the same checksum of the record that
 * ldr_sample_index() names, computed here from the data file.
 *
 *   --no-ready-wait      no ldr_stream_wait: the daemon sends READY only
 *                        once the copy has landed, so the kernels must see
 *                        the batch all the same;
 *   --release-elsewhere  a negative control: the released event is recorded
 *                        on a second, idle stream, so the daemon's next copy
 *                        into the slot may overwrite it while the busy
 *                        stream still reads it; the comparison must notice.
 *
 * Row checksum: the row as 8-byte little-endian words w_i (the tail
 * zero-padded), sum of w_i * (2i + 1) mod 2^64: position-dependent, so
 * swapped or shifted words show, and cheap enough to read the whole slot.
 *
 * stdout: "stream_check: batches=N rows=R mismatches=M". Exit codes: 0 no
 * mismatch, 1 mismatches, 2 usage, 3 a client library call failed, 4 a
 * CUDA call failed, 5 an I/O failure (the data file, stdout); the message
 * on stderr names the call.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loaderd.h"

#define CUDA_PROG_NAME "stream_check"
#include "tools/cuda_prog.h"

#define EXIT_MATCH 0
#define EXIT_MISMATCH 1 /* and the others of tools/cuda_prog.h */

#define CHECKSUM_THREADS 256
#define NEXT_TIMEOUT_MS 30000
#define MISMATCHES_SHOWN 5

struct options {
	const char *socket;
	const char *pipeline;
	const char *data;
	uint64_t record_bytes;
	uint64_t batches;
	unsigned depth;
	unsigned spin_us;
	int busy; /* -1 until --busy or --idle */
	bool no_ready_wait;
	bool release_elsewhere;
};

/* Spins on the SM clock: keeps the stream busy for `cycles` without
 * touching memory. */
__global__ void spin_kernel(long long cycles)
{
	long long start = clock64();
	while (clock64() - start < cycles) {
	}
}

__device__ static unsigned long long load_word(const unsigned char *row, size_t word,
					       size_t row_bytes, bool aligned)
{
	if (aligned)
		return reinterpret_cast<const unsigned long long *>(row)[word];
	unsigned long long w = 0;
	size_t base = word * 8;
	for (unsigned k = 0; k < 8 && base + k < row_bytes; k++)
		w |= (unsigned long long)row[base + k] << (8 * k);
	return w;
}

/* One block per row; out[row] = the row's checksum. */
__global__ void checksum_kernel(const unsigned char *data, size_t row_bytes,
				unsigned long long *out)
{
	__shared__ unsigned long long partial[CHECKSUM_THREADS];
	const unsigned char *row = data + (size_t)blockIdx.x * row_bytes;
	size_t words = (row_bytes + 7) / 8;
	bool aligned = ((uintptr_t)row % 8) == 0 && row_bytes % 8 == 0;
	unsigned long long acc = 0;
	for (size_t i = threadIdx.x; i < words; i += blockDim.x)
		acc += load_word(row, i, row_bytes, aligned) * (2 * (unsigned long long)i + 1);
	partial[threadIdx.x] = acc;
	__syncthreads();
	for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
		if (threadIdx.x < s)
			partial[threadIdx.x] += partial[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = partial[0];
}

static uint64_t host_checksum(const unsigned char *row, size_t row_bytes)
{
	uint64_t acc = 0;
	for (size_t i = 0; i * 8 < row_bytes; i++) {
		uint64_t w = 0;
		for (unsigned k = 0; k < 8 && i * 8 + k < row_bytes; k++)
			w |= (uint64_t)row[i * 8 + k] << (8 * k);
		acc += w * (2 * (uint64_t)i + 1);
	}
	return acc;
}

static bool client_ok(int r, struct ldr_client *c, const char *call)
{
	if (r >= 0)
		return true;
	fprintf(stderr, "stream_check: %s: %s (%s)\n", call, c ? ldr_error(c) : "", strerror(-r));
	return false;
}

/* The checksum of every record of the data file, by sample index. */
static int reference_checksums(const char *path, size_t record_bytes, uint64_t **out,
			       uint64_t *n_records)
{
	int rc = CUDA_PROG_EXIT_IO;
	unsigned char *buf = NULL;
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "stream_check: %s: %s\n", path, strerror(errno));
		return rc;
	}
	buf = (unsigned char *)malloc(record_bytes);
	uint64_t cap = 1024, n = 0;
	uint64_t *sums = (uint64_t *)malloc(cap * sizeof(*sums));
	if (!buf || !sums) {
		fprintf(stderr, "stream_check: out of memory\n");
		goto free_sums;
	}
	for (;;) {
		size_t got = fread(buf, 1, record_bytes, f);
		if (got == 0)
			break;
		if (got != record_bytes) {
			fprintf(stderr, "stream_check: %s: %s\n", path,
				ferror(f) ? strerror(errno) : "size is not a multiple of --record-bytes");
			goto free_sums;
		}
		if (n == cap) {
			uint64_t *grown = (uint64_t *)realloc(sums, 2 * cap * sizeof(*sums));
			if (!grown) {
				fprintf(stderr, "stream_check: out of memory\n");
				goto free_sums;
			}
			sums = grown;
			cap *= 2;
		}
		sums[n++] = host_checksum(buf, record_bytes);
	}
	if (ferror(f)) {
		fprintf(stderr, "stream_check: %s: %s\n", path, strerror(errno));
		goto free_sums;
	}
	*out = sums;
	*n_records = n;
	sums = NULL;
	rc = 0;
free_sums:
	free(sums);
	free(buf);
	fclose(f);
	return rc;
}

static int usage(const char *msg)
{
	return cuda_prog_usage(msg,
		"usage: stream_check --socket PATH --pipeline NAME --data FILE --record-bytes N\n"
		"                    --batches N (--busy | --idle) [--depth D] [--spin-us US]\n"
		"                    [--no-ready-wait] [--release-elsewhere]\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"socket", required_argument, NULL, 's'},
		{"pipeline", required_argument, NULL, 'p'},
		{"data", required_argument, NULL, 'f'},
		{"record-bytes", required_argument, NULL, 'r'},
		{"batches", required_argument, NULL, 'n'},
		{"depth", required_argument, NULL, 'd'},
		{"spin-us", required_argument, NULL, 'u'},
		{"busy", no_argument, NULL, 'B'},
		{"idle", no_argument, NULL, 'I'},
		{"no-ready-wait", no_argument, NULL, 'W'},
		{"release-elsewhere", no_argument, NULL, 'E'},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->busy = -1;
	o->spin_us = 2000;
	int opt;
	uint64_t v;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': o->socket = optarg; break;
		case 'p': o->pipeline = optarg; break;
		case 'f': o->data = optarg; break;
		case 'r':
			if (!cuda_prog_parse_u64(optarg, 1u << 30, &o->record_bytes) ||
			    o->record_bytes == 0)
				return usage("--record-bytes: not an integer in 1..2^30");
			break;
		case 'n':
			if (!cuda_prog_parse_u64(optarg, 1u << 24, &o->batches) || o->batches == 0)
				return usage("--batches: not an integer in 1..2^24");
			break;
		case 'd':
			if (!cuda_prog_parse_u64(optarg, 1024, &v))
				return usage("--depth: not an integer in 0..1024");
			o->depth = (unsigned)v;
			break;
		case 'u':
			if (!cuda_prog_parse_u64(optarg, 10000000, &v))
				return usage("--spin-us: not an integer in 0..10000000");
			o->spin_us = (unsigned)v;
			break;
		case 'B': o->busy = 1; break;
		case 'I': o->busy = 0; break;
		case 'W': o->no_ready_wait = true; break;
		case 'E': o->release_elsewhere = true; break;
		default: return usage("unknown option");
		}
	}
	if (optind != argc)
		return usage("unexpected argument");
	if (!o->socket || !o->pipeline || !o->data || !o->record_bytes || !o->batches)
		return usage("--socket, --pipeline, --data, --record-bytes and --batches are required");
	if (o->busy < 0)
		return usage("one of --busy and --idle is required");
	return 0;
}

/* Takes o->batches batches and enqueues their kernels; fills the sample
 * index of every row (rows past a short batch's end stay UINT64_MAX).
 * Returns 0 or an exit code. */
static int stream_batches(struct ldr_client *c, const struct options *o, cudaStream_t work,
			  cudaStream_t other, long long spin_cycles, unsigned batch_size,
			  unsigned long long *d_sums, uint64_t *samples)
{
	for (uint64_t i = 0; i < o->batches; i++) {
		struct ldr_batch b;
		if (!client_ok(ldr_next(c, &b, NEXT_TIMEOUT_MS), c, "ldr_next"))
			return CUDA_PROG_EXIT_CLIENT;
		if (!b.on_device || b.n_tensors != 1 || b.rows == 0 || b.rows > batch_size ||
		    b.tensors[0].bytes != (size_t)b.rows * o->record_bytes) {
			fprintf(stderr, "stream_check: batch %" PRIu64 ": on_device %d, %u tensors, "
				"%u rows, %zu bytes: not one device tensor of rows * %" PRIu64 " bytes\n",
				i, b.on_device, b.n_tensors, b.rows, b.tensors[0].bytes, o->record_bytes);
			return CUDA_PROG_EXIT_CLIENT;
		}
		for (unsigned row = 0; row < b.rows; row++)
			samples[i * batch_size + row] = ldr_sample_index(c, &b, row);

		if (!o->no_ready_wait && !client_ok(ldr_stream_wait(c, &b, work), c, "ldr_stream_wait"))
			return CUDA_PROG_EXIT_CLIENT;
		if (o->busy) {
			spin_kernel<<<1, 1, 0, work>>>(spin_cycles);
			if (!cuda_prog_ok(cudaGetLastError(), "spin_kernel launch"))
				return CUDA_PROG_EXIT_CUDA;
		}
		checksum_kernel<<<b.rows, CHECKSUM_THREADS, 0, work>>>(
			(const unsigned char *)b.tensors[0].data, o->record_bytes,
			d_sums + i * batch_size);
		if (!cuda_prog_ok(cudaGetLastError(), "checksum_kernel launch"))
			return CUDA_PROG_EXIT_CUDA;
		if (!client_ok(ldr_release_stream(c, &b, o->release_elsewhere ? other : work), c,
			       "ldr_release_stream"))
			return CUDA_PROG_EXIT_CLIENT;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct options o;
	int rc = parse_options(argc, argv, &o);
	if (rc)
		return rc;

	uint64_t *reference = NULL, n_records = 0;
	rc = reference_checksums(o.data, o.record_bytes, &reference, &n_records);
	if (rc)
		return rc;

	struct ldr_client *c = NULL;
	cudaStream_t work = NULL, other = NULL;
	unsigned long long *d_sums = NULL, *h_sums = NULL;
	uint64_t *samples = NULL;
	uint64_t rows = 0, mismatches = 0;
	int clock_khz = 0;
	unsigned batch_size;
	size_t slots;
	double start, elapsed_s;

	rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_start() ||
	    !cuda_prog_ok(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0),
			  "cudaDeviceGetAttribute(cudaDevAttrClockRate)") ||
	    !cuda_prog_ok(cudaStreamCreateWithFlags(&work, cudaStreamNonBlocking),
			  "cudaStreamCreateWithFlags") ||
	    !cuda_prog_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking),
			  "cudaStreamCreateWithFlags"))
		goto destroy_streams;

	rc = CUDA_PROG_EXIT_CLIENT;
	struct ldr_attach_opts ao;
	memset(&ao, 0, sizeof(ao));
	ao.pipeline = o.pipeline;
	ao.depth = o.depth;
	ao.client_name = "stream_check";
	ao.device = "0";
	if (!client_ok(ldr_connect(o.socket, &c), c, "ldr_connect") ||
	    !client_ok(ldr_attach(c, &ao), c, "ldr_attach"))
		goto close_client;
	if (ldr_device_uuid(c)[0] == '\0') {
		fprintf(stderr, "stream_check: attached with device \"0\" but ldr_device_uuid is empty\n");
		goto close_client;
	}

	batch_size = ldr_batch_size(c);
	slots = (size_t)o.batches * batch_size;
	samples = (uint64_t *)malloc(slots * sizeof(*samples));
	h_sums = (unsigned long long *)malloc(slots * sizeof(*h_sums));
	if (!samples || !h_sums) {
		fprintf(stderr, "stream_check: out of memory\n");
		goto close_client;
	}
	for (size_t i = 0; i < slots; i++)
		samples[i] = UINT64_MAX;
	rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_ok(cudaMalloc(&d_sums, slots * sizeof(*d_sums)), "cudaMalloc"))
		goto close_client;

	start = cuda_prog_now_s();
	rc = stream_batches(c, &o, work, other, (long long)o.spin_us * clock_khz / 1000, batch_size,
			    d_sums, samples);
	if (rc)
		goto close_client;
	rc = CUDA_PROG_EXIT_CUDA;
	if (!cuda_prog_ok(cudaStreamSynchronize(work), "cudaStreamSynchronize") ||
	    !cuda_prog_ok(cudaStreamSynchronize(other), "cudaStreamSynchronize") ||
	    !cuda_prog_ok(cudaMemcpy(h_sums, d_sums, slots * sizeof(*h_sums),
				     cudaMemcpyDeviceToHost),
			  "cudaMemcpy"))
		goto close_client;
	elapsed_s = cuda_prog_now_s() - start;
	fprintf(stderr, "stream_check: %s%s%s, spin %u us, %.3f s, %.1f batches/s, GPU %s\n",
		o.busy ? "busy" : "idle", o.no_ready_wait ? ", no ready wait" : "",
		o.release_elsewhere ? ", released on another stream" : "", o.busy ? o.spin_us : 0,
		elapsed_s, (double)o.batches / elapsed_s, ldr_device_uuid(c));

	for (size_t i = 0; i < slots; i++) {
		if (samples[i] == UINT64_MAX)
			continue;
		rows++;
		if (samples[i] < n_records && h_sums[i] == reference[samples[i]])
			continue;
		if (mismatches++ < MISMATCHES_SHOWN)
			fprintf(stderr, "stream_check: batch %zu row %zu: sample %" PRIu64
				": checksum %016llx, the file gives %016" PRIx64 "\n",
				i / batch_size, i % batch_size, samples[i], h_sums[i],
				samples[i] < n_records ? reference[samples[i]] : 0);
	}
	printf("stream_check: batches=%" PRIu64 " rows=%" PRIu64 " mismatches=%" PRIu64 "\n",
	       o.batches, rows, mismatches);
	rc = fflush(stdout) != 0 ? CUDA_PROG_EXIT_IO : mismatches ? EXIT_MISMATCH : EXIT_MATCH;

close_client:
	/* Every batch taken was released; ldr_close waits for the work it
	 * ordered before the releases. */
	ldr_close(c);
	if (d_sums)
		cudaFree(d_sums);
	free(h_sums);
	free(samples);
destroy_streams:
	if (other)
		cudaStreamDestroy(other);
	if (work)
		cudaStreamDestroy(work);
	free(reference);
	return rc;
}
