/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for image/jpeg. Every JPEG is made here, in memory, by
 * libjpeg's own compressor (jpeg_mem_dest) from smooth gradients plus
 * noise, and every expectation comes from a plain libjpeg decode of the
 * same bytes with libjpeg's defaults (JDCT_ISLOW, fancy upsampling):
 *
 *   - jd_header reports the dimensions written;
 *   - a full-box decode at out size = image size is the plain full decode,
 *     pixel for pixel, at scale 8/8 and origin (0, 0);
 *   - a box decode (random boxes, inside, across and outside the edges,
 *     random output sizes and aspect changes) returns exactly the pixels the
 *     plain decode at the same scale (scale_num/8) has at that place, i.e.
 *     cropping and row skipping are exact, at the scale jpeg.h's rule gives
 *     (the smallest that covers the output, raised by the chroma's ratio
 *     along one axis for 2x1, 1x2, 4x1 and 4x2 luma sampling), or at 8/8
 *     with JD_SCALE_FULL, covering the box plus 2 pixels and every tap the resampler of
 *     image/resize.h reads;
 *   - CMYK and YCCK files (Adobe, inverted) decode to RGB within a stated
 *     tolerance of the RGB they were made from, and exactly to the formula
 *     jpeg.c documents applied to libjpeg's CMYK output;
 *   - every case: 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 (and luma 4x2),
 *     progressive, restart markers, grayscale, CMYK, YCCK, 1x1, 1x5000 and
 *     5000x1;
 *   - every broken input (empty, 10 random bytes, headers only, truncated
 *     in the header and at 50%, a flipped entropy byte, a PNG, too many
 *     pixels, too many scans, random damage) gets its documented -errno
 *     and message; under ASan (-DLOADERD_SANITIZE=address,undefined) the
 *     same run also shows no invalid access and, at exit, no leak;
 *   - jd_check_entropy takes every whole file and refuses a restart interval
 *     cut short (which a decode of the rows above it never sees), a scan cut
 *     in the middle, truncated files and headers alone; the workers' choice
 *     of the GPU's decoder (image_gpu_takes) lets the cut interval through
 *     under gpu_check structure and not under entropy;
 *   - image/yuv.h, the GPU path's pixels from decoded planes: from the
 *     planes libjpeg decodes (raw_data_out), every class the GPU takes
 *     (gray, 4:4:4, 4:2:2, 4:2:0, 4:4:0) at sizes down to 1x1 is libjpeg's
 *     own full-size decode exactly, and within a stated mean of its
 *     reduced-size decodes at 1/2, 1/4 and 1/8.
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

#include <cmocka.h>
#include <jpeglib.h>

#include "image/jpeg.h"
#include "image/yuv.h"
#include "proto/proto.h"
#include "image/image_sample.h"

/* ---- deterministic randomness ---- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static uint32_t rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(rng_next(s) % n);
}

/* ---- making images ---- */

/* Smooth gradients and a slow wave, plus uniform noise of +-noise. */
static uint8_t *make_rgb(uint32_t w, uint32_t h, uint64_t seed, int noise)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	assert_non_null(p);
	uint64_t rs = seed * 0x9e3779b97f4a7c15ull + 1;
	for (uint32_t y = 0; y < h; y++) {
		for (uint32_t x = 0; x < w; x++) {
			double fx = w > 1 ? (double)x / (w - 1) : 0.5;
			double fy = h > 1 ? (double)y / (h - 1) : 0.5;
			double v[3] = {
				230 * fx + 12,
				230 * fy + 12,
				128 + 100 * sin(6.0 * fx + 4.0 * fy),
			};
			for (int c = 0; c < 3; c++) {
				int n = noise ? (int)rng_below(&rs, 2 * (uint32_t)noise + 1) - noise : 0;
				long q = lround(v[c]) + n;
				p[((size_t)y * w + x) * 3 + (size_t)c] =
					(uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
			}
		}
	}
	return p;
}

enum kind { KIND_YCC, KIND_GRAY, KIND_CMYK, KIND_YCCK };

struct enc {
	enum kind kind;
	int hs, vs; /* luma sampling factors (chroma 1x1), KIND_YCC only */
	bool progressive;
	unsigned restart_interval; /* MCUs between restart markers, 0 none */
	int quality;
};

/* RGB to Adobe (inverted) CMYK: k = max(r, g, b), c = r * 255 / k, so that
 * R = c * k / 255 gives r back up to rounding. */
static void rgb_to_inverted_cmyk(const uint8_t *rgb, uint8_t *cmyk)
{
	unsigned k = rgb[0];
	if (rgb[1] > k)
		k = rgb[1];
	if (rgb[2] > k)
		k = rgb[2];
	for (int c = 0; c < 3; c++)
		cmyk[c] = k ? (uint8_t)((rgb[c] * 255u + k / 2) / k) : 0;
	cmyk[3] = (uint8_t)k;
}

static uint8_t *encode_with(const uint8_t *rgb, uint32_t w, uint32_t h, const struct enc *e,
			    const jpeg_scan_info *scans, int n_scans, size_t *len)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr jerr;
	c.err = jpeg_std_error(&jerr); /* an encoder error here is a broken test: exits */
	jpeg_create_compress(&c);
	unsigned char *out = NULL;
	unsigned long out_len = 0;
	jpeg_mem_dest(&c, &out, &out_len);
	c.image_width = w;
	c.image_height = h;
	int comps = e->kind == KIND_GRAY ? 1 : e->kind == KIND_YCC ? 3 : 4;
	c.input_components = comps;
	c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
	jpeg_set_defaults(&c);
	if (e->kind == KIND_YCCK)
		jpeg_set_colorspace(&c, JCS_YCCK);
	jpeg_set_quality(&c, e->quality, TRUE);
	if (e->kind == KIND_YCC) {
		c.comp_info[0].h_samp_factor = e->hs;
		c.comp_info[0].v_samp_factor = e->vs;
		for (int i = 1; i < 3; i++)
			c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
	}
	if (e->progressive)
		jpeg_simple_progression(&c);
	if (scans) {
		c.scan_info = scans;
		c.num_scans = n_scans;
	}
	c.restart_interval = e->restart_interval;
	jpeg_start_compress(&c, TRUE);
	uint8_t *row = malloc((size_t)w * 4);
	assert_non_null(row);
	while (c.next_scanline < h) {
		const uint8_t *src = rgb + (size_t)c.next_scanline * w * 3;
		for (uint32_t x = 0; x < w; x++) {
			const uint8_t *p = src + (size_t)x * 3;
			if (comps == 1)
				row[x] = (uint8_t)((77 * p[0] + 150 * p[1] + 29 * p[2] + 128) >> 8);
			else if (comps == 3)
				memcpy(row + (size_t)x * 3, p, 3);
			else
				rgb_to_inverted_cmyk(p, row + (size_t)x * 4);
		}
		JSAMPROW r = row;
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(row);
	*len = out_len;
	return out;
}

static uint8_t *encode(const uint8_t *rgb, uint32_t w, uint32_t h, const struct enc *e,
		       size_t *len)
{
	return encode_with(rgb, w, h, e, NULL, 0, len);
}

/* ---- the reference: a plain libjpeg decode ---- */

static uint8_t ref_mul255(unsigned a, unsigned b)
{
	return (uint8_t)((a * b + 127) / 255); /* round(a * b / 255): a * b / 255 is never x.5 */
}

