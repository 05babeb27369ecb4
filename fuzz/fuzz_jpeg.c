/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_jpeg: libFuzzer harness for the JPEG decoder of image pipelines
 * (image/jpeg.c), which reads files nobody vetted: jd_check_entropy on the
 * whole input, then a region decode. The first 8 bytes of the
 * input choose a box, an output size and (the low bit of the seventh) the
 * decode_scale, fast or full; the rest is the file. Any input
 * may be refused, but a refusal must carry a message and a documented
 * code, and an accepted one must return a region inside its buffer. Any
 * breach aborts (and ASan/UBSan catch the rest).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "image/jpeg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct jd_scratch scratch; /* reused, as a worker does */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 8)
		return 0;
	uint8_t b[8];
	memcpy(b, data, 8);
	data += 8;
	size -= 8;
	char err[256] = "";
	/* The workers' check of a file they would leave to the GPU */
	int rc = jd_check_entropy(data, size, 1u << 24, 0, err, sizeof(err));
	if (rc < 0 && (err[0] == '\0' || (rc != -EBADMSG && rc != -ENODATA && rc != -ENOMEM &&
					   rc != -EFBIG)))
		abort();
	err[0] = '\0';
	uint32_t w = 0, h = 0;
	rc = jd_header(data, size, &w, &h, err, sizeof(err));
	if (rc < 0) {
		if (err[0] == '\0' || (rc != -EBADMSG && rc != -ENODATA && rc != -ENOMEM))
			abort();
		return 0;
	}
	double bw = 1.0 + (double)w * b[2] / 255.0, bh = 1.0 + (double)h * b[3] / 255.0;
	double bx = (double)w * b[0] / 255.0 - bw / 4, by = (double)h * b[1] / 255.0 - bh / 4;
	struct jd_image img;
	err[0] = '\0';
	scratch.scale = b[6] & 1 ? JD_SCALE_FULL : JD_SCALE_FAST;
	rc = jd_decode_box(data, size, bx, by, bw, bh, 1u + b[4], 1u + b[5], 1u << 24, &img,
			   &scratch, err, sizeof(err));
	if (rc < 0) {
		if (err[0] == '\0' || (rc != -EBADMSG && rc != -ENODATA && rc != -ENOMEM &&
				       rc != -EFBIG))
			abort();
		return 0;
	}
	if (!img.rgb || img.w == 0 || img.h == 0 || img.stride < 3 * (size_t)img.w)
		abort();
	volatile uint8_t sink = img.rgb[(size_t)(img.h - 1) * img.stride + 3 * (size_t)img.w - 1];
	(void)sink;
	return 0;
}
