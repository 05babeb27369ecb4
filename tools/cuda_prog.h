/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_prog: what the small CUDA programs of tests/gpu/ and bench/ share
 * (attach_cycles, stream_check, loaderd-h2d-ceiling, loaderd-bus-probe): a
 * CUDA runtime call checked where it is made, its failure named on stderr
 * after the program's name, the device set up before anything is timed,
 * the monotonic clock in seconds, a bounded decimal argument.
 *
 * Header only, every function static inline: each program is one file,
 * compiled as C or (stream_check.cu) as CUDA C++, and none links anything
 * of loaderd's for these. Define CUDA_PROG_NAME, the name messages begin
 * with, before including it.
 */
#ifndef LDR_TOOLS_CUDA_PROG_H
#define LDR_TOOLS_CUDA_PROG_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#ifndef CUDA_PROG_NAME
#error "define CUDA_PROG_NAME (the program's name, for its messages) before including cuda_prog.h"
#endif

/* Exit codes the programs share, beside 0 and what each says of 1: */
enum {
	CUDA_PROG_EXIT_USAGE = 2,  /* every program */
	CUDA_PROG_EXIT_CLIENT = 3, /* the tests' programs: a client library call failed */
	CUDA_PROG_EXIT_CUDA = 4,   /* the tests' programs: a CUDA call failed */
	CUDA_PROG_EXIT_IO = 5,     /* the tests' programs: stdin, stdout, a file */
	CUDA_PROG_EXIT_SKIP = 77,  /* the benchmarks: no GPU here */
};

/* The one place CUDA errors are turned into a message: true when err is
 * cudaSuccess, else "NAME: CALL: MESSAGE (ERROR)" on stderr and false. */
static inline bool cuda_prog_ok(cudaError_t err, const char *call)
{
	if (err == cudaSuccess)
		return true;
	fprintf(stderr, CUDA_PROG_NAME ": %s: %s (%s)\n", call, cudaGetErrorString(err),
		cudaGetErrorName(err));
	return false;
}

/* Selects device 0 and creates its primary context (the runtime shares it
 * with the client library), so that this set-up stays out of what is
 * measured afterwards. False after the message. */
static inline bool cuda_prog_start(void)
{
	return cuda_prog_ok(cudaSetDevice(0), "cudaSetDevice(0)") &&
	       cuda_prog_ok(cudaFree(NULL), "cudaFree(NULL)");
}

static inline double cuda_prog_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "NAME: MSG", then the synopsis, on stderr; CUDA_PROG_EXIT_USAGE. */
static inline int cuda_prog_usage(const char *msg, const char *synopsis)
{
	fprintf(stderr, CUDA_PROG_NAME ": %s\n%s", msg, synopsis);
	return CUDA_PROG_EXIT_USAGE;
}

/* A decimal integer in 0..max, nothing else in s (no sign, no space). */
static inline bool cuda_prog_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max)
		return false;
	*out = v;
	return true;
}

#endif
