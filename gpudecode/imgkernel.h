/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imgkernel: the GPU half of an image sample, for images decoded on the
 * GPU: from a batch of decoded RGB regions in device memory to the
 * pipeline's output rows, on a CUDA stream. Per image it does what the
 * worker does after jd_decode_box (image/image_sample.c): resample the
 * plan's box (image/resize.h: antialiased triangle filter, black outside
 * the image, optional mirror), then store the uint8 result in the
 * pipeline's layout (NCHW, NHWC) and dtype (uint8, or (x / 255 - mean) /
 * std as float16 or float32).
 *
 * How it matches resize.c: given the same decoded pixels, the same bytes.
 * The tap ranges, the float weights and the choice of which pass goes
 * first come from image/resize_taps.h, which resize.c compiles too; the
 * weights are computed per output in double, in the same order, and
 * rounded to float once. Both passes accumulate taps in resize.c's order,
 * each product and each sum rounded to float (no fused multiply-add); the
 * intermediate between the passes is float; the one rounding to uint8 is
 * resize.c's (half up, clamped). The conversion that follows is
 * image/pixel.h's: x * scale + shift in float, and IEEE half with rounding
 * to nearest even for float16. Taps are clipped to the image and the
 * outside rule is the image's, as resize.h defines them; in coordinates
 * relative to the decoded region, as image_sample.c passes them to
 * rs_resize_rgb, so the double arithmetic is the same too. A region made
 * by the region rule (imgk_region, jd_decode_box) holds every pixel a tap
 * can reach; should a region hold less, taps are clipped to it as well and
 * the kernel never reads outside it. tests/gpu/imgkernel_check.c compares
 * the two on random images, boxes and formats. GPU-decoded samples then
 * agree with the workers' as far as the decoded pixels agree: a decoder
 * other than libjpeg-turbo, or one that decodes at another DCT scale,
 * gives other pixels to start from.
 *
 * Use, per batch:
 *   1. per image, imgk_region says which region of the image to decode;
 *   2. on the host, one struct imgk_item per image; imgk_plan checks them
 *      and gives each its part of a scratch buffer in device memory (tap
 *      tables and the float intermediate between the passes);
 *   3. copy the items to device memory; imgk_launch enqueues the work:
 *      three kernels over the whole batch, no allocation, no host wait.
 * The stream orders everything: the regions, the items and the scratch
 * must stay untouched until the work on the stream is done, and two
 * batches in flight at once need two scratch buffers.
 *
 * Threads: no global state; calls touch only their arguments.
 */
#ifndef LDR_IMAGE_IMGKERNEL_H
#define LDR_IMAGE_IMGKERNEL_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IMGK_BATCH_MAX 65535u    /* images per launch */
#define IMGK_SIZE_MAX 65536u     /* a side of an image, a region or the output */

/* One image of a batch. imgk_plan reads it on the host; imgk_launch reads
 * it from device memory. All coordinates follow struct jd_image: decoded
 * pixels of the whole decoded image, which is the source image itself for
 * a full-size decode (sx = sy = 1) and its M/8 reduction for a DCT-scaled
 * one. */
struct imgk_item {
	const uint8_t *src;      /* the decoded region, device memory: RGB, 3 bytes per
				  * pixel, interleaved; pixel (x0, y0) of the image first */
	uint64_t src_pitch;      /* bytes from one row of src to the next, >= 3 * src_w */
	uint32_t src_w, src_h;   /* the region's size, 1..IMGK_SIZE_MAX */
	int32_t x0, y0;          /* the region's origin in the decoded image; the region
				  * lies inside the image */
	uint32_t img_w, img_h;   /* the whole decoded image, 1..IMGK_SIZE_MAX */
	double sx, sy;           /* decoded pixels per source pixel, > 0 (jd_image's) */
	double x, y, w, h;       /* the plan's box in source pixels (struct tf_plan); may
				  * extend beyond the image; w, h > 0 */
	uint32_t flip;           /* nonzero: mirror the output horizontally */
	uint32_t reserved;       /* 0 */
	uint64_t dst_offset;     /* where this image's output row starts in dst, bytes;
				  * a multiple of the element size */
	uint64_t scratch_offset; /* set by imgk_plan */
};

/* The batch's output: every image out_w x out_h, 3 channels. */
struct imgk_format {
	uint32_t out_w, out_h; /* 1..IMGK_SIZE_MAX */
	uint32_t layout;       /* 0 NCHW, 1 NHWC (struct arena_image_params) */
	uint32_t dtype;        /* PROTO_DTYPE_UINT8, _FLOAT16 or _FLOAT32 (proto/proto.h) */
	float mean[3], std[3]; /* float dtypes: (x / 255 - mean) / std; finite, std > 0 */
};

/*
 * The region of a img_w x img_h image (> 0) that the box (x, y, w, h)
 * resampled to out_w x out_h reads: the box widened by the filter's reach,
 * clipped to the image, never empty; what jd_decode_box decodes for that
 * box at scale 8/8 (image/jpeg.h, jd_box_range). A decoder that decodes
 * exactly this region at full size gives an item with x0 = *rx, y0 = *ry,
 * src_w = *rw, src_h = *rh, sx = sy = 1.
 */
