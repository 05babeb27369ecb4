/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for image/resize: agreement with a plain double-precision
 * implementation of the definition in resize.h on random images and boxes
 * (downscales to 8x, upscales to 4x, fractional boxes, boxes partly or
 * wholly outside the image, padded strides) and on a few outputs from a
 * very wide box; exact identity; constant images staying constant; flip
 * being the mirror image; a box resize being torchvision's resize then
 * center_crop, inside the image and with zero padding; argument checks.
 * Prints the time of the typical worker call.
 *
 * Tolerance against the reference: at most 1 level, and on at most
 * 1 value in 1000. The resampler keeps float weights and a float
 * intermediate and rounds once, so its error before rounding is a few
 * float ulps of 255 (below 1e-3); the rounded results differ only where
 * the exact value lies that close to a .5, and then by exactly 1.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "image/resize.h"
#include "rng.h"

#define DIFF_FRACTION_MAX 1e-3


struct image {
	uint32_t w, h;
	size_t stride;
	uint8_t *px;
};

#define STRIDE_JUNK 0xA5

/* A random image, with junk in the stride's padding that must never be
 * read into the output. */
static struct image image_random(uint32_t w, uint32_t h, size_t pad)
{
	struct image im = {w, h, 3 * (size_t)w + pad, NULL};
	im.px = malloc(im.stride * h);
	assert_non_null(im.px);
	for (size_t i = 0; i < im.stride * h; i++)
		im.px[i] = (i % im.stride) < 3 * (size_t)w ? (uint8_t)rng_next() : STRIDE_JUNK;
	return im;
}

/* An output buffer whose padding holds STRIDE_JUNK, checked afterwards. */
static struct image image_blank(uint32_t w, uint32_t h, size_t pad)
{
	struct image im = {w, h, 3 * (size_t)w + pad, NULL};
	im.px = malloc(im.stride * h);
	assert_non_null(im.px);
	memset(im.px, STRIDE_JUNK, im.stride * h);
	return im;
}

static void assert_padding_untouched(const struct image *im)
{
	for (uint32_t r = 0; r < im->h; r++)
		for (size_t c = 3 * (size_t)im->w; c < im->stride; c++)
			assert_int_equal(im->px[r * im->stride + c], STRIDE_JUNK);
}

static uint8_t *pixel(const struct image *im, uint32_t x, uint32_t y)
{
	return im->px + y * im->stride + 3 * (size_t)x;
}

/*
 * The reference: resize.h's definition, one output at a time, in double,
 * with nothing rounded before the end. Source pixel j's weight for output
 * i is weights[j], for j in [*lo, *hi); that range is empty when the
 * output's center is outside the image.
 */
static void ref_weights(uint32_t src_len, double start, double len, uint32_t n_out, uint32_t i,
			double *weights, uint32_t *lo, uint32_t *hi)
{
	double scale = len / n_out;
	double filter_scale = fmax(scale, 1.0);
	double support = filter_scale * 1.0;
	double center = start + (i + 0.5) * scale;

	*lo = *hi = 0;
	if (center < 0.0 || center > src_len)
		return;
	*lo = (uint32_t)fmax(floor(center - support + 0.5), 0.0);
	*hi = (uint32_t)fmin(floor(center + support + 0.5), src_len);
	double sum = 0.0;
	for (uint32_t j = *lo; j < *hi; j++) {
		double t = fabs((j + 0.5 - center) / filter_scale);
		weights[j] = t < 1.0 ? 1.0 - t : 0.0;
		sum += weights[j];
	}
	for (uint32_t j = *lo; j < *hi; j++)
		weights[j] /= sum;
}

struct ref_axis {
	uint32_t src_len;
	double *weights; /* [n_out][src_len] */
	uint32_t *lo, *hi;
};

