/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jpeg: region decode at a DCT scale through libjpeg-turbo (jpeg.h).
 *
 * One call is one libjpeg decompressor, created and destroyed inside the
 * call, with its error manager, progress monitor and jmp_buf in a context
 * on the caller's stack: no global state, and an error anywhere in libjpeg
 * (an ERREXIT, a warning we make fatal, our own limits) longjmps back to
 * the one place that destroys the decompressor, which releases everything
 * libjpeg allocated. Our own memory is the caller's scratch, so nothing
 * else needs undoing.
 *
 * The setjmp sits in a function of its own (jd_decode_guarded), and what
 * the error path reads lives in a context owned by its caller. C leaves
 * indeterminate only the locals of the function that called setjmp that
 * changed before the longjmp, and the error path uses none of those.
 *
 * How a region is decoded, in libjpeg terms:
 *   - scale_num/scale_denom = M/8: the IDCT outputs M x M pixels per 8 x 8
 *     block, so a smaller scale saves the IDCT, upsampling and color
 *     conversion work for pixels the resampler would average away. The
 *     reduced IDCTs are not a bilinear downscale, so the resampled output
 *     differs from torchvision's (a full decode, then the resize) by about
 *     a level on average (docs/config.md, "decode_scale"); JD_SCALE_FULL
 *     always decodes at 8/8.
 *   - jpeg_crop_scanline for the columns. It moves the left edge down to an
 *     iMCU boundary; we read back the adjusted xoffset and output_width.
 *     Its documented caveat: fancy h2v1/h2v2 upsampling treats the crop's
 *     left and right columns as image edges, so those two columns can
 *     differ from a full decode. We ask for one column more on each side
 *     (when the image has one) and never hand those columns out, and never
 *     crop narrower than JD_MIN_CROP_PX, so every pixel returned equals the
 *     full decode's.
 *   - jpeg_skip_scanlines to the first row, jpeg_read_scanlines to the
 *     last, then destroy without jpeg_finish_decompress: the entropy data
 *     after the last row is never read.
 *   - JDCT_ISLOW: the accurate integer IDCT, libjpeg's default. JDCT_IFAST
 *     is a legacy option: with libjpeg-turbo's SIMD code the two run about
 *     as fast on AVX2 CPUs (libjpeg-turbo's usage.txt), IFAST loses
 *     accuracy, most at high quality, and it only ever applies at 8/8 (the
 *     reduced-size IDCTs have one method). With ISLOW the pixels are the
 *     ones other libjpeg-turbo decoders (PIL, torchvision) produce.
 *   - do_fancy_upsampling TRUE (triangle-filtered chroma, the default, what
 *     those decoders do).
 *   - do_block_smoothing FALSE. Smoothing estimates low AC coefficients of
 *     a progressive image from neighbouring DC values while they are still
 *     unknown, which is for showing partly received images; a complete file
 *     leaves nothing to estimate, so it never changes a valid decode. Off,
 *     a crop cannot see the crop edge as an image edge there either.
 *
 * Color: grayscale, YCbCr and RGB files are decoded with out_color_space
 * JCS_RGB (libjpeg-turbo expands grayscale to R = G = B itself). CMYK and
 * YCCK files are decoded as JCS_CMYK (libjpeg turns YCCK into CMYK) and
 * converted here. Photoshop writes CMYK inverted (0 = full ink) and marks
 * such files with an Adobe APP14 marker; for those, with stored values
 * c, m, y, k:
 *     R = round(c * k / 255), G = round(m * k / 255), B = round(y * k / 255)
 * that is, (1 - C)(1 - K) with C and K as ink fractions. Without the Adobe
 * marker the values are taken as plain ink: R = round((255 - c)(255 - k) / 255).
 * No ICC profile is applied.
 */
#include "image/jpeg.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <time.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "common/errtext.h"

/* Decoded pixels past each edge of the box, at least; see jd_decode_box. */
#define JD_MARGIN_PX 2

/* libjpeg's memory ceiling (mem->max_memory_to_use), which libjpeg-turbo
 * checks, against everything it has allocated, when it sizes its
 * whole-image buffers. The strip buffers of even the widest image libjpeg
 * accepts (65500 px) stay well under the base; the whole-image coefficient
 * arrays of progressive and multi-scan files hold 2 bytes per component
 * sample, at most 8 bytes per pixel (4 full-resolution components), each
 * side padded to the MCU (32 px at most). So a valid image always fits,
 * and a header whose layout would need more fails with -ENOMEM instead of
 * growing the worker. */
#define JD_MEM_BASE_BYTES (64L << 20)
#define JD_MEM_BYTES_PER_PX 8L
#define JD_MEM_PAD_PX 32L

/* The narrowest crop we ask jpeg_crop_scanline for. A crop that leaves a
 * subsampled component less than 2 samples wide makes libjpeg-turbo pick
 * its upsamplers again for the cropped width, and at that width fancy
 * h2v1/h2v2 upsampling gives way to plain replication, in both directions:
 * other pixels than the full decode's. 16 output pixels keep every
 * subsampled component at 4 samples or more; an image narrower than that
 * is decoded whole. */
#define JD_MIN_CROP_PX 16

/* Rows handed to one jpeg_read_scanlines call. */
#define JD_READ_ROWS 16

_Static_assert(sizeof(unsigned long) >= sizeof(size_t),
	       "jpeg_mem_src takes the length as unsigned long");

struct jd_ctx {
	struct jpeg_error_mgr pub; /* first: libjpeg hands back &pub */
	struct jpeg_progress_mgr progress;
	struct jpeg_decompress_struct cinfo;
	jmp_buf jump;
	bool in_header; /* running jpeg_read_header: running out is "truncated" */
	uint32_t max_cpu_ms;     /* 0: no limit */
	uint64_t cpu_start_ns;   /* the calling thread's CPU time at the start */
	uint32_t progress_calls;
	int rc;
	char *err;
	size_t err_cap;
};

static struct jd_ctx *jd_ctx_of(j_common_ptr cinfo)
{
	return (struct jd_ctx *)cinfo->err;
}

static _Noreturn void jd_fail(struct jd_ctx *ctx, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Ends the call: the reason into the caller's buffer, rc to return, and
 * back to the setjmp that destroys the decompressor. */
static _Noreturn void jd_fail(struct jd_ctx *ctx, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ctx->rc = verrtext(ctx->err, ctx->err_cap, rc, fmt, ap);
	va_end(ap);
	longjmp(ctx->jump, 1);
}

static _Noreturn void jd_on_error_exit(j_common_ptr cinfo)
{
	struct jd_ctx *ctx = jd_ctx_of(cinfo);
	char msg[JMSG_LENGTH_MAX];
	(*cinfo->err->format_message)(cinfo, msg);
	switch (cinfo->err->msg_code) {
	case JERR_OUT_OF_MEMORY:
		jd_fail(ctx, -ENOMEM, "%s", msg);
	case JERR_NO_BACKING_STORE: /* what going over max_memory_to_use raises */
		jd_fail(ctx, -ENOMEM, "needs more than the decoder's memory limit of %ld bytes",
			cinfo->mem->max_memory_to_use);
	default:
		jd_fail(ctx, -EBADMSG, "%s", msg);
	}
}

/*
 * Warnings are where libjpeg reports damaged data it decided to live with
 * (missing data padded with gray, a bad Huffman code, bytes where a marker
 * should be); each of them means the pixels are not the file's, so each
 * ends the call. The one exception is an unknown JFIF major version, which
 * says nothing about the pixels. Trace messages (level >= 0) are ignored.
 */
static void jd_on_emit_message(j_common_ptr cinfo, int msg_level)
{
	if (msg_level >= 0)
		return;
	struct jd_ctx *ctx = jd_ctx_of(cinfo);
	int code = cinfo->err->msg_code;
	if (code == JWRN_JFIF_MAJOR)
		return;
	if (code == JWRN_JPEG_EOF) {
		if (ctx->in_header)
			jd_fail(ctx, -ENODATA, "truncated");
		jd_fail(ctx, -EBADMSG, "premature end of data");
	}
	char msg[JMSG_LENGTH_MAX];
	(*cinfo->err->format_message)(cinfo, msg);
	jd_fail(ctx, -EBADMSG, "%s", msg);
}

static void jd_on_output_message(j_common_ptr cinfo)
{
	(void)cinfo; /* pure decoder: the caller logs */
}

static uint64_t jd_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Progress calls between two looks at the clock: a look costs a system
 * call, a call a few microseconds of decoding. */
#define JD_CPU_CHECK_EVERY 8

/* Called before each unit of input work (an iMCU row, a marker) and each
 * batch of output rows. */
static void jd_on_progress(j_common_ptr cinfo)
{
	if (!cinfo->is_decompressor)
		return;
	struct jd_ctx *ctx = jd_ctx_of(cinfo);
	int scan = ((j_decompress_ptr)cinfo)->input_scan_number;
	if (scan > JD_MAX_SCANS)
		jd_fail(ctx, -EBADMSG, "more than %d scans", JD_MAX_SCANS);
	if (ctx->max_cpu_ms && ++ctx->progress_calls % JD_CPU_CHECK_EVERY == 0 &&
	    jd_thread_cpu_ns() - ctx->cpu_start_ns > (uint64_t)ctx->max_cpu_ms * 1000000ull)
		jd_fail(ctx, -ETIME, "took over %u ms of CPU time", ctx->max_cpu_ms);
}

static void jd_ctx_init(struct jd_ctx *ctx, char *err, size_t err_cap)
{
	memset(ctx, 0, sizeof(*ctx));
	jpeg_std_error(&ctx->pub);
	ctx->pub.error_exit = jd_on_error_exit;
	ctx->pub.emit_message = jd_on_emit_message;
	ctx->pub.output_message = jd_on_output_message;
	ctx->progress.progress_monitor = jd_on_progress;
	ctx->err = err;
	ctx->err_cap = err_cap;
	ctx->in_header = true;
}

/* Inside the setjmp scope: creates the decompressor and reads the header.
 * Errors longjmp. */
static void jd_open_and_read_header(struct jd_ctx *ctx, const uint8_t *data, size_t len)
{
	j_decompress_ptr cinfo = &ctx->cinfo;
	cinfo->err = &ctx->pub;
	jpeg_create_decompress(cinfo);
	cinfo->progress = &ctx->progress;
	cinfo->mem->max_memory_to_use = JD_MEM_BASE_BYTES;
	jpeg_mem_src(cinfo, data, (unsigned long)len);
	ctx->in_header = true;
	jpeg_read_header(cinfo, TRUE);
	ctx->in_header = false;
}

/* jd_open_and_read_header, then the image's size against max_pixels and
 * libjpeg's memory ceiling for it. Errors longjmp. */
static void jd_open_sized(struct jd_ctx *ctx, const uint8_t *data, size_t len, uint64_t max_pixels)
{
	j_decompress_ptr cinfo = &ctx->cinfo;
	jd_open_and_read_header(ctx, data, len);
	uint64_t pixels = (uint64_t)cinfo->image_width * cinfo->image_height;
	if (pixels > max_pixels)
		jd_fail(ctx, -EFBIG, "%u x %u pixels, over max_image_pixels %llu",
			(unsigned)cinfo->image_width, (unsigned)cinfo->image_height,
			(unsigned long long)max_pixels);
	cinfo->mem->max_memory_to_use =
		JD_MEM_BASE_BYTES + JD_MEM_BYTES_PER_PX * ((long)cinfo->image_width + JD_MEM_PAD_PX) *
					    ((long)cinfo->image_height + JD_MEM_PAD_PX);
}

static int jd_header_guarded(struct jd_ctx *ctx, const uint8_t *data, size_t len, uint32_t *w,
			     uint32_t *h)
{
	if (setjmp(ctx->jump)) {
		jpeg_destroy_decompress(&ctx->cinfo);
		return ctx->rc;
	}
	jd_open_and_read_header(ctx, data, len);
	*w = ctx->cinfo.image_width;
	*h = ctx->cinfo.image_height;
	jpeg_destroy_decompress(&ctx->cinfo);
	return 0;
}

/* What both entry points check first, with err emptied: their own
 * arguments (args_ok), the data, an empty file. 0, -EINVAL or -ENODATA. */
static int jd_check_input(const uint8_t *data, size_t len, bool args_ok, char *err, size_t err_cap)
{
	errtext(err, err_cap, 0, "%s", "");
	if (!args_ok || (!data && len > 0))
		return errtext(err, err_cap, -EINVAL, "invalid argument");
	if (len == 0)
		return errtext(err, err_cap, -ENODATA, "empty file");
	return 0;
}

int jd_header(const uint8_t *data, size_t len, uint32_t *w, uint32_t *h, char *err,
	      size_t err_cap)
{
	int rc = jd_check_input(data, len, w && h, err, err_cap);
	if (rc == -EINVAL)
		return rc;
	*w = *h = 0;
	if (rc < 0)
		return rc;
	struct jd_ctx ctx;
	jd_ctx_init(&ctx, err, err_cap);
	return jd_header_guarded(&ctx, data, len, w, h);
}

/* Smallest M in {1, 2, 4, 8} whose scale M/8 keeps the box at least as big
 * as the output; 8 when none does. */
int jd_pick_scale(double w, double h, uint32_t out_w, uint32_t out_h)
{
	for (int m = 1; m < 8; m *= 2)
		if (w * m / 8 >= out_w && h * m / 8 >= out_h)
			return m;
	return 8;
}

void jd_box_range(double start, double span, double s, uint32_t out, uint32_t n, uint32_t *lo,
		  uint32_t *hi)
{
	/* With r = max(1, span * s / out), the triangle's taps reach r/2 + 1/2
	 * past the box. Computed in double and clamped before any
	 * conversion, so absurd boxes cannot overflow. */
	double reach = fmax(1.0, span * s / out);
	double margin = fmax(JD_MARGIN_PX, ceil(reach / 2 + 0.5));
	double a = floor(start * s) - margin;
	double b = ceil((start + span) * s) + margin;
	a = fmin(fmax(a, 0.0), (double)n);
	b = fmin(fmax(b, 0.0), (double)n);
	if (a >= n)
		a = n - 1;
	if (b <= a)
		b = a + 1;
	*lo = (uint32_t)a;
	*hi = (uint32_t)b;
}

/*
 * Whether jpeg_crop_scanline gives this decode exact pixels. At a reduced
 * scale libjpeg-turbo may decode a subsampled component with a larger IDCT
 * than the luma (a 2x2-sampled component at 4/8 gets the 8x8 IDCT and then
 * needs no upsampling). libjpeg-turbo 2.1's jpeg_crop_scanline sizes every
 * component's cropped row as if its IDCT were the luma's (later releases
 * use the component's own): harmless where that component then needs no upsampling, since only the
 * upsamplers read that width, but where it still does (4x2 sampling at
 * 4/8 upsamples 2x1), the right part of the row is garbage. Those decodes
 * are rare and are done at full width instead.
 */
/* The libjpeg 6b API (Debian's libjpeg62-turbo) has one scaled DCT size
 * per component; the 7/8 APIs have one per direction. */
#if JPEG_LIB_VERSION >= 70
#define COMP_SCALED_H(c) ((c)->DCT_h_scaled_size)
#define COMP_SCALED_V(c) ((c)->DCT_v_scaled_size)
#define MIN_SCALED_H(ci) ((ci)->min_DCT_h_scaled_size)
#define MIN_SCALED_V(ci) ((ci)->min_DCT_v_scaled_size)
#else
#define COMP_SCALED_H(c) ((c)->DCT_scaled_size)
#define COMP_SCALED_V(c) ((c)->DCT_scaled_size)
#define MIN_SCALED_H(ci) ((ci)->min_DCT_scaled_size)
#define MIN_SCALED_V(ci) ((ci)->min_DCT_scaled_size)
#endif

static bool jd_crop_is_exact(j_decompress_ptr cinfo)
{
	const int min_h = MIN_SCALED_H(cinfo), min_v = MIN_SCALED_V(cinfo);
	for (int ci = 0; ci < cinfo->num_components; ci++) {
		const jpeg_component_info *c = &cinfo->comp_info[ci];
		bool upsampled = c->h_samp_factor * COMP_SCALED_H(c) != cinfo->max_h_samp_factor * min_h ||
				 c->v_samp_factor * COMP_SCALED_V(c) != cinfo->max_v_samp_factor * min_v;
		if ((COMP_SCALED_H(c) != min_h || COMP_SCALED_V(c) != min_v) && upsampled)
			return false;
	}
	return true;
}

/*
 * The scale M/8 to decode at, from the M0/8 that gives the output enough
 * luma (jd_pick_scale): M0 doubled (up to 8) until every component has,
 * along each axis, at least min(M0/8, its own sampling ratio) samples per
 * source pixel (jpeg.h, "Scale"). A component sampled h of the largest H
 * across with a scaled DCT size of S has S * h / (8 * H) samples per
 * source pixel across (and likewise down), so the test is
 * S * h >= min(M0 * H, 8 * h). libjpeg-turbo sets S itself
 * (jpeg_calc_output_dimensions): twice the luma's for a 2x2-subsampled
 * chroma, which passes; the luma's for a 2x1 or 1x2 one, which then fails
 * along its subsampled axis until M = 2 M0. Errors longjmp.
 */
static int jd_chroma_scale(j_decompress_ptr cinfo, int m0)
{
	int m = m0;
	for (; m < 8; m *= 2) {
		cinfo->scale_num = (unsigned)m;
		cinfo->scale_denom = 8;
		jpeg_calc_output_dimensions(cinfo);
		bool enough = true;
		for (int ci = 0; ci < cinfo->num_components; ci++) {
			const jpeg_component_info *c = &cinfo->comp_info[ci];
			int h = c->h_samp_factor, v = c->v_samp_factor;
			int need_h = m0 * cinfo->max_h_samp_factor < 8 * h ? m0 * cinfo->max_h_samp_factor : 8 * h;
			int need_v = m0 * cinfo->max_v_samp_factor < 8 * v ? m0 * cinfo->max_v_samp_factor : 8 * v;
			if (COMP_SCALED_H(c) * h < need_h || COMP_SCALED_V(c) * v < need_v)
				enough = false;
		}
		if (enough)
			break;
	}
	return m;
}

int jd_fast_scale(int m0, uint32_t hs, uint32_t vs)
{
	/* libjpeg-turbo scales a chroma sampled 1/k of the luma along both
	 * axes up by k with its IDCT (up to 8/8), and upsamples what ratio is
	 * left along one axis; jd_chroma_scale's test on those sizes. */
	const uint32_t k = hs < vs ? hs : vs;
	int m = m0;
	for (; m < 8; m *= 2) {
		const uint32_t scaled = (uint32_t)m * k < 8 ? (uint32_t)m * k : 8;
		const uint32_t need_h = (uint32_t)m0 * hs < 8 ? (uint32_t)m0 * hs : 8;
		const uint32_t need_v = (uint32_t)m0 * vs < 8 ? (uint32_t)m0 * vs : 8;
		if (scaled >= need_h && scaled >= need_v)
			break;
	}
	return m;
}

static uint8_t *jd_scratch_reserve(struct jd_scratch *s, size_t bytes)
{
	if (s->cap >= bytes)
		return s->buf;
	free(s->buf); /* contents are not kept between calls */
	s->buf = malloc(bytes);
	s->cap = s->buf ? bytes : 0;
	return s->buf;
}

/* round(a * b / 255) for a, b in [0, 255], exactly. */
static uint8_t jd_mul255(unsigned a, unsigned b)
{
	unsigned t = a * b + 128;
	return (uint8_t)((t + (t >> 8)) >> 8);
}

/* In place: n CMYK pixels at row become n RGB pixels at its start. Each
 * RGB pixel is written at or before the CMYK pixel it comes from, which
 * has already been read. */
static void jd_cmyk_to_rgb(uint8_t *row, size_t n, bool inverted)
{
	for (size_t i = 0; i < n; i++) {
		unsigned c = row[4 * i], m = row[4 * i + 1], y = row[4 * i + 2], k = row[4 * i + 3];
		if (!inverted) {
			c = 255 - c;
			m = 255 - m;
			y = 255 - y;
			k = 255 - k;
		}
		row[3 * i] = jd_mul255(c, k);
		row[3 * i + 1] = jd_mul255(m, k);
		row[3 * i + 2] = jd_mul255(y, k);
	}
}

struct jd_request {
	double x, y, w, h;
	uint32_t out_w, out_h;
	uint64_t max_pixels;
	uint32_t scale; /* enum jd_scale */
};

static int jd_decode_guarded(struct jd_ctx *ctx, const uint8_t *data, size_t len,
			     const struct jd_request *rq, struct jd_image *out, struct jd_scratch *s)
{
	j_decompress_ptr cinfo = &ctx->cinfo;
	if (setjmp(ctx->jump)) {
		jpeg_destroy_decompress(cinfo);
		return ctx->rc;
	}
	jd_open_sized(ctx, data, len, rq->max_pixels);

	bool cmyk;
	switch (cinfo->jpeg_color_space) {
	case JCS_GRAYSCALE:
	case JCS_YCbCr:
	case JCS_RGB:
		cmyk = false;
		cinfo->out_color_space = JCS_RGB;
		break;
	case JCS_CMYK:
	case JCS_YCCK:
		cmyk = true;
		cinfo->out_color_space = JCS_CMYK;
		break;
	default:
		jd_fail(ctx, -EBADMSG, "unsupported color space (%d components)",
			cinfo->num_components);
	}
	int m = 8;
	if (rq->scale != JD_SCALE_FULL)
		m = jd_chroma_scale(cinfo, jd_pick_scale(rq->w, rq->h, rq->out_w, rq->out_h));
	cinfo->scale_num = (unsigned)m;
	cinfo->scale_denom = 8;
	cinfo->dct_method = JDCT_ISLOW;
	cinfo->do_fancy_upsampling = TRUE;
	cinfo->do_block_smoothing = FALSE;

	jpeg_start_decompress(cinfo);
	const uint32_t full_w = cinfo->output_width, full_h = cinfo->output_height;
	const double scale = m / 8.0;
	uint32_t c0, c1, r0, r1;
	jd_box_range(rq->x, rq->w, scale, rq->out_w, full_w, &c0, &c1);
	jd_box_range(rq->y, rq->h, scale, rq->out_h, full_h, &r0, &r1);

	/* One guard column each side where the image has one, and no crop
	 * narrower than JD_MIN_CROP_PX (see the top). */
	JDIMENSION xoff = c0 > 0 ? c0 - 1 : 0;
	JDIMENSION xend = c1 < full_w ? c1 + 1 : c1;
	if (xend - xoff < JD_MIN_CROP_PX) {
		xend = xoff + JD_MIN_CROP_PX < full_w ? xoff + JD_MIN_CROP_PX : full_w;
		xoff = xend > JD_MIN_CROP_PX ? xend - JD_MIN_CROP_PX : 0;
	}
	JDIMENSION cw = xend - xoff;
	if (!jd_crop_is_exact(cinfo)) {
		xoff = 0;
		cw = full_w;
	}
	if (xoff > 0 || cw < full_w)
		jpeg_crop_scanline(cinfo, &xoff, &cw);
	if (xoff > c0 || xoff + cinfo->output_width < c1)
		jd_fail(ctx, -EBADMSG, "crop to columns %u..%u gave %u..%u", c0, c1, (unsigned)xoff,
			(unsigned)(xoff + cinfo->output_width));

	const size_t px_bytes = cmyk ? 4 : 3;
	const size_t row_bytes = (size_t)cinfo->output_width * px_bytes;
	const size_t rows = r1 - r0;
	uint8_t *buf = jd_scratch_reserve(s, rows * row_bytes);
	if (!buf)
		jd_fail(ctx, -ENOMEM, "out of memory for a %zu x %u region", rows,
			(unsigned)cinfo->output_width);

	if (r0 > 0 && jpeg_skip_scanlines(cinfo, r0) != r0)
		jd_fail(ctx, -EBADMSG, "could not skip to row %u", r0);
	while (cinfo->output_scanline < r1) {
		JSAMPROW ptrs[JD_READ_ROWS];
		JDIMENSION at = cinfo->output_scanline, n = r1 - at;
		if (n > JD_READ_ROWS)
			n = JD_READ_ROWS;
		for (JDIMENSION i = 0; i < n; i++)
			ptrs[i] = buf + (size_t)(at - r0 + i) * row_bytes;
		JDIMENSION got = jpeg_read_scanlines(cinfo, ptrs, n);
		if (got == 0) /* cannot happen with a memory source; never spin */
			jd_fail(ctx, -EBADMSG, "decoder stopped at row %u", (unsigned)at);
		if (cmyk)
			for (JDIMENSION i = 0; i < got; i++)
				jd_cmyk_to_rgb(ptrs[i], cinfo->output_width, cinfo->saw_Adobe_marker);
	}

	out->rgb = buf + (size_t)(c0 - xoff) * 3;
	out->w = c1 - c0;
	out->h = (uint32_t)rows;
	out->stride = row_bytes;
	out->sx = out->sy = scale;
	out->x0 = (int32_t)c0;
	out->y0 = (int32_t)r0;
	jpeg_destroy_decompress(cinfo); /* also abandons the rest of the data */
	return 0;
}

int jd_decode_box(const uint8_t *data, size_t len, double x, double y, double w, double h,
		  uint32_t out_w, uint32_t out_h, uint64_t max_pixels, struct jd_image *out,
		  struct jd_scratch *s, char *err, size_t err_cap)
{
	if (out)
		memset(out, 0, sizeof(*out));
	int rc = jd_check_input(data, len,
				out && s && out_w > 0 && out_h > 0 && isfinite(x) && isfinite(y) &&
				     isfinite(w) && isfinite(h) && w > 0 && h > 0,
				err, err_cap);
	if (rc < 0)
		return rc;
	struct jd_ctx ctx;
	jd_ctx_init(&ctx, err, err_cap);
	ctx.max_cpu_ms = s->max_cpu_ms;
	if (ctx.max_cpu_ms)
		ctx.cpu_start_ns = jd_thread_cpu_ns();
	struct jd_request rq = {x, y, w, h, out_w, out_h, max_pixels, s->scale};
	rc = jd_decode_guarded(&ctx, data, len, &rq, out, s);
	if (rc < 0)
		memset(out, 0, sizeof(*out));
	return rc;
}

/* Inside the setjmp scope of jd_check_entropy: every row at 1/8 scale (the
 * IDCT then keeps only each block's DC), then on to the end of the file. */
static int jd_entropy_guarded(struct jd_ctx *ctx, const uint8_t *data, size_t len,
			      uint64_t max_pixels)
{
	j_decompress_ptr cinfo = &ctx->cinfo;
	if (setjmp(ctx->jump)) {
		jpeg_destroy_decompress(cinfo);
		return ctx->rc;
	}
	jd_open_sized(ctx, data, len, max_pixels);
	cinfo->scale_num = 1;
	cinfo->scale_denom = 8;
	cinfo->do_fancy_upsampling = FALSE;
	cinfo->do_block_smoothing = FALSE;
	jpeg_start_decompress(cinfo);
	JSAMPARRAY row = (*cinfo->mem->alloc_sarray)(
		(j_common_ptr)cinfo, JPOOL_IMAGE,
		cinfo->output_width * (JDIMENSION)cinfo->output_components, 1);
	while (cinfo->output_scanline < cinfo->output_height)
		if (jpeg_read_scanlines(cinfo, row, 1) == 0) /* cannot happen with a memory source */
			jd_fail(ctx, -EBADMSG, "decoder stopped at row %u",
				(unsigned)cinfo->output_scanline);
	jpeg_finish_decompress(cinfo); /* the rest, to the end of image marker */
	jpeg_destroy_decompress(cinfo);
	return 0;
}

int jd_check_entropy(const uint8_t *data, size_t len, uint64_t max_pixels, uint32_t max_cpu_ms,
		     char *err, size_t err_cap)
{
	int rc = jd_check_input(data, len, true, err, err_cap);
	if (rc < 0)
		return rc;
	struct jd_ctx ctx;
	jd_ctx_init(&ctx, err, err_cap);
	ctx.max_cpu_ms = max_cpu_ms;
	if (ctx.max_cpu_ms)
		ctx.cpu_start_ns = jd_thread_cpu_ns();
	return jd_entropy_guarded(&ctx, data, len, max_pixels);
}

void jd_scratch_free(struct jd_scratch *s)
{
	if (!s)
		return;
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
	s->max_cpu_ms = 0;
	s->scale = JD_SCALE_FAST;
}