/* A plain libjpeg decompressor on data[0..len), its header read. */
static void ref_open(struct jpeg_decompress_struct *d, struct jpeg_error_mgr *jerr,
		     const uint8_t *data, size_t len)
{
	d->err = jpeg_std_error(jerr);
	jpeg_create_decompress(d);
	jpeg_mem_src(d, data, (unsigned long)len);
	jpeg_read_header(d, TRUE);
}

/* Whole image at scale m/8, libjpeg defaults, as RGB. CMYK files are read
 * as CMYK and converted by the formula jpeg.c documents. */
static uint8_t *ref_decode(const uint8_t *data, size_t len, int m, uint32_t *w, uint32_t *h)
{
	struct jpeg_decompress_struct d;
	struct jpeg_error_mgr jerr;
	ref_open(&d, &jerr, data, len);
	bool cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
	d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	d.scale_num = (unsigned)m;
	d.scale_denom = 8;
	jpeg_start_decompress(&d);
	*w = d.output_width;
	*h = d.output_height;
	size_t px = cmyk ? 4 : 3;
	uint8_t *img = malloc((size_t)*w * *h * 3);
	uint8_t *row = malloc((size_t)*w * px);
	assert_non_null(img);
	assert_non_null(row);
	while (d.output_scanline < d.output_height) {
		uint8_t *dst = img + (size_t)d.output_scanline * *w * 3;
		JSAMPROW r = row;
		jpeg_read_scanlines(&d, &r, 1);
		for (uint32_t x = 0; x < *w; x++) {
			if (!cmyk) {
				memcpy(dst + x * 3, row + x * 3, 3);
				continue;
			}
			unsigned v[4];
			for (int c = 0; c < 4; c++)
				v[c] = d.saw_Adobe_marker ? row[x * 4 + c] : 255u - row[x * 4 + c];
			for (int c = 0; c < 3; c++)
				dst[x * 3 + c] = ref_mul255(v[c], v[3]);
		}
	}
	jpeg_finish_decompress(&d);
	jpeg_destroy_decompress(&d);
	free(row);
	return img;
}

/* ---- image/yuv.h: pixels from decoded planes, against libjpeg ---- */

/* The planes libjpeg decodes the file to (raw_data_out): what the GPU's
 * engines give (gpudecode/nvjd.h, NVJD_OUTPUT_YUV), up to their IDCT. The
 * planes' memory in *mem, for the caller to free. */
static void raw_planes(const uint8_t *data, size_t len, struct yuv_planes *p, uint8_t **mem)
{
	struct jpeg_decompress_struct d;
	struct jpeg_error_mgr jerr;
	ref_open(&d, &jerr, data, len);
	d.raw_data_out = TRUE;
	jpeg_start_decompress(&d);
	int nc = d.num_components, mh = d.max_h_samp_factor, mv = d.max_v_samp_factor;
	uint32_t mcus_x = (d.image_width + 8 * mh - 1) / (8 * mh);
	uint32_t mcus_y = (d.image_height + 8 * mv - 1) / (8 * mv);
	size_t pitch[3], rows[3], total = 0;
	for (int c = 0; c < nc; c++) {
		pitch[c] = (size_t)mcus_x * d.comp_info[c].h_samp_factor * 8;
		rows[c] = (size_t)mcus_y * d.comp_info[c].v_samp_factor * 8;
		total += pitch[c] * rows[c];
	}
	*mem = malloc(total);
	JSAMPROW *ptrs[3];
	uint8_t *at = *mem;
	for (int c = 0; c < nc; c++) {
		ptrs[c] = malloc(rows[c] * sizeof(JSAMPROW));
		assert_non_null(ptrs[c]);
		for (size_t r = 0; r < rows[c]; r++)
			ptrs[c][r] = at + r * pitch[c];
		p->plane[c] = at;
		p->pitch[c] = pitch[c];
		at += pitch[c] * rows[c];
	}
	for (uint32_t m = 0; m < mcus_y; m++) {
		JSAMPARRAY bands[3];
		for (int c = 0; c < nc; c++)
			bands[c] = ptrs[c] + (size_t)m * d.comp_info[c].v_samp_factor * 8;
		assert_int_equal(jpeg_read_raw_data(&d, bands, (JDIMENSION)(8 * mv)), 8 * mv);
	}
	p->w = d.image_width;
	p->h = d.image_height;
	p->gray = nc == 1;
	p->sh = nc == 1 ? 1 : (uint32_t)(mh / d.comp_info[1].h_samp_factor);
	p->sv = nc == 1 ? 1 : (uint32_t)(mv / d.comp_info[1].v_samp_factor);
	jpeg_finish_decompress(&d);
	jpeg_destroy_decompress(&d);
	for (int c = 0; c < nc; c++)
		free(ptrs[c]);
}

/* Every class the GPU takes, at sizes whose chroma planes are 1, 2 and 3
 * samples wide (libjpeg repeats the narrow ones) and odd ones. */
static const struct enc yuv_classes[] = {
	{KIND_GRAY, 1, 1, false, 0, 90}, {KIND_YCC, 1, 1, false, 0, 90},
	{KIND_YCC, 2, 1, false, 0, 90},  {KIND_YCC, 2, 2, false, 0, 90},
	{KIND_YCC, 1, 2, false, 0, 90},
};
static const uint32_t yuv_sizes[][2] = {{1, 1}, {2, 3}, {3, 2}, {4, 4}, {5, 7}, {6, 1},
					{17, 9}, {64, 48}, {333, 257}};

/* At scale 8/8 the planes upsampled and converted by yuv.h are libjpeg's
 * decode exactly, pixel for pixel. */
static void test_yuv_full_size(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof yuv_classes / sizeof yuv_classes[0]; k++) {
		for (size_t s = 0; s < sizeof yuv_sizes / sizeof yuv_sizes[0]; s++) {
			uint32_t w = yuv_sizes[s][0], h = yuv_sizes[s][1], rw, rh;
			uint8_t *rgb = make_rgb(w, h, 40 + s, 24);
			size_t len;
			uint8_t *jpg = encode(rgb, w, h, &yuv_classes[k], &len);
			uint8_t *ref = ref_decode(jpg, len, 8, &rw, &rh), *mem;
			struct yuv_planes p;
			raw_planes(jpg, len, &p, &mem);
			assert_int_equal(p.w, rw);
			assert_int_equal(p.h, rh);
			size_t wrong = 0;
			for (uint32_t y = 0; y < h; y++)
				for (uint32_t x = 0; x < w; x++) {
					uint8_t px[3];
					yuv_pixel(&p, 1, x, y, px);
					wrong += memcmp(px, ref + ((size_t)y * w + x) * 3, 3) != 0;
				}
			if (wrong)
				fail_msg("%ux%u, luma %dx%d%s: %zu of %u pixels differ from libjpeg's", w,
					 h, yuv_classes[k].hs, yuv_classes[k].vs,
					 yuv_classes[k].kind == KIND_GRAY ? " (gray)" : "", wrong, w * h);
			free(rgb);
			free(jpg);
			free(ref);
			free(mem);
		}
	}
}

/* At scale 1/f (f = 2, 4, 8) the block means stand for libjpeg's reduced
 * IDCT: the image is the size libjpeg gives, and on photo-like images
 * (gradients and noise) within YUV_REDUCED_MEAN_MAX levels of it on
 * average (0.07-0.35 measured). */
