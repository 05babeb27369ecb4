/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cudaerr: the one place CUDA code (the daemon's GPU threads, daemon/gpu/;
 * the GPU decoding library, gpudecode/) turns a cudaError_t into the text
 * of a message and into an errno. Header only, so that common/ links no
 * CUDA: only files that already call CUDA include it.
 */
#ifndef LDR_COMMON_CUDAERR_H
#define LDR_COMMON_CUDAERR_H

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

/* "DESCRIPTION (cudaErrorNAME)" into buf; returns buf. */
static inline const char *cudaerr_text(cudaError_t e, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
	return buf;
}

/* The errno a failure of a CUDA call maps to. */
static inline int cudaerr_errno(cudaError_t e)
{
	switch (e) {
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

/* False for cudaSuccess; else true with "WHAT: DESCRIPTION (NAME)" in text. */
static inline bool cudaerr_failed(cudaError_t e, char *text, size_t cap, const char *what)
{
	if (e == cudaSuccess)
		return false;
	char why[256];
	snprintf(text, cap, "%s: %s", what, cudaerr_text(e, why, sizeof(why)));
	return true;
}

#endif