static struct ref_axis ref_axis_make(uint32_t src_len, double start, double len, uint32_t n_out,
				     bool mirror)
{
	struct ref_axis a = {src_len, calloc((size_t)n_out * src_len, sizeof(double)),
			     calloc(n_out, sizeof(uint32_t)), calloc(n_out, sizeof(uint32_t))};
	assert_non_null(a.weights);
	assert_non_null(a.lo);
	assert_non_null(a.hi);
	for (uint32_t i = 0; i < n_out; i++)
		ref_weights(src_len, start, len, n_out, mirror ? n_out - 1 - i : i,
			    a.weights + (size_t)i * src_len, &a.lo[i], &a.hi[i]);
	return a;
}

static void ref_axis_free(struct ref_axis *a)
{
	free(a->weights);
	free(a->lo);
	free(a->hi);
}

static void ref_resize(const struct image *src, double x, double y, double w, double h,
		       struct image *dst, bool flip)
{
	struct ref_axis ax = ref_axis_make(src->w, x, w, dst->w, flip);
	struct ref_axis ay = ref_axis_make(src->h, y, h, dst->h, false);
	double *mid = malloc(sizeof(double) * 3 * src->h * dst->w);
	assert_non_null(mid);

	for (uint32_t r = 0; r < src->h; r++)
		for (uint32_t i = 0; i < dst->w; i++)
			for (int c = 0; c < 3; c++) {
				const double *wi = ax.weights + (size_t)i * src->w;
				double acc = 0.0;
				for (uint32_t j = ax.lo[i]; j < ax.hi[i]; j++)
					acc += wi[j] * pixel(src, j, r)[c];
				mid[((size_t)r * dst->w + i) * 3 + c] = acc;
			}
	for (uint32_t o = 0; o < dst->h; o++)
		for (uint32_t i = 0; i < dst->w; i++)
			for (int c = 0; c < 3; c++) {
				const double *wo = ay.weights + (size_t)o * src->h;
				double acc = 0.0;
				for (uint32_t r = ay.lo[o]; r < ay.hi[o]; r++)
					acc += wo[r] * mid[((size_t)r * dst->w + i) * 3 + c];
				double v = floor(acc + 0.5);
				pixel(dst, i, o)[c] = (uint8_t)fmin(fmax(v, 0.0), 255.0);
			}
	free(mid);
	ref_axis_free(&ay);
	ref_axis_free(&ax);
}

static void test_matches_reference(void **state)
{
	struct rs_scratch s = {0};
	uint64_t values = 0, differing = 0;
	int max_diff = 0, reported = 0;

	for (int trial = 0; trial < 600; trial++) {
		/* One draw per statement: argument order is unspecified, and the
		 * cases must not depend on the compiler. */
		uint32_t src_w = rng_range(1, 120), src_h = rng_range(1, 120);
		struct image src = image_random(src_w, src_h, rng_range(0, 9));
		uint32_t out_w = rng_range(1, 80), out_h = rng_range(1, 80);
		/* Per axis, source pixels per output from 1/4 (4x upscale) to
		 * 8 (8x downscale), log-uniform; boxes start anywhere from
		 * well before the image to near its far edge. */
		double w = out_w * exp2(rng_real(-2.0, 3.0));
		double h = out_h * exp2(rng_real(-2.0, 3.0));
		double x = rng_real(-0.5 * w, src.w - 0.5 * w);
		double y = rng_real(-0.5 * h, src.h - 0.5 * h);
		switch (trial % 4) {
		case 0: /* whole pixels */
			x = round(x), y = round(y), w = fmax(round(w), 1.0), h = fmax(round(h), 1.0);
			break;
		case 1: /* inside the image, as random_resized_crop's boxes are */
			w = fmin(w, src.w), h = fmin(h, src.h);
			x = rng_real(0.0, src.w - w), y = rng_real(0.0, src.h - h);
			break;
		default:
			break;
		}
		bool flip = rng_next() & 1;
		struct image got = image_blank(out_w, out_h, rng_range(0, 5));
		struct image want = image_blank(out_w, out_h, 0);

		assert_int_equal(rs_resize_rgb(src.px, src.w, src.h, src.stride, x, y, w, h, got.px,
					       out_w, out_h, got.stride, flip, &s),
				 0);
		ref_resize(&src, x, y, w, h, &want, flip);
		assert_padding_untouched(&got);
		for (uint32_t r = 0; r < out_h; r++)
			for (size_t c = 0; c < 3 * (size_t)out_w; c++) {
				int d = abs(got.px[r * got.stride + c] - want.px[r * want.stride + c]);
				if (d > 1 && reported++ < 5)
					print_message("trial %d: src %ux%u box %.17g,%.17g %.17gx%.17g "
						      "out %ux%u flip %d: differs by %d\n",
						      trial, src.w, src.h, x, y, w, h, out_w, out_h,
						      flip, d);
				max_diff = d > max_diff ? d : max_diff;
				differing += d != 0;
				values++;
			}
		free(want.px);
		free(got.px);
		free(src.px);
	}
	rs_scratch_free(&s);
	print_message("%llu of %llu values differ from the reference, by at most %d\n",
		      (unsigned long long)differing, (unsigned long long)values, max_diff);
	assert_true(max_diff <= 1);
	assert_true((double)differing <= DIFF_FRACTION_MAX * (double)values);
}

