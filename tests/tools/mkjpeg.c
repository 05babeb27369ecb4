/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkjpeg: makes the JPEG files the tests and benchmarks read, with libjpeg's
 * own compressor, so that every file is one a real encoder writes.
 *
 * usage: mkjpeg OUT.jpg --width W --height H [--quality Q] [--seed S]
 *               [--pattern gradient|noise|photo] [--progressive]
 *               [--gray | --cmyk | --ycck] [--subsamp 444|422|420|440|411]
 *               [--restart ROWS] [--exif ORIENTATION] [--truncate BYTES]
 *               [--corrupt OFFSET]
 *        mkjpeg --tree ROOT --classes C --per-class N --min-side A
 *               --max-side B [--quality Q] [--seed S]
 *
 * Single mode writes OUT.jpg and prints nothing. Defaults: quality 90,
 * seed 0, pattern photo, subsampling 420, baseline, no restart markers.
 *   photo     smooth gradients and waves, 3 to 7 shaded shapes, fine texture
 *             and a little grain, so that it compresses like a photograph
 *             (about 3 bits per pixel at quality 90); a function of
 *             (seed, W, H).
 *   gradient  R = 255*x/(W-1), G = 255*y/(H-1), B = 255*(x+y)/(W+H-2),
 *             rounded, no noise, seed ignored: tests can predict pixels.
 *   noise     every sample the encoder is given (RGB, gray or CMYK)
 *             uniform in [0, 255], from the seed.
 *   --gray    one component (luma of the RGB pattern).
 *   --cmyk    Adobe CMYK (in_color_space JCS_CMYK, Adobe marker), stored
 *             inverted the way Photoshop writes it: R = C*K/255, and so on.
 *   --ycck    the same CMYK samples, stored as YCCK (jpeg_set_colorspace).
 *   --subsamp luma (and K) sampling factors, 444 1x1, 422 2x1, 420 2x2,
 *             440 1x2, 411 4x1; chroma stays 1x1. Not valid with --gray or
 *             --cmyk, whose components are all full resolution.
 *   --restart ROWS      a restart marker every ROWS MCU rows.
 *   --exif ORIENTATION  an Exif APP1 segment first after SOI, as a camera
 *                       writes it: IFD0 with the orientation tag (1..8),
 *                       IFD1 with a 32 x 24 JPEG thumbnail of the same
 *                       picture (a whole JPEG, SOI to EOI, inside the
 *                       segment). The pixels of the image are the same as
 *                       without it: readers that ignore Exif decode the
 *                       picture as stored.
 *   --corrupt OFFSET    xor 0x5a into the byte OFFSET bytes after the end of
 *                       the first SOS segment (the first entropy-coded byte
 *                       is offset 0); OFFSET must lie before the EOI marker.
 *   --truncate BYTES    keep only the first BYTES bytes; BYTES must be less
 *                       than the file's size. Applied after --corrupt.
 *
 * Tree mode writes ROOT/class_XXX/img_YYYYY.jpg (both zero-based), C classes
 * of N photo images each, every side uniform in [A, B]; each file is a
 * function of (seed, class, index) alone. It makes ROOT (and its parents)
 * as needed, reuses one set of buffers for every image, and prints one line,
 * "<count> files, <bytes> bytes".
 *
 * Exit codes: 0 done; 2 bad arguments (the message names the argument);
 * 1 an I/O or encoder failure (the message names the file).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <jerror.h>

#define EXIT_USAGE 2
#define EXIT_IO 1

#define MAX_SIDE ((int)JPEG_MAX_DIMENSION)
#define MAX_CLASSES 1000    /* class_XXX */
#define MAX_PER_CLASS 100000 /* img_YYYYY */
#define PHOTO_WAVES 2
#define PHOTO_MAX_SHAPES 7
#define CORRUPT_XOR 0x5a
#define THUMB_WIDTH 32
#define THUMB_HEIGHT 24

enum pattern { PATTERN_PHOTO, PATTERN_GRADIENT, PATTERN_NOISE };
enum color { COLOR_RGB, COLOR_GRAY, COLOR_CMYK, COLOR_YCCK };

struct image_spec {
	int width, height, quality;
	uint64_t seed;
	enum pattern pattern;
	enum color color;
	int luma_h, luma_v; /* sampling factors of Y (and K for YCCK) */
	bool progressive;
	int restart_rows; /* 0: none */
};

/* ---- deterministic randomness ------------------------------------------ */

/* splitmix64: one state word, full period, good enough for test pictures
 * and fast enough to draw one word per pixel. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static float rng_float(uint64_t *state, float lo, float hi)
{
	return lo + (hi - lo) * (float)(rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

/* ---- the picture ------------------------------------------------------- */

struct wave {
	float fx, fy, phase; /* radians per pixel, radians */
	float amp[3];
};

struct shape {
	bool ellipse; /* else an axis-aligned rectangle */
	float cx, cy, rx, ry;
	float color[3];
	float alpha; /* how much of the shape covers what is under it */
	float shade; /* lit from above: brighter at the top, darker below */
};

struct scene {
	enum pattern pattern;
	int width, height;
	float base[3], slope_x[3], slope_y[3]; /* levels across the picture */
	struct wave waves[PHOTO_WAVES];
	struct shape shapes[PHOTO_MAX_SHAPES];
	int shape_count;
	/* Fine detail (foliage, fabric, gravel): value noise on a grid of
	 * texture_cell pixels, bilinear between grid points. */
	int texture_cell;
	float texture_amp; /* peak, levels */
	uint64_t texture_key;
	float noise_luma, noise_chroma; /* peak amplitude, levels */
	uint64_t rng;                   /* drawn row by row for the noise */
};

struct grow_dest {
	struct jpeg_destination_mgr pub;
	JOCTET *buf;
	size_t cap, len;
};

/*
 * Buffers one process reuses for every image, sized for the widest row so
 * far (width_cap): float rows carved from one block, one output row, and
 * the growing buffer the compressed file lands in. Float rows are planar
 * (all R, then all G, then all B): each inner loop walks one plane.
 */