#define YUV_REDUCED_MEAN_MAX 0.75
static void test_yuv_reduced(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof yuv_classes / sizeof yuv_classes[0]; k++) {
		for (uint32_t f = 2; f <= 8; f *= 2) {
			uint32_t w = 333, h = 257, rw, rh;
			uint8_t *rgb = make_rgb(w, h, 7 + f, 24);
			size_t len;
			uint8_t *jpg = encode(rgb, w, h, &yuv_classes[k], &len);
			uint8_t *ref = ref_decode(jpg, len, (int)(8 / f), &rw, &rh), *mem;
			struct yuv_planes p;
			raw_planes(jpg, len, &p, &mem);
			assert_int_equal(rw, (w + f - 1) / f);
			assert_int_equal(rh, (h + f - 1) / f);
			double sum = 0;
			for (uint32_t y = 0; y < rh; y++)
				for (uint32_t x = 0; x < rw; x++) {
					uint8_t px[3];
					yuv_pixel(&p, f, x, y, px);
					for (int c = 0; c < 3; c++)
						sum += abs(px[c] - ref[((size_t)y * rw + x) * 3 + c]);
				}
			double mean = sum / (3.0 * rw * rh);
			printf("yuv at 1/%u, luma %dx%d%s: mean difference %.3f levels\n", f,
			       yuv_classes[k].hs, yuv_classes[k].vs,
			       yuv_classes[k].kind == KIND_GRAY ? " (gray)" : "", mean);
			assert_true(mean <= YUV_REDUCED_MEAN_MAX);
			free(rgb);
			free(jpg);
			free(ref);
			free(mem);
		}
	}
}

/* ---- the cases ---- */

struct jcase {
	const char *name;
	uint32_t w, h;
	struct enc e;
	int noise;
	double max_mean_err; /* > 0: full decode within this mean error of the source */
	int max_err;         /* and this largest error */
};

/* CMYK goes through a multiplication, so one level of JPEG error in K
 * becomes up to c/255 levels in each channel, and YCCK adds chroma
 * subsampling on top; measured mean errors are about a third of these. */
#define CMYK_MEAN_TOL 2.0
#define CMYK_MAX_TOL 24
#define YCCK_MEAN_TOL 4.0
#define YCCK_MAX_TOL 64

static const struct jcase cases[] = {
	{"ycc444", 203, 157, {KIND_YCC, 1, 1, false, 0, 90}, 12, 0, 0},
	{"ycc422", 203, 157, {KIND_YCC, 2, 1, false, 0, 90}, 12, 0, 0},
	{"ycc420", 203, 157, {KIND_YCC, 2, 2, false, 0, 90}, 12, 0, 0},
	{"ycc440", 203, 157, {KIND_YCC, 1, 2, false, 0, 90}, 12, 0, 0},
	{"ycc411", 203, 157, {KIND_YCC, 4, 1, false, 0, 90}, 12, 0, 0},
	/* Luma 4x2: at 4/8 libjpeg-turbo gives chroma the 8x8 IDCT and still
	 * upsamples it 2x1, the layout 2.1's jpeg_crop_scanline gets wrong. */
	{"ycc4x2", 203, 157, {KIND_YCC, 4, 2, false, 0, 90}, 12, 0, 0},
	{"ycc420_large", 517, 389, {KIND_YCC, 2, 2, false, 0, 85}, 12, 0, 0},
	{"ycc420_progressive", 203, 157, {KIND_YCC, 2, 2, true, 0, 90}, 12, 0, 0},
	{"ycc444_progressive", 203, 157, {KIND_YCC, 1, 1, true, 0, 90}, 12, 0, 0},
	{"ycc422_progressive", 203, 157, {KIND_YCC, 2, 1, true, 0, 90}, 12, 0, 0},
	{"ycc420_restart", 203, 157, {KIND_YCC, 2, 2, false, 3, 90}, 12, 0, 0},
	{"ycc411_restart_progressive", 203, 157, {KIND_YCC, 4, 1, true, 5, 90}, 12, 0, 0},
	{"gray", 203, 157, {KIND_GRAY, 1, 1, false, 0, 90}, 12, 0, 0},
	{"gray_progressive", 203, 157, {KIND_GRAY, 1, 1, true, 0, 90}, 12, 0, 0},
	{"cmyk", 203, 157, {KIND_CMYK, 1, 1, false, 0, 95}, 2, CMYK_MEAN_TOL, CMYK_MAX_TOL},
	{"cmyk_progressive", 203, 157, {KIND_CMYK, 1, 1, true, 0, 95}, 2, CMYK_MEAN_TOL,
	 CMYK_MAX_TOL},
	{"ycck", 203, 157, {KIND_YCCK, 1, 1, false, 0, 95}, 2, YCCK_MEAN_TOL, YCCK_MAX_TOL},
	{"ycc420_1x1", 1, 1, {KIND_YCC, 2, 2, false, 0, 90}, 12, 0, 0},
	{"gray_1x1", 1, 1, {KIND_GRAY, 1, 1, false, 0, 90}, 12, 0, 0},
	{"ycc420_1x5000", 1, 5000, {KIND_YCC, 2, 2, false, 0, 90}, 12, 0, 0},
	{"ycc422_5000x1", 5000, 1, {KIND_YCC, 2, 1, false, 0, 90}, 12, 0, 0},
	{"ycc420_1x5000_progressive", 1, 5000, {KIND_YCC, 2, 2, true, 0, 90}, 12, 0, 0},
};

static struct jd_scratch scratch; /* one for the whole run: reuse and growth */

/* M0 of jd_pick_scale: the smallest scale that gives the output enough
 * pixels. */
static int expected_luma_scale(double bw, double bh, uint32_t out_w, uint32_t out_h)
{
	for (int m = 1; m <= 4; m *= 2)
		if (bw * m / 8 >= out_w && bh * m / 8 >= out_h)
			return m;
	return 8;
}

/* The scale of a fast decode of the case: M0 doubled until the chroma
 * has, along each axis, min(M0/8, its own ratio to the luma) samples per
 * source pixel. libjpeg-turbo scales a chroma sampled 1 / k of the luma
 * along both axes up by k with the IDCT (up to 8/8), and upsamples what
 * ratio is left along one axis (2x1, 1x2, 4x1, 4x2). */
static int expected_scale(const struct jcase *c, int m0)
{
	if (c->e.kind != KIND_YCC)
		return m0;
	int hs = c->e.hs, vs = c->e.vs, k = hs < vs ? hs : vs;
	int m = m0;
	for (; m < 8; m *= 2) {
		int s = m * k < 8 ? m * k : 8; /* the chroma's scaled DCT size */
		/* samples per source pixel s / (8 * hs) >= min(m0 / 8, 1 / hs) */
		bool across = s >= (m0 * hs < 8 ? m0 * hs : 8);
		bool down = s >= (m0 * vs < 8 ? m0 * vs : 8);
		if (across && down)
			break;
	}
	return m;
}

static long clampl(double v, long lo, long hi)
{
	return v < lo ? lo : v > hi ? hi : (long)v;
}

/* The source pixels [lo, hi) (clipped to [0, n)) image/resize.h's filter
 * reads for the first and last output pixel of a box [start, start + len)
 * resampled to out pixels. */
static void resize_taps(double start, double len, uint32_t out, uint32_t n, long *lo, long *hi)
{
	double scale = len / out, support = scale > 1 ? scale : 1;
	double first = start + 0.5 * scale, last = start + (out - 0.5) * scale;
	*lo = clampl(floor(first - support + 0.5), 0, (long)n);
	*hi = clampl(floor(last + support + 0.5), 0, (long)n);
}