/* Few outputs from a wide box: windows of very different sizes, the
 * last ones cut by the image's edge. Each call gets a fresh scratch, so
 * its buffers are exactly as large as asked and the sanitizer build sees
 * any read past them. */
static void test_strong_downscale(void **state)
{
	static const uint32_t src_widths[] = {50, 200};
	static const double offsets[] = {0.0, 0.37, -13.5};

	for (size_t a = 0; a < sizeof(src_widths) / sizeof(src_widths[0]); a++)
		for (size_t b = 0; b < sizeof(offsets) / sizeof(offsets[0]); b++)
			for (uint32_t out_w = 1; out_w <= 6; out_w++) {
				uint32_t sw = src_widths[a], sh = 7;
				struct image src = image_random(sw, sh, 0);
				struct image got = image_blank(out_w, 2, 0);
				struct image want = image_blank(out_w, 2, 0);
				struct rs_scratch s = {0};
				double x = offsets[b], w = sw - offsets[b] / 2;
				for (int flip = 0; flip < 2; flip++) {
					assert_int_equal(rs_resize_rgb(src.px, sw, sh, src.stride, x, 0,
								       w, sh, got.px, out_w, 2,
								       got.stride, flip, &s),
							 0);
					ref_resize(&src, x, 0, w, sh, &want, flip);
					for (size_t i = 0; i < got.stride * 2; i++)
						assert_true(abs(got.px[i] - want.px[i]) <= 1);
				}
				rs_scratch_free(&s);
				free(want.px);
				free(got.px);
				free(src.px);
			}
}

/* Box = the whole image, output the same size: every weight is 1 or 0. */
static void test_identity(void **state)
{
	static const uint32_t sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {3, 5}, {64, 48}, {223, 97}};
	struct rs_scratch s = {0};

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint32_t w = sizes[k][0], h = sizes[k][1];
		struct image src = image_random(w, h, k);
		struct image got = image_blank(w, h, 2);
		struct image mirrored = image_blank(w, h, 0);

		assert_int_equal(rs_resize_rgb(src.px, w, h, src.stride, 0, 0, w, h, got.px, w, h,
					       got.stride, false, &s),
				 0);
		for (uint32_t r = 0; r < h; r++)
			assert_memory_equal(pixel(&got, 0, r), pixel(&src, 0, r), 3 * (size_t)w);
		assert_padding_untouched(&got);

		assert_int_equal(rs_resize_rgb(src.px, w, h, src.stride, 0, 0, w, h, mirrored.px, w,
					       h, mirrored.stride, true, &s),
				 0);
		for (uint32_t r = 0; r < h; r++)
			for (uint32_t c = 0; c < w; c++)
				assert_memory_equal(pixel(&mirrored, c, r), pixel(&src, w - 1 - c, r), 3);
		free(mirrored.px);
		free(got.px);
		free(src.px);
	}
	rs_scratch_free(&s);
}