void imgk_region(uint32_t img_w, uint32_t img_h, double x, double y, double w, double h,
		 uint32_t out_w, uint32_t out_h, int32_t *rx, int32_t *ry, uint32_t *rw,
		 uint32_t *rh);

/*
 * An image made smaller by an integer factor f (2, 4 or 8) before it is
 * resampled, as the workers' decoder makes it with a reduced-size IDCT
 * (libjpeg's scale M/8, f = 8/M; jd_pick_scale chooses M); the output is
 * ceil(src_w / f) x ceil(src_h / f), the size libjpeg gives. A block mean
 * is what the reduced IDCT computes to first order (its DC term):
 *   - where the JPEG's chroma leaves no upsampling at 1/f (gray, 4:4:4,
 *     and 4:2:0, whose chroma libjpeg's IDCT scales up instead), out
 *     pixel (i, j) is the mean, rounded half up, of the source pixels
 *     [i f, i f + f) x [j f, j f + f) inside the image;
 *   - for 4:2:2 (sh = 2) and 4:4:0 (sv = 2), whose chroma libjpeg reduces
 *     by f as well and then upsamples by 2 (image/yuv.h has its rules),
 *     the pixels are taken back to Y, Cb and Cr: luma is the block mean
 *     as above, each chroma plane's reduced sample the mean of its block
 *     (2f x f or f x 2f source pixels), upsampled as libjpeg does (the
 *     triangle filter, or repeated at 1/8 and on grids of 2 samples or
 *     fewer across), and the three converted with libjpeg's tables.
 * So the GPU path resamples nearly the same pixels as the workers' path
 * does, chroma included.
 */
struct imgk_shrink {
	const uint8_t *src;   /* RGB interleaved, device memory */
	uint64_t src_pitch;
	uint32_t src_w, src_h;
	uint8_t *dst;         /* RGB interleaved, device memory */
	uint64_t dst_pitch;   /* >= 3 * ceil(src_w / f) */
	uint32_t f;           /* 2, 4 or 8 */
	uint16_t sh, sv;      /* the JPEG's chroma subsampling across and down, 1 or 2
			       * (1 and 1 for gray); 0 is taken as 1 */
};

/* Enqueues the n shrinks at items_dev (device memory) on stream: one
 * launch, no allocation, no synchronisation. 0; -EINVAL for n over
 * IMGK_BATCH_MAX or a NULL pointer; -EIO when the launch failed (the error
 * in *cuda_err when not NULL). An item with f not 2, 4 or 8 is skipped. */
int imgk_shrink_launch(const struct imgk_shrink *items_dev, uint32_t n, cudaStream_t stream,
		       cudaError_t *cuda_err);

/* Bytes of one image's output in fmt; 0 for a format imgk_launch refuses. */
uint64_t imgk_row_bytes(const struct imgk_format *fmt);

/*
 * Checks the n host-side items against fmt (the ranges above, finite
 * coordinates, each output row inside a dst of dst_bytes bytes) and sets
 * each one's scratch_offset, for a scratch buffer of *scratch_bytes bytes
 * (> 0 when n > 0) that imgk_launch then gets. The size follows the
 * regions and the output, not the boxes' scale: per image,
 * 12 * max(out_h * src_w, src_h * out_w) bytes and the tap tables.
 * Returns 0, or -EINVAL (a NULL pointer, n over IMGK_BATCH_MAX, a bad
 * format or item; the items are then left partly planned).
 */
int imgk_plan(struct imgk_item *items, uint32_t n, const struct imgk_format *fmt,
	      uint64_t dst_bytes, uint64_t *scratch_bytes);

/*
 * Enqueues on stream the n images whose items (as imgk_plan left them,
 * copied to device memory) are at items_dev: each image's output row goes
 * to dst + its dst_offset, through the scratch buffer of scratch_bytes
 * bytes (device memory, 16-byte aligned). dst, of dst_bytes bytes, must be
 * aligned to the element size. n == 0 enqueues nothing. No allocation, no
 * synchronisation: the work runs when the stream gets to it. An item that
 * imgk_plan would refuse, or whose scratch part or row does not fit, is
 * skipped on the GPU (its row is not written).
 *
 * Returns 0; -EINVAL for a NULL pointer, n over IMGK_BATCH_MAX, a bad
 * format or a misaligned buffer (nothing enqueued); -EIO when a launch
 * failed (the kernels enqueued before it still run, and the rows are not
 * all written), with the error in *cuda_err (when cuda_err is not NULL)
 * for the caller to name and convert (common/cudaerr.h). Enqueued work
 * that fails later shows on the stream, as any kernel's does.
 */
int imgk_launch(const struct imgk_item *items_dev, uint32_t n, const struct imgk_format *fmt,
		void *scratch, uint64_t scratch_bytes, uint8_t *dst, uint64_t dst_bytes,
		cudaStream_t stream, cudaError_t *cuda_err);

#ifdef __cplusplus
}
#endif

#endif
