/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resize: PIL's antialiased bilinear resample of a box of an RGB image,
 * in float, from per-axis tap tables (contract in resize.h).
 *
 * A tap table says, for each output column (or row), which source columns
 * (rows) it reads and with what weights; taps outside the image and taps
 * of weight 0 at the ends are left out, so the passes read image pixels
 * only and the span of the tables is all of the source that gets read.
 * One pass filters along y over whole line segments, the other along x
 * pixel by pixel, with every x window padded to one size. Which pass goes
 * first is decided per call from a cost estimate. The taps, their weights
 * and that estimate come from resize_taps.h, which the GPU kernel
 * (imgkernel.cu) compiles too, so that both make the same bytes.
 *
 * The inner loops use GCC/Clang vector types of 16 bytes, 4 floats: the
 * build's -O2 only vectorises loops whose trip count it knows, and these
 * would otherwise run one float at a time. Wider vector types and small
 * conversions (4 bytes to 4 floats) compile to scalar code or to spills
 * with GCC, so uint8 <-> float goes through explicit shuffles, which
 * become SSE2 unpacks and packs on baseline x86-64 (zips on NEON).
 */
#include "image/resize.h"
#include "image/resize_taps.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef float rs__f32x4 __attribute__((vector_size(16)));
typedef int32_t rs__i32x4 __attribute__((vector_size(16)));
typedef uint16_t rs__u16x8 __attribute__((vector_size(16)));
typedef uint8_t rs__u8x16 __attribute__((vector_size(16)));

/* Widening by interleaving with zeros puts the value in the low byte. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "resize.c assumes little-endian");

/* Two-vector shuffles: GCC has __builtin_shuffle with a mask vector,
 * Clang (and GCC >= 12) __builtin_shufflevector with constant indices. */
#if defined(__clang__)
#define RS__SHUF16(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define RS__SHUF8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define RS__SHUF16(a, b, ...) __builtin_shuffle(a, b, (rs__u8x16){__VA_ARGS__})
#define RS__SHUF8(a, b, ...) __builtin_shuffle(a, b, (rs__u16x8){__VA_ARGS__})
#endif

/* Floats of padding after a row buffer: the horizontal pass loads and
 * stores 4 floats per pixel of 3. */
#define RS__PAD 4

/* The source pixels one output reads: [first, first + count). count == 0:
 * the output's center is outside the image, or it has no tap. */
struct rs__span {
	uint32_t first;
	uint32_t count;
};

struct rs__axis {
	uint32_t n_out;
	uint32_t stride;        /* taps per output in weight[] */
	uint32_t lanes;         /* floats per tap: 1, or 4 copies for the x axis */
	uint32_t lo, hi;        /* source pixels some tap reads; lo >= hi: none */
	uint64_t taps;          /* sum of the counts: a pass's work per line */
	struct rs__span *span;  /* [n_out] */
	float *weight;          /* [n_out][stride][lanes] */
};

/* PIL's precompute_coeffs for one axis (resize_taps.h), over the whole
 * image. mirror stores output i's taps at n_out - 1 - i. */
static void rs__axis_fill(struct rs__axis *ax, uint32_t src_len, double start, double len,
			  bool mirror)
{
	const struct rs_axis_geom g = rs_axis_geom_make(start, len, ax->n_out);

	ax->lo = src_len;
	ax->hi = 0;
	ax->taps = 0;
	for (uint32_t i = 0; i < ax->n_out; i++) {
		uint32_t o = mirror ? ax->n_out - 1 - i : i;
		struct rs__span *sp = &ax->span[o];
		float *wt = ax->weight + (size_t)o * ax->stride * ax->lanes;
		uint32_t first = 0;
		uint32_t count = rs_output_taps(&g, i, 0.0, (double)src_len, 0, src_len, ax->stride,
						&first, wt, ax->lanes);
		*sp = (struct rs__span){count > 0 ? first : 0, count};
		if (count == 0)
			continue;
		ax->taps += count;
		if (first < ax->lo)
			ax->lo = first;
		if (first + count > ax->hi)
			ax->hi = first + count;
	}
}

/*
 * Gives every output of the axis the same number of taps, the largest
 * count, by padding windows with weights of 0 (shifted left where they
 * would run past hi); an output without taps gets a window of zeros.
 * The horizontal pass runs one loop per pixel, and a trip count that
 * changes from pixel to pixel costs a mispredicted branch at most of
 * them, which is more than the padding's multiplications.
 */