/* Boxes inside the image, many touching or near its edges, where the taps
 * are clipped and the weights renormalised: a constant stays constant. */
static void test_constant_stays_constant(void **state)
{
	static const uint8_t values[] = {0, 1, 77, 128, 254, 255};
	struct rs_scratch s = {0};

	for (int trial = 0; trial < 300; trial++) {
		uint8_t v = values[trial % (int)sizeof(values)];
		uint32_t sw = rng_range(1, 90), sh = rng_range(1, 90);
		struct image src = image_random(sw, sh, 1);
		for (uint32_t r = 0; r < sh; r++)
			memset(pixel(&src, 0, r), v, 3 * (size_t)sw);
		double w = rng_real(0.05, 1.0) * sw, h = rng_real(0.05, 1.0) * sh;
		double x = rng_real(0.0, sw - w), y = rng_real(0.0, sh - h);
		if (trial % 3 == 0) /* against the top-left corner */
			x = 0, y = 0;
		if (trial % 3 == 1) /* against the bottom-right corner */
			x = sw - w, y = sh - h;
		uint32_t out_w = rng_range(1, 4 * sw), out_h = rng_range(1, 4 * sh);
		out_w = out_w > 120 ? 120 : out_w;
		out_h = out_h > 120 ? 120 : out_h;
		struct image got = image_blank(out_w, out_h, 0);

		assert_int_equal(rs_resize_rgb(src.px, sw, sh, src.stride, x, y, w, h, got.px, out_w,
					       out_h, got.stride, trial & 1, &s),
				 0);
		for (size_t i = 0; i < got.stride * out_h; i++)
			if (got.px[i] != v)
				fail_msg("trial %d: src %ux%u box %.17g,%.17g %.17gx%.17g out %ux%u: "
					 "byte %zu is %d, not %d",
					 trial, sw, sh, x, y, w, h, out_w, out_h, i, got.px[i], v);
		free(got.px);
		free(src.px);
	}
	rs_scratch_free(&s);
}

static void test_flip_is_mirror(void **state)
{
	struct rs_scratch s = {0};

	for (int trial = 0; trial < 200; trial++) {
		uint32_t src_w = rng_range(1, 100), src_h = rng_range(1, 100);
		struct image src = image_random(src_w, src_h, 0);
		uint32_t out_w = rng_range(1, 100), out_h = rng_range(1, 100);
		double w = rng_real(0.1, 1.5) * src.w, h = rng_real(0.1, 1.5) * src.h;
		double x = rng_real(-0.3 * w, src.w - 0.7 * w), y = rng_real(-0.3 * h, src.h - 0.7 * h);
		struct image plain = image_blank(out_w, out_h, 0);
		struct image flipped = image_blank(out_w, out_h, 0);

		assert_int_equal(rs_resize_rgb(src.px, src.w, src.h, src.stride, x, y, w, h, plain.px,
					       out_w, out_h, plain.stride, false, &s),
				 0);
		assert_int_equal(rs_resize_rgb(src.px, src.w, src.h, src.stride, x, y, w, h,
					       flipped.px, out_w, out_h, flipped.stride, true, &s),
				 0);
		for (uint32_t r = 0; r < out_h; r++)
			for (uint32_t c = 0; c < out_w; c++)
				assert_memory_equal(pixel(&flipped, c, r),
						    pixel(&plain, out_w - 1 - c, r), 3);
		free(flipped.px);
		free(plain.px);
		free(src.px);
	}
	rs_scratch_free(&s);
}

/*
 * What the transform plans rely on: torchvision's resize of the whole
 * image to rw x rh followed by center_crop(ch, cw) is one box resize,
 * whether the crop lies inside the resized image (the taps read past the
 * box) or beyond it (zero padding of whole pixels, no blending at its
 * edge). Scales are powers of two, so both sides compute the same centers
 * and weights; the two calls may still pick different pass orders, which
 * can move a value that lies within float error of a .5 by one level.
 * Reading only the box, or blending with the padding, would be off by far
 * more at the crop's edges.
 */