/* Checks one region against the reference decode at its scale. */
static void check_region(const char *what, const struct jd_image *im, const uint8_t *ref,
			 uint32_t rw, uint32_t rh, double bx, double by, double bw, double bh,
			 uint32_t out_w, uint32_t out_h)
{
	assert_true(im->w >= 1 && im->h >= 1);
	assert_true(im->x0 >= 0 && im->y0 >= 0);
	assert_true((uint64_t)im->x0 + im->w <= rw);
	assert_true((uint64_t)im->y0 + im->h <= rh);
	assert_true(im->stride >= (size_t)im->w * 3);
	double s = im->sx;
	/* Covers the box plus 2 pixels, clipped (and never empty). */
	long want_x0 = clampl(floor(bx * s) - 2, 0, (long)rw - 1);
	long want_x1 = clampl(ceil((bx + bw) * s) + 2, 1, (long)rw);
	long want_y0 = clampl(floor(by * s) - 2, 0, (long)rh - 1);
	long want_y1 = clampl(ceil((by + bh) * s) + 2, 1, (long)rh);
	if (im->x0 > want_x0 || im->x0 + (long)im->w < want_x1 || im->y0 > want_y0 ||
	    im->y0 + (long)im->h < want_y1)
		fail_msg("%s: region (%d,%d %ux%u) misses box (%g,%g %gx%g) at scale %g", what,
			 im->x0, im->y0, im->w, im->h, bx, by, bw, bh, s);
	/* And every tap the resampler reads. */
	long lo, hi;
	resize_taps(bx * s, bw * s, out_w, rw, &lo, &hi);
	if (lo < hi && (im->x0 > lo || im->x0 + (long)im->w < hi))
		fail_msg("%s: columns %d..%u miss taps %ld..%ld", what, im->x0, im->x0 + im->w, lo,
			 hi);
	resize_taps(by * s, bh * s, out_h, rh, &lo, &hi);
	if (lo < hi && (im->y0 > lo || im->y0 + (long)im->h < hi))
		fail_msg("%s: rows %d..%u miss taps %ld..%ld", what, im->y0, im->y0 + im->h, lo, hi);
	for (uint32_t j = 0; j < im->h; j++) {
		const uint8_t *got = im->rgb + (size_t)j * im->stride;
		const uint8_t *want = ref + (((size_t)im->y0 + j) * rw + (size_t)im->x0) * 3;
		if (memcmp(got, want, (size_t)im->w * 3) == 0)
			continue;
		for (uint32_t i = 0; i < im->w * 3; i++)
			if (got[i] != want[i])
				fail_msg("%s: box (%g,%g %gx%g) out %ux%u scale %g region (%d,%d %ux%u): "
					 "pixel (%u,%u) channel %u is %u, full decode has %u",
					 what, bx, by, bw, bh, out_w, out_h, s, im->x0, im->y0, im->w,
					 im->h, im->x0 + i / 3, im->y0 + j, i % 3, got[i], want[i]);
	}
}

