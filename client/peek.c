/* SPDX-License-Identifier: Apache-2.0 */
/* peek: one image batch as a PNG contact sheet, through libpng (peek.h). */
#include "peek.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errtext.h"

#define GLYPH_COLS 5
#define GLYPH_ROWS 7
#define GLYPH_ADVANCE 6     /* font columns from one glyph to the next */
#define LABEL_SCALE 2
#define LABEL_CHARS 21      /* "-9223372036854775808" and its NUL */
#define IMAGE_SIDE_MAX 65536u
#define PNG_COMPRESSION 3   /* zlib level: a contact sheet is looked at once */

/* 5x7 glyphs of '0'..'9' and '-', a row per byte, bit 4 the leftmost
 * column. tests/integration/test_peek.py renders labels from a copy. */
static const uint8_t glyphs[11][GLYPH_ROWS] = {
	{ 0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e }, /* 0 */
	{ 0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e }, /* 1 */
	{ 0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f }, /* 2 */
	{ 0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e }, /* 3 */
	{ 0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02 }, /* 4 */
	{ 0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e }, /* 5 */
	{ 0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e }, /* 6 */
	{ 0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08 }, /* 7 */
	{ 0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e }, /* 8 */
	{ 0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c }, /* 9 */
	{ 0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00 }, /* - */
};

_Static_assert(PEEK_LABEL_HEIGHT == PEEK_LABEL_PAD + GLYPH_ROWS * LABEL_SCALE + 2,
	       "the label strip is the pad, the glyphs at scale 2 and 2 rows");

/* Per channel mapping of float pixels to 0..255 (unused for uint8). */
struct channel_ranges {
	double min[3], max[3];
};

/* What the libpng callbacks report back (through png_get_error_ptr / _io_ptr). */
struct png_sink {
	FILE *f;
	int write_errno; /* a failed write's errno, else 0 */
	char message[128]; /* libpng's own error text */
};

static const struct ldr_tensor *find_tensor(const struct ldr_batch *b, const char *name)
{
	for (unsigned t = 0; t < b->n_tensors && t < LDR_TENSORS_MAX; t++)
		if (strncmp(b->tensors[t].name, name, sizeof b->tensors[t].name) == 0)
			return &b->tensors[t];
	return NULL;
}

int peek_find_image(const struct ldr_batch *b, struct peek_image *img)
{
	const struct ldr_tensor *t = find_tensor(b, "image");
	if (!t || t->ndim != 4)
		return -ENOENT;
	/* [B, 3, H, W] unless only the last dimension is 3 (a 3x3 image in
	 * either layout reads as nchw, loaderd's default). */
	bool nhwc = t->shape[1] != 3 && t->shape[3] == 3;
	int64_t h = nhwc ? t->shape[1] : t->shape[2], w = nhwc ? t->shape[2] : t->shape[3];
	size_t elem = t->dtype == LDR_UINT8 ? 1 : t->dtype == LDR_FLOAT16 ? 2 :
		      t->dtype == LDR_FLOAT32 ? 4 : 0;
	if (elem == 0 || (t->shape[1] != 3 && !nhwc) || b->rows == 0 || t->shape[0] != b->rows ||
	    h < 1 || w < 1 || h > IMAGE_SIDE_MAX || w > IMAGE_SIDE_MAX)
		return -EINVAL;
	size_t image_bytes = elem * 3 * (size_t)h * (size_t)w; /* < 2^36: no overflow */
	if (t->bytes % image_bytes != 0 || t->bytes / image_bytes != b->rows)
		return -EINVAL;
	*img = (struct peek_image){ .dtype = t->dtype, .nhwc = nhwc, .count = b->rows,
				    .height = (unsigned)h, .width = (unsigned)w, .pixels = t->data };
	const struct ldr_tensor *l = find_tensor(b, "label");
	if (l && l->dtype == LDR_INT64 && l->ndim == 1 && l->shape[0] == b->rows &&
	    l->bytes == (size_t)b->rows * sizeof(int64_t))
		img->labels = l->data;
	return 0;
}

