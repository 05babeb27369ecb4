/* SPDX-License-Identifier: Apache-2.0 */
/*
 * peek: renders one batch of an image pipeline as a PNG contact sheet
 * (`loaderctl peek`; internal to loaderctl).
 *
 * The sheet is a grid of `columns` x `tile_rows` tiles on a dark background
 * (PEEK_BACKGROUND), one tile per image in batch order, left to right then
 * top to bottom. Geometry, in pixels, for images of W x H:
 *
 *     width  = PEEK_GAP + columns   * (W + PEEK_GAP)
 *     height = PEEK_GAP + tile_rows * (H + strip + PEEK_GAP)
 *
 * where strip is PEEK_LABEL_HEIGHT when the batch has labels, else 0. The
 * strip under a tile holds the label in decimal in a 5x7 bitmap font (the
 * glyph table in peek.c), white, scaled x2 (x1 when that is wider than the
 * tile, then clipped at the tile's right edge), centred on the tile (the
 * integer part of half the spare width to its left), its top PEEK_LABEL_PAD
 * pixels under the image (x1: centred in the rows x2 takes); glyphs
 * advance 6 font columns.
 *
 * Pixels: uint8 images as they are. Float images (normalised by the
 * pipeline as (x/255 - mean)/std, which the client does not know) are
 * mapped per channel linearly from the batch's minimum..maximum of that
 * channel to 0..255 (rounded; NaN is 0, infinities clamp; a channel
 * with one value throughout is 128).
 *
 * Nothing here logs: failures return -errno, with the reason (naming the
 * file) in `err`.
 */
#ifndef LDR_CLIENT_PEEK_H
#define LDR_CLIENT_PEEK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loaderd.h"

#define PEEK_GAP 4               /* between tiles and around the sheet */
#define PEEK_LABEL_PAD 2         /* between a tile and its label's glyphs */
#define PEEK_LABEL_HEIGHT 18     /* the pad, 7 x 2 glyph rows, 2 under them */
#define PEEK_BACKGROUND 32       /* grey level of gaps and label strips */
#define PEEK_COLUMNS_DEFAULT_MAX 16 /* default columns: ceil(sqrt(B)), at most this */
#define PEEK_SHEET_MAX 1000000   /* pixels per side (libpng's default limit) */

/* One batch's images, found in its tensors; points into the batch. */
struct peek_image {
	enum ldr_dtype dtype;  /* LDR_UINT8, LDR_FLOAT16 or LDR_FLOAT32 */
	bool nhwc;             /* [B, H, W, 3], else [B, 3, H, W] */
	unsigned count;        /* images: the batch's rows */
	unsigned height, width;
	const void *pixels;    /* count * 3 * height * width elements */
	const void *labels;    /* count int64 labels, or NULL: tiles without labels */
};

/* The grid of a sheet. */
struct peek_sheet {
	unsigned columns, tile_rows;
	unsigned width, height; /* pixels */
};

/* A PNG being written to PATH.tmp-PID, renamed to PATH once complete. */
struct peek_output {
	char *path;
	char *tmp_path;
	FILE *f;
};

/* Finds tensor "image" (rank 4, 3 channels, uint8/float16/float32) and,
 * when present as int64 [B], "label" in batch b (host delivery), checking
 * their sizes.
 * -ENOENT: no rank-4 "image"; -EINVAL: one peek cannot show. */
int peek_find_image(const struct ldr_batch *b, struct peek_image *img);

/* Lays out img's tiles in `columns` columns (0: the default; more than the
 * images: one row). -EFBIG when the sheet would exceed PEEK_SHEET_MAX. */
int peek_layout(const struct peek_image *img, unsigned columns, struct peek_sheet *s);

/* Creates PATH.tmp-PID for writing (before the batch is fetched, so that
 * an unwritable path fails first). 0 or -errno; -EEXIST when PATH exists
 * and is not a regular file (the rename would replace it: a device, a
 * directory, a symbolic link). */
int peek_output_open(struct peek_output *o, const char *path, char *err, size_t err_cap);

/* Renders the sheet into the temporary file, closes it and renames it to
 * PATH. On failure the temporary file is removed. 0 or -errno. */
int peek_output_commit(struct peek_output *o, const struct peek_image *img,
		       const struct peek_sheet *s, char *err, size_t err_cap);

/* Removes the temporary file if it is still there, frees o. Accepts an
 * output never opened (zeroed) or already committed. */
void peek_output_discard(struct peek_output *o);

#endif
