/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd_lib: nvjd_load (nvjd.h): nvJPEG opened with dlopen and every
 * function the decoder calls resolved into the table `nvjd_lib` (nvjd_impl.h),
 * whose types are those nvjpeg.h declares, so that the compiler checks
 * every call against the header the build used; and nvJPEG's statuses in
 * words.
 */
#include "gpudecode/nvjd.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/errtext.h"
#include "gpudecode/nvjd_impl.h"

static const struct {
	const char *name;
	size_t offset;
} nvj_symbols[] = {
#define NVJD_SYMBOL(name) {#name, offsetof(struct nvjd_table, name)},
	NVJD_FUNCTIONS(NVJD_SYMBOL)
#undef NVJD_SYMBOL
};

/* Filled under lib_lock by the first successful nvjd_load, never changed
 * after: readers check nvjd_lib_loaded() (which takes the lock) first. */
struct nvjd_table nvjd_lib;
static struct {
	bool loaded;
	void *handle;
	int version[3];
	char what[160];
} lib;
static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;

const char *nvjd_status_name(nvjpegStatus_t s)
{
	switch (s) {
	case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
	case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
	case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
	case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
	case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
	case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
	case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
	case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
	case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
	case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
		return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
	case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
	}
	return "unknown nvJPEG status";
}

bool nvjd_lib_loaded(void)
{
	pthread_mutex_lock(&lib_lock);
	bool loaded = lib.loaded;
	pthread_mutex_unlock(&lib_lock);
	return loaded;
}

int nvjd_load(const char *lib_path, char *text, size_t cap)
{
	const char *name = lib_path ? lib_path : NVJD_SONAME;
	int rc = 0;
	pthread_mutex_lock(&lib_lock);
	if (lib.loaded) {
		errtext(text, cap, 0, "%s", lib.what);
		goto unlock;
	}
	void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!handle) {
		rc = errtext(text, cap, -ENOENT, "nvJPEG is not available: %s", dlerror());
		goto unlock;
	}
	struct nvjd_table t;
	for (size_t i = 0; i < sizeof nvj_symbols / sizeof nvj_symbols[0]; i++) {
		void *f = dlsym(handle, nvj_symbols[i].name);
		if (!f) {
			rc = errtext(text, cap, -ENOSYS,
				     "%s lacks %s: not an nvJPEG this build can use", name,
				     nvj_symbols[i].name);
			goto close_library;
		}
		memcpy((char *)&t + nvj_symbols[i].offset, &f, sizeof f);
	}
	int v[3] = {0, 0, 0};
	if (t.nvjpegGetProperty(MAJOR_VERSION, &v[0]) != NVJPEG_STATUS_SUCCESS ||
	    t.nvjpegGetProperty(MINOR_VERSION, &v[1]) != NVJPEG_STATUS_SUCCESS ||
	    t.nvjpegGetProperty(PATCH_LEVEL, &v[2]) != NVJPEG_STATUS_SUCCESS) {
		rc = errtext(text, cap, -ENOSYS, "%s does not report its version", name);
		goto close_library;
	}
	if (v[0] != NVJPEG_VER_MAJOR) {
		rc = errtext(text, cap, -ENOSYS,
			     "%s is nvJPEG %d.%d.%d; this build needs version %d", name, v[0], v[1],
			     v[2], NVJPEG_VER_MAJOR);
		goto close_library;
	}
	nvjd_lib = t;
	memcpy(lib.version, v, sizeof v);
	lib.handle = handle;
	snprintf(lib.what, sizeof lib.what, "nvJPEG %d.%d.%d (%s)", v[0], v[1], v[2], name);
	lib.loaded = true;
	errtext(text, cap, 0, "%s", lib.what);
	goto unlock;
close_library:
	dlclose(handle);
unlock:
	pthread_mutex_unlock(&lib_lock);
	return rc;
}

void nvjd_lib_version(int version[3])
{
	pthread_mutex_lock(&lib_lock);
	memcpy(version, lib.version, sizeof lib.version);
	pthread_mutex_unlock(&lib_lock);
}