int peek_layout(const struct peek_image *img, unsigned columns, struct peek_sheet *s)
{
	if (columns == 0) {
		columns = 1;
		while ((uint64_t)columns * columns < img->count && columns < PEEK_COLUMNS_DEFAULT_MAX)
			columns++;
	}
	if (columns > img->count)
		columns = img->count;
	unsigned tile_rows = (img->count + columns - 1) / columns;
	uint64_t cell_h = img->height + (img->labels ? PEEK_LABEL_HEIGHT : 0);
	uint64_t width = PEEK_GAP + (uint64_t)columns * (img->width + PEEK_GAP);
	uint64_t height = PEEK_GAP + (uint64_t)tile_rows * (cell_h + PEEK_GAP);
	if (width > PEEK_SHEET_MAX || height > PEEK_SHEET_MAX)
		return -EFBIG;
	*s = (struct peek_sheet){ .columns = columns, .tile_rows = tile_rows,
				  .width = (unsigned)width, .height = (unsigned)height };
	return 0;
}

/* IEEE 754 binary16 to float: subnormals, infinities and NaN included. */
static float float_from_half(uint16_t h)
{
	unsigned exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	float v;
	if (exp == 0)
		v = ldexpf((float)mant, -24);
	else if (exp == 0x1f)
		v = mant ? NAN : INFINITY;
	else
		v = ldexpf((float)(mant | 0x400u), (int)exp - 25);
	return (h & 0x8000u) ? -v : v;
}

/* Element `at` of a float image (read with memcpy: the client does not
 * promise the tensor's alignment). */
static float float_at(const struct peek_image *img, size_t at)
{
	if (img->dtype == LDR_FLOAT16) {
		uint16_t h;
		memcpy(&h, (const uint8_t *)img->pixels + 2 * at, sizeof h);
		return float_from_half(h);
	}
	float f;
	memcpy(&f, (const uint8_t *)img->pixels + 4 * at, sizeof f);
	return f;
}

/* Element index of (image i, channel ch, row y, column x). */
static size_t element_at(const struct peek_image *img, size_t i, unsigned ch, unsigned y,
			 unsigned x)
{
	size_t h = img->height, w = img->width;
	if (img->nhwc)
		return ((i * h + y) * w + x) * 3 + ch;
	return ((i * 3 + ch) * h + y) * w + x;
}

/* The finite minimum and maximum of each channel over the whole batch. */
static void measure_channels(const struct peek_image *img, struct channel_ranges *r)
{
	for (unsigned ch = 0; ch < 3; ch++) {
		r->min[ch] = INFINITY;
		r->max[ch] = -INFINITY;
	}
	if (img->dtype == LDR_UINT8)
		return;
	size_t n = (size_t)img->count * 3 * img->height * img->width;
	for (size_t at = 0; at < n; at++) {
		/* Channel of element `at`: the innermost index in nhwc, else
		 * the index of its H x W plane modulo 3. */
		unsigned ch = img->nhwc ? at % 3 : (at / ((size_t)img->height * img->width)) % 3;
		float v = float_at(img, at);
		if (!isfinite(v))
			continue;
		r->min[ch] = fmin(r->min[ch], v);
		r->max[ch] = fmax(r->max[ch], v);
	}
}

static uint8_t pixel_at(const struct peek_image *img, const struct channel_ranges *r, size_t at,
			unsigned ch)
{
	if (img->dtype == LDR_UINT8)
		return ((const uint8_t *)img->pixels)[at];
	double v = float_at(img, at);
	if (isnan(v))
		return 0;
	if (!(r->max[ch] > r->min[ch]))
		return 128;
	double level = floor((v - r->min[ch]) * 255.0 / (r->max[ch] - r->min[ch]) + 0.5);
	return (uint8_t)fmax(0.0, fmin(255.0, level));
}

/* Row `y` (0..PEEK_LABEL_HEIGHT) of a label strip, drawn into the tile's
 * `width` pixels at `out`. */
