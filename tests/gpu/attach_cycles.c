/* SPDX-License-Identifier: Apache-2.0 */
/*
 * attach_cycles: attaching to a GPU and leaving, many times over, must give
 * back everything each attachment took (device memory, IPC mappings, fds).
 *
 *   attach_cycles --socket PATH --pipeline NAME [--cycles N] [--warmup N]
 *
 * One cycle: ldr_connect, ldr_attach with device "0", take and release 2
 * batches, ldr_close. The test that drives it (test_gpu_attach_cycles.py)
 * measures the daemon at the same two points, so the program stops at each
 * and waits for a line on stdin:
 *
 *   1. --warmup cycles (default 10: the first attachment loads libcuda and
 *      the daemon sets up per-device state once), then prints
 *      "attach_cycles: warm" and waits;
 *   2. measures device-wide free memory (cudaMemGetInfo) and its own open
 *      fds (/proc/self/fd), runs --cycles cycles (default 1000), prints
 *      "attach_cycles: cycled" and waits (the daemon frees the last ring
 *      after the last close, asynchronously);
 *   3. measures again and prints
 *      "attach_cycles: cycles=N device_free_before=B device_free_after=A
 *       fds_before=F fds_after=G seconds=S" (one line).
 *
 * The figures are judged by the test. Exit codes: 0 ran, 2 usage, 3 a client
 * library call failed, 4 a CUDA call failed, 5 an I/O failure (stdin closed
 * early, /proc/self/fd unreadable); the message on stderr names the call.
 */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loaderd.h"

#define CUDA_PROG_NAME "attach_cycles"
#include "tools/cuda_prog.h"

#define EXIT_RAN 0 /* and the others of tools/cuda_prog.h */
#define NEXT_TIMEOUT_MS 30000
#define BATCHES_PER_CYCLE 2

struct options {
	const char *socket;
	const char *pipeline;
	uint64_t cycles;
	uint64_t warmup;
};

/* Entries of /proc/self/fd (the directory's own fd included, the same
 * both times it is counted); -1 when it cannot be read. */
static long open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d) {
		fprintf(stderr, "attach_cycles: /proc/self/fd: %s\n", strerror(errno));
		return -1;
	}
	long n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* One attachment; returns 0 or an exit code. */
static int cycle(const struct options *o, uint64_t n)
{
	struct ldr_client *c = NULL;
	struct ldr_attach_opts ao = {
		.pipeline = o->pipeline,
		.client_name = "attach_cycles",
		.device = "0",
	};
	const char *call = "ldr_connect";
	int r = ldr_connect(o->socket, &c);
	if (r == 0) {
		call = "ldr_attach";
		r = ldr_attach(c, &ao);
	}
	for (unsigned i = 0; r == 0 && i < BATCHES_PER_CYCLE; i++) {
		struct ldr_batch b;
		call = "ldr_next";
		r = ldr_next(c, &b, NEXT_TIMEOUT_MS);
		if (r == 0 && !b.on_device) {
			fprintf(stderr, "attach_cycles: cycle %" PRIu64 ": a batch arrived in host memory "
				"although device \"0\" was asked for\n", n);
			ldr_close(c);
			return CUDA_PROG_EXIT_CLIENT;
		}
		if (r == 0) {
			call = "ldr_release";
			r = ldr_release(c, &b);
		}
	}
	if (r < 0)
		fprintf(stderr, "attach_cycles: cycle %" PRIu64 ": %s: %s (%s)\n", n, call,
			c ? ldr_error(c) : "", strerror(-r));
	ldr_close(c);
	return r < 0 ? CUDA_PROG_EXIT_CLIENT : 0;
}

static int run_cycles(const struct options *o, uint64_t first, uint64_t count)
{
	for (uint64_t i = first; i < first + count; i++) {
		int rc = cycle(o, i);
		if (rc)
			return rc;
	}
	return 0;
}

/* Announces a point reached and waits for the driving test's go-ahead. */
static int handshake(const char *point)
{
	char line[64];
	printf("attach_cycles: %s\n", point);
	if (fflush(stdout) != 0 || !fgets(line, sizeof(line), stdin)) {
		fprintf(stderr, "attach_cycles: stdin closed while waiting after \"%s\"\n", point);
		return CUDA_PROG_EXIT_IO;
	}
	return 0;
}

static int usage(const char *msg)
{
	return cuda_prog_usage(msg, "usage: attach_cycles --socket PATH --pipeline NAME "
			       "[--cycles N] [--warmup N]\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"socket", required_argument, NULL, 's'},
		{"pipeline", required_argument, NULL, 'p'},
		{"cycles", required_argument, NULL, 'n'},
		{"warmup", required_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	*o = (struct options){.cycles = 1000, .warmup = 10};
	int opt;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': o->socket = optarg; break;
		case 'p': o->pipeline = optarg; break;
		case 'n':
			if (!cuda_prog_parse_u64(optarg, 100000000, &o->cycles))
				return usage("--cycles: not an integer in 0..100000000");
			break;
		case 'w':
			if (!cuda_prog_parse_u64(optarg, 100000000, &o->warmup))
				return usage("--warmup: not an integer in 0..100000000");
			break;
		default: return usage("unknown option");
		}
	}
	if (optind != argc)
		return usage("unexpected argument");
	if (!o->socket || !o->pipeline)
		return usage("--socket and --pipeline are required");
	return 0;
}

int main(int argc, char **argv)
{
	struct options o;
	int rc = parse_options(argc, argv, &o);
	if (rc)
		return rc;

	/* The runtime shares device 0's primary context with the client
	 * library; initialising it first keeps its own set-up out of the
	 * figures. */
	size_t free_before, free_after, total;
	if (!cuda_prog_start())
		return CUDA_PROG_EXIT_CUDA;

	rc = run_cycles(&o, 0, o.warmup);
	if (rc)
		return rc;
	rc = handshake("warm");
	if (rc)
		return rc;
	long fds_before = open_fds();
	if (fds_before < 0)
		return CUDA_PROG_EXIT_IO;
	if (!cuda_prog_ok(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo"))
		return CUDA_PROG_EXIT_CUDA;

	double start = cuda_prog_now_s();
	rc = run_cycles(&o, o.warmup, o.cycles);
	if (rc)
		return rc;
	double elapsed_s = cuda_prog_now_s() - start;
	rc = handshake("cycled");
	if (rc)
		return rc;
	if (!cuda_prog_ok(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo"))
		return CUDA_PROG_EXIT_CUDA;
	long fds_after = open_fds();
	if (fds_after < 0)
		return CUDA_PROG_EXIT_IO;

	printf("attach_cycles: cycles=%" PRIu64 " device_free_before=%zu device_free_after=%zu "
	       "fds_before=%ld fds_after=%ld seconds=%.3f\n",
	       o.cycles, free_before, free_after, fds_before, fds_after, elapsed_s);
	return fflush(stdout) == 0 ? EXIT_RAN : CUDA_PROG_EXIT_IO;
}
