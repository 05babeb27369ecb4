/* SPDX-License-Identifier: Apache-2.0 */
/*
 * image_sample: one image sample, from the bytes of its JPEG file to its
 * row of the staging slot, in the worker: header, the transform chain's
 * plan for (seed, epoch, sample index), region decode at the DCT scale the
 * output needs, or at full scale (params->decode_scale, image/jpeg.h),
 * antialiased resize and flip
 * (image/resize.h), then the pipeline's layout and dtype (uint8, or
 * (x / 255 - mean) / std as float16 or float32).
 *
 * Pure computation: no I/O, no logging (image_sample_timed reads the
 * monotonic clock); a bad image is a -errno
 * (image/jpeg.h's codes) the reader turns into a substitution or a failed
 * item. The scratch buffers grow to the largest image met and are reused.
 */
#ifndef LDR_IMAGE_IMAGE_SAMPLE_H
#define LDR_IMAGE_IMAGE_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/jpeg.h"
#include "image/jpeghdr.h"
#include "image/resize.h"
#include "image/transform.h"
#include "shm/layout.h"

struct image_sampler {
	struct tf_chain chain;
	struct arena_image_params params; /* checked copy */
	struct jd_scratch jd;
	struct rs_scratch rs;
	uint8_t *rgb; /* out_h x out_w x 3, before layout and dtype */
};

/* Checks params (transform, sizes, dtype, layout) and prepares s. 0 or
 * -EINVAL. row_bytes: what one image row of the slot must hold. */
int image_sampler_init(struct image_sampler *s, const struct arena_image_params *params,
		       uint64_t *row_bytes);
void image_sampler_free(struct image_sampler *s);

/* Writes sample `index` of `epoch`, decoded from data[0..len), into row.
 * 0, or -errno (-EBADMSG, -ENODATA, -EFBIG, -ENOMEM, -ETIME: over the
 * pipeline's max_decode_ms). */
int image_sample(struct image_sampler *s, const uint8_t *data, size_t len, uint64_t epoch,
		 uint64_t index, uint8_t *row);

/* image_sample, timed: with times not NULL, how long its decode (header,
 * plan, region decode at the DCT scale) and its transform (resize, crop,
 * flip, layout, dtype) took, on the monotonic clock (set on success). */
struct image_times {
	uint64_t decode_ns, transform_ns;
};
int image_sample_timed(struct image_sampler *s, const uint8_t *data, size_t len, uint64_t epoch,
		       uint64_t index, uint8_t *row, struct image_times *times);

/*
 * GPU decoding: whether the GPU's hardware decoder gets the JPEG in
 * data[0..len) under the pipeline's params: jh_gpu_takes within max_bytes
 * (the room for a JPEG in a row) and params->max_pixels, and, with
 * params->gpu_check entropy, all of its entropy-coded data read without a
 * fault (jd_check_entropy, within max_decode_ms). Fills *info when true.
 * A false leaves the file to the workers' decoder, which finds a bad one
 * bad (on_error). A function of the bytes and the params only.
 */
bool image_gpu_takes(const struct arena_image_params *params, const uint8_t *data, size_t len,
		     uint64_t max_bytes, struct jh_info *info);

/* The sample that replaces bad sample `index` at the given attempt (1, 2,
 * ...): deterministic in (seed, epoch, index, attempt), never index itself
 * when n > 1. */
uint64_t image_substitute(const struct image_sampler *s, uint64_t epoch, uint64_t index,
			  uint32_t attempt, uint64_t n_samples);

#endif