static void draw_label_row(uint8_t *out, unsigned width, int64_t label, unsigned y)
{
	char text[LABEL_CHARS];
	int n = snprintf(text, sizeof text, "%" PRId64, label);
	unsigned chars = n > 0 ? (unsigned)n : 0;
	unsigned scale = chars * GLYPH_ADVANCE * LABEL_SCALE - LABEL_SCALE <= width ? LABEL_SCALE : 1;
	unsigned text_w = chars * GLYPH_ADVANCE * scale - scale;
	unsigned top = PEEK_LABEL_PAD + (GLYPH_ROWS * LABEL_SCALE - GLYPH_ROWS * scale) / 2;
	if (y < top || y >= top + GLYPH_ROWS * scale)
		return;
	unsigned glyph_row = (y - top) / scale;
	unsigned left = text_w < width ? (width - text_w) / 2 : 0;
	for (unsigned c = 0; c < chars; c++) {
		const uint8_t *g = glyphs[text[c] == '-' ? 10 : text[c] - '0'];
		for (unsigned gx = 0; gx < GLYPH_COLS * scale; gx++) {
			unsigned x = left + (c * GLYPH_ADVANCE) * scale + gx;
			if (x >= width)
				return;
			if (g[glyph_row] & (0x10u >> (gx / scale)))
				memset(out + 3 * (size_t)x, 255, 3);
		}
	}
}

/* Sheet row y as RGB into `row` (3 * s->width bytes). */
static void render_row(const struct peek_image *img, const struct peek_sheet *s,
		       const struct channel_ranges *r, unsigned y, uint8_t *row)
{
	memset(row, PEEK_BACKGROUND, 3 * (size_t)s->width);
	unsigned cell_h = img->height + (img->labels ? PEEK_LABEL_HEIGHT : 0);
	if (y < PEEK_GAP)
		return;
	unsigned tile_row = (y - PEEK_GAP) / (cell_h + PEEK_GAP);
	unsigned in_cell = (y - PEEK_GAP) % (cell_h + PEEK_GAP);
	if (tile_row >= s->tile_rows || in_cell >= cell_h)
		return;
	for (unsigned col = 0; col < s->columns; col++) {
		size_t i = (size_t)tile_row * s->columns + col;
		if (i >= img->count)
			break;
		uint8_t *out = row + 3 * ((size_t)PEEK_GAP + (size_t)col * (img->width + PEEK_GAP));
		if (in_cell >= img->height) {
			int64_t label;
			memcpy(&label, (const uint8_t *)img->labels + i * sizeof label, sizeof label);
			draw_label_row(out, img->width, label, in_cell - img->height);
			continue;
		}
		for (unsigned x = 0; x < img->width; x++)
			for (unsigned ch = 0; ch < 3; ch++)
				out[3 * x + ch] = pixel_at(img, r, element_at(img, i, ch, in_cell, x), ch);
	}
}

static void on_png_error(png_structp png, png_const_charp message)
{
	struct png_sink *sink = png_get_error_ptr(png);
	errtext(sink->message, sizeof sink->message, 0, "%s", message);
	png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp message)
{
	(void)png;
	(void)message; /* nothing libpng warns about when writing changes the file */
}

static void on_png_write(png_structp png, png_bytep data, size_t bytes)
{
	struct png_sink *sink = png_get_io_ptr(png);
	errno = 0;
	if (fwrite(data, 1, bytes, sink->f) != bytes) {
		sink->write_errno = errno ? errno : EIO;
		png_error(png, "write failed");
	}
}

static void on_png_flush(png_structp png)
{
	(void)png; /* the file is flushed and checked when it is closed */
}

