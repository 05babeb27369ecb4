/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd_check: what nvjd.c asks of each image before the engines get it
 * (nvjd.h, "Every image is checked on the host first"), and the header
 * through nvJPEG (nvjd_image_info): nvJPEG's parse, jh_check_scan, the
 * region and the support check, each failure the image's status and
 * message. nvJPEG is called only through the table `nvjd_lib`.
 */
#include "gpudecode/nvjd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/errtext.h"
#include "gpudecode/nvjd_impl.h"
#include "image/jpeghdr.h"

/* ---- headers ---------------------------------------------------------------- */

static const char *css_name(nvjpegChromaSubsampling_t css)
{
	switch (css) {
	case NVJPEG_CSS_444: return "4:4:4";
	case NVJPEG_CSS_422: return "4:2:2";
	case NVJPEG_CSS_420: return "4:2:0";
	case NVJPEG_CSS_440: return "4:4:0";
	case NVJPEG_CSS_411: return "4:1:1";
	case NVJPEG_CSS_410: return "4:1:0";
	case NVJPEG_CSS_410V: return "4:1:0v";
	case NVJPEG_CSS_GRAY: return "gray";
	case NVJPEG_CSS_UNKNOWN: break;
	}
	return "unknown";
}

/* The errno and text of a failure to read an image's header. */
static int header_failure(nvjpegStatus_t s, const char *call, char *err, size_t cap)
{
	switch (s) {
	case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
		return errtext(err, cap, -EBADMSG, "truncated JPEG (%s: %s)", call,
			       nvjd_status_name(s));
	case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
		return errtext(err, cap, -ENOTSUP, "a JPEG nvJPEG does not read (%s: %s)", call,
			       nvjd_status_name(s));
	case NVJPEG_STATUS_ALLOCATOR_FAILURE:
		return errtext(err, cap, -ENOMEM, "%s: %s", call, nvjd_status_name(s));
	default:
		return errtext(err, cap, -EBADMSG, "corrupt JPEG header (%s: %s)", call,
			       nvjd_status_name(s));
	}
}

static bool starts_as_jpeg(const uint8_t *data, size_t len)
{
	return len >= 2 && data[0] == 0xff && data[1] == 0xd8;
}

int nvjd_image_info(struct nvjd *d, const uint8_t *data, size_t len, struct nvjd_header *out,
		    char *err, size_t cap)
{
	if (!d || !data || !out)
		return errtext(err, cap, -EINVAL, "nvjd_image_info: a NULL pointer");
	*out = (struct nvjd_header){.subsampling = "unknown"};
	if (len == 0)
		return errtext(err, cap, -EBADMSG, "empty file");
	if (!starts_as_jpeg(data, len))
		return errtext(err, cap, -EBADMSG, "not a JPEG (no start-of-image marker)");
	int components = 0, widths[NVJPEG_MAX_COMPONENT] = {0}, heights[NVJPEG_MAX_COMPONENT] = {0};
	nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
	nvjpegStatus_t s = nvjd_lib.nvjpegGetImageInfo(d->handle, data, len, &components, &css,
						       widths, heights);
	if (s != NVJPEG_STATUS_SUCCESS)
		return header_failure(s, "nvjpegGetImageInfo", err, cap);
	if (widths[0] <= 0 || heights[0] <= 0)
		return errtext(err, cap, -EBADMSG, "corrupt JPEG header (%d x %d pixels)",
			       widths[0], heights[0]);
	*out = (struct nvjd_header){.width = (uint32_t)widths[0],
				    .height = (uint32_t)heights[0],
				    .components = components,
				    .subsampling = css_name(css)};
	return 0;
}

/* ---- one image's checks --------------------------------------------------- */

int nvjd__reject(struct nvjd_image *im, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	im->status = verrtext(im->err, sizeof im->err, code, fmt, ap);
	va_end(ap);
	return code;
}

static const char *encoding_name(nvjpegJpegEncoding_t enc)
{
	switch (enc) {
	case NVJPEG_ENCODING_BASELINE_DCT: return "baseline";
	case NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN: return "extended sequential";
	case NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN: return "progressive";
	case NVJPEG_ENCODING_LOSSLESS_HUFFMAN: return "lossless";
	case NVJPEG_ENCODING_UNKNOWN: break;
	}
	return "unknown encoding";
}

/* What the engines refuse, in words: "progressive 4:2:0, 3 components". */
static void describe_stream(nvjpegJpegStream_t js, char *buf, size_t cap)
{
	nvjpegJpegEncoding_t enc = NVJPEG_ENCODING_UNKNOWN;
	nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
	unsigned components = 0;
	nvjd_lib.nvjpegJpegStreamGetJpegEncoding(js, &enc);
	nvjd_lib.nvjpegJpegStreamGetChromaSubsampling(js, &css);
	nvjd_lib.nvjpegJpegStreamGetComponentsNum(js, &components);
	snprintf(buf, cap, "%s %s, %u component%s", encoding_name(enc), css_name(css), components,
		 components == 1 ? "" : "s");
}