struct workspace {
	int width_cap;
	float *floats;            /* the block the float rows below live in */
	float *col_sin, *col_cos; /* PHOTO_WAVES rows each: per picture */
	float *wave;              /* PHOTO_WAVES rows: per picture row */
	float *plane;             /* 3 rows: R, G, B of one picture row */
	float *grid;              /* width_cap + 2: texture at grid columns */
	JSAMPLE *out_row;         /* width_cap * 4 */
	struct grow_dest dest;
};

static void scene_init(struct scene *sc, enum pattern pattern, uint64_t seed, int width, int height)
{
	uint64_t rng = seed;
	float side = (float)(width < height ? width : height);

	memset(sc, 0, sizeof(*sc));
	sc->pattern = pattern;
	sc->width = width;
	sc->height = height;
	/* The noise gets its own stream so that the picture's layout does not
	 * depend on how many draws the layout took. */
	sc->rng = rng_next(&rng) ^ 0x6a09e667f3bcc908ull;
	if (pattern != PATTERN_PHOTO)
		return;

	for (int c = 0; c < 3; c++) {
		sc->base[c] = rng_float(&rng, 50.0f, 200.0f);
		sc->slope_x[c] = rng_float(&rng, -70.0f, 70.0f);
		sc->slope_y[c] = rng_float(&rng, -70.0f, 70.0f);
	}
	for (int w = 0; w < PHOTO_WAVES; w++) {
		struct wave *wv = &sc->waves[w];
		/* Half a cycle to three cycles across the picture: large, soft
		 * features like sky, walls and out-of-focus background. */
		float cycles_x = rng_float(&rng, 0.5f, 3.0f);
		float cycles_y = rng_float(&rng, 0.5f, 3.0f);
		wv->fx = 2.0f * (float)M_PI * cycles_x / (float)width * (rng_next(&rng) & 1 ? 1.0f : -1.0f);
		wv->fy = 2.0f * (float)M_PI * cycles_y / (float)height;
		wv->phase = rng_float(&rng, 0.0f, 2.0f * (float)M_PI);
		for (int c = 0; c < 3; c++)
			wv->amp[c] = rng_float(&rng, 10.0f, 35.0f);
	}
	sc->shape_count = 3 + (int)(rng_next(&rng) % (PHOTO_MAX_SHAPES - 2));
	for (int s = 0; s < sc->shape_count; s++) {
		struct shape *sh = &sc->shapes[s];
		sh->ellipse = rng_next(&rng) & 1;
		sh->cx = rng_float(&rng, 0.0f, (float)width);
		sh->cy = rng_float(&rng, 0.0f, (float)height);
		sh->rx = rng_float(&rng, 0.05f, 0.3f) * side;
		sh->ry = rng_float(&rng, 0.05f, 0.3f) * side;
		for (int c = 0; c < 3; c++)
			sh->color[c] = rng_float(&rng, 20.0f, 235.0f);
		sh->alpha = rng_float(&rng, 0.6f, 0.95f);
		sh->shade = rng_float(&rng, 0.1f, 0.4f);
	}
	sc->texture_cell = 2 + (int)(rng_next(&rng) % 2);
	sc->texture_amp = rng_float(&rng, 45.0f, 55.0f);
	sc->texture_key = rng_next(&rng);
	sc->noise_luma = 6.0f;
	sc->noise_chroma = 3.0f;
}

static int workspace_reserve(struct workspace *ws, int width)
{
	if (width <= ws->width_cap)
		return 0;
	size_t n = (size_t)width;
	float *floats = realloc(ws->floats, (n * (3 * PHOTO_WAVES + 3) + n + 2) * sizeof(float));
	if (!floats)
		return -ENOMEM;
	ws->floats = floats;
	JSAMPLE *out_row = realloc(ws->out_row, n * 4 * sizeof(JSAMPLE));
	if (!out_row)
		return -ENOMEM;
	ws->out_row = out_row;
	ws->col_sin = floats;
	ws->col_cos = ws->col_sin + n * PHOTO_WAVES;
	ws->wave = ws->col_cos + n * PHOTO_WAVES;
	ws->plane = ws->wave + n * PHOTO_WAVES;
	ws->grid = ws->plane + n * 3;
	ws->width_cap = width;
	return 0;
}

static void workspace_free(struct workspace *ws)
{
	free(ws->floats);
	free(ws->out_row);
	free(ws->dest.buf);
	memset(ws, 0, sizeof(*ws));
}

/* The waves are sin(fx*x + fy*y + phase) = sin(fx*x)cos(..) + cos(fx*x)sin(..):
 * the x halves are computed once per picture, the y halves once per row. */
static void scene_prepare_columns(const struct scene *sc, struct workspace *ws)
{
	if (sc->pattern != PATTERN_PHOTO)
		return;
	for (int w = 0; w < PHOTO_WAVES; w++) {
		float *s = ws->col_sin + (size_t)w * (size_t)ws->width_cap;
		float *co = ws->col_cos + (size_t)w * (size_t)ws->width_cap;
		for (int x = 0; x < sc->width; x++) {
			s[x] = sinf(sc->waves[w].fx * (float)x);
			co[x] = cosf(sc->waves[w].fx * (float)x);
		}
	}
}