/* Writes the whole sheet as an 8-bit RGB PNG to sink->f. 0 or -errno. */
static int write_png(struct png_sink *sink, const struct peek_image *img,
		     const struct peek_sheet *s)
{
	struct channel_ranges ranges;
	measure_channels(img, &ranges);
	uint8_t *row = malloc(3 * (size_t)s->width);
	if (!row)
		return -ENOMEM;
	int rc = -ENOMEM;
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, sink, on_png_error,
						  on_png_warning);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	if (!info)
		goto destroy_png;
	/* A libpng error longjmps back here. Of the locals changed between
	 * here and the last png call, none is read after that (only y is
	 * changed), so none needs to be volatile (C17 7.13.2.1). */
	if (setjmp(png_jmpbuf(png))) {
		rc = sink->write_errno ? -sink->write_errno : -EIO;
		goto destroy_png;
	}
	png_set_write_fn(png, sink, on_png_write, on_png_flush);
	png_set_compression_level(png, PNG_COMPRESSION);
	png_set_IHDR(png, info, s->width, s->height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	for (unsigned y = 0; y < s->height; y++) {
		render_row(img, s, &ranges, y, row);
		png_write_row(png, row);
	}
	png_write_end(png, NULL);
	rc = 0;
destroy_png:
	png_destroy_write_struct(&png, &info);
	free(row);
	return rc;
}

int peek_output_open(struct peek_output *o, const char *path, char *err, size_t err_cap)
{
	*o = (struct peek_output){ 0 };
	/* The rename would replace whatever is there: a device, a FIFO or a
	 * symbolic link (/dev/stdout) must not become a PNG. */
	struct stat st;
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return errtext(err, err_cap, -EEXIST, "%s: exists and is not a regular file", path);
	size_t cap = strlen(path) + 32;
	o->path = strdup(path);
	o->tmp_path = malloc(cap);
	if (!o->path || !o->tmp_path) {
		peek_output_discard(o);
		return errtext(err, err_cap, -ENOMEM, "out of memory");
	}
	snprintf(o->tmp_path, cap, "%s.tmp-%ld", path, (long)getpid());
	/* O_EXCL: never through a link, never into a file already there (one
	 * a killed run of the same pid left is named in the error). */
	int fd = open(o->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0 || !(o->f = fdopen(fd, "wb"))) {
		int errno_open = errno;
		if (fd >= 0)
			close(fd);
		errtext(err, err_cap, -errno_open, "%s: %s", errno_open == EEXIST ? o->tmp_path : path,
			strerror(errno_open));
		if (fd < 0) {
			free(o->tmp_path);
			o->tmp_path = NULL; /* not ours: nothing to remove */
		}
		peek_output_discard(o);
		return -errno_open;
	}
	return 0;
}

int peek_output_commit(struct peek_output *o, const struct peek_image *img,
		       const struct peek_sheet *s, char *err, size_t err_cap)
{
	struct png_sink sink = { .f = o->f };
	int rc = write_png(&sink, img, s);
	if (rc < 0 && !sink.write_errno && sink.message[0]) {
		errtext(err, err_cap, rc, "%s: libpng: %s", o->tmp_path, sink.message);
		goto remove_tmp;
	}
	if (rc < 0) {
		errtext(err, err_cap, rc, "%s: %s", o->tmp_path, strerror(-rc));
		goto remove_tmp;
	}
	FILE *f = o->f;
	o->f = NULL;
	if (fclose(f) != 0) {
		rc = errtext(err, err_cap, -errno, "%s: %s", o->tmp_path, strerror(errno));
		goto remove_tmp;
	}
	if (rename(o->tmp_path, o->path) < 0) {
		rc = errtext(err, err_cap, -errno, "%s: %s", o->path, strerror(errno));
		goto remove_tmp;
	}
	free(o->tmp_path);
	o->tmp_path = NULL; /* renamed: nothing left to remove */
	return 0;
remove_tmp:
	peek_output_discard(o);
	return rc;
}

void peek_output_discard(struct peek_output *o)
{
	if (o->f)
		fclose(o->f);
	if (o->tmp_path)
		unlink(o->tmp_path);
	free(o->tmp_path);
	free(o->path);
	*o = (struct peek_output){ 0 };
}