/* Checks image im on the host and sets its region in params: 0 when it
 * can go to the engines, else its status (also stored in im). */
int nvjd__check_image(struct nvjd *d, struct nvjd_image *im, nvjpegDecodeParams_t params)
{
	if (!im->data || !im->dst)
		return nvjd__reject(im, -EINVAL, "%s is NULL", im->data ? "dst" : "data");
	if (im->len == 0)
		return nvjd__reject(im, -EBADMSG, "empty file");
	if (!starts_as_jpeg(im->data, im->len))
		return nvjd__reject(im, -EBADMSG, "not a JPEG (no start-of-image marker)");
	bool given = im->given_w && im->given_h;
	bool yuv = d->flags & NVJD_OUTPUT_YUV;
	if (yuv != (im->planes != NVJD_PLANES_NONE) || (yuv && (!given || im->roi_w)))
		return nvjd__reject(im, -EINVAL, yuv ? "planar output needs the image's size and subsampling, "
				     "and no region" : "planes given to a decoder of interleaved RGB");
	unsigned w = im->given_w, h = im->given_h;
	nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
	char text[NVJD_ERR_MAX];
	if (!given) {
		s = nvjd_lib.nvjpegJpegStreamParse(d->handle, im->data, im->len, 0, 0, d->parsed);
		if (s != NVJPEG_STATUS_SUCCESS) {
			int code = header_failure(s, "nvjpegJpegStreamParse", text, sizeof text);
			return nvjd__reject(im, code, "%s", text);
		}
	}
	int code = im->scan_checked ? 0 : jh_check_scan(im->data, im->len, text, sizeof text);
	if (code)
		return nvjd__reject(im, code, "%s", text);
	if (!given)
		s = nvjd_lib.nvjpegJpegStreamGetFrameDimensions(d->parsed, &w, &h);
	if (s != NVJPEG_STATUS_SUCCESS || w == 0 || h == 0 || w > INT32_MAX || h > INT32_MAX)
		return nvjd__reject(im, -EBADMSG, "corrupt JPEG header (frame %u x %u)", w, h);
	im->width = w;
	im->height = h;

	uint32_t out_w = w, out_h = h;
	if (im->roi_w) {
		if (im->roi_h == 0 || im->roi_x > w || im->roi_w > w - im->roi_x || im->roi_y > h ||
		    im->roi_h > h - im->roi_y)
			return nvjd__reject(im, -EINVAL,
				      "region (%u, %u) %u x %u is not inside the %u x %u image",
				      im->roi_x, im->roi_y, im->roi_w, im->roi_h, w, h);
		out_w = im->roi_w;
		out_h = im->roi_h;
		s = nvjd_lib.nvjpegDecodeParamsSetROI(params, (int)im->roi_x, (int)im->roi_y,
						      (int)out_w, (int)out_h);
	} else if (given) { /* never beyond the size given, whatever the file says */
		s = nvjd_lib.nvjpegDecodeParamsSetROI(params, 0, 0, (int)w, (int)h);
	} else {
		s = nvjd_lib.nvjpegDecodeParamsSetROI(params, 0, 0, -1, -1);
	}
	if (s != NVJPEG_STATUS_SUCCESS)
		return nvjd__reject(im, -ENOTSUP, "nvjpegDecodeParamsSetROI: %s", nvjd_status_name(s));
	const char *unfit = nvjd_fits(im, out_w, out_h);
	if (unfit)
		return nvjd__reject(im, -EINVAL, "%u x %u pixels: %s (%zu bytes)", out_w, out_h, unfit,
			      im->dst_bytes);
	im->out_w = out_w;
	im->out_h = out_h;

	if (given)
		return 0;
	int unsupported = -1;
	s = nvjd_lib.nvjpegDecodeBatchedSupportedEx(d->handle, d->parsed, params, &unsupported);
	if (s != NVJPEG_STATUS_SUCCESS || unsupported != 0) {
		char what[96];
		describe_stream(d->parsed, what, sizeof what);
		if (s != NVJPEG_STATUS_SUCCESS)
			return nvjd__reject(im, -ENOTSUP,
				      "the hardware decoder does not take this image (%s; %s)",
				      what, nvjd_status_name(s));
		return nvjd__reject(im, -ENOTSUP, "the hardware decoder does not take this image (%s)",
			      what);
	}
	return 0;
}