static void run_case(void **state)
{
	const struct jcase *c = *state;
	uint8_t *rgb = make_rgb(c->w, c->h, (uint64_t)c->w * 7919 + c->h, c->noise);
	size_t len;
	uint8_t *jpg = encode(rgb, c->w, c->h, &c->e, &len);
	char err[256];
	uint64_t max_px = (uint64_t)c->w * c->h;

	uint32_t hw = 0, hh = 0;
	assert_int_equal(jd_header(jpg, len, &hw, &hh, err, sizeof(err)), 0);
	assert_int_equal(hw, c->w);
	assert_int_equal(hh, c->h);

	uint8_t *ref[9] = {0};
	uint32_t rw[9], rh[9];
	for (int m = 1; m <= 8; m *= 2)
		ref[m] = ref_decode(jpg, len, m, &rw[m], &rh[m]);

	/* Full box at the image's own size: the plain full decode. */
	struct jd_image im;
	int rc = jd_decode_box(jpg, len, 0, 0, c->w, c->h, c->w, c->h, max_px, &im, &scratch, err,
			       sizeof(err));
	if (rc != 0)
		fail_msg("%s: full decode: %d %s", c->name, rc, err);
	assert_true(im.sx == 1.0 && im.sy == 1.0);
	assert_int_equal(im.x0, 0);
	assert_int_equal(im.y0, 0);
	assert_int_equal(im.w, c->w);
	assert_int_equal(im.h, c->h);
	check_region(c->name, &im, ref[8], rw[8], rh[8], 0, 0, c->w, c->h, c->w, c->h);

	if (c->max_mean_err > 0) {
		double sum = 0;
		int worst = 0;
		for (uint32_t y = 0; y < c->h; y++) {
			for (uint32_t x = 0; x < (size_t)c->w * 3; x++) {
				int d = abs((int)im.rgb[(size_t)y * im.stride + x] -
					    (int)rgb[(size_t)y * c->w * 3 + x]);
				sum += d;
				worst = d > worst ? d : worst;
			}
		}
		double mean = sum / ((double)c->w * c->h * 3);
		if (mean > c->max_mean_err || worst > c->max_err)
			fail_msg("%s: RGB from CMYK off by %.2f on average (limit %.2f), %d at worst "
				 "(limit %d)",
				 c->name, mean, c->max_mean_err, worst, c->max_err);
		print_message("%s: RGB from CMYK within %.2f on average, %d at worst\n", c->name,
			      mean, worst);
	}

	/* Random boxes: inside, across edges, outside; random output sizes
	 * and aspect changes, so every scale comes up. */
	uint64_t rs = 0x5eed0000u + c->w * 31u + c->h;
	int seen[9] = {0};
	for (int iter = 0; iter < 150; iter++) {
		double bw = 0.5 + rng_unit(&rs) * 1.3 * c->w;
		double bh = 0.5 + rng_unit(&rs) * 1.3 * c->h;
		double bx = -0.25 * c->w + rng_unit(&rs) * 1.1 * c->w;
		double by = -0.25 * c->h + rng_unit(&rs) * 1.1 * c->h;
		if (iter % 10 == 0) { /* a box inside the image */
			bw = 0.5 + rng_unit(&rs) * 0.5 * c->w;
			bh = 0.5 + rng_unit(&rs) * 0.5 * c->h;
			bx = rng_unit(&rs) * (c->w - bw);
			by = rng_unit(&rs) * (c->h - bh);
		}
		double fx = 0.02 + rng_unit(&rs) * 1.2;
		double fy = iter % 3 ? fx : 0.02 + rng_unit(&rs) * 1.2;
		uint32_t out_w = (uint32_t)fmax(1, bw * fx), out_h = (uint32_t)fmax(1, bh * fy);
		rc = jd_decode_box(jpg, len, bx, by, bw, bh, out_w, out_h, max_px, &im, &scratch,
				   err, sizeof(err));
		if (rc != 0)
			fail_msg("%s: box (%g,%g %gx%g) out %ux%u: %d %s", c->name, bx, by, bw, bh,
				 out_w, out_h, rc, err);
		int m0 = expected_luma_scale(bw, bh, out_w, out_h);
		int m = expected_scale(c, m0);
		if (c->e.kind == KIND_YCC && jd_fast_scale(m0, (uint32_t)c->e.hs, (uint32_t)c->e.vs) != m)
			fail_msg("%s: jd_fast_scale(%d) %d, the decoder's %d", c->name, m0,
				 jd_fast_scale(m0, (uint32_t)c->e.hs, (uint32_t)c->e.vs), m);
		if (c->e.kind == KIND_GRAY && jd_fast_scale(m0, 1, 1) != m)
			fail_msg("%s: jd_fast_scale(%d) for gray %d", c->name, m0, jd_fast_scale(m0, 1, 1));
		if (im.sx != m / 8.0 || im.sy != m / 8.0)
			fail_msg("%s: box %gx%g out %ux%u decoded at %g, expected %d/8", c->name, bw,
				 bh, out_w, out_h, im.sx, m);
		/* The rule itself, stated as properties of the result. */
		if (m < 8)
			assert_true(bw * im.sx >= out_w && bh * im.sy >= out_h);
		if (m0 > 1)
			assert_true(bw * m0 / 16 < out_w || bh * m0 / 16 < out_h);
		seen[m]++;
		char what[96];
		snprintf(what, sizeof(what), "%s iteration %d", c->name, iter);
		check_region(what, &im, ref[m], rw[m], rh[m], bx, by, bw, bh, out_w, out_h);
	}
	if (c->w >= 100 && c->h >= 100)
		for (int m0 = 1; m0 <= 8; m0 *= 2)
			if (seen[expected_scale(c, m0)] == 0)
				fail_msg("%s: no box came out at scale %d/8", c->name,
					 expected_scale(c, m0));

	/* JD_SCALE_FULL: the same boxes at 8/8 whatever the output. */
	scratch.scale = JD_SCALE_FULL;
	for (int iter = 0; iter < 30; iter++) {
		double bw = 0.5 + rng_unit(&rs) * c->w, bh = 0.5 + rng_unit(&rs) * c->h;
		double bx = rng_unit(&rs) * (c->w - bw * 0.5), by = rng_unit(&rs) * (c->h - bh * 0.5);
		uint32_t out_w = (uint32_t)fmax(1, bw * 0.1), out_h = (uint32_t)fmax(1, bh * 0.1);
		rc = jd_decode_box(jpg, len, bx, by, bw, bh, out_w, out_h, max_px, &im, &scratch,
				   err, sizeof(err));
		if (rc != 0)
			fail_msg("%s: full scale: box (%g,%g %gx%g) out %ux%u: %d %s", c->name, bx, by,
				 bw, bh, out_w, out_h, rc, err);
		if (im.sx != 1.0 || im.sy != 1.0)
			fail_msg("%s: full scale: box %gx%g out %ux%u decoded at %g", c->name, bw, bh,
				 out_w, out_h, im.sx);
		char what[96];
		snprintf(what, sizeof(what), "%s full scale %d", c->name, iter);
		check_region(what, &im, ref[8], rw[8], rh[8], bx, by, bw, bh, out_w, out_h);
	}
	scratch.scale = JD_SCALE_FAST;

	/* Boxes wholly outside keep the nearest edge. */
	rc = jd_decode_box(jpg, len, c->w + 50.0, c->h + 50.0, 10, 10, 10, 10, max_px, &im,
			   &scratch, err, sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(im.x0 + (int32_t)im.w, (int32_t)rw[8]);
	assert_int_equal(im.y0 + (int32_t)im.h, (int32_t)rh[8]);
	check_region(c->name, &im, ref[8], rw[8], rh[8], c->w + 50.0, c->h + 50.0, 10, 10, 10, 10);
	rc = jd_decode_box(jpg, len, -80.0, -80.0, 10, 10, 10, 10, max_px, &im, &scratch, err,
			   sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(im.x0, 0);
	assert_int_equal(im.y0, 0);
	check_region(c->name, &im, ref[8], rw[8], rh[8], -80.0, -80.0, 10, 10, 10, 10);

	for (int m = 1; m <= 8; m *= 2)
		free(ref[m]);
	free(jpg);
	free(rgb);
}

/* ---- broken input ---- */

/* Offset just past the first SOS segment (where entropy data begins), or 0. */
static size_t entropy_start(const uint8_t *p, size_t len)
{
	size_t i = 2;
	while (i + 4 <= len) {
		if (p[i] != 0xFF)
			return 0;
		uint8_t marker = p[i + 1];
		size_t seg = ((size_t)p[i + 2] << 8) | p[i + 3];
		if (marker == 0xDA)
			return i + 2 + seg;
		i += 2 + seg;
	}
	return 0;
}

static uint8_t *sample_jpeg(const struct enc *e, uint32_t w, uint32_t h, size_t *len)
{
	uint8_t *rgb = make_rgb(w, h, 42, 12);
	uint8_t *jpg = encode(rgb, w, h, e, len);
	free(rgb);
	return jpg;
}

static const struct enc baseline420 = {KIND_YCC, 2, 2, false, 0, 90};
static const struct enc progressive420 = {KIND_YCC, 2, 2, true, 0, 90};

/* Both calls on the same bytes give rc, and the message contains text. */
static void expect_both(const uint8_t *p, size_t len, int header_rc, int decode_rc,
			const char *text)
{
	char err[256];
	uint32_t w = 1, h = 1;
	struct jd_image im;
	int rc = jd_header(p, len, &w, &h, err, sizeof(err));
	if (rc != header_rc || (rc < 0 && !strstr(err, text)))
		fail_msg("jd_header on %zu bytes: %d \"%s\", expected %d \"%s\"", len, rc, err,
			 header_rc, text);
	rc = jd_decode_box(p, len, 0, 0, 64, 64, 64, 64, 1u << 24, &im, &scratch, err,
			   sizeof(err));
	if (rc != decode_rc || !strstr(err, text))
		fail_msg("jd_decode_box on %zu bytes: %d \"%s\", expected %d \"%s\"", len, rc, err,
			 decode_rc, text);
	assert_null(im.rgb);
}

static void test_empty(void **state)
{
	const uint8_t none[1] = {0};
	expect_both(none, 0, -ENODATA, -ENODATA, "empty file");
	expect_both(NULL, 0, -ENODATA, -ENODATA, "empty file");
}

static void test_random_bytes(void **state)
{
	uint8_t junk[10];
	uint64_t rs = 7;
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rng_next(&rs);
	junk[0] &= 0x7F; /* not the 0xFF of a marker */
	expect_both(junk, sizeof(junk), -EBADMSG, -EBADMSG, "Not a JPEG file");
}

static void test_png(void **state)
{
	static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13,
				      'I', 'H', 'D', 'R', 0, 0, 0, 64, 0, 0, 0, 64, 8, 2, 0, 0, 0};
	expect_both(png, sizeof(png), -EBADMSG, -EBADMSG, "Not a JPEG file: starts with 0x89 0x50");
}

static void test_truncated_in_header(void **state)
{
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 96, 64, &len);
	size_t sos = entropy_start(jpg, len);
	assert_true(sos > 40);
	const size_t cuts[] = {1, 2, 3, 20, sos / 2, sos - 1};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
		expect_both(jpg, cuts[i], -ENODATA, -ENODATA, "truncated");
	free(jpg);
}

static void test_headers_only(void **state)
{
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 96, 64, &len);
	size_t sos = entropy_start(jpg, len);
	assert_true(sos > 0 && sos < len);
	char err[256];
	uint32_t w, h;
	assert_int_equal(jd_header(jpg, sos, &w, &h, err, sizeof(err)), 0);
	assert_int_equal(w, 96);
	assert_int_equal(h, 64);
	expect_both(jpg, sos, 0, -EBADMSG, "premature end of data");
	free(jpg);
}