static void rs__axis_fix_windows(struct rs__axis *ax)
{
	uint32_t k_max = 0;
	for (uint32_t i = 0; i < ax->n_out; i++)
		if (ax->span[i].count > k_max)
			k_max = ax->span[i].count;
	for (uint32_t i = 0; i < ax->n_out; i++) {
		struct rs__span *sp = &ax->span[i];
		float *wt = ax->weight + (size_t)i * ax->stride * ax->lanes;
		uint32_t first = sp->count > 0 ? sp->first : ax->lo;
		if (first > ax->hi - k_max)
			first = ax->hi - k_max;
		size_t shift = sp->count > 0 ? (size_t)(sp->first - first) * ax->lanes : 0;
		size_t used = (size_t)sp->count * ax->lanes;
		memmove(wt + shift, wt, used * sizeof(float));
		memset(wt, 0, shift * sizeof(float));
		memset(wt + shift + used, 0, ((size_t)k_max * ax->lanes - shift - used) * sizeof(float));
		sp->first = first;
		sp->count = k_max;
	}
}

static rs__f32x4 rs__load4(const float *p)
{
	rs__f32x4 v;
	memcpy(&v, p, sizeof v);
	return v;
}

static void rs__store4(float *p, rs__f32x4 v)
{
	memcpy(p, &v, sizeof v);
}

/* 16 bytes to 16 floats, in order. */
static void rs__widen16(const uint8_t *p, rs__f32x4 *x0, rs__f32x4 *x1, rs__f32x4 *x2,
			rs__f32x4 *x3)
{
	const rs__u8x16 z8 = {0};
	const rs__u16x8 z16 = {0};
	rs__u8x16 b;
	memcpy(&b, p, sizeof b);
	rs__u16x8 lo = (rs__u16x8)RS__SHUF16(b, z8, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21,
					      6, 22, 7, 23);
	rs__u16x8 hi = (rs__u16x8)RS__SHUF16(b, z8, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29,
					      14, 30, 15, 31);
	*x0 = __builtin_convertvector((rs__i32x4)RS__SHUF8(lo, z16, 0, 8, 1, 9, 2, 10, 3, 11),
				      rs__f32x4);
	*x1 = __builtin_convertvector((rs__i32x4)RS__SHUF8(lo, z16, 4, 12, 5, 13, 6, 14, 7, 15),
				      rs__f32x4);
	*x2 = __builtin_convertvector((rs__i32x4)RS__SHUF8(hi, z16, 0, 8, 1, 9, 2, 10, 3, 11),
				      rs__f32x4);
	*x3 = __builtin_convertvector((rs__i32x4)RS__SHUF8(hi, z16, 4, 12, 5, 13, 6, 14, 7, 15),
				      rs__f32x4);
}

/* Round half up into 0..255, as PIL's clip8 does. Weights and pixels are
 * >= 0, so only float error could leave 0..255; clamped all the same,
 * before the conversion, which would be undefined out of range. */
static uint8_t rs__to_u8(float v)
{
	v += 0.5f;
	if (!(v > 0.0f))
		return 0;
	if (v >= 255.0f)
		return 255;
	return (uint8_t)v;
}

static rs__i32x4 rs__to_u8x4(rs__f32x4 v)
{
	const rs__f32x4 top = {255.0f, 255.0f, 255.0f, 255.0f};
	v += 0.5f;
	/* Products and sums of values >= 0 are >= 0: only the top needs it. */
	rs__i32x4 below = v < top;
	rs__i32x4 bits = ((rs__i32x4)v & below) | ((rs__i32x4)top & ~below);
	return __builtin_convertvector((rs__f32x4)bits, rs__i32x4);
}

/* 16 floats to 16 bytes, rounded as rs__to_u8 does. */
static void rs__narrow16(uint8_t *p, rs__f32x4 x0, rs__f32x4 x1, rs__f32x4 x2, rs__f32x4 x3)
{
	rs__u16x8 lo = RS__SHUF8((rs__u16x8)rs__to_u8x4(x0), (rs__u16x8)rs__to_u8x4(x1), 0, 2, 4, 6,
				 8, 10, 12, 14);
	rs__u16x8 hi = RS__SHUF8((rs__u16x8)rs__to_u8x4(x2), (rs__u16x8)rs__to_u8x4(x3), 0, 2, 4, 6,
				 8, 10, 12, 14);
	rs__u8x16 b = RS__SHUF16((rs__u8x16)lo, (rs__u8x16)hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
				 20, 22, 24, 26, 28, 30);
	memcpy(p, &b, sizeof b);
}