static void check_resize_then_crop(struct rs_scratch *s, const struct image *src, uint32_t rw,
				   uint32_t rh, uint32_t cw, uint32_t ch)
{
	struct image resized = image_blank(rw, rh, 0);
	struct image got = image_blank(cw, ch, 0);
	assert_int_equal(rs_resize_rgb(src->px, src->w, src->h, src->stride, 0, 0, src->w, src->h,
				       resized.px, rw, rh, resized.stride, false, s),
			 0);

	/* torchvision's center_crop: pad (left, top) by ((cw - rw) // 2, ...)
	 * when the crop is larger; else offset by Python's round((rw - cw) / 2),
	 * which rounds half to even, as rint does. */
	int64_t left = cw > rw ? -(int64_t)((cw - rw) / 2) : (int64_t)rint((rw - cw) / 2.0);
	int64_t top = ch > rh ? -(int64_t)((ch - rh) / 2) : (int64_t)rint((rh - ch) / 2.0);
	double sx = (double)src->w / rw, sy = (double)src->h / rh;
	assert_int_equal(rs_resize_rgb(src->px, src->w, src->h, src->stride, left * sx, top * sy,
				       cw * sx, ch * sy, got.px, cw, ch, got.stride, false, s),
			 0);

	for (uint32_t r = 0; r < ch; r++)
		for (uint32_t c = 0; c < cw; c++) {
			int64_t rx = left + c, ry = top + r;
			const uint8_t *p = pixel(&got, c, r);
			if (rx < 0 || rx >= rw || ry < 0 || ry >= rh) {
				assert_true(p[0] == 0 && p[1] == 0 && p[2] == 0);
				continue;
			}
			const uint8_t *want = pixel(&resized, (uint32_t)rx, (uint32_t)ry);
			for (int k = 0; k < 3; k++)
				if (abs(p[k] - want[k]) > 1)
					fail_msg("%ux%u -> %ux%u, crop %ux%u: pixel (%u, %u) is %d, "
						 "resize then crop gives %d",
						 src->w, src->h, rw, rh, cw, ch, c, r, p[k], want[k]);
		}
	free(got.px);
	free(resized.px);
}

static void test_box_is_resize_then_crop(void **state)
{
	struct rs_scratch s = {0};
	struct image big = image_random(64, 48, 0);
	check_resize_then_crop(&s, &big, 32, 24, 20, 14); /* crop inside */
	check_resize_then_crop(&s, &big, 32, 24, 40, 30); /* padded */
	check_resize_then_crop(&s, &big, 16, 12, 21, 5);  /* padded across, inside down */
	check_resize_then_crop(&s, &big, 8, 6, 8, 6);
	struct image small = image_random(16, 12, 3);
	check_resize_then_crop(&s, &small, 64, 48, 50, 40); /* upscaled, crop inside */
	check_resize_then_crop(&s, &small, 64, 48, 70, 53); /* upscaled, padded */
	check_resize_then_crop(&s, &small, 16, 12, 25, 17); /* no resize, padded */
	free(small.px);
	free(big.px);
	rs_scratch_free(&s);
}

/* Outputs whose centers all lie outside the image are black. */
static void test_box_outside_is_black(void **state)
{
	struct rs_scratch s = {0};
	struct image src = image_random(10, 10, 0);
	struct image got = image_blank(6, 4, 0);
	static const double boxes[][4] = {
		{-20, 0, 10, 10}, {10.5, 0, 3, 10}, {0, -7, 10, 5}, {0, 11, 10, 10}, {-1e300, 0, 1, 1},
	};
	for (size_t k = 0; k < sizeof(boxes) / sizeof(boxes[0]); k++) {
		assert_int_equal(rs_resize_rgb(src.px, 10, 10, src.stride, boxes[k][0], boxes[k][1],
					       boxes[k][2], boxes[k][3], got.px, 6, 4, got.stride,
					       false, &s),
				 0);
		for (size_t i = 0; i < got.stride * 4; i++)
			assert_int_equal(got.px[i], 0);
	}
	free(got.px);
	free(src.px);
	rs_scratch_free(&s);
}

