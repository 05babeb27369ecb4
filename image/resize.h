/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resize: the antialiased resampler of image pipelines. Takes a box of an
 * RGB image (uint8, 3 bytes per pixel, interleaved) and writes it resampled
 * to out_w x out_h, optionally mirrored.
 *
 * Filter: PIL's ImagingResample with the BILINEAR (triangle) filter, which
 * is what torchvision.transforms.functional.resize(antialias=True) runs.
 * Separable; along an axis with box [start, start + len) resampled to n
 * outputs, scale = len / n and output i has
 *   center  = start + (i + 0.5) * scale
 *   support = max(scale, 1)                  (triangle of radius 1, widened
 *                                             by the downscale factor)
 *   taps    j in [floor(center - support + 0.5), floor(center + support + 0.5))
 *           clipped to the image, as PIL clips them
 *   weight  tri((j + 0.5 - center) / max(scale, 1)), tri(t) = max(0, 1 - |t|),
 *           normalised to sum 1 over the taps kept.
 * Taps may lie outside the box: a box inside the image reads the pixels
 * around it, like PIL's resize(box=...), so a box resize computes what
 * torchvision's resize of the whole image followed by a crop computes.
 *
 * Outside the image: an output pixel whose center lies outside the image
 * (center < 0 or center > src size, on either axis) is 0, black; every
 * other output pixel is computed as above, from image pixels only. That
 * is torchvision's resize followed by center_crop's zero padding: the
 * padding is whole output pixels of black, and the pixels next to it do
 * not blend with it.
 *
 * Precision: weights and the intermediate image between the two passes are
 * float, and the only rounding is the final one (half up, like PIL's). PIL
 * uses 22-bit fixed-point weights and rounds the intermediate to uint8, so
 * it can differ from this by one level; this is closer to the exact result
 * (see tests/unit/test_resize.c).
 *
 * Cost: only the source rows and columns the taps reach are read. The pass
 * order (vertical then horizontal, or the reverse) is picked per call from
 * the tap tables to do the least work; the result does not depend on it
 * beyond float rounding.
 *
 * Threads: a call touches only its arguments; one scratch per thread.
 */
#ifndef LDR_IMAGE_RESIZE_H
#define LDR_IMAGE_RESIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Caller-owned working memory (tap tables, row buffers), grown as needed
 * and kept between calls so steady-state calls allocate nothing.
 * Zero-initialise before the first call; release with rs_scratch_free.
 * The fields are the resampler's own. */
struct rs_scratch {
	void *tables;
	size_t tables_bytes;
	float *rows;
	size_t rows_bytes;
};

/*
 * Resamples the box (x, y, w, h), in source pixels, of the src_w x src_h
 * image at src (rows src_stride bytes apart) into the out_w x out_h image
 * at dst (rows dst_stride bytes apart; only the first 3 * out_w bytes of
 * each row are written). The box may extend beyond the image (see above).
 * flip mirrors the output horizontally: output column i gets what column
 * out_w - 1 - i would have had.
 *
 * Returns 0; -EINVAL for a NULL pointer, a zero size, w or h <= 0, a
 * non-finite box, or a stride shorter than 3 bytes per pixel; -ENOMEM when
 * the scratch cannot grow (dst is then untouched).
 */
int rs_resize_rgb(const uint8_t *src, uint32_t src_w, uint32_t src_h, size_t src_stride,
		  double x, double y, double w, double h,
		  uint8_t *dst, uint32_t out_w, uint32_t out_h, size_t dst_stride,
		  bool flip, struct rs_scratch *s);

/* Frees what the scratch holds and zeroes it; accepts a zeroed scratch. */
void rs_scratch_free(struct rs_scratch *s);

#endif