/*
 * The line loops below go 16 values at a time; a line whose length is not
 * a multiple of 16 ends with a block that overlaps the one before it,
 * recomputing a few values rather than running a scalar tail. Lines
 * shorter than 16 run the scalar loop.
 */
static size_t rs__block_at(size_t c, size_t len)
{
	return c + 16 <= len ? c : len - 16;
}

/* 16 floats stored at p, as rs__widen16 leaves them. */
static void rs__store16(float *p, rs__f32x4 x0, rs__f32x4 x1, rs__f32x4 x2, rs__f32x4 x3)
{
	rs__store4(p, x0);
	rs__store4(p + 4, x1);
	rs__store4(p + 8, x2);
	rs__store4(p + 12, x3);
}

/* sum_k w[k] * src[k * stride], k in order: one column of the vertical
 * filter, the scalar way (lines shorter than 16). */
static float rs__vtap_u8(const uint8_t *src, size_t stride, const float *w, uint32_t n)
{
	float acc = 0.0f;
	for (uint32_t k = 0; k < n; k++)
		acc += w[k] * src[k * stride];
	return acc;
}

static float rs__vtap_f32(const float *src, size_t stride, const float *w, uint32_t n)
{
	float acc = 0.0f;
	for (uint32_t k = 0; k < n; k++)
		acc += w[k] * src[k * stride];
	return acc;
}

/* out[c] = sum_k w[k] * src[k * stride + c] for c < len: the vertical
 * filter over uint8 source rows. */
static void rs__vfilter_u8(const uint8_t *src, size_t stride, const float *w, uint32_t n,
			   float *out, size_t len)
{
	if (len < 16) {
		for (size_t c = 0; c < len; c++)
			out[c] = rs__vtap_u8(src + c, stride, w, n);
		return;
	}
	for (size_t c0 = 0; c0 < len; c0 += 16) {
		size_t c = rs__block_at(c0, len);
		rs__f32x4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
		const uint8_t *p = src + c;
		for (uint32_t k = 0; k < n; k++, p += stride) {
			rs__f32x4 x0, x1, x2, x3;
			rs__widen16(p, &x0, &x1, &x2, &x3);
			a0 += w[k] * x0;
			a1 += w[k] * x1;
			a2 += w[k] * x2;
			a3 += w[k] * x3;
		}
		rs__store16(out + c, a0, a1, a2, a3);
	}
}

/* The same over float rows (stride in floats), rounded into uint8. */
static void rs__vfilter_f32_u8(const float *src, size_t stride, const float *w, uint32_t n,
			       uint8_t *out, size_t len)
{
	if (len < 16) {
		for (size_t c = 0; c < len; c++)
			out[c] = rs__to_u8(rs__vtap_f32(src + c, stride, w, n));
		return;
	}
	for (size_t c0 = 0; c0 < len; c0 += 16) {
		size_t c = rs__block_at(c0, len);
		rs__f32x4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
		const float *p = src + c;
		for (uint32_t k = 0; k < n; k++, p += stride) {
			a0 += w[k] * rs__load4(p);
			a1 += w[k] * rs__load4(p + 4);
			a2 += w[k] * rs__load4(p + 8);
			a3 += w[k] * rs__load4(p + 12);
		}
		rs__narrow16(out + c, a0, a1, a2, a3);
	}
}

static void rs__widen_line(const uint8_t *src, float *out, size_t len)
{
	if (len < 16) {
		for (size_t c = 0; c < len; c++)
			out[c] = src[c];
		return;
	}
	for (size_t c0 = 0; c0 < len; c0 += 16) {
		size_t c = rs__block_at(c0, len);
		rs__f32x4 x0, x1, x2, x3;
		rs__widen16(src + c, &x0, &x1, &x2, &x3);
		rs__store16(out + c, x0, x1, x2, x3);
	}
}

