/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-h2d-ceiling: how fast this machine's bus copies page-locked host
 * memory to one GPU. bench/gpu_bench.py runs it in the same run as loaderd
 * and divides loaderd's delivered rate by this figure, so "fraction of the
 * ceiling" is measured, not taken from a data sheet.
 *
 *   loaderd-h2d-ceiling [--device N] [--copies N] [--repeats N] [--sources N] BYTES...
 *
 * For each size (bytes; a K, M or G suffix means a power of 1024): --sources
 * page-locked host buffers (cudaHostAlloc) and one device buffer
 * (cudaMalloc); on one non-blocking stream, a warm-up, then --repeats times
 * --copies back-to-back cudaMemcpyAsync host-to-device, timed with CUDA
 * events. Consecutive copies take consecutive source buffers, as loaderd's
 * slots rotate. The median repeat is printed, one line per size:
 *
 *   h2d: bytes=B GB_per_s=X          (GB = 10^9 bytes)
 *
 * after one line naming the device. Exit codes: 0; 1 a CUDA call failed
 * (the call and CUDA's message on stderr); 2 a usage error; 77 no GPU here.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define CUDA_PROG_NAME "loaderd-h2d-ceiling"
#include "tools/cuda_prog.h"

#define MAX_SIZES 64
#define MAX_SOURCES 16
#define MAX_REPEATS 1000
#define MAX_BYTES (16ull << 30)
/* Enough copies that a repeat lasts tens of milliseconds at PCIe Gen5
 * speed, far above the events' resolution and the launch latency. */
#define DEFAULT_BYTES_PER_REPEAT (2ull << 30)
#define MIN_COPIES 8
#define WARMUP_COPIES 4

struct ceiling_opts {
	int device;
	uint64_t copies;  /* 0: DEFAULT_BYTES_PER_REPEAT worth, at least MIN_COPIES */
	uint64_t repeats;
	uint64_t sources;
	uint64_t sizes[MAX_SIZES];
	size_t n_sizes;
	bool help;
};

static const char usage_text[] =
	"Usage: loaderd-h2d-ceiling [--device N] [--copies N] [--repeats N] [--sources N] BYTES...\n"
	"  Prints 'h2d: bytes=B GB_per_s=X' for each size: the median over the repeats\n"
	"  of back-to-back pinned host-to-device copies on one stream.\n"
	"  --device N    CUDA device ordinal (default 0)\n"
	"  --copies N    copies per repeat (default: 2 GiB worth, at least 8)\n"
	"  --repeats N   timed repeats per size (default 9)\n"
	"  --sources N   page-locked source buffers copied from in turn (2..16, default 2)\n"
	"  BYTES         copy size; a K, M or G suffix means KiB, MiB, GiB\n";

#define CUDA_CHECK_GOTO(call, label)              \
	do {                                      \
		if (!cuda_prog_ok((call), #call)) \
			goto label;               \
	} while (0)

/* Decimal digits, optionally one of K M G (powers of 1024), in [min, max];
 * 0, or -1 after the usage message. */
static int parse_size(const char *name, const char *text, uint64_t min, uint64_t max,
		      uint64_t *out)
{
	uint64_t v = 0;
	const char *s = text;
	if (*s < '0' || *s > '9')
		goto bad;
	for (; *s >= '0' && *s <= '9'; s++) {
		uint64_t d = (uint64_t)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			goto out_of_range;
		v = v * 10 + d;
	}
	unsigned shift = 0;
	if (*s == 'K')
		shift = 10;
	else if (*s == 'M')
		shift = 20;
	else if (*s == 'G')
		shift = 30;
	if (shift) {
		s++;
		if (v > (UINT64_MAX >> shift))
			goto out_of_range;
		v <<= shift;
	}
	if (*s != '\0')
		goto bad;
	if (v < min || v > max)
		goto out_of_range;
	*out = v;
	return 0;
bad:
	fprintf(stderr, "loaderd-h2d-ceiling: %s: '%s' is not a number\n%s", name, text, usage_text);
	return -1;
out_of_range:
	fprintf(stderr, "loaderd-h2d-ceiling: %s: %s is out of range (%" PRIu64 "..%" PRIu64 ")\n%s",
		name, text, min, max, usage_text);
	return -1;
}

/* 0 (o->help set when --help was given), or an exit code after the message. */
static int parse_args(int argc, char **argv, struct ceiling_opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		uint64_t *dst = NULL;
		uint64_t min = 1, max = 0, device = 0;
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			o->help = true;
			return 0;
		}
		if (strcmp(arg, "--device") == 0) {
			dst = &device;
			min = 0;
			max = 1023;
		} else if (strcmp(arg, "--copies") == 0) {
			dst = &o->copies;
			max = 1000000;
		} else if (strcmp(arg, "--repeats") == 0) {
			dst = &o->repeats;
			max = MAX_REPEATS;
		} else if (strcmp(arg, "--sources") == 0) {
			dst = &o->sources;
			min = 2;
			max = MAX_SOURCES;
		}
		if (dst) {
			if (i + 1 >= argc) {
				fprintf(stderr, "loaderd-h2d-ceiling: option '%s' needs a value\n%s", arg,
					usage_text);
				return CUDA_PROG_EXIT_USAGE;
			}
			if (parse_size(arg, argv[++i], min, max, dst) < 0)
				return CUDA_PROG_EXIT_USAGE;
			if (dst == &device)
				o->device = (int)device;
			continue;
		}
		if (strncmp(arg, "--", 2) == 0) {
			fprintf(stderr, "loaderd-h2d-ceiling: unknown option '%s'\n%s", arg, usage_text);
			return CUDA_PROG_EXIT_USAGE;
		}
		if (o->n_sizes == MAX_SIZES) {
			fprintf(stderr, "loaderd-h2d-ceiling: at most %d sizes\n", MAX_SIZES);
			return CUDA_PROG_EXIT_USAGE;
		}
		if (parse_size("size", arg, 1, MAX_BYTES, &o->sizes[o->n_sizes]) < 0)
			return CUDA_PROG_EXIT_USAGE;
		o->n_sizes++;
	}
	if (o->n_sizes == 0) {
		fprintf(stderr, "loaderd-h2d-ceiling: no size given\n%s", usage_text);
		return CUDA_PROG_EXIT_USAGE;
	}
	return 0;
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/*
 * Times the copies of one size; *gb_per_s is the median repeat. Returns 0,
 * or -1 after cuda_prog_ok has named the failing call. Every buffer, event and
 * the stream are freed on both paths (cleanup accepts the NULLs of what was
 * never made).
 */
static int measure_size(const struct ceiling_opts *o, uint64_t bytes, double *gb_per_s)
{
	void *src[MAX_SOURCES] = { NULL };
	void *dst = NULL;
	cudaStream_t stream = NULL;
	cudaEvent_t start = NULL, stop = NULL;
	double rates[MAX_REPEATS];
	int rc = -1;
	uint64_t copies = o->copies;
	if (copies == 0) {
		copies = DEFAULT_BYTES_PER_REPEAT / bytes;
		if (copies < MIN_COPIES)
			copies = MIN_COPIES;
	}

	for (uint64_t s = 0; s < o->sources; s++) {
		CUDA_CHECK_GOTO(cudaHostAlloc(&src[s], bytes, cudaHostAllocDefault), free_buffers);
		/* Touched and not all zeros: what a batch of real data looks like. */
		memset(src[s], 0xa5 ^ (int)s, bytes);
	}
	CUDA_CHECK_GOTO(cudaMalloc(&dst, bytes), free_buffers);
	CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), free_buffers);
	CUDA_CHECK_GOTO(cudaEventCreate(&start), free_buffers);
	CUDA_CHECK_GOTO(cudaEventCreate(&stop), free_buffers);

	for (uint64_t k = 0; k < WARMUP_COPIES; k++)
		CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src[k % o->sources], bytes, cudaMemcpyHostToDevice,
						stream), free_buffers);
	CUDA_CHECK_GOTO(cudaStreamSynchronize(stream), free_buffers);

	for (uint64_t r = 0; r < o->repeats; r++) {
		CUDA_CHECK_GOTO(cudaEventRecord(start, stream), free_buffers);
		for (uint64_t k = 0; k < copies; k++)
			CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src[k % o->sources], bytes,
							cudaMemcpyHostToDevice, stream),
					free_buffers);
		CUDA_CHECK_GOTO(cudaEventRecord(stop, stream), free_buffers);
		CUDA_CHECK_GOTO(cudaEventSynchronize(stop), free_buffers);
		float ms = 0;
		CUDA_CHECK_GOTO(cudaEventElapsedTime(&ms, start, stop), free_buffers);
		rates[r] = ms > 0 ? (double)bytes * (double)copies / ((double)ms * 1e6) : 0.0;
		fprintf(stderr, "loaderd-h2d-ceiling: bytes=%" PRIu64 " repeat %" PRIu64 ": %" PRIu64
			" copies in %.3f ms, %.2f GB/s\n", bytes, r, copies, (double)ms, rates[r]);
	}
	qsort(rates, o->repeats, sizeof rates[0], compare_double);
	*gb_per_s = o->repeats % 2 ? rates[o->repeats / 2] :
				     (rates[o->repeats / 2 - 1] + rates[o->repeats / 2]) / 2;
	rc = 0;
