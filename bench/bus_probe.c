/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-bus-probe: what limits host-to-device delivery on this machine,
 * apart from loaderd. bench/RESULTS.md ("Where the time went") quotes it.
 *
 *   loaderd-bus-probe [--device N] [--file PATH] [--wait-only]
 *
 * Prints, one line each (GB = 10^9 bytes):
 *   bus: pinned 16 MiB copies back to back, alone;
 *   memcpy: the rate of 1, 4, 8 and 15 threads each copying 256 MiB
 *     buffers, and the bus while they run (host memory bandwidth shared
 *     between CPU copies and the GPU's DMA);
 *   callback: the bus with a cudaLaunchHostFunc after every copy;
 *   with --file: the time to map PATH read-only and page-lock it
 *     (cudaHostRegisterReadOnly), then batches of 16 MiB made of shuffled
 *     1 MiB, 64 KiB and 4 KiB pieces of it copied with one
 *     cudaMemcpyBatchAsync each (loaderd's direct delivery);
 *   wait: WAIT_ROUNDS times a 4 KiB page-locked copy to the GPU and a
 *     cudaStreamSynchronize for it, the 10th, 50th and 90th percentiles
 *     and the largest: how long the process waits on its own small GPU
 *     work. Alone it is microseconds; beside another process's kernels
 *     without MPS, a time slice of the other's (bench/RESULTS.md, "GPU
 *     decoding beside training"). --wait-only prints this line alone.
 * Exit codes: 0; 1 a CUDA or system call failed (named on stderr); 2 usage;
 * 77 no GPU.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define CUDA_PROG_NAME "loaderd-bus-probe"
#include "tools/cuda_prog.h"

#define MIB (1ull << 20)
#define BATCH (16 * MIB)
#define COPIES 256          /* 4 GiB per bus measurement */
#define CPU_BUFFER (256 * MIB)
#define MAX_THREADS 15
#define FILE_BATCHES 64
#define WAIT_ROUNDS 300
#define WAIT_BYTES 4096

#define CUDA_TRY(call)                            \
	do {                                      \
		if (!cuda_prog_ok((call), #call)) \
			return -1;                \
	} while (0)

struct gpu {
	cudaStream_t stream;
	uint8_t *dev;      /* one batch */
	uint8_t *pinned[2];
	cudaEvent_t start, stop;
};

static void CUDART_CB noop(void *arg)
{
	(void)arg;
}

/* COPIES pinned copies (with a host callback after each if asked); GB/s. */
static int bus_rate(struct gpu *g, bool callbacks, double *gbps)
{
	CUDA_TRY(cudaEventRecord(g->start, g->stream));
	for (int i = 0; i < COPIES; i++) {
		CUDA_TRY(cudaMemcpyAsync(g->dev, g->pinned[i % 2], BATCH, cudaMemcpyHostToDevice,
					 g->stream));
		if (callbacks)
			CUDA_TRY(cudaLaunchHostFunc(g->stream, noop, NULL));
	}
	CUDA_TRY(cudaEventRecord(g->stop, g->stream));
	CUDA_TRY(cudaEventSynchronize(g->stop));
	float ms = 0;
	CUDA_TRY(cudaEventElapsedTime(&ms, g->start, g->stop));
	*gbps = (double)BATCH * COPIES / (ms * 1e-3) / 1e9;
	return 0;
}

struct copier {
	pthread_t thread;
	uint8_t *a, *b;
	atomic_bool *stop;
	atomic_uint_least64_t *copied;
};

static void *copy_loop(void *arg)
{
	struct copier *c = arg;
	while (!atomic_load(c->stop)) {
		memcpy(c->b, c->a, CPU_BUFFER);
		atomic_fetch_add(c->copied, CPU_BUFFER);
	}
	return NULL;
}

/* n threads copying; their rate alone and the bus while they run. */
static int memcpy_rates(struct gpu *g, struct copier *cs, int n)
{
	atomic_bool stop = false;
	atomic_uint_least64_t copied = 0;
	for (int i = 0; i < n; i++) {
		cs[i].stop = &stop;
		cs[i].copied = &copied;
		if (pthread_create(&cs[i].thread, NULL, copy_loop, &cs[i]) != 0) {
			fprintf(stderr, "loaderd-bus-probe: pthread_create failed\n");
			atomic_store(&stop, true);
			for (int k = 0; k < i; k++)
				pthread_join(cs[k].thread, NULL);
			return -1;
		}
	}
	usleep(200000);
	double t0 = cuda_prog_now_s();
	uint64_t c0 = atomic_load(&copied);
	usleep(1000000);
	double cpu = (double)(atomic_load(&copied) - c0) / (cuda_prog_now_s() - t0) / 1e9;
	double bus = 0;
	int rc = bus_rate(g, false, &bus);
	atomic_store(&stop, true);
	for (int i = 0; i < n; i++)
		pthread_join(cs[i].thread, NULL);
	if (rc == 0)
		printf("memcpy: threads=%d GB_per_s=%.2f bus_GB_per_s=%.2f\n", n, cpu, bus);
	return rc;
}

/* Batches of shuffled `piece`-byte parts of the locked file, one batched
 * copy each. */
static int file_rate(struct gpu *g, const uint8_t *map, uint64_t bytes, uint64_t piece)
{
	size_t per = BATCH / piece, n = per * FILE_BATCHES;
	void **dsts = malloc(n * sizeof(*dsts));
	const void **srcs = malloc(n * sizeof(*srcs));
	size_t *sizes = malloc(n * sizeof(*sizes));
	int rc = -1;
	if (!dsts || !srcs || !sizes) {
		fprintf(stderr, "loaderd-bus-probe: out of memory\n");
		goto out;
	}
	uint64_t x = 88172645463325252ull, pieces = bytes / piece; /* xorshift64 */
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		srcs[i] = map + (x % pieces) * piece;
		dsts[i] = g->dev + (i % per) * piece;
		sizes[i] = piece;
	}
	struct cudaMemcpyAttributes attr;
	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	size_t attr_index = 0;
	if (!cuda_prog_ok(cudaEventRecord(g->start, g->stream), "cudaEventRecord"))
		goto out;
	for (size_t b = 0; b < FILE_BATCHES; b++)
		if (!cuda_prog_ok(cudaMemcpyBatchAsync(dsts + b * per, srcs + b * per,
						       sizes + b * per, per, &attr, &attr_index, 1,
						       g->stream),
				  "cudaMemcpyBatchAsync"))
			goto out;
	float ms = 0;
	if (!cuda_prog_ok(cudaEventRecord(g->stop, g->stream), "cudaEventRecord") ||
	    !cuda_prog_ok(cudaEventSynchronize(g->stop), "cudaEventSynchronize") ||
	    !cuda_prog_ok(cudaEventElapsedTime(&ms, g->start, g->stop), "cudaEventElapsedTime"))
		goto out;
	printf("file: piece_bytes=%llu GB_per_s=%.2f\n", (unsigned long long)piece,
	       (double)BATCH * FILE_BATCHES / (ms * 1e-3) / 1e9);
	rc = 0;
out:
	free(dsts);
	free(srcs);
	free(sizes);
	return rc;
}

static int probe_file(struct gpu *g, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < (off_t)BATCH) {
		fprintf(stderr, "loaderd-bus-probe: %s: cannot open, or smaller than 16 MiB\n", path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	uint64_t bytes = (uint64_t)st.st_size;
	double t0 = cuda_prog_now_s();
	void *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		perror("loaderd-bus-probe: mmap");
		return -1;
	}
	if (!cuda_prog_ok(cudaHostRegister(map, bytes,
					   cudaHostRegisterReadOnly | cudaHostRegisterPortable),
			  "cudaHostRegister")) {
		munmap(map, bytes);
		return -1;
	}
	printf("file: bytes=%llu lock_seconds=%.3f\n", (unsigned long long)bytes,
	       cuda_prog_now_s() - t0);
	int rc = 0;
	const uint64_t pieces[] = {MIB, 64 << 10, 4 << 10};
	for (size_t i = 0; i < 3 && rc == 0; i++)
		rc = file_rate(g, map, bytes, pieces[i]);
	cudaHostUnregister(map);
	munmap(map, bytes);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int wait_line(struct gpu *g)
{
	static double us[WAIT_ROUNDS];
	for (int i = 0; i < WAIT_ROUNDS; i++) {
		double t0 = cuda_prog_now_s();
		CUDA_TRY(cudaMemcpyAsync(g->dev, g->pinned[0], WAIT_BYTES, cudaMemcpyHostToDevice,
					 g->stream));
		CUDA_TRY(cudaStreamSynchronize(g->stream));
		us[i] = (cuda_prog_now_s() - t0) * 1e6;
	}
	qsort(us, WAIT_ROUNDS, sizeof us[0], cmp_double);
	int mps = 0, dev = 0;
	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, dev);
	printf("wait: rounds=%d p10_us=%.1f p50_us=%.1f p90_us=%.1f max_us=%.1f mps=%d\n",
	       WAIT_ROUNDS, us[WAIT_ROUNDS / 10], us[WAIT_ROUNDS / 2], us[WAIT_ROUNDS * 9 / 10],
	       us[WAIT_ROUNDS - 1], mps != 0);
	return 0;
}

static int run(int device, const char *file, bool wait_only)
{
	struct gpu g = {0};
	CUDA_TRY(cudaSetDevice(device));
	CUDA_TRY(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
	CUDA_TRY(cudaMalloc((void **)&g.dev, BATCH));
	for (int i = 0; i < 2; i++) {
		CUDA_TRY(cudaHostAlloc((void **)&g.pinned[i], BATCH, cudaHostAllocDefault));
		memset(g.pinned[i], i + 1, BATCH);
	}
	CUDA_TRY(cudaEventCreate(&g.start));
	CUDA_TRY(cudaEventCreate(&g.stop));
	if (wait_only)
		return wait_line(&g);
	double alone = 0, cb = 0;
	if (bus_rate(&g, false, &alone) < 0 || bus_rate(&g, true, &cb) < 0)
		return -1;
	printf("bus: GB_per_s=%.2f\n", alone);
	printf("callback: GB_per_s=%.2f\n", cb);

	struct copier cs[MAX_THREADS];
	for (int i = 0; i < MAX_THREADS; i++) {
		cs[i].a = malloc(CPU_BUFFER);
		cs[i].b = malloc(CPU_BUFFER);
		if (!cs[i].a || !cs[i].b) {
			fprintf(stderr, "loaderd-bus-probe: out of memory\n");
			return -1;
		}
		memset(cs[i].a, i, CPU_BUFFER);
		memset(cs[i].b, 0, CPU_BUFFER);
	}
	const int threads[] = {1, 4, 8, MAX_THREADS};
	int rc = 0;
	for (size_t i = 0; i < 4 && rc == 0; i++)
		rc = memcpy_rates(&g, cs, threads[i]);
	for (int i = 0; i < MAX_THREADS; i++) {
		free(cs[i].a);
		free(cs[i].b);
	}
	if (rc == 0 && file)
		rc = probe_file(&g, file);
	return rc == 0 ? wait_line(&g) : rc;
}

int main(int argc, char **argv)
{
	int device = 0;
	const char *file = NULL;
	bool wait_only = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
			device = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc) {
			file = argv[++i];
		} else if (strcmp(argv[i], "--wait-only") == 0) {
			wait_only = true;
		} else {
			fprintf(stderr, "usage: loaderd-bus-probe [--device N] [--file PATH] "
				"[--wait-only]\n");
			return CUDA_PROG_EXIT_USAGE;
		}
	}
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("loaderd-bus-probe: skipped: no GPU\n");
		return CUDA_PROG_EXIT_SKIP;
	}
	if (device < 0 || device >= n) {
		fprintf(stderr, "loaderd-bus-probe: --device %d: this machine has %d GPUs\n", device, n);
		return CUDA_PROG_EXIT_USAGE;
	}
	return run(device, file, wait_only) == 0 ? 0 : 1;
}
