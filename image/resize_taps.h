/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resize_taps: the part of the resampler (resize.h) that decides which
 * source pixels an output reads and with what weights, and which pass goes
 * first. resize.c (gcc, C) and the GPU kernel imgkernel.cu (nvcc, host and
 * device) both compile it, so the two read the same pixels with
 * bit-identical float weights and filter in the same order: given the same
 * decoded pixels, they produce the same bytes.
 *
 * Header only, static inline, no allocation. Identical results need the
 * double arithmetic here evaluated as written, each operation rounded on
 * its own: gcc in the project's C17 mode does not contract a * b + c into a
 * fused multiply-add (-std=c17 implies -ffp-contract=off), and nvcc is told
 * not to with --fmad=false (image/CMakeLists.txt).
 */
#ifndef LDR_IMAGE_RESIZE_TAPS_H
#define LDR_IMAGE_RESIZE_TAPS_H

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RS_HD __host__ __device__
#else
#define RS_HD
#endif

/* The triangle filter of radius 1, PIL's bilinear_filter. */
static inline RS_HD double rs_triangle(double t)
{
	t = fabs(t);
	return t < 1.0 ? 1.0 - t : 0.0;
}

/* Taps per output a weight table must hold for an axis whose box spans
 * len source pixels over n_out outputs and whose taps stay inside
 * src_len pixels: PIL's kernel size, 2 * ceil(support) + 1, but never
 * more than src_len. */
static inline RS_HD uint32_t rs_axis_stride(uint32_t src_len, double len, uint32_t n_out)
{
	double support = fmax(len / n_out, 1.0);
	double k = 2.0 * ceil(support) + 1.0;
	return k < (double)src_len ? (uint32_t)k : src_len;
}

/* One axis of a box: [start, start + len) resampled to n outputs. */
struct rs_axis_geom {
	double start;
	double scale;     /* len / n: source pixels per output */
	double support;   /* max(scale, 1): the triangle's radius, widened */
	double inv_scale; /* 1 / support */
};

static inline RS_HD struct rs_axis_geom rs_axis_geom_make(double start, double len, uint32_t n)
{
	struct rs_axis_geom g;
	g.start = start;
	g.scale = len / n;
	g.support = g.scale > 1.0 ? g.scale : 1.0; /* the triangle's radius is 1 */
	g.inv_scale = 1.0 / g.support;
	return g;
}

/*
 * PIL's precompute_coeffs for output i of the axis (resize.h), with the
 * taps of weight 0 at either end dropped. center = start + (i + 0.5) *
 * scale; an output whose center is not within [in_lo, in_hi] (the image's
 * extent) has no tap. Taps are clipped to the source pixels
 * [clip_lo, clip_hi), which resize.c passes as the image and the GPU
 * kernel as the part of the image it was given. Writes the count weights,
 * lanes copies of each, at wt, the first source pixel at *first, and
 * returns count; 0 when the output has no tap (*first and wt untouched).
 * wt has room for max_taps taps (rs_axis_stride); an output with more
 * would be a bug, and gets none.
 *
 * When the center is inside and the taps are clipped to the image, the
 * tap under the center is kept with a weight > 0, so the sum is never 0.
 */
static inline RS_HD uint32_t rs_output_taps(const struct rs_axis_geom *g, uint32_t i,
					    double in_lo, double in_hi, uint32_t clip_lo,
					    uint32_t clip_hi, uint32_t max_taps, uint32_t *first,
					    float *wt, uint32_t lanes)
{
	const double center = g->start + (i + 0.5) * g->scale;
	/* Also false for NaN and infinities. */
	if (!(center >= in_lo && center <= in_hi) || clip_lo >= clip_hi)
		return 0;
	const double a = floor(center - g->support + 0.5);
	const double b = floor(center + g->support + 0.5);
	const uint32_t lo = a > (double)clip_lo ? (a < (double)clip_hi ? (uint32_t)a : clip_hi)
						: clip_lo;
	const uint32_t end = b < (double)clip_hi ? (b > (double)lo ? (uint32_t)b : lo) : clip_hi;

	double sum = 0.0;
	uint32_t nz_first = end, nz_end = lo;
	for (uint32_t j = lo; j < end; j++) {
		double wj = rs_triangle((j - center + 0.5) * g->inv_scale);
		if (wj == 0.0)
			continue;
		sum += wj;
		if (nz_first == end)
			nz_first = j;
		nz_end = j + 1;
	}
	if (sum == 0.0)
		return 0;
	assert(nz_end - nz_first <= max_taps);
	if (nz_end - nz_first > max_taps)
		return 0;
	for (uint32_t j = nz_first; j < nz_end; j++) {
		float wj = (float)(rs_triangle((j - center + 0.5) * g->inv_scale) / sum);
		for (uint32_t l = 0; l < lanes; l++)
			*wt++ = wj;
	}
	*first = nz_first;
	return nz_end - nz_first;
}

/*
 * Which pass goes first, from a cost estimate: nanoseconds per unit of
 * work, measured at -O2 on x86-64 (SSE2) for resize.c's loops: a vertical
 * tap over 16 uint8 or 16 float values, widening or rounding 16 values,
 * and a horizontal output pixel of a given window size (unrolled up to 9
 * taps, a loop beyond). The GPU kernel follows the same choice, so that
 * its float rounding is resize.c's; the work it counts is the GPU's work
 * too.
 */
#define RS_COST_V_U8 2.2
#define RS_COST_V_F32 1.4
#define RS_COST_WIDEN 1.3
#define RS_COST_NARROW 4.0

static inline RS_HD double rs_cost_h_pixel(uint32_t taps)
{
	return taps <= 9 ? 0.9 + 0.45 * taps : 2.0 + 0.6 * taps;
}

/* True: vertical pass first. y_taps: the sum of the y axis's tap counts;
 * x_window: the most taps of an x output; cols, rows: the source columns
 * and rows some tap reads; out_w x out_h: the output. Vertical first
 * filters the columns the taps reach once per output row; horizontal
 * first filters each source row they reach once. */
static inline RS_HD bool rs_vertical_first(uint64_t y_taps, uint32_t x_window, size_t cols,
					   size_t rows, uint32_t out_w, uint32_t out_h)
{
	const size_t in_row = 3 * cols, out_row = 3 * (size_t)out_w;
	const double h_line = out_w * rs_cost_h_pixel(x_window);
	double cost_v_first = y_taps * (in_row / 16.0) * RS_COST_V_U8 +
			      out_h * (h_line + out_row / 16.0 * RS_COST_NARROW);
	double cost_h_first = rows * (in_row / 16.0 * RS_COST_WIDEN + h_line) +
			      y_taps * (out_row / 16.0) * RS_COST_V_F32 +
			      out_h * (out_row / 16.0) * RS_COST_NARROW;
	return cost_v_first <= cost_h_first;
}

#endif