free_buffers:
	/* Results of the frees are checked too: a failure here is a broken context. */
	if (stop && !cuda_prog_ok(cudaEventDestroy(stop), "cudaEventDestroy(stop)"))
		rc = -1;
	if (start && !cuda_prog_ok(cudaEventDestroy(start), "cudaEventDestroy(start)"))
		rc = -1;
	if (stream && !cuda_prog_ok(cudaStreamDestroy(stream), "cudaStreamDestroy(stream)"))
		rc = -1;
	if (dst && !cuda_prog_ok(cudaFree(dst), "cudaFree(dst)"))
		rc = -1;
	for (uint64_t s = 0; s < o->sources; s++)
		if (src[s] && !cuda_prog_ok(cudaFreeHost(src[s]), "cudaFreeHost(src[s])"))
			rc = -1;
	return rc;
}

int main(int argc, char **argv)
{
	struct ceiling_opts o = { .repeats = 9, .sources = 2 };
	int rc = parse_args(argc, argv, &o);
	if (rc != 0)
		return rc;
	if (o.help) {
		fputs(usage_text, stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}

	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);
	/* No device, or no driver to reach one: nothing to measure here. */
	if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
	    (err == cudaSuccess && count == 0)) {
		fprintf(stderr, "loaderd-h2d-ceiling: no GPU: %s\n",
			err == cudaSuccess ? "the CUDA runtime sees 0 devices" : cudaGetErrorString(err));
		return CUDA_PROG_EXIT_SKIP;
	}
	if (!cuda_prog_ok(err, "cudaGetDeviceCount(&count)"))
		return 1;
	if (o.device >= count) {
		fprintf(stderr, "loaderd-h2d-ceiling: --device %d: the CUDA runtime sees %d device%s\n",
			o.device, count, count == 1 ? "" : "s");
		return CUDA_PROG_EXIT_USAGE;
	}
	if (!cuda_prog_ok(cudaSetDevice(o.device), "cudaSetDevice(o.device)"))
		return 1;
	struct cudaDeviceProp prop;
	if (!cuda_prog_ok(cudaGetDeviceProperties(&prop, o.device),
			  "cudaGetDeviceProperties(&prop, o.device)"))
		return 1;
	printf("device: %d \"%s\" pci %04x:%02x:%02x.0\n", o.device, prop.name,
	       (unsigned)prop.pciDomainID, (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
	fflush(stdout);

	for (size_t i = 0; i < o.n_sizes; i++) {
		double gb_per_s = 0;
		if (measure_size(&o, o.sizes[i], &gb_per_s) < 0)
			return 1;
		printf("h2d: bytes=%" PRIu64 " GB_per_s=%.2f\n", o.sizes[i], gb_per_s);
		fflush(stdout);
	}
	return fflush(stdout) == 0 ? 0 : 1;
}
