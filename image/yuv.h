/* SPDX-License-Identifier: Apache-2.0 */
/*
 * yuv: a pixel of a JPEG image from its decoded Y, Cb and Cr planes, as
 * libjpeg-turbo makes it: for what reads the planes the GPU's engines
 * give (tests/gpu/nvjd_check.c holds them to libjpeg), and held to
 * libjpeg itself by tests/unit/test_jpeg.c.
 *
 * The GPU's engines give the planes at the image's chroma subsampling
 * (gpudecode/nvjd.h, NVJD_OUTPUT_YUV); the workers' libjpeg-turbo decodes the
 * same planes (up to its IDCT) and then, at full size (scale 8/8):
 *   - upsamples chroma by its "fancy" triangle filter: 4:2:2 across
 *     (h2v1_fancy_upsample), 4:2:0 across and down (h2v2), 4:4:0 down
 *     (h1v2), each output 3/4 of the nearer sample and 1/4 of the next,
 *     with its integer rounding; the planes' edges repeat their last
 *     sample, as its context rows do; a chroma plane no wider than 2
 *     is repeated instead (jdsample.c's condition);
 *   - converts with its fixed-point tables (jdcolor.c, ycc_rgb_convert:
 *     16 fraction bits, clamped to 0..255); gray is R = G = B = Y.
 * At a reduced scale 1/f (f = 2, 4, 8: jd_pick_scale) its IDCT makes each
 * plane smaller instead: luma by f, chroma by less where that spares
 * upsampling (jdmaster.c), and chroma is then upsampled as above from the
 * reduced plane (repeated at 1/8). Here a sample of a reduced plane is the
 * rounded mean of its block of the decoded plane, what the reduced IDCT
 * computes to first order (its DC term); tests/unit/test_jpeg.c measures
 * the difference (about 0.15-0.35 levels on average) and holds full size
 * to libjpeg exactly.
 *
 * Plain C with no state; under nvcc the functions are __host__
 * __device__, for a kernel that converts planes on the GPU.
 */
#ifndef LDR_IMAGE_YUV_H
#define LDR_IMAGE_YUV_H

#include <stdint.h>

#ifdef __CUDACC__
#define YUV_FN static inline __host__ __device__
#else
#define YUV_FN static inline
#endif

/* An image's planes: Y of w x h, and, unless gray, Cb and Cr of
 * ceil(w / sh) x ceil(h / sv), with sh, sv in {1, 2}. */
struct yuv_planes {
	const uint8_t *plane[3];
	uint64_t pitch[3];
	uint32_t w, h;
	uint32_t sh, sv;  /* chroma's subsampling across and down */
	uint32_t gray;    /* nonzero: Y alone */
};

/* jdcolor.c's fixed point: FIX(x) = x * 2^16 rounded */
#define YUV_FIX_CR_R 91881  /* 1.40200 */
#define YUV_FIX_CB_B 116130 /* 1.77200 */
#define YUV_FIX_CR_G 46802  /* 0.71414 */
#define YUV_FIX_CB_G 22554  /* 0.34414 */
#define YUV_HALF (1 << 15)

