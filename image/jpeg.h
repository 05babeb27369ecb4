/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jpeg: JPEG decoding for image pipelines, through libjpeg-turbo's libjpeg
 * API, where the work per image follows the output size rather than the
 * file size: a call decodes only the box of the image a sample needs, at
 * the smallest DCT scale (1/8, 2/8, 4/8 or 8/8) that still gives the
 * resampler at least as many pixels as it outputs (or, by the caller's
 * choice, always at 8/8), and only the rows and columns that box (plus the
 * filter's margin) covers.
 *
 * Input is untrusted. No file, however broken, crashes, hangs or leaks:
 * every libjpeg error and every libjpeg warning about the data ends the
 * call with a -errno and a message (warnings too, because libjpeg would
 * otherwise carry on and pad what it could not decode with gray). Limits:
 * the caller's pixel count (checked right after the header, before any
 * large allocation), a memory ceiling for libjpeg derived from the image's
 * dimensions, at most JD_MAX_SCANS scans (a progressive file with
 * thousands of scans is the known way to make a small file cost minutes),
 * and the caller's cap on CPU time per decode (jd_scratch.max_cpu_ms).
 *
 * Pure: no I/O, no logging, no global state. Messages never name the file;
 * the caller, which knows the path, prefixes it and logs once.
 *
 * Threads: calls touch only their arguments. One jd_scratch per thread
 * (or per caller that serialises its calls).
 */
#ifndef LDR_IMAGE_JPEG_H
#define LDR_IMAGE_JPEG_H

#include <stddef.h>
#include <stdint.h>

/* Scans a file may have. libjpeg's simple progression writes 10 (6 for
 * grayscale); only a progression that sends coefficients one at a time in
 * successive-approximation steps, which no encoder in use does, comes near
 * this (several hundred scans per component). */
#define JD_MAX_SCANS 500

/* How jd_decode_box picks its DCT scale (config decode_scale). */
enum jd_scale {
	/* The smallest scale that gives the resampler enough pixels, raised
	 * where a subsampled chroma would lose resolution the output needs
	 * (jd_decode_box, "Scale"). */
	JD_SCALE_FAST = 0,
	/* Always 8/8: the pixels a full decode has, which is what torchvision
	 * and Pillow resample. */
	JD_SCALE_FULL = 1,
};

/* Working memory, owned by the caller: zero-initialise, pass to every call,
 * release with jd_scratch_free. It grows to the largest region decoded and
 * is reused, so steady-state calls make no large allocation of their own.
 * buf and cap are the decoder's own; the rest is the caller's choice:
 * max_cpu_ms, its limit on the CPU time (of the calling thread) one
 * jd_decode_box call may take, 0 for none: the cap that no file, whatever
 * its scans and size within max_pixels, can make a decode exceed; scale,
 * an enum jd_scale (JD_SCALE_FAST when zeroed; any other value than
 * JD_SCALE_FULL counts as fast). */
struct jd_scratch {
	uint8_t *buf;
	size_t cap;
	uint32_t max_cpu_ms;
	uint32_t scale;
};

/*
 * A decoded region. rgb points into the scratch and stays valid until the
 * next call with that scratch or jd_scratch_free. Pixels are RGB, 3 bytes,
 * interleaved; rows are stride bytes apart (stride >= 3 * w).
 *
 * Coordinates: the image was decoded at sx decoded pixels per source pixel
 * across and sy down (sx == sy == M/8); rgb[0] is decoded pixel (x0, y0).
 * A box (x, y, w, h) in source pixels is therefore, in rgb's own
 * coordinates, (x * sx - x0, y * sy - y0, w * sx, h * sy).
 */
struct jd_image {
	const uint8_t *rgb;
	uint32_t w, h;
	size_t stride;
	double sx, sy; /* decoded px per source px, x and y */
	int32_t x0, y0; /* origin of rgb in decoded-image px */
};

/*
 * Reads the header of the JPEG in data[0..len) and stores its size in
 * source pixels in *w and *h. On failure writes a message (without a file
 * name) into err[0..err_cap) when err_cap > 0, and returns:
 *   -ENODATA  len == 0 ("empty file"), or the data ends before the header
 *             does ("truncated")
 *   -EBADMSG  not a JPEG, or a corrupt header (libjpeg's message)
 *   -ENOMEM   out of memory
 *   -EINVAL   a NULL pointer
 * Cheap: allocates a few kilobytes inside libjpeg and reads no entropy data.
 */
int jd_header(const uint8_t *data, size_t len, uint32_t *w, uint32_t *h, char *err,
	      size_t err_cap);