/* Texture value at grid point (gx, gy), uniform in [-1, 1]. */
static float texture_at(uint64_t key, uint64_t gx, uint64_t gy)
{
	uint64_t state = key ^ (gx * 0xd6e8feb86659fd93ull) ^ (gy * 0xa0761d6478bd642full);
	return (float)(rng_next(&state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* One row of the photo pattern into ws->plane. This runs for every pixel of
 * every picture a --tree makes, so the inner loops multiply rather than
 * divide. */
static void photo_row(struct scene *sc, const struct workspace *ws, int y)
{
	size_t cap = (size_t)ws->width_cap;
	int width = sc->width;
	float fy_pos = (float)y;

	for (int w = 0; w < PHOTO_WAVES; w++) {
		const float *cs = ws->col_sin + w * cap, *cc = ws->col_cos + w * cap;
		float *wave = ws->wave + w * cap;
		float rs = sinf(sc->waves[w].fy * fy_pos + sc->waves[w].phase);
		float rc = cosf(sc->waves[w].fy * fy_pos + sc->waves[w].phase);
		for (int x = 0; x < width; x++)
			wave[x] = cs[x] * rc + cc[x] * rs;
	}
	for (int c = 0; c < 3; c++) {
		float *p = ws->plane + c * cap;
		float base = sc->base[c] + sc->slope_y[c] * fy_pos / (float)sc->height;
		float step = sc->slope_x[c] / (float)width;
		_Static_assert(PHOTO_WAVES == 2, "the loop below sums two waves");
		float a0 = sc->waves[0].amp[c], a1 = sc->waves[1].amp[c];
		const float *w0 = ws->wave, *w1 = ws->wave + cap;
		for (int x = 0; x < width; x++)
			p[x] = base + step * (float)x + a0 * w0[x] + a1 * w1[x];
	}

	/* Later shapes cover earlier ones, as objects in front would. */
	float pixel_y = fy_pos + 0.5f;
	for (int s = 0; s < sc->shape_count; s++) {
		const struct shape *sh = &sc->shapes[s];
		float dy = (pixel_y - sh->cy) / sh->ry;
		if (dy <= -1.0f || dy >= 1.0f)
			continue;
		float half = sh->ellipse ? sh->rx * sqrtf(1.0f - dy * dy) : sh->rx;
		int x0 = (int)ceilf(sh->cx - half - 0.5f);
		int x1 = (int)floorf(sh->cx + half - 0.5f);
		if (x0 < 0)
			x0 = 0;
		if (x1 > width - 1)
			x1 = width - 1;
		float light = 1.0f - sh->shade * dy;
		for (int c = 0; c < 3; c++) {
			float *p = ws->plane + c * cap, target = sh->color[c] * light;
			for (int x = x0; x <= x1; x++)
				p[x] += sh->alpha * (target - p[x]);
		}
	}

	/* Texture: interpolated down the grid columns once per row, then
	 * across the row per pixel (into the first wave row, done with). */
	int cell = sc->texture_cell;
	uint64_t gy = (uint64_t)(y / cell);
	float inv_cell = 1.0f / (float)cell;
	float ty = (float)(y % cell) * inv_cell;
	float *texture = ws->wave;
	for (int gx = 0; gx <= width / cell + 1; gx++) {
		float top = texture_at(sc->texture_key, (uint64_t)gx, gy);
		float bottom = texture_at(sc->texture_key, (uint64_t)gx, gy + 1);
		ws->grid[gx] = (top + (bottom - top) * ty) * sc->texture_amp;
	}
	for (int x0 = 0, gx = 0; x0 < width; x0 += cell, gx++) {
		float t = ws->grid[gx], dt = (ws->grid[gx + 1] - t) * inv_cell;
		for (int k = 0; k < cell && x0 + k < width; k++)
			texture[x0 + k] = t + dt * (float)k;
	}

	/* Grain, like a sensor's: mostly luma (triangular), a little chroma. */
	const float luma_scale = sc->noise_luma / 65535.0f;
	const float chroma_scale = sc->noise_chroma / 127.5f;
	float *r_plane = ws->plane, *g_plane = r_plane + cap, *b_plane = g_plane + cap;
	for (int x = 0; x < width; x++) {
		uint64_t r = rng_next(&sc->rng);
		float luma = ((float)(r & 0xffff) + (float)((r >> 16) & 0xffff)) * luma_scale - sc->noise_luma;
		float common = texture[x] + luma - sc->noise_chroma;
		r_plane[x] += common + (float)((r >> 32) & 0xff) * chroma_scale;
		g_plane[x] += common + (float)((r >> 40) & 0xff) * chroma_scale;
		b_plane[x] += common + (float)((r >> 48) & 0xff) * chroma_scale;
	}
}

/* The gradient pattern into ws->plane; the formula is in the file's
 * header comment, so tests can predict it. */
static void gradient_row(const struct scene *sc, const struct workspace *ws, int y)
{
	size_t cap = (size_t)ws->width_cap;
	float wspan = (float)(sc->width > 1 ? sc->width - 1 : 1);
	float hspan = (float)(sc->height > 1 ? sc->height - 1 : 1);
	float dspan = (float)(sc->width + sc->height > 2 ? sc->width + sc->height - 2 : 1);

	for (int x = 0; x < sc->width; x++) {
		ws->plane[x] = 255.0f * (float)x / wspan;
		ws->plane[cap + (size_t)x] = 255.0f * (float)y / hspan;
		ws->plane[2 * cap + (size_t)x] = 255.0f * (float)(x + y) / dspan;
	}
}

/* Rounded and clamped; ternaries rather than branches on a NaN-safe test
 * so that the compiler can use min/max instructions. */
static JSAMPLE to_sample(float v)
{
	v = v > 0.0f ? v : 0.0f;
	v = v < 255.0f ? v : 255.0f;
	return (JSAMPLE)(v + 0.5f);
}

static int color_components(enum color color)
{
	switch (color) {
	case COLOR_GRAY:
		return 1;
	case COLOR_CMYK:
	case COLOR_YCCK:
		return 4;
	case COLOR_RGB:
		break;
	}
	return 3;
}

/* One row of the picture in the encoder's input colour space. */
static void scene_row(struct scene *sc, const struct workspace *ws, enum color color, int y, JSAMPLE *out)
{
	int comps = color_components(color);

	if (sc->pattern == PATTERN_NOISE) {
		size_t n = (size_t)sc->width * (size_t)comps;
		for (size_t i = 0; i < n; i += 8) {
			uint64_t r = rng_next(&sc->rng);
			for (size_t k = i; k < n && k < i + 8; k++, r >>= 8)
				out[k] = (JSAMPLE)(r & 0xff);
		}
		return;
	}
	if (sc->pattern == PATTERN_GRADIENT)
		gradient_row(sc, ws, y);
	else
		photo_row(sc, ws, y);

	size_t cap = (size_t)ws->width_cap;
	const float *rp = ws->plane, *gp = rp + cap, *bp = gp + cap;
	if (color == COLOR_GRAY) {
		for (int x = 0; x < sc->width; x++)
			out[x] = to_sample(0.299f * rp[x] + 0.587f * gp[x] + 0.114f * bp[x]);
		return;
	}
	if (color == COLOR_RGB) {
		for (int x = 0; x < sc->width; x++) {
			out[x * 3 + 0] = to_sample(rp[x]);
			out[x * 3 + 1] = to_sample(gp[x]);
			out[x * 3 + 2] = to_sample(bp[x]);
		}
		return;
	}
	for (int x = 0; x < sc->width; x++) {
		JSAMPLE r = to_sample(rp[x]), g = to_sample(gp[x]), b = to_sample(bp[x]);
		/* Inverted (Adobe) CMYK: 255 is no ink. K carries the brightness
		 * and C, M, Y the colour, so that R = C*K/255 undoes it. Pure
		 * black has no colour to keep; it gets no coloured ink. */
		int k = r > g ? r : g;
		k = k > b ? k : b;
		JSAMPLE *q = &out[x * 4];
		if (k == 0) {
			q[0] = q[1] = q[2] = 255;
		} else {
			q[0] = (JSAMPLE)((r * 255 + k / 2) / k);
			q[1] = (JSAMPLE)((g * 255 + k / 2) / k);
			q[2] = (JSAMPLE)((b * 255 + k / 2) / k);
		}
		q[3] = (JSAMPLE)k;
	}
}

/* ---- compressing into memory ------------------------------------------- */

static void grow_dest_init(j_compress_ptr cinfo)
{
	struct grow_dest *d = (struct grow_dest *)cinfo->dest;
	d->pub.next_output_byte = d->buf;
	d->pub.free_in_buffer = d->cap;
	d->len = 0;
}

/* libjpeg calls this only when the whole buffer is full. */
static boolean grow_dest_empty(j_compress_ptr cinfo)
{
	struct grow_dest *d = (struct grow_dest *)cinfo->dest;
	size_t cap = d->cap * 2;
	JOCTET *buf = realloc(d->buf, cap);
	if (!buf)
		ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
	d->pub.next_output_byte = buf + d->cap;
	d->pub.free_in_buffer = cap - d->cap;
	d->buf = buf;
	d->cap = cap;
	return TRUE;
}

static void grow_dest_term(j_compress_ptr cinfo)
{
	struct grow_dest *d = (struct grow_dest *)cinfo->dest;
	d->len = d->cap - d->pub.free_in_buffer;
}

struct jpeg_failure {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	char message[JMSG_LENGTH_MAX];
};

/* libjpeg's default would exit(); we want the message, and main() to pick
 * the exit code. */
static void on_jpeg_error(j_common_ptr cinfo)
{
	struct jpeg_failure *f = (struct jpeg_failure *)cinfo->err;
	(*cinfo->err->format_message)(cinfo, f->message);
	longjmp(f->jump, 1);
}

/*
 * Compresses the picture spec describes into ws->dest (buf, len).
 * Returns 0, or -ENOMEM / -EIO with the encoder's words in why.
 */
static int encode(struct workspace *ws, const struct image_spec *spec, char *why, size_t why_cap)
{
	struct jpeg_compress_struct cinfo;
	struct jpeg_failure failure;
	struct scene sc;

	if (workspace_reserve(ws, spec->width) < 0) {
		snprintf(why, why_cap, "out of memory for a %d-pixel row", spec->width);
		return -ENOMEM;
	}
	if (!ws->dest.buf) {
		ws->dest.cap = 1 << 16;
		ws->dest.buf = malloc(ws->dest.cap);
		if (!ws->dest.buf) {
			ws->dest.cap = 0;
			snprintf(why, why_cap, "out of memory for the output buffer");
			return -ENOMEM;
		}
	}
	scene_init(&sc, spec->pattern, spec->seed, spec->width, spec->height);
	scene_prepare_columns(&sc, ws);

	cinfo.err = jpeg_std_error(&failure.pub);
	failure.pub.error_exit = on_jpeg_error;
	if (setjmp(failure.jump)) {
		snprintf(why, why_cap, "%s", failure.message);
		jpeg_destroy_compress(&cinfo);
		return -EIO;
	}
	jpeg_create_compress(&cinfo);
	ws->dest.pub.init_destination = grow_dest_init;
	ws->dest.pub.empty_output_buffer = grow_dest_empty;
	ws->dest.pub.term_destination = grow_dest_term;
	cinfo.dest = &ws->dest.pub;

	cinfo.image_width = (JDIMENSION)spec->width;
	cinfo.image_height = (JDIMENSION)spec->height;
	cinfo.input_components = color_components(spec->color);
	switch (spec->color) {
	case COLOR_GRAY:
		cinfo.in_color_space = JCS_GRAYSCALE;
		break;
	case COLOR_CMYK:
	case COLOR_YCCK:
		cinfo.in_color_space = JCS_CMYK;
		break;
	case COLOR_RGB:
		cinfo.in_color_space = JCS_RGB;
		break;
	}
	jpeg_set_defaults(&cinfo);
	if (spec->color == COLOR_YCCK)
		jpeg_set_colorspace(&cinfo, JCS_YCCK);
	jpeg_set_quality(&cinfo, spec->quality, TRUE);
	if (spec->color == COLOR_RGB || spec->color == COLOR_YCCK) {
		/* Chroma stays 1x1; luma (and K, which carries detail like luma)
		 * gets the factors. */
		for (int c = 0; c < cinfo.num_components; c++) {
			bool full = c == 0 || c == 3;
			cinfo.comp_info[c].h_samp_factor = full ? spec->luma_h : 1;
			cinfo.comp_info[c].v_samp_factor = full ? spec->luma_v : 1;
		}
	}
	if (spec->color == COLOR_CMYK || spec->color == COLOR_YCCK)
		cinfo.write_Adobe_marker = TRUE;
	if (spec->progressive)
		jpeg_simple_progression(&cinfo);
	cinfo.restart_in_rows = spec->restart_rows;

	jpeg_start_compress(&cinfo, TRUE);
	JSAMPROW row = ws->out_row;
	for (int y = 0; y < spec->height; y++) {
		scene_row(&sc, ws, spec->color, y, row);
		jpeg_write_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	return 0;
}

/*
 * Offset of the first entropy-coded byte: just past the first SOS segment.
 * Returns 0, or -EINVAL when the markers before it do not parse.
 */
static int find_scan_data(const JOCTET *buf, size_t len, size_t *offset)
{
	size_t pos = 2;

	if (len < 2 || buf[0] != 0xff || buf[1] != 0xd8)
		return -EINVAL;
	while (pos + 1 < len) {
		if (buf[pos] != 0xff)
			return -EINVAL;
		while (pos + 1 < len && buf[pos + 1] == 0xff) /* fill bytes */
			pos++;
		if (pos + 1 >= len)
			break;
		int marker = buf[pos + 1];
		if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) { /* no length */
			pos += 2;
			continue;
		}
		if (pos + 3 >= len)
			break;
		size_t seg = ((size_t)buf[pos + 2] << 8) | buf[pos + 3];
		if (seg < 2 || pos + 2 + seg > len)
			return -EINVAL;
		pos += 2 + seg;
		if (marker == 0xda) {
			*offset = pos;
			return 0;
		}
	}
	return -EINVAL;
}

/* The whole of buf into a new file at path. Returns 0 or -errno. */
static int write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	int err = 0;

	if (!f)
		return -errno;
	errno = 0;
	if (len && fwrite(buf, 1, len, f) != len)
		err = errno ? -errno : -EIO;
	errno = 0;
	if (fclose(f) != 0 && !err)
		err = errno ? -errno : -EIO;
	return err;
}

/* ---- arguments --------------------------------------------------------- */

static void print_usage(FILE *out)
{
	fputs("usage: mkjpeg OUT.jpg --width W --height H [--quality Q (90)] [--seed S (0)]\n"
	      "              [--pattern gradient|noise|photo (photo)] [--progressive]\n"
	      "              [--gray | --cmyk | --ycck] [--subsamp 444|422|420|440|411 (420)]\n"
	      "              [--restart ROWS] [--exif ORIENTATION] [--truncate BYTES]\n"
	      "              [--corrupt OFFSET]\n"
	      "       mkjpeg --tree ROOT --classes C --per-class N --min-side A --max-side B\n"
	      "              [--quality Q (90)] [--seed S (0)]\n"
	      "\n"
	      "  --exif ORIENTATION an Exif APP1 segment (orientation 1..8, a JPEG thumbnail)\n"
	      "                     first after SOI; the image's pixels are unchanged\n"
	      "  --corrupt OFFSET   xor 0x5a into the byte OFFSET bytes into the entropy-coded\n"
	      "                     data (after the first SOS segment), before EOI\n"
	      "  --truncate BYTES   keep the first BYTES bytes (fewer than the whole file)\n"
	      "  --tree             writes ROOT/class_XXX/img_YYYYY.jpg and prints\n"
	      "                     \"<count> files, <bytes> bytes\"\n"
	      "exit: 0 done, 2 bad arguments, 1 I/O or encoder failure\n",
	      out);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Says what is wrong with the arguments; returns the exit code for it. */
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("mkjpeg: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'mkjpeg --help'.\n", stderr);
	return EXIT_USAGE;
}

/* Decimal only, whole text, within [min, max]. Returns 0, or -EINVAL after
 * saying what is wrong. */
static int parse_u64(const char *name, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end = NULL;
	unsigned long long v = 0;

	errno = 0;
	if (*text >= '0' && *text <= '9') /* strtoull would take "-1" and " 1" */
		v = strtoull(text, &end, 10);
	if (!end || *end || errno || v < min || v > max) {
		usage_error("%s: expected a number from %" PRIu64 " to %" PRIu64 ", got '%s'", name, min, max, text);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_int(const char *name, const char *text, int min, int max, int *out)
{
	uint64_t v;
	int err = parse_u64(name, text, (uint64_t)min, (uint64_t)max, &v);
	if (err == 0)
		*out = (int)v;
	return err;
}

enum option {
	OPT_WIDTH, OPT_HEIGHT, OPT_QUALITY, OPT_SEED, OPT_PATTERN, OPT_PROGRESSIVE,
	OPT_GRAY, OPT_CMYK, OPT_YCCK, OPT_SUBSAMP, OPT_RESTART, OPT_TRUNCATE,
	OPT_CORRUPT, OPT_TREE, OPT_CLASSES, OPT_PER_CLASS, OPT_MIN_SIDE,
	OPT_MAX_SIDE, OPT_EXIF, OPT_HELP, OPT_COUNT
};

static const struct {
	const char *name;
	bool takes_value;
	enum { SINGLE_ONLY, TREE_ONLY, EITHER } mode;
} options[OPT_COUNT] = {
	[OPT_WIDTH] = { "--width", true, SINGLE_ONLY },
	[OPT_HEIGHT] = { "--height", true, SINGLE_ONLY },
	[OPT_QUALITY] = { "--quality", true, EITHER },
	[OPT_SEED] = { "--seed", true, EITHER },
	[OPT_PATTERN] = { "--pattern", true, SINGLE_ONLY },
	[OPT_PROGRESSIVE] = { "--progressive", false, SINGLE_ONLY },
	[OPT_GRAY] = { "--gray", false, SINGLE_ONLY },
	[OPT_CMYK] = { "--cmyk", false, SINGLE_ONLY },
	[OPT_YCCK] = { "--ycck", false, SINGLE_ONLY },
	[OPT_SUBSAMP] = { "--subsamp", true, SINGLE_ONLY },
	[OPT_RESTART] = { "--restart", true, SINGLE_ONLY },
	[OPT_TRUNCATE] = { "--truncate", true, SINGLE_ONLY },
	[OPT_CORRUPT] = { "--corrupt", true, SINGLE_ONLY },
	[OPT_TREE] = { "--tree", true, TREE_ONLY },
	[OPT_CLASSES] = { "--classes", true, TREE_ONLY },
	[OPT_PER_CLASS] = { "--per-class", true, TREE_ONLY },
	[OPT_MIN_SIDE] = { "--min-side", true, TREE_ONLY },
	[OPT_MAX_SIDE] = { "--max-side", true, TREE_ONLY },
	[OPT_EXIF] = { "--exif", true, SINGLE_ONLY },
	[OPT_HELP] = { "--help", false, EITHER },
};

/* What was asked for, before it is checked as a whole. */
struct request {
	const char *out_path, *tree_root;
	struct image_spec spec;
	bool seen[OPT_COUNT];
	uint64_t truncate_bytes, corrupt_offset;
	int classes, per_class, min_side, max_side;
	int exif_orientation;
};

static int parse_subsamp(const char *text, struct image_spec *spec)
{
	static const struct {
		const char *name;
		int h, v;
	} modes[] = { { "444", 1, 1 }, { "422", 2, 1 }, { "420", 2, 2 }, { "440", 1, 2 }, { "411", 4, 1 } };

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (strcmp(text, modes[i].name) == 0) {
			spec->luma_h = modes[i].h;
			spec->luma_v = modes[i].v;
			return 0;
		}
	return -EINVAL;
}

/* One option's value into the request. Returns 0, or the exit code after
 * saying what is wrong. */
static int apply_option(struct request *rq, enum option opt, const char *name, const char *value)
{
	struct image_spec *sp = &rq->spec;
	int err = 0;

	switch (opt) {
	case OPT_WIDTH:
		err = parse_int(name, value, 1, MAX_SIDE, &sp->width);
		break;
	case OPT_HEIGHT:
		err = parse_int(name, value, 1, MAX_SIDE, &sp->height);
		break;
	case OPT_QUALITY:
		err = parse_int(name, value, 1, 100, &sp->quality);
		break;
	case OPT_SEED:
		err = parse_u64(name, value, 0, UINT64_MAX, &sp->seed);
		break;
	case OPT_PATTERN:
		if (strcmp(value, "photo") == 0)
			sp->pattern = PATTERN_PHOTO;
		else if (strcmp(value, "gradient") == 0)
			sp->pattern = PATTERN_GRADIENT;
		else if (strcmp(value, "noise") == 0)
			sp->pattern = PATTERN_NOISE;
		else
			return usage_error("--pattern: expected gradient, noise or photo, got '%s'", value);
		break;
	case OPT_PROGRESSIVE:
		sp->progressive = true;
		break;
	case OPT_SUBSAMP:
		if (parse_subsamp(value, sp) < 0)
			return usage_error("--subsamp: expected 444, 422, 420, 440 or 411, got '%s'", value);
		break;
	case OPT_RESTART:
		err = parse_int(name, value, 1, 65535, &sp->restart_rows);
		break;
	case OPT_TRUNCATE:
		err = parse_u64(name, value, 0, UINT64_MAX, &rq->truncate_bytes);
		break;
	case OPT_CORRUPT:
		err = parse_u64(name, value, 0, UINT64_MAX, &rq->corrupt_offset);
		break;
	case OPT_TREE:
		if (!*value)
			return usage_error("--tree: empty directory name");
		rq->tree_root = value;
		break;
	case OPT_CLASSES:
		err = parse_int(name, value, 1, MAX_CLASSES, &rq->classes);
		break;
	case OPT_PER_CLASS:
		err = parse_int(name, value, 1, MAX_PER_CLASS, &rq->per_class);
		break;
	case OPT_MIN_SIDE:
		err = parse_int(name, value, 1, MAX_SIDE, &rq->min_side);
		break;
	case OPT_MAX_SIDE:
		err = parse_int(name, value, 1, MAX_SIDE, &rq->max_side);
		break;
	case OPT_EXIF:
		err = parse_int(name, value, 1, 8, &rq->exif_orientation);
		break;
	case OPT_GRAY: /* flags: seen[] is all they set */
	case OPT_CMYK:
	case OPT_YCCK:
	case OPT_HELP:
	case OPT_COUNT:
		break;
	}
	return err < 0 ? EXIT_USAGE : 0;
}

/* Returns 0; -1 after printing --help; or the exit code after saying what
 * is wrong. Accepts "--name value" and "--name=value". */
static int parse_args(int argc, char **argv, struct request *rq)
{
	memset(rq, 0, sizeof(*rq));
	rq->spec.quality = 90;
	rq->spec.pattern = PATTERN_PHOTO;
	rq->spec.luma_h = 2;
	rq->spec.luma_v = 2;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
			if (rq->out_path)
				return usage_error("%s: only one output file, already have '%s'", arg, rq->out_path);
			rq->out_path = arg;
			continue;
		}
		const char *eq = strchr(arg, '=');
		size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
		int opt = 0;
		while (opt < OPT_COUNT && (strlen(options[opt].name) != name_len ||
					   strncmp(options[opt].name, arg, name_len) != 0))
			opt++;
		if (opt == OPT_COUNT)
			return usage_error("%.*s: unknown option", (int)name_len, arg);
		const char *name = options[opt].name;
		if (opt == OPT_HELP) {
			print_usage(stdout);
			return -1;
		}
		const char *value = NULL;
		if (!options[opt].takes_value) {
			if (eq)
				return usage_error("%s: takes no value", name);
		} else if (eq) {
			value = eq + 1;
		} else if (i + 1 < argc) {
			value = argv[++i];
		} else {
			return usage_error("%s: missing value", name);
		}
		int code = apply_option(rq, (enum option)opt, name, value);
		if (code)
			return code;
		rq->seen[opt] = true;
	}
	return 0;
}

/* The request as a whole: required options, and ones that cannot mix. */
static int check_request(struct request *rq)
{
	bool tree = rq->seen[OPT_TREE];
	static const enum option single_needs[] = { OPT_WIDTH, OPT_HEIGHT };
	static const enum option tree_needs[] = { OPT_CLASSES, OPT_PER_CLASS, OPT_MIN_SIDE, OPT_MAX_SIDE };
	const enum option *needs = tree ? tree_needs : single_needs;
	size_t need_count = tree ? sizeof(tree_needs) / sizeof(tree_needs[0])
				 : sizeof(single_needs) / sizeof(single_needs[0]);

	for (int opt = 0; opt < OPT_COUNT; opt++) {
		if (!rq->seen[opt])
			continue;
		if (tree && options[opt].mode == SINGLE_ONLY)
			return usage_error("%s: not valid with --tree", options[opt].name);
		if (!tree && options[opt].mode == TREE_ONLY)
			return usage_error("%s: needs --tree", options[opt].name);
	}
	for (size_t i = 0; i < need_count; i++)
		if (!rq->seen[needs[i]])
			return usage_error("%s is required%s", options[needs[i]].name, tree ? " with --tree" : "");
	if (tree) {
		if (rq->out_path)
			return usage_error("%s: --tree takes no output file", rq->out_path);
		if (rq->min_side > rq->max_side)
			return usage_error("--min-side: %d is larger than --max-side %d", rq->min_side, rq->max_side);
		return 0;
	}

	if (!rq->out_path)
		return usage_error("no output file given");
	bool gray = rq->seen[OPT_GRAY], cmyk = rq->seen[OPT_CMYK], ycck = rq->seen[OPT_YCCK];
	if (gray + cmyk + ycck > 1)
		return usage_error("--gray, --cmyk and --ycck exclude each other");
	if (rq->seen[OPT_SUBSAMP] && (gray || cmyk))
		return usage_error("--subsamp: has no meaning with %s", gray ? "--gray" : "--cmyk");
	rq->spec.color = gray ? COLOR_GRAY : cmyk ? COLOR_CMYK : ycck ? COLOR_YCCK : COLOR_RGB;
	return 0;
}

/* ---- Exif ---------------------------------------------------------------- */

static void put16le(JOCTET *p, unsigned v)
{
	p[0] = (JOCTET)(v & 0xff);
	p[1] = (JOCTET)(v >> 8);
}

static void put32le(JOCTET *p, uint32_t v)
{
	put16le(p, v & 0xffff);
	put16le(p + 2, v >> 16);
}

/* One 12-byte IFD entry of a little-endian TIFF structure. */
static void put_ifd_entry(JOCTET *p, unsigned tag, unsigned type, uint32_t count, uint32_t value)
{
	put16le(p, tag);
	put16le(p + 2, type);
	put32le(p + 4, count);
	if (type == 3 && count == 1) { /* SHORT: left-justified in the field */
		put16le(p + 8, value);
		put16le(p + 10, 0);
	} else {
		put32le(p + 8, value);
	}
}

/*
 * The Exif APP1 segment --exif describes, whole (marker and length
 * included), into a new buffer: "Exif\0\0", a little-endian TIFF header,
 * IFD0 {Orientation}, IFD1 {JPEGInterchangeFormat, ...Length}, then the
 * thumbnail's bytes. Returns 0, or -ENOMEM / -EIO with why filled.
 */
static int exif_segment(const struct image_spec *spec, int orientation, JOCTET **out, size_t *out_len,
			char *why, size_t why_cap)
{
	struct workspace thumb_ws = { 0 };
	struct image_spec thumb = *spec;
	thumb.width = THUMB_WIDTH;
	thumb.height = THUMB_HEIGHT;
	thumb.progressive = false;
	thumb.restart_rows = 0;
	int err = encode(&thumb_ws, &thumb, why, why_cap);
	if (err < 0)
		goto free_thumb;

	enum { TIFF = 6, IFD0 = 8, IFD0_BYTES = 2 + 12 + 4, IFD1 = IFD0 + IFD0_BYTES,
	       IFD1_BYTES = 2 + 2 * 12 + 4, THUMB = IFD1 + IFD1_BYTES };
	size_t payload = TIFF + THUMB + thumb_ws.dest.len; /* after the length field */
	if (2 + payload > 0xffff) {
		snprintf(why, why_cap, "the Exif thumbnail is too large for one segment");
		err = -EIO;
		goto free_thumb;
	}
	JOCTET *seg = calloc(1, 4 + payload);
	if (!seg) {
		snprintf(why, why_cap, "out of memory for the Exif segment");
		err = -ENOMEM;
		goto free_thumb;
	}
	seg[0] = 0xff;
	seg[1] = 0xe1;
	seg[2] = (JOCTET)((2 + payload) >> 8);
	seg[3] = (JOCTET)((2 + payload) & 0xff);
	JOCTET *p = seg + 4;
	memcpy(p, "Exif\0\0", TIFF);
	JOCTET *tiff = p + TIFF; /* offsets below count from here */
	memcpy(tiff, "II*\0", 4);
	put32le(tiff + 4, IFD0);
	put16le(tiff + IFD0, 1);
	put_ifd_entry(tiff + IFD0 + 2, 0x0112, 3, 1, (uint32_t)orientation);
	put32le(tiff + IFD0 + 2 + 12, IFD1);
	put16le(tiff + IFD1, 2);
	put_ifd_entry(tiff + IFD1 + 2, 0x0201, 4, 1, THUMB);
	put_ifd_entry(tiff + IFD1 + 2 + 12, 0x0202, 4, 1, (uint32_t)thumb_ws.dest.len);
	put32le(tiff + IFD1 + 2 + 24, 0);
	memcpy(tiff + THUMB, thumb_ws.dest.buf, thumb_ws.dest.len);
	*out = seg;
	*out_len = 4 + payload;
free_thumb:
	workspace_free(&thumb_ws);
	return err;
}

/* ---- the two modes ------------------------------------------------------ */

static int run_single(struct request *rq)
{
	struct workspace ws = { 0 };
	char why[JMSG_LENGTH_MAX + 64];
	int code = 0;

	if (encode(&ws, &rq->spec, why, sizeof(why)) < 0) {
		fprintf(stderr, "mkjpeg: %s: %s\n", rq->out_path, why);
		code = EXIT_IO;
		goto free_workspace;
	}
	JOCTET *buf = ws.dest.buf;
	size_t len = ws.dest.len;
	if (rq->seen[OPT_EXIF]) {
		JOCTET *seg = NULL, *whole = NULL;
		size_t seg_len = 0;
		if (exif_segment(&rq->spec, rq->exif_orientation, &seg, &seg_len, why, sizeof(why)) < 0 ||
		    !(whole = malloc(len + seg_len))) {
			fprintf(stderr, "mkjpeg: %s: %s\n", rq->out_path, seg ? "out of memory" : why);
			free(seg);
			code = EXIT_IO;
			goto free_workspace;
		}
		memcpy(whole, buf, 2); /* SOI */
		memcpy(whole + 2, seg, seg_len);
		memcpy(whole + 2 + seg_len, buf + 2, len - 2);
		free(seg);
		free(ws.dest.buf);
		ws.dest.buf = buf = whole;
		ws.dest.cap = len = len + seg_len;
	}
	if (rq->seen[OPT_CORRUPT]) {
		size_t scan;
		if (find_scan_data(buf, len, &scan) < 0) {
			fprintf(stderr, "mkjpeg: %s: no scan found in the encoder's output\n", rq->out_path);
			code = EXIT_IO;
			goto free_workspace;
		}
		size_t scan_bytes = scan + 2 <= len ? len - 2 - scan : 0; /* EOI ends the file */
		if (rq->corrupt_offset >= scan_bytes) {
			fprintf(stderr, "mkjpeg: --corrupt: offset %" PRIu64 " is not inside the %zu bytes of entropy-coded data\n",
				rq->corrupt_offset, scan_bytes);
			code = EXIT_USAGE;
			goto free_workspace;
		}
		buf[scan + rq->corrupt_offset] ^= CORRUPT_XOR;
	}
	if (rq->seen[OPT_TRUNCATE]) {
		if (rq->truncate_bytes >= len) {
			fprintf(stderr, "mkjpeg: --truncate: %" PRIu64 " bytes is not less than the file's %zu\n",
				rq->truncate_bytes, len);
			code = EXIT_USAGE;
			goto free_workspace;
		}
		len = (size_t)rq->truncate_bytes;
	}
	int err = write_file(rq->out_path, buf, len);
	if (err < 0) {
		fprintf(stderr, "mkjpeg: %s: %s\n", rq->out_path, strerror(-err));
		code = EXIT_IO;
	}
free_workspace:
	workspace_free(&ws);
	return code;
}

/* mkdir -p: every missing directory along path. */
static int make_dirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char saved = buf[i];
		buf[i] = '\0';
		if (mkdir(buf, 0777) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = saved;
	}
	return 0;
}

static int run_tree(struct request *rq)
{
	struct workspace ws = { 0 };
	char path[4096], why[JMSG_LENGTH_MAX + 64];
	unsigned long long files = 0, bytes = 0;
	int code = 0, err;

	err = make_dirs(rq->tree_root);
	if (err < 0) {
		fprintf(stderr, "mkjpeg: %s: %s\n", rq->tree_root, strerror(-err));
		return EXIT_IO;
	}
	for (int cls = 0; cls < rq->classes; cls++) {
		int n = snprintf(path, sizeof(path), "%s/class_%03d", rq->tree_root, cls);
		if (n < 0 || (size_t)n >= sizeof(path) - sizeof("/img_00000.jpg")) {
			fprintf(stderr, "mkjpeg: %s: %s\n", rq->tree_root, strerror(ENAMETOOLONG));
			code = EXIT_IO;
			goto free_workspace;
		}
		if (mkdir(path, 0777) < 0 && errno != EEXIST) {
			fprintf(stderr, "mkjpeg: %s: %s\n", path, strerror(errno));
			code = EXIT_IO;
			goto free_workspace;
		}
		for (int idx = 0; idx < rq->per_class; idx++) {
			/* Each file from (seed, class, index) alone, so that a tree
			 * with more images per class keeps the files it shares with a
			 * smaller one. */
			uint64_t mix = ((uint64_t)cls << 32) | (uint64_t)idx;
			uint64_t rng = rq->spec.seed ^ rng_next(&mix);
			struct image_spec spec = rq->spec;
			unsigned span = (unsigned)(rq->max_side - rq->min_side) + 1;
			spec.width = rq->min_side + (int)(rng_next(&rng) % span);
			spec.height = rq->min_side + (int)(rng_next(&rng) % span);
			spec.seed = rng_next(&rng);

			snprintf(path + n, sizeof(path) - (size_t)n, "/img_%05d.jpg", idx);
			if (encode(&ws, &spec, why, sizeof(why)) < 0) {
				fprintf(stderr, "mkjpeg: %s: %s\n", path, why);
				code = EXIT_IO;
				goto free_workspace;
			}
			err = write_file(path, ws.dest.buf, ws.dest.len);
			if (err < 0) {
				fprintf(stderr, "mkjpeg: %s: %s\n", path, strerror(-err));
				code = EXIT_IO;
				goto free_workspace;
			}
			files++;
			bytes += ws.dest.len;
		}
	}
	printf("%llu files, %llu bytes\n", files, bytes);
free_workspace:
	workspace_free(&ws);
	return code;
}

int main(int argc, char **argv)
{
	struct request rq;
	int code;

	if (argc < 2) {
		print_usage(stderr);
		return EXIT_USAGE;
	}
	code = parse_args(argc, argv, &rq);
	if (code)
		return code < 0 ? 0 : code;
	code = check_request(&rq);
	if (code)
		return code;
	return rq.tree_root ? run_tree(&rq) : run_single(&rq);
}
