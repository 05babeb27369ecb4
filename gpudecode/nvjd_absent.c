/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd_absent: the nvjd calls (nvjd.h) in a build that found no nvjpeg.h
 * (LOADERD_HAVE_NVJPEG 0), so that callers need no conditional code and the
 * daemon says why GPU JPEG decoding is unavailable: nvjd_load fails, and so
 * does everything that needs it.
 */
#include "gpudecode/nvjd.h"

#include <errno.h>

#include "common/errtext.h"

int nvjd_load(const char *lib_path, char *text, size_t cap)
{
	return errtext(text, cap, -ENOSYS, "loaderd was built without nvJPEG (no nvjpeg.h at build time)");
}

int nvjd_open(int device, uint32_t max_batch, unsigned flags, struct nvjd **out, char *why,
	      size_t cap)
{
	if (out)
		*out = NULL;
	return nvjd_load(NULL, why, cap);
}

void nvjd_info(const struct nvjd *d, struct nvjd_info *out)
{
	*out = (struct nvjd_info){.device = -1};
}

void nvjd_stats(const struct nvjd *d, struct nvjd_stats *out)
{
	*out = (struct nvjd_stats){0};
}

int nvjd_image_info(struct nvjd *d, const uint8_t *data, size_t len, struct nvjd_header *out,
		    char *err, size_t cap)
{
	return nvjd_load(NULL, err, cap);
}

int nvjd_decode(struct nvjd *d, struct nvjd_image *imgs, uint32_t n, cudaStream_t stream)
{
	return -EINVAL; /* no decoder can exist */
}

int nvjd_wait(struct nvjd *d, char *why, size_t cap)
{
	return 0;
}

void nvjd_close(struct nvjd *d)
{
}
