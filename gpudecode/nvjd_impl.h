/*
 * nvjd_impl: what nvjd.c and nvjd_lib.c share (internal to gpudecode/): the
 * table of nvJPEG's functions that nvjd_load fills (nvjd_lib.c) and the
 * decoder calls through, and nvJPEG's statuses in words.
 */
#ifndef LDR_GPUDECODE_NVJD_IMPL_H
#define LDR_GPUDECODE_NVJD_IMPL_H

#include <stdbool.h>

#include <nvjpeg.h>

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

/* Whether nvjd_load has succeeded (takes the loader's lock). */
bool nvjd_lib_loaded(void);
/* The loaded nvJPEG's major, minor and patch version. */
void nvjd_lib_version(int version[3]);
/* "NVJPEG_STATUS_BAD_JPEG", ... */
const char *nvjd_status_name(nvjpegStatus_t s);

#endif