static void rs__narrow_line(const float *src, uint8_t *out, size_t len)
{
	if (len < 16) {
		for (size_t c = 0; c < len; c++)
			out[c] = rs__to_u8(src[c]);
		return;
	}
	for (size_t c0 = 0; c0 < len; c0 += 16) {
		size_t c = rs__block_at(c0, len);
		rs__narrow16(out + c, rs__load4(src + c), rs__load4(src + c + 4),
			     rs__load4(src + c + 8), rs__load4(src + c + 12));
	}
}

/* The horizontal filter for windows of `taps` pixels (rs__axis_fix_windows):
 * row holds the pixels from ax->lo on, then RS__PAD floats; out gets
 * 3 * n_out floats, then junk in its RS__PAD. Inlined with a constant
 * taps, the tap loop unrolls (-O2 alone would not) and loses its
 * counter. */
static inline __attribute__((always_inline)) void
rs__hfilter_taps(const float *row, const struct rs__axis *ax, float *out, uint32_t taps)
{
	/* One pixel per 4-float vector; the fourth lane is junk, and each
	 * store's is overwritten by the next pixel's, so in order. */
	for (uint32_t i = 0; i < ax->n_out; i++) {
		const float *p = row + 3 * (size_t)(ax->span[i].first - ax->lo);
		const float *w = ax->weight + (size_t)i * ax->stride * 4;
		rs__f32x4 acc = {0};
#pragma GCC unroll 16
		for (uint32_t k = 0; k < taps; k++)
			acc += rs__load4(w + 4 * k) * rs__load4(p + 3 * k);
		rs__store4(out + 3 * (size_t)i, acc);
	}
}

static void rs__hfilter(const float *row, const struct rs__axis *ax, float *out)
{
	/* 1: no downscale; up to 5 covers downscales to 2x, 9 to 4x. */
	switch (ax->span[0].count) {
	case 1: rs__hfilter_taps(row, ax, out, 1); break;
	case 2: rs__hfilter_taps(row, ax, out, 2); break;
	case 3: rs__hfilter_taps(row, ax, out, 3); break;
	case 4: rs__hfilter_taps(row, ax, out, 4); break;
	case 5: rs__hfilter_taps(row, ax, out, 5); break;
	case 6: rs__hfilter_taps(row, ax, out, 6); break;
	case 7: rs__hfilter_taps(row, ax, out, 7); break;
	case 8: rs__hfilter_taps(row, ax, out, 8); break;
	case 9: rs__hfilter_taps(row, ax, out, 9); break;
	default: rs__hfilter_taps(row, ax, out, ax->span[0].count); break;
	}
}

/* Grows *buf to at least need bytes; its contents are not kept. */
static int rs__grow(void **buf, size_t *have, size_t need)
{
	if (*have >= need)
		return 0;
	void *p = malloc(need);
	if (p == NULL)
		return -ENOMEM;
	free(*buf);
	*buf = p;
	*have = need;
	return 0;
}

/* a * b + c without wrapping; false when it would. */
static bool rs__size_mad(size_t a, size_t b, size_t c, size_t *out)
{
	size_t ab;
	return !__builtin_mul_overflow(a, b, &ab) && !__builtin_add_overflow(ab, c, out);
}

/* Spans and weights of one axis, rounded up to keep what follows aligned. */
static bool rs__axis_bytes(uint32_t n_out, uint32_t stride, uint32_t lanes, size_t *out)
{
	size_t spans = (size_t)n_out * sizeof(struct rs__span);
	size_t weights;
	if (!rs__size_mad(n_out, (size_t)stride * lanes * sizeof(float), 0, &weights))
		return false;
	if (!rs__size_mad(1, spans, weights, out) || !rs__size_mad(1, *out, 63, out))
		return false;
	*out &= ~(size_t)63;
	return true;
}

static void rs__axis_place(struct rs__axis *ax, uint8_t *at, uint32_t n_out, uint32_t stride,
			   uint32_t lanes)
{
	ax->n_out = n_out;
	ax->stride = stride;
	ax->lanes = lanes;
	ax->span = (struct rs__span *)(void *)at;
	ax->weight = (float *)(void *)(at + (size_t)n_out * sizeof(struct rs__span));
}