static void test_truncated_half(void **state)
{
	const struct enc *encs[] = {&baseline420, &progressive420};
	for (int k = 0; k < 2; k++) {
		size_t len;
		uint8_t *jpg = sample_jpeg(encs[k], 160, 120, &len);
		char err[256];
		struct jd_image im;
		int rc = jd_decode_box(jpg, len / 2, 0, 0, 160, 120, 160, 120, 1u << 24, &im,
				       &scratch, err, sizeof(err));
		assert_int_equal(rc, -EBADMSG);
		assert_string_equal(err, "premature end of data");
		/* Baseline: the rows before the cut need nothing after it, and are
		 * the full file's pixels. Progressive files are read whole. */
		rc = jd_decode_box(jpg, len / 2, 10, 4, 60, 16, 60, 16, 1u << 24, &im, &scratch, err,
				   sizeof(err));
		if (k == 0) {
			if (rc != 0)
				fail_msg("top rows of a baseline file cut at 50%%: %d %s", rc, err);
			uint32_t rw, rh;
			uint8_t *ref = ref_decode(jpg, len, 8, &rw, &rh);
			check_region("top rows", &im, ref, rw, rh, 10, 4, 60, 16, 60, 16);
			free(ref);
		} else {
			assert_int_equal(rc, -EBADMSG);
		}
		free(jpg);
	}
}

static void test_flipped_entropy_byte(void **state)
{
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 160, 120, &len);
	size_t start = entropy_start(jpg, len);
	assert_true(start > 0 && start < len - 2);
	/* A 0x00 that is not a stuffed byte, followed by a byte that is neither
	 * 0x00 nor 0xFF: flipping all its bits makes a marker in the middle of
	 * the scan, which any decoder must notice. */
	size_t at = 0;
	for (size_t i = start + (len - start) / 3; i + 3 < len; i++) {
		if (jpg[i] == 0x00 && jpg[i - 1] != 0xFF && jpg[i + 1] != 0x00 && jpg[i + 1] != 0xFF) {
			at = i;
			break;
		}
	}
	assert_true(at != 0);
	jpg[at] ^= 0xFF;
	char err[256];
	struct jd_image im;
	int rc = jd_decode_box(jpg, len, 0, 0, 160, 120, 160, 120, 1u << 24, &im, &scratch, err,
			       sizeof(err));
	if (rc != -EBADMSG || !strstr(err, "Corrupt JPEG data"))
		fail_msg("flipped byte at %zu of %zu: %d \"%s\"", at, len, rc, err);
	free(jpg);
}

/* ---- jd_check_entropy ---- */

/* jpg with the bytes of its scan from `from` to the next marker (a restart
 * marker or EOI) cut out but `keep` of them; never inside a stuffed FF 00.
 * *len becomes the new length. */
static void cut_to_next_marker(uint8_t *jpg, size_t *len, size_t from, size_t keep)
{
	size_t a = from + keep, b = a;
	while (b + 1 < *len && !(jpg[b] == 0xFF && jpg[b + 1] != 0x00))
		b++;
	while (a > from && jpg[a - 1] == 0xFF)
		a++;
	assert_true(b > a && b + 1 < *len);
	memmove(jpg + a, jpg + b, *len - b);
	*len -= b - a;
}

/* Offset just past the n-th restart marker of the scan (n from 0), or 0. */
static size_t after_restart(const uint8_t *jpg, size_t len, int n)
{
	for (size_t i = entropy_start(jpg, len); i > 0 && i + 1 < len; i++)
		if (jpg[i] == 0xFF && jpg[i + 1] >= 0xD0 && jpg[i + 1] <= 0xD7 && n-- == 0)
			return i + 2;
	return 0;
}

static void expect_entropy(const uint8_t *p, size_t len, uint64_t max_pixels, int want,
			 const char *text, const char *what)
{
	char err[256] = "unset";
	int rc = jd_check_entropy(p, len, max_pixels, 0, err, sizeof(err));
	if (rc != want || (want < 0 && !strstr(err, text)))
		fail_msg("jd_check_entropy, %s: %d \"%s\", expected %d \"%s\"", what, rc, err, want,
			 text);
}

static void test_entropy_check(void **state)
{
	const struct enc restart420 = {KIND_YCC, 2, 2, false, 3, 90};
	const struct enc restart444 = {KIND_YCC, 1, 1, false, 1, 90};
	const struct enc grey = {KIND_GRAY, 1, 1, false, 0, 90};
	const struct enc *whole[] = {&baseline420, &progressive420, &restart420, &restart444, &grey};
	for (size_t k = 0; k < sizeof(whole) / sizeof(whole[0]); k++) {
		size_t len;
		uint8_t *jpg = sample_jpeg(whole[k], 203, 157, &len);
		expect_entropy(jpg, len, 1u << 24, 0, "", "a whole file");
		expect_entropy(jpg, len, 203 * 157 - 1, -EFBIG, "over max_image_pixels", "too big");
		expect_entropy(jpg, len / 2, 1u << 24, -EBADMSG, "premature end of data", "cut at 50%");
		size_t sos = entropy_start(jpg, len);
		expect_entropy(jpg, sos, 1u << 24, -EBADMSG, "premature end of data", "headers only");
		free(jpg);
	}
	/* Bytes cut out of a restart interval, the markers all there and in
	 * order: a decode of the rows above the damage never sees it, the
	 * check does. */
	const struct enc *restarts[] = {&restart420, &restart444};
	const size_t keeps[] = {0, 1, 4};
	for (size_t k = 0; k < 2; k++)
		for (size_t j = 0; j < sizeof(keeps) / sizeof(keeps[0]); j++) {
			size_t len;
			uint8_t *jpg = sample_jpeg(restarts[k], 203, 157, &len);
			int markers = 0;
			while (after_restart(jpg, len, markers) > 0)
				markers++;
			size_t at = after_restart(jpg, len, markers / 2); /* halfway down */
			assert_true(markers > 8 && at > 0);
			cut_to_next_marker(jpg, &len, at, keeps[j]);
			expect_entropy(jpg, len, 1u << 24, -EBADMSG, "Corrupt JPEG data",
				     "a restart interval cut short");
			struct jd_image im;
			char err[256];
			int rc = jd_decode_box(jpg, len, 0, 0, 203, 8, 203, 8, 1u << 24, &im, &scratch,
					       err, sizeof(err));
			if (rc != 0)
				fail_msg("the top rows above a cut restart interval: %d %s", rc, err);
			free(jpg);
		}
	/* No restart markers: the middle of the scan cut out. */
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 203, 157, &len);
	size_t start = entropy_start(jpg, len);
	cut_to_next_marker(jpg, &len, start + (len - start) / 3, 0);
	expect_entropy(jpg, len, 1u << 24, -EBADMSG, "", "the middle of the scan cut out");
	free(jpg);
	expect_entropy(NULL, 0, 1u << 24, -ENODATA, "empty file", "nothing");
	static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13};
	expect_entropy(png, sizeof(png), 1u << 24, -EBADMSG, "Not a JPEG file", "a PNG");
}

/* The pipeline's decode_scale reaches the workers' decoder: a sampler
 * under full decodes at 8/8 what fast decodes at 2/8, so their rows differ;
 * a value past JD_SCALE_FULL is refused. */
