/* SPDX-License-Identifier: Apache-2.0 */
/* image_sample: one image sample into its slot row (image_sample.h). */
#include "image/image_sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "image/pixel.h"
#include "proto/proto.h"

#define ERR_TEXT 256

int image_sampler_init(struct image_sampler *s, const struct arena_image_params *params,
		       uint64_t *row_bytes)
{
	memset(s, 0, sizeof(*s));
	char err[ERR_TEXT];
	if (memchr(params->transform, '\0', sizeof(params->transform)) == NULL ||
	    tf_parse(params->transform, &s->chain, err, sizeof(err)) < 0 ||
	    s->chain.out_h != params->out_h || s->chain.out_w != params->out_w ||
	    params->layout > 1 || params->on_error > 1 || params->max_pixels == 0 ||
	    params->decode_scale > JD_SCALE_FULL)
		return -EINVAL;
	uint64_t elem;
	if (params->dtype == PROTO_DTYPE_UINT8)
		elem = 1;
	else if (params->dtype == PROTO_DTYPE_FLOAT16)
		elem = 2;
	else if (params->dtype == PROTO_DTYPE_FLOAT32)
		elem = 4;
	else
		return -EINVAL;
	for (int c = 0; c < 3; c++)
		if (!isfinite(params->mean[c]) || !isfinite(params->std[c]) || !(params->std[c] > 0))
			return -EINVAL;
	s->params = *params;
	s->jd.max_cpu_ms = params->max_decode_ms;
	s->jd.scale = params->decode_scale;
	uint64_t pixels = (uint64_t)params->out_h * params->out_w;
	s->rgb = malloc(pixels * 3);
	if (!s->rgb)
		return -ENOMEM;
	*row_bytes = pixels * 3 * elem;
	return 0;
}

void image_sampler_free(struct image_sampler *s)
{
	jd_scratch_free(&s->jd);
	rs_scratch_free(&s->rs);
	free(s->rgb);
	s->rgb = NULL;
}

/* s->rgb (HWC uint8) into row, in the pipeline's layout and dtype. */
static void image_store_row(const struct image_sampler *s, uint8_t *row)
{
	const struct arena_image_params *p = &s->params;
	size_t pixels = (size_t)p->out_h * p->out_w;
	const uint8_t *rgb = s->rgb;
	if (p->dtype == PROTO_DTYPE_UINT8) {
		if (p->layout == 1) {
			memcpy(row, rgb, pixels * 3);
			return;
		}
		for (size_t i = 0; i < pixels; i++)
			for (int c = 0; c < 3; c++)
				row[c * pixels + i] = rgb[i * 3 + (size_t)c];
		return;
	}
	float scale[3], shift[3];
	px_norm_coeffs(p->mean, p->std, scale, shift);
	for (size_t i = 0; i < pixels; i++) {
		for (int c = 0; c < 3; c++) {
			float v = px_norm(rgb[i * 3 + (size_t)c], scale[c], shift[c]);
			size_t at = p->layout == 1 ? i * 3 + (size_t)c : (size_t)c * pixels + i;
			if (p->dtype == PROTO_DTYPE_FLOAT32) {
				memcpy(row + at * 4, &v, sizeof(v));
			} else {
				uint16_t h = px_half_from_float(v);
				memcpy(row + at * 2, &h, sizeof(h));
			}
		}
	}
}

int image_sample(struct image_sampler *s, const uint8_t *data, size_t len, uint64_t epoch,
		 uint64_t index, uint8_t *row)
{
	return image_sample_timed(s, data, len, epoch, index, row, NULL);
}

int image_sample_timed(struct image_sampler *s, const uint8_t *data, size_t len, uint64_t epoch,
		       uint64_t index, uint8_t *row, struct image_times *times)
{
	uint64_t t0 = times ? clock_mono_ns() : 0, t1 = 0;
	char err[ERR_TEXT];
	uint32_t w = 0, h = 0;
	int rc = jd_header(data, len, &w, &h, err, sizeof(err));
	if (rc < 0)
		return rc;
	if ((uint64_t)w * h > s->params.max_pixels)
		return -EFBIG;
	struct tf_plan plan;
	tf_plan_sample(&s->chain, s->params.seed, epoch, index, w, h, &plan);
	struct jd_image img;
	rc = jd_decode_box(data, len, plan.x, plan.y, plan.w, plan.h, plan.out_w, plan.out_h,
			   s->params.max_pixels, &img, &s->jd, err, sizeof(err));
	if (rc < 0)
		return rc;
	if (times)
		t1 = clock_mono_ns();
	rc = rs_resize_rgb(img.rgb, img.w, img.h, img.stride, plan.x * img.sx - img.x0,
			   plan.y * img.sy - img.y0, plan.w * img.sx, plan.h * img.sy, s->rgb,
			   plan.out_w, plan.out_h, (size_t)plan.out_w * 3, plan.flip, &s->rs);
	if (rc < 0)
		return rc == -EINVAL ? -EBADMSG : rc;
	image_store_row(s, row);
	if (times) {
		uint64_t t2 = clock_mono_ns();
		times->decode_ns = t1 - t0;
		times->transform_ns = t2 - t1;
	}
	return 0;
}

uint64_t image_substitute(const struct image_sampler *s, uint64_t epoch, uint64_t index,
			  uint32_t attempt, uint64_t n_samples)
{
	if (n_samples < 2)
		return index;
	uint64_t h = hash_sample(s->params.seed, 0x5eedull, epoch, index) ^ attempt;
	uint64_t other = hash_mix64(h) % (n_samples - 1); /* bias below 2^-40 for any real dataset */
	return other >= index ? other + 1 : other;
}

bool image_gpu_takes(const struct arena_image_params *params, const uint8_t *data, size_t len,
		     uint64_t max_bytes, struct jh_info *info)
{
	struct jh_limits lim = {.max_bytes = max_bytes, .max_pixels = params->max_pixels};
	if (!jh_gpu_takes(data, len, &lim, info))
		return false;
	/* Damage the engines may not report (bytes cut out of a restart
	 * interval, a bad Huffman code) */
	return params->gpu_check != ARENA_GPU_CHECK_ENTROPY ||
	       jd_check_entropy(data, len, params->max_pixels, params->max_decode_ms, NULL, 0) == 0;
}