int rs_resize_rgb(const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		  double x, double y, double w, double h,
		  uint8_t *dst, uint32_t out_w, uint32_t out_h, size_t dst_stride,
		  bool flip, struct rs_scratch *s)
{
	if (src == NULL || dst == NULL || s == NULL)
		return -EINVAL;
	if (src_w == 0 || src_h == 0 || out_w == 0 || out_h == 0)
		return -EINVAL;
	if (!isfinite(x) || !isfinite(y) || !isfinite(w) || !isfinite(h) || !(w > 0.0) ||
	    !(h > 0.0))
		return -EINVAL;
	if (src_stride / 3 < src_w || dst_stride / 3 < out_w)
		return -EINVAL;

	/* The horizontal pass multiplies a pixel by 4 copies of its weight. */
	const uint32_t x_stride = rs_axis_stride(src_w, w, out_w);
	const uint32_t y_stride = rs_axis_stride(src_h, h, out_h);
	size_t x_bytes, y_bytes, table_bytes;
	if (!rs__axis_bytes(out_w, x_stride, 4, &x_bytes) ||
	    !rs__axis_bytes(out_h, y_stride, 1, &y_bytes) ||
	    !rs__size_mad(1, x_bytes, y_bytes, &table_bytes))
		return -ENOMEM;
	if (rs__grow(&s->tables, &s->tables_bytes, table_bytes) < 0)
		return -ENOMEM;

	struct rs__axis ax, ay;
	rs__axis_place(&ax, s->tables, out_w, x_stride, 4);
	rs__axis_place(&ay, (uint8_t *)s->tables + x_bytes, out_h, y_stride, 1);
	rs__axis_fill(&ax, src_w, x, w, flip);
	rs__axis_fill(&ay, src_h, y, h, false);

	const size_t out_row = 3 * (size_t)out_w;
	if (ax.lo >= ax.hi || ay.lo >= ay.hi) {
		for (uint32_t r = 0; r < out_h; r++)
			memset(dst + r * dst_stride, 0, out_row);
		return 0;
	}
	rs__axis_fix_windows(&ax);
	const size_t cols = ax.hi - ax.lo, rows = ay.hi - ay.lo;
	const size_t in_row = 3 * cols;
	const uint8_t *src0 = src + 3 * (size_t)ax.lo;

	const bool v_first = rs_vertical_first(ay.taps, ax.span[0].count, cols, rows, out_w, out_h);

	/* Both: a float line of the source columns. Vertical first: a float
	 * line of output. Horizontal first: all the filtered source rows. */
	const size_t line_floats = in_row + RS__PAD, mid_stride = out_row + RS__PAD;
	size_t floats, bytes;
	if (!rs__size_mad(v_first ? 1 : rows, mid_stride, line_floats, &floats) ||
	    !rs__size_mad(floats, sizeof(float), 0, &bytes))
		return -ENOMEM;
	if (rs__grow((void **)&s->rows, &s->rows_bytes, bytes) < 0)
		return -ENOMEM;
	float *line = s->rows, *mid = s->rows + line_floats;
	/* Read by the last pixel's 4-float loads: defined, and never NaN. */
	memset(line + in_row, 0, RS__PAD * sizeof(float));

	if (v_first) {
		for (uint32_t r = 0; r < out_h; r++) {
			const struct rs__span sp = ay.span[r];
			uint8_t *out = dst + r * dst_stride;
			if (sp.count == 0) {
				memset(out, 0, out_row);
				continue;
			}
			rs__vfilter_u8(src0 + sp.first * src_stride, src_stride,
				       ay.weight + (size_t)r * ay.stride, sp.count, line, in_row);
			rs__hfilter(line, &ax, mid);
			rs__narrow_line(mid, out, out_row);
		}
		return 0;
	}

	for (size_t r = 0; r < rows; r++) {
		rs__widen_line(src0 + (ay.lo + r) * src_stride, line, in_row);
		rs__hfilter(line, &ax, mid + r * mid_stride);
	}
	for (uint32_t r = 0; r < out_h; r++) {
		const struct rs__span sp = ay.span[r];
		uint8_t *out = dst + r * dst_stride;
		if (sp.count == 0) {
			memset(out, 0, out_row);
			continue;
		}
		rs__vfilter_f32_u8(mid + (sp.first - ay.lo) * mid_stride, mid_stride,
				   ay.weight + (size_t)r * ay.stride, sp.count, out, out_row);
	}
	return 0;
}

void rs_scratch_free(struct rs_scratch *s)
{
	if (s == NULL)
		return;
	free(s->tables);
	free(s->rows);
	*s = (struct rs_scratch){0};
}