static void test_sampler_decode_scale(void **state)
{
	struct arena_image_params ip = {.max_pixels = 1u << 24, .max_decode_ms = 5000,
					.out_h = 56, .out_w = 56, .layout = 1,
					.dtype = PROTO_DTYPE_UINT8, .std = {1, 1, 1}};
	snprintf(ip.transform, sizeof(ip.transform), "resize(64) center_crop(56)");
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 640, 480, &len);
	uint8_t rows[2][56 * 56 * 3];
	for (uint32_t scale = JD_SCALE_FAST; scale <= JD_SCALE_FULL; scale++) {
		struct image_sampler s;
		uint64_t row_bytes = 0;
		ip.decode_scale = scale;
		assert_int_equal(image_sampler_init(&s, &ip, &row_bytes), 0);
		assert_int_equal(row_bytes, sizeof(rows[0]));
		assert_int_equal(s.jd.scale, scale);
		assert_int_equal(image_sample(&s, jpg, len, 0, 0, rows[scale]), 0);
		image_sampler_free(&s);
	}
	assert_memory_not_equal(rows[0], rows[1], sizeof(rows[0]));
	struct image_sampler s;
	uint64_t row_bytes = 0;
	ip.decode_scale = JD_SCALE_FULL + 1;
	assert_int_equal(image_sampler_init(&s, &ip, &row_bytes), -EINVAL);
	free(jpg);
}

/* The workers' choice of the GPU's decoder (image/image_sample.h) for
 * one file under each gpu_check: structure lets a restart interval cut
 * short through (the engines' blind spot), entropy does not. */
static void test_gpu_route(void **state)
{
	const struct enc restart420 = {KIND_YCC, 2, 2, false, 3, 90};
	struct arena_image_params ip = {.max_pixels = 1u << 24, .max_decode_ms = 5000};
	struct jh_info info;
	size_t len;
	uint8_t *jpg = sample_jpeg(&restart420, 203, 157, &len);
	for (uint32_t check = ARENA_GPU_CHECK_STRUCTURE; check <= ARENA_GPU_CHECK_ENTROPY; check++) {
		ip.gpu_check = check;
		assert_true(image_gpu_takes(&ip, jpg, len, len, &info));
		assert_int_equal(info.width, 203);
		assert_false(image_gpu_takes(&ip, jpg, len, len - 1, &info)); /* over max_bytes */
	}
	ip.max_pixels = 203 * 157 - 1;
	assert_false(image_gpu_takes(&ip, jpg, len, len, &info));
	ip.max_pixels = 1u << 24;
	int markers = 0;
	while (after_restart(jpg, len, markers) > 0)
		markers++;
	cut_to_next_marker(jpg, &len, after_restart(jpg, len, markers / 2), 1);
	ip.gpu_check = ARENA_GPU_CHECK_STRUCTURE;
	assert_true(image_gpu_takes(&ip, jpg, len, len, &info));
	ip.gpu_check = ARENA_GPU_CHECK_ENTROPY;
	assert_false(image_gpu_takes(&ip, jpg, len, len, &info));
	free(jpg);
	jpg = sample_jpeg(&progressive420, 203, 157, &len); /* not the engines' */
	for (uint32_t check = ARENA_GPU_CHECK_STRUCTURE; check <= ARENA_GPU_CHECK_ENTROPY; check++) {
		ip.gpu_check = check;
		assert_false(image_gpu_takes(&ip, jpg, len, len, &info));
	}
	free(jpg);
}

static void test_too_many_pixels(void **state)
{
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 203, 157, &len);
	char err[256];
	struct jd_image im;
	int rc = jd_decode_box(jpg, len, 0, 0, 203, 157, 203, 157, 203 * 157 - 1, &im, &scratch,
			       err, sizeof(err));
	assert_int_equal(rc, -EFBIG);
	assert_string_equal(err, "203 x 157 pixels, over max_image_pixels 31870");
	rc = jd_decode_box(jpg, len, 0, 0, 203, 157, 203, 157, 203 * 157, &im, &scratch, err,
			   sizeof(err));
	assert_int_equal(rc, 0);
	free(jpg);
}

/* A valid progressive file with 631 scans (every coefficient in its own
 * successive-approximation scans): past JD_MAX_SCANS. */