YUV_FN uint8_t yuv_clamp(int v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* libjpeg's ycc_rgb_convert of one pixel (its right shifts are arithmetic) */
YUV_FN void yuv_to_rgb(int y, int cb, int cr, uint8_t *rgb)
{
	int x_cb = cb - 128, x_cr = cr - 128;
	int r = (YUV_FIX_CR_R * x_cr + YUV_HALF) >> 16;
	int b = (YUV_FIX_CB_B * x_cb + YUV_HALF) >> 16;
	int g = (-YUV_FIX_CB_G * x_cb + YUV_HALF - YUV_FIX_CR_G * x_cr) >> 16;
	rgb[0] = yuv_clamp(y + r);
	rgb[1] = yuv_clamp(y + g);
	rgb[2] = yuv_clamp(y + b);
}

YUV_FN uint32_t yuv_min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/* The rounded mean of plane c over columns [x0, x1) and rows [y0, y1). */
YUV_FN int yuv_block_mean(const struct yuv_planes *p, int c, uint32_t x0, uint32_t x1, uint32_t y0,
			  uint32_t y1)
{
	uint32_t sum = 0;
	for (uint32_t y = y0; y < y1; y++) {
		const uint8_t *row = p->plane[c] + y * p->pitch[c];
		for (uint32_t x = x0; x < x1; x++)
			sum += row[x];
	}
	const uint32_t n = (x1 - x0) * (y1 - y0);
	return (int)((sum + n / 2) / n);
}

/* A chroma plane as libjpeg-turbo has it at scale 1/f, before upsampling:
 * its IDCT reduced by g (sample (a, b) the mean of a g x g block of the
 * plane: the reduced IDCT's DC term), rw x rh samples, then upsampled
 * by uh across and uv down (1 or 2) to the image's size at 1/f. */
struct yuv_chroma_grid {
	const struct yuv_planes *p;
	int c;
	uint32_t g, cw, ch, rw, rh, uh, uv;
	int fancy; /* triangle filter, else samples repeated */
};

YUV_FN struct yuv_chroma_grid yuv_chroma_grid_of(const struct yuv_planes *p, int c, uint32_t f)
{
	/* jdmaster.c: chroma's IDCT is scaled up (doubled) while that leaves
	 * less upsampling in both directions; min is luma's size of a block. */
	const uint32_t min = 8 / f;
	uint32_t ss = min;
	while (ss < 8 && (p->sh * min) % (ss * 2) == 0 && (p->sv * min) % (ss * 2) == 0)
		ss *= 2;
	struct yuv_chroma_grid q;
	q.p = p;
	q.c = c;
	q.g = 8 / ss;
	q.cw = (p->w + p->sh - 1) / p->sh;
	q.ch = (p->h + p->sv - 1) / p->sv;
	q.rw = (q.cw + q.g - 1) / q.g;
	q.rh = (q.ch + q.g - 1) / q.g;
	q.uh = p->sh * min / ss;
	q.uv = p->sv * min / ss;
	q.fancy = min > 1; /* jdsample.c: no fancy upsampling at scale 1/8 */
	return q;
}

YUV_FN int yuv_grid_at(const struct yuv_chroma_grid *q, uint32_t a, uint32_t b)
{
	if (q->g == 1)
		return q->p->plane[q->c][b * q->p->pitch[q->c] + a];
	return yuv_block_mean(q->p, q->c, a * q->g, yuv_min(a * q->g + q->g, q->cw), b * q->g,
			      yuv_min(b * q->g + q->g, q->ch));
}

/* The chroma sample of pixel (x, y) of the image at 1/f, upsampled as
 * libjpeg-turbo's jdsample.c does: h2v1, h1v2 and h2v2 fancy upsampling
 * (h2v1 and h2v2 only on grids wider than 2), else repeated. */
YUV_FN int yuv_chroma(const struct yuv_chroma_grid *q, uint32_t x, uint32_t y)
{
	const uint32_t cx = x / q->uh, cy = y / q->uv;
	if (q->uv == 1) {
		if (q->uh == 1 || !q->fancy || q->rw <= 2)
			return yuv_grid_at(q, cx, cy);
		const int here = yuv_grid_at(q, cx, cy);
		if ((x & 1) == 0) /* the sample to the left is the next nearest */
			return cx == 0 ? here : (3 * here + yuv_grid_at(q, cx - 1, cy) + 1) >> 2;
		return cx == q->rw - 1 ? here : (3 * here + yuv_grid_at(q, cx + 1, cy) + 2) >> 2;
	}
	/* down by 2: the nearer row, and the one above (even y) or below (odd),
	 * the grid's first and last rows repeated beyond its edges */
	if (!q->fancy || (q->uh == 2 && q->rw <= 2))
		return yuv_grid_at(q, cx, cy);
	const uint32_t other = (y & 1) == 0 ? (cy == 0 ? 0 : cy - 1) : yuv_min(cy + 1, q->rh - 1);
	const int here = 3 * yuv_grid_at(q, cx, cy) + yuv_grid_at(q, cx, other);
	if (q->uh == 1) /* h1v2_fancy_upsample */
		return (here + ((y & 1) == 0 ? 1 : 2)) >> 2;
	if ((x & 1) == 0) {
		if (cx == 0)
			return (here * 4 + 8) >> 4;
		return (here * 3 + 3 * yuv_grid_at(q, cx - 1, cy) + yuv_grid_at(q, cx - 1, other) + 8) >>
		       4;
	}
	if (cx == q->rw - 1)
		return (here * 4 + 7) >> 4;
	return (here * 3 + 3 * yuv_grid_at(q, cx + 1, cy) + yuv_grid_at(q, cx + 1, other) + 7) >> 4;
}

/* Pixel (i, j) of the image at scale 1/f (f = 1, 2, 4 or 8; the image is
 * then ceil(w / f) x ceil(h / f)) into rgb[0..2], chroma from the grids
 * yuv_chroma_grid_of gave for f (unused for gray). */
YUV_FN void yuv_pixel_in(const struct yuv_planes *p, uint32_t f, const struct yuv_chroma_grid *cb,
			 const struct yuv_chroma_grid *cr, uint32_t i, uint32_t j, uint8_t *rgb)
{
	const int y = f == 1 ? p->plane[0][j * p->pitch[0] + i]
			     : yuv_block_mean(p, 0, i * f, yuv_min(i * f + f, p->w), j * f,
					      yuv_min(j * f + f, p->h));
	if (p->gray) {
		rgb[0] = rgb[1] = rgb[2] = (uint8_t)y;
		return;
	}
	yuv_to_rgb(y, yuv_chroma(cb, i, j), yuv_chroma(cr, i, j), rgb);
}

/* The same, working out the grids. */
YUV_FN void yuv_pixel(const struct yuv_planes *p, uint32_t f, uint32_t i, uint32_t j, uint8_t *rgb)
{
	const struct yuv_chroma_grid cb = yuv_chroma_grid_of(p, 1, f), cr = yuv_chroma_grid_of(p, 2, f);
	yuv_pixel_in(p, f, &cb, &cr, i, j, rgb);
}

#endif