/*
 * Decodes the part of the JPEG in data[0..len) that the box (x, y, w, h),
 * in full-resolution source pixels, covers, for a resampler that will make
 * out_w x out_h pixels of that box. The box may extend beyond the image.
 *
 * Scale: with s->scale JD_SCALE_FULL, M = 8. Otherwise (fast) first M0,
 * the smallest M in {1, 2, 4, 8} with w * M/8 >= out_w and h * M/8 >=
 * out_h (jd_pick_scale; 8 when even that falls short: upscaling); then M0
 * doubled (up to 8) until every component has, along each axis, at least
 * min(M0/8, its own sampling ratio) samples per source pixel. libjpeg-turbo
 * decodes a chroma subsampled 2x2 (4:2:0) at twice the luma's scale, so
 * it keeps what the output needs of it, but one subsampled 2x1 or 1x2
 * (4:2:2, 4:4:0) at the luma's scale, upsampled afterwards, which halves
 * its resolution along that axis: those files are decoded at 2 M0 (4:1:1
 * at up to 4 M0), which costs about a fifth more time per image.
 *
 * Region: the box at that scale, widened on each side by the resampling
 * filter's reach (image/resize.h: a triangle of radius max(1, scale) with
 * scale = box span / output size, which reaches max(1, scale)/2 + 1/2
 * pixels past the box; never less than 2 pixels), rounded out to whole
 * pixels and clipped to the image. A box wholly outside the image still
 * yields at least the one row or column on the nearest edge.
 *
 * Pixels are exactly those a full decode at the same scale has there
 * (libjpeg defaults: JDCT_ISLOW, fancy upsampling), with interblock
 * smoothing off, which only changes progressive files that never send the
 * low AC coefficients in full (see jpeg.c). Grayscale becomes R = G = B;
 * CMYK and YCCK become RGB as jpeg.c describes.
 *
 * max_pixels: the caller's limit on width * height of the source image
 * (config max_image_pixels), checked before anything large is allocated.
 *
 * Returns 0 and fills *out, or, with a message in err as for jd_header:
 *   -EINVAL   a NULL pointer, out_w or out_h 0, w or h not > 0, or a
 *             coordinate that is not finite
 *   -ENODATA  empty, or truncated before the end of the header
 *   -EFBIG    width * height > max_pixels
 *             ("W x H pixels, over max_image_pixels N")
 *   -EBADMSG  not a JPEG; corrupt header or data; data that ends early
 *             ("premature end of data"); any libjpeg warning about corrupt
 *             data ("Corrupt JPEG data: ..."); a color space other than
 *             grayscale, YCbCr, RGB, CMYK or YCCK; more than JD_MAX_SCANS
 *             scans
 *   -ENOMEM   out of memory, or over libjpeg's memory ceiling
 *   -ETIME    the decode used more than s->max_cpu_ms of CPU time
 *             ("took over N ms of CPU time")
 * Data after the last row the region needs is not read, so a file damaged
 * only there decodes (except progressive files, which are read whole).
 * On failure *out is zeroed.
 */
int jd_decode_box(const uint8_t *data, size_t len, double x, double y, double w, double h,
		  uint32_t out_w, uint32_t out_h, uint64_t max_pixels, struct jd_image *out,
		  struct jd_scratch *s, char *err, size_t err_cap);

/*
 * Reads all of the JPEG in data[0..len) as a decode would, its entropy-coded
 * data to the end of the file, but at 1/8 scale (one value per 8 x 8
 * block: Huffman decoding is most of the work) and keeping nothing: whether
 * libjpeg finds the file whole. For the workers' check of the images they
 * leave to the GPU (config gpu_decode_check = entropy), whose hardware
 * decoder does not report every kind of damage.
 *
 * Returns 0, or, with a message in err as for jd_header, the codes of
 * jd_decode_box: -EBADMSG for anything libjpeg errors or warns about (a
 * bad Huffman code, data that runs out inside a restart interval, a
 * marker where data should be), -ENODATA, -EFBIG (over max_pixels),
 * -ENOMEM, -ETIME (over max_cpu_ms of the calling thread's CPU time; 0:
 * no limit), -EINVAL. Unlike jd_decode_box it always reads the whole file.
 */
int jd_check_entropy(const uint8_t *data, size_t len, uint64_t max_pixels, uint32_t max_cpu_ms,
		     char *err, size_t err_cap);

/*
 * The region rule of jd_decode_box along one axis: the decoded pixels
 * [*lo, *hi) it decodes for the box [start, start + span) (source pixels)
 * at scale s (M/8) for out output pixels, on an axis of n > 0 decoded
 * pixels. That is the box at scale s widened by the filter's reach (a
 * triangle of radius r = max(1, span * s / out) reaches r/2 + 1/2 pixels
 * past the box; never less than 2 pixels), rounded out to whole pixels and
 * clipped to [0, n); a box wholly outside keeps the pixel on the nearest
 * edge. For decoders of their own (gpudecode/imgkernel.h) that must decode
 * what the resampler reads. Pure; start finite, span, s > 0, out > 0.
 */
void jd_box_range(double start, double span, double s, uint32_t out, uint32_t n, uint32_t *lo,
		  uint32_t *hi);

/* M of the DCT scale M/8 that gives a w x h box at least out_w x out_h
 * pixels (1, 2, 4 or 8): the scale jd_decode_box starts from in fast mode,
 * and keeps for 4:4:4, 4:2:0 and grayscale files (see jd_decode_box).
 * Pure. */
int jd_pick_scale(double w, double h, uint32_t out_w, uint32_t out_h);

/* M of the DCT scale M/8 that jd_decode_box decodes at in fast mode, from
 * m0 (jd_pick_scale's) for a file whose first component is sampled hs x vs
 * (1..4 each) and whose others are 1x1: grayscale (1, 1), 4:4:4 (1, 1),
 * 4:2:0 (2, 2) keep m0; 4:2:2 (2, 1) and 4:4:0 (1, 2) get 2 m0, up to 8.
 * The rule of jd_decode_box ("Scale" above) worked out from libjpeg-turbo's
 * sizes of the chroma IDCT, for a caller that has only the header (the GPU
 * path, which shrinks its images to the workers' scale). Pure. */
int jd_fast_scale(int m0, uint32_t hs, uint32_t vs);

/* Frees what the scratch holds and zeroes it; accepts a zeroed scratch. */
void jd_scratch_free(struct jd_scratch *s);

#endif