static void test_invalid_arguments(void **state)
{
	struct rs_scratch s = {0};
	uint8_t src[4 * 4 * 3] = {0}, dst[2 * 2 * 3];
	const double inf = INFINITY, nan = NAN;
	memset(dst, STRIDE_JUNK, sizeof(dst));

#define RS(src_, sw, sh, sst, x, y, w, h, dst_, ow, oh, dst_st, s_)                            \
	rs_resize_rgb(src_, sw, sh, sst, x, y, w, h, dst_, ow, oh, dst_st, false, s_)
	assert_int_equal(RS(NULL, 4, 4, 12, 0, 0, 4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, 4, NULL, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, 4, dst, 2, 2, 6, NULL), -EINVAL);
	assert_int_equal(RS(src, 0, 4, 12, 0, 0, 4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 0, 12, 0, 0, 4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, 4, dst, 0, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, 4, dst, 2, 0, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 0, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, 0, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, -4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, -1e-9, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, nan, 0, 4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, -inf, 4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, inf, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, nan, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 11, 0, 0, 4, 4, dst, 2, 2, 6, &s), -EINVAL);
	assert_int_equal(RS(src, 4, 4, 12, 0, 0, 4, 4, dst, 2, 2, 5, &s), -EINVAL);
#undef RS
	for (size_t i = 0; i < sizeof(dst); i++)
		assert_int_equal(dst[i], STRIDE_JUNK);

	/* A zeroed scratch frees, twice. */
	rs_scratch_free(&s);
	rs_scratch_free(&s);
}

static double seconds_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The typical worker calls, timed on one core; printed, not asserted.
 * The best of several batches: other processes only ever add time. */
static void test_timing(void **state)
{
	static const struct {
		const char *what;
		uint32_t sw, sh;
		double x, y, w, h;
	} cases[] = {
		{"500x375 whole -> 224x224", 500, 375, 0, 0, 500, 375},
		{"375x500 whole -> 224x224", 375, 500, 0, 0, 375, 500},
		{"500x375 box 312.5x233.7 -> 224x224", 500, 375, 40.25, 71.5, 312.5, 233.7},
		{"500x375 box 110x130 (upscale) -> 224x224", 500, 375, 201.3, 17.9, 110, 130},
	};
	enum { batches = 20, calls = 10 };
	struct rs_scratch s = {0};
	struct image out = image_blank(224, 224, 0);

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct image src = image_random(cases[k].sw, cases[k].sh, 0);
		double best = INFINITY, total = 0.0;
		for (int b = 0; b < batches; b++) {
			double start = seconds_now();
			for (int i = 0; i < calls; i++)
				assert_int_equal(rs_resize_rgb(src.px, src.w, src.h, src.stride,
							       cases[k].x, cases[k].y, cases[k].w,
							       cases[k].h, out.px, 224, 224,
							       out.stride, i & 1, &s),
						 0);
			double t = (seconds_now() - start) / calls;
			best = fmin(best, t);
			total += t;
		}
		print_message("resize %s: %.3f ms per call (best batch), %.3f ms (mean)\n",
			      cases[k].what, best * 1e3, total * 1e3 / batches);
		free(src.px);
	}
	free(out.px);
	rs_scratch_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_reference),
		cmocka_unit_test(test_strong_downscale),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_constant_stays_constant),
		cmocka_unit_test(test_flip_is_mirror),
		cmocka_unit_test(test_box_is_resize_then_crop),
		cmocka_unit_test(test_box_outside_is_black),
		cmocka_unit_test(test_invalid_arguments),
		cmocka_unit_test(test_timing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
