/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd_impl: what nvjd.c and nvjd_lib.c share (internal to gpudecode/): the
 * table of nvJPEG's functions that nvjd_load fills (nvjd_lib.c) and the
 * decoder calls through, and nvJPEG's statuses in words.
 */
#ifndef LDR_GPUDECODE_NVJD_IMPL_H
#define LDR_GPUDECODE_NVJD_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <nvjpeg.h>

#include "gpudecode/nvjd.h"

#define NVJD_STR2(x) #x
#define NVJD_STR(x) NVJD_STR2(x)
/* The library of the major version whose header the build used. */
#define NVJD_SONAME "libnvjpeg.so." NVJD_STR(NVJPEG_VER_MAJOR)

/* Every nvJPEG function this module calls. */
#define NVJD_FUNCTIONS(X)                                                                  \
	X(nvjpegGetProperty)                                                               \
	X(nvjpegCreateEx)                                                                  \
	X(nvjpegDestroy)                                                                   \
	X(nvjpegGetHardwareDecoderInfo)                                                    \
	X(nvjpegJpegStateCreate)                                                           \
	X(nvjpegJpegStateDestroy)                                                          \
	X(nvjpegGetImageInfo)                                                              \
	X(nvjpegJpegStreamCreate)                                                          \
	X(nvjpegJpegStreamDestroy)                                                         \
	X(nvjpegJpegStreamParse)                                                           \
	X(nvjpegJpegStreamGetFrameDimensions)                                              \
	X(nvjpegJpegStreamGetComponentsNum)                                                \
	X(nvjpegJpegStreamGetChromaSubsampling)                                            \
	X(nvjpegJpegStreamGetJpegEncoding)                                                 \
	X(nvjpegDecodeParamsCreate)                                                        \
	X(nvjpegDecodeParamsDestroy)                                                       \
	X(nvjpegDecodeParamsSetOutputFormat)                                               \
	X(nvjpegDecodeParamsSetROI)                                                        \
	X(nvjpegDecodeBatchedSupportedEx)                                                  \
	X(nvjpegDecodeBatchedInitialize)                                                   \
	X(nvjpegDecodeBatchedPreAllocate)                                                  \
	X(nvjpegDecodeBatchedEx)

/* Fields named as the functions, typed from their declarations. */
struct nvjd_table {
#define NVJD_FIELD(name) __typeof__(name) *name;
	NVJD_FUNCTIONS(NVJD_FIELD)
#undef NVJD_FIELD
};

/* Filled by the first successful nvjd_load and never changed after; read
 * it only once nvjd_lib_loaded() has returned true on this thread, or on
 * one that handed over to this one. */
extern struct nvjd_table nvjd_lib;

/* A decoder (nvjd.h): nvjd.c opens it and submits its batches,
 * nvjd_check.c checks each image on the host first. */
struct nvjd {
	int device;
	uint32_t max_batch;
	unsigned flags;
	unsigned engines, cores_per_engine;
	nvjpegHandle_t handle;
	struct shared_handle *shared; /* where handle came from, NULL: its own */
	nvjpegJpegState_t state;
	nvjpegJpegStream_t parsed; /* the checks' parse of one image at a time */
	/* [2 * max_batch]: image i's region, in two sets used in turn, so that
	 * the checks of a batch never touch what the previous one was given. */
	nvjpegDecodeParams_t *params;
	unsigned param_set;
	cudaEvent_t done; /* recorded after every submission */
	bool in_flight;   /* a submission not waited for yet */
	int batch_size;   /* the state's, 0: initialise before use */
	struct nvjd_stats stats;
	/* One call's batch, in submission order ([max_batch] each): */
	uint32_t *queue; /* index into imgs */
	const unsigned char **data;
	size_t *lens;
	nvjpegImage_t *dst;
	nvjpegDecodeParams_t *batch_params;
};

/* One image's checks before submission (nvjd_check.c): 0, or its status
 * (-ENOTSUP, -EBADMSG, -EINVAL, ...) with its message set. params: the
 * image's decode parameters, its region set here. */
int nvjd__check_image(struct nvjd *d, struct nvjd_image *im, nvjpegDecodeParams_t params);
/* im's status `code` with its message: returns code. */
int nvjd__reject(struct nvjd_image *im, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Whether nvjd_load has succeeded (takes the loader's lock). */
bool nvjd_lib_loaded(void);
/* The loaded nvJPEG's major, minor and patch version. */
void nvjd_lib_version(int version[3]);
/* "NVJPEG_STATUS_BAD_JPEG", ... */
const char *nvjd_status_name(nvjpegStatus_t s);

#endif