static void test_too_many_scans(void **state)
{
	enum { N = 1 + 63 * 10 };
	static jpeg_scan_info scans[N];
	int n = 0;
	scans[n++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
	for (int k = 1; k < 64; k++) {
		scans[n++] = (jpeg_scan_info){1, {0}, k, k, 0, 9};
		for (int al = 8; al >= 0; al--)
			scans[n++] = (jpeg_scan_info){1, {0}, k, k, al + 1, al};
	}
	assert_int_equal(n, N);
	assert_true(N > JD_MAX_SCANS);
	uint8_t *rgb = make_rgb(32, 32, 3, 12);
	struct enc e = {KIND_GRAY, 1, 1, false, 0, 90};
	size_t len;
	uint8_t *jpg = encode_with(rgb, 32, 32, &e, scans, N, &len);
	char err[256];
	struct jd_image im;
	int rc = jd_decode_box(jpg, len, 0, 0, 32, 32, 32, 32, 1u << 20, &im, &scratch, err,
			       sizeof(err));
	assert_int_equal(rc, -EBADMSG);
	assert_string_equal(err, "more than 500 scans");
	/* The same image in libjpeg's 6 scans decodes. */
	e.progressive = true;
	free(jpg);
	jpg = encode(rgb, 32, 32, &e, &len);
	rc = jd_decode_box(jpg, len, 0, 0, 32, 32, 32, 32, 1u << 20, &im, &scratch, err,
			   sizeof(err));
	assert_int_equal(rc, 0);
	free(jpg);
	free(rgb);
}

static void test_invalid_arguments(void **state)
{
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 32, 32, &len);
	char err[256];
	struct jd_image im;
	uint32_t w, h;
	assert_int_equal(jd_header(jpg, len, NULL, &h, err, sizeof(err)), -EINVAL);
	assert_int_equal(jd_header(NULL, 5, &w, &h, err, sizeof(err)), -EINVAL);
	assert_int_equal(jd_decode_box(jpg, len, NAN, 0, 8, 8, 8, 8, 1u << 20, &im, &scratch, err,
				       sizeof(err)),
			 -EINVAL);
	assert_int_equal(jd_decode_box(jpg, len, 0, 0, INFINITY, 8, 8, 8, 1u << 20, &im, &scratch,
				       err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(jd_decode_box(jpg, len, 0, 0, 0, 8, 8, 8, 1u << 20, &im, &scratch, err,
				       sizeof(err)),
			 -EINVAL);
	assert_int_equal(jd_decode_box(jpg, len, 0, 0, 8, 8, 0, 8, 1u << 20, &im, &scratch, err,
				       sizeof(err)),
			 -EINVAL);
	assert_int_equal(jd_decode_box(jpg, len, 0, 0, 8, 8, 8, 8, 1u << 20, NULL, &scratch, err,
				       sizeof(err)),
			 -EINVAL);
	/* Absurd but finite boxes are clipped, not overflowed. */
	assert_int_equal(jd_decode_box(jpg, len, -1e300, -1e300, 1e308, 1e308, 8, 8, 1u << 20, &im,
				       &scratch, err, sizeof(err)),
			 0);
	assert_true(im.sx == 0.125 && im.w == 4 && im.h == 4); /* all of it, at 1/8 */
	/* err may be absent. */
	assert_int_equal(jd_decode_box(jpg, 3, 0, 0, 8, 8, 8, 8, 1u << 20, &im, &scratch, NULL, 0),
			 -ENODATA);
	free(jpg);
}

/* Random damage to real files (bytes overwritten, bits flipped, cuts):
 * every call ends with a documented code, and a success is a sane region.
 * Under ASan this is where out-of-bounds access or leaks would show. */
static void test_random_damage(void **state)
{
	const struct enc encs[] = {
		{KIND_YCC, 2, 2, false, 0, 90}, {KIND_YCC, 2, 2, true, 0, 90},
		{KIND_YCC, 2, 1, false, 2, 90}, {KIND_CMYK, 1, 1, false, 0, 90},
		{KIND_GRAY, 1, 1, true, 0, 90}, {KIND_YCC, 4, 1, false, 0, 90},
	};
	uint64_t rs = 99;
	int outcomes[4] = {0}; /* 0, EBADMSG, ENODATA, other allowed */
	for (size_t k = 0; k < sizeof(encs) / sizeof(encs[0]); k++) {
		size_t len;
		uint8_t *jpg = sample_jpeg(&encs[k], 72, 56, &len);
		uint8_t *bad = malloc(len);
		assert_non_null(bad);
		for (int iter = 0; iter < 120; iter++) {
			memcpy(bad, jpg, len);
			size_t blen = len;
			int edits = 1 + (int)rng_below(&rs, 4);
			for (int e = 0; e < edits; e++) {
				size_t at = rng_below(&rs, (uint32_t)len);
				if (rng_below(&rs, 2))
					bad[at] = (uint8_t)rng_next(&rs);
				else
					bad[at] ^= (uint8_t)(1u << rng_below(&rs, 8));
			}
			if (rng_below(&rs, 4) == 0)
				blen = 1 + rng_below(&rs, (uint32_t)len - 1);
			char err[256];
			struct jd_image im;
			double bx = rng_unit(&rs) * 60, by = rng_unit(&rs) * 40;
			int rc = jd_decode_box(bad, blen, bx, by, 30, 30, 1 + rng_below(&rs, 40),
					       1 + rng_below(&rs, 40), 1u << 22, &im, &scratch, err,
					       sizeof(err));
			if (rc == 0) {
				assert_true(im.w >= 1 && im.h >= 1 && im.stride >= im.w * 3u);
				unsigned sum = 0; /* touch every pixel returned */
				for (uint32_t j = 0; j < im.h; j++)
					for (uint32_t i = 0; i < im.w * 3; i++)
						sum += im.rgb[(size_t)j * im.stride + i];
				(void)sum;
				outcomes[0]++;
			} else if (rc == -EBADMSG) {
				outcomes[1]++;
			} else if (rc == -ENODATA) {
				outcomes[2]++;
			} else if (rc == -EFBIG || rc == -ENOMEM) {
				outcomes[3]++;
			} else {
				fail_msg("damaged file: unexpected %d \"%s\"", rc, err);
			}
			if (rc != 0)
				assert_true(err[0] != '\0');
		}
		free(bad);
		free(jpg);
	}
	print_message("random damage: %d decoded, %d EBADMSG, %d ENODATA, %d EFBIG/ENOMEM\n",
		      outcomes[0], outcomes[1], outcomes[2], outcomes[3]);
	assert_true(outcomes[1] > 0);
}

/* A file within every other limit that still costs much CPU (a large
 * image in a few hundred successive-approximation scans) stops at the
 * caller's CPU cap, and decodes without one. */
static void test_cpu_cap(void **state)
{
	enum { N = 1 + 63 * 6, SIDE = 1024 };
	static jpeg_scan_info scans[N];
	int n = 0;
	scans[n++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
	for (int k = 1; k < 64; k++) {
		scans[n++] = (jpeg_scan_info){1, {0}, k, k, 0, 5};
		for (int al = 4; al >= 0; al--)
			scans[n++] = (jpeg_scan_info){1, {0}, k, k, al + 1, al};
	}
	assert_int_equal(n, N);
	assert_true(N <= JD_MAX_SCANS);
	uint8_t *rgb = make_rgb(SIDE, SIDE, 5, 12);
	struct enc e = {KIND_GRAY, 1, 1, false, 0, 90};
	size_t len;
	uint8_t *jpg = encode_with(rgb, SIDE, SIDE, &e, scans, N, &len);
	char err[256];
	struct jd_image im;
	struct jd_scratch s = {.max_cpu_ms = 2};
	int rc = jd_decode_box(jpg, len, 0, 0, SIDE, SIDE, SIDE, SIDE, 1u << 24, &im, &s, err,
			       sizeof(err));
	assert_int_equal(rc, -ETIME);
	assert_string_equal(err, "took over 2 ms of CPU time");
	assert_null(im.rgb);
	s.max_cpu_ms = 0;
	rc = jd_decode_box(jpg, len, 0, 0, SIDE, SIDE, SIDE, SIDE, 1u << 24, &im, &s, err,
			   sizeof(err));
	assert_int_equal(rc, 0);
	jd_scratch_free(&s);
	free(jpg);
	free(rgb);
}

static void test_scratch_free(void **state)
{
	struct jd_scratch s = {0};
	jd_scratch_free(&s); /* zeroed: fine */
	jd_scratch_free(NULL);
	size_t len;
	uint8_t *jpg = sample_jpeg(&baseline420, 40, 30, &len);
	struct jd_image im;
	char err[64];
	assert_int_equal(jd_decode_box(jpg, len, 0, 0, 40, 30, 40, 30, 1200, &im, &s, err,
				       sizeof(err)),
			 0);
	assert_non_null(s.buf);
	jd_scratch_free(&s);
	assert_null(s.buf);
	assert_int_equal(s.cap, 0);
	jd_scratch_free(&s); /* twice: fine */
	free(jpg);
}

int main(void)
{
	static const struct CMUnitTest broken[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_png),
		cmocka_unit_test(test_truncated_in_header),
		cmocka_unit_test(test_headers_only),
		cmocka_unit_test(test_truncated_half),
		cmocka_unit_test(test_flipped_entropy_byte),
		cmocka_unit_test(test_too_many_pixels),
		cmocka_unit_test(test_too_many_scans),
		cmocka_unit_test(test_entropy_check),
		cmocka_unit_test(test_gpu_route),
		cmocka_unit_test(test_sampler_decode_scale),
		cmocka_unit_test(test_cpu_cap),
		cmocka_unit_test(test_invalid_arguments),
		cmocka_unit_test(test_random_damage),
		cmocka_unit_test(test_scratch_free),
		cmocka_unit_test(test_yuv_full_size),
		cmocka_unit_test(test_yuv_reduced),
	};
	enum { N_CASES = sizeof(cases) / sizeof(cases[0]), N_BROKEN = sizeof(broken) / sizeof(broken[0]) };
	struct CMUnitTest tests[N_CASES + N_BROKEN];
	size_t n = 0;
	for (size_t i = 0; i < N_CASES; i++)
		tests[n++] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL,
						 (void *)&cases[i]};
	for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++)
		tests[n++] = broken[i];
	int failed = _cmocka_run_group_tests("jpeg", tests, n, NULL, NULL);
	jd_scratch_free(&scratch);
	return failed;
}
