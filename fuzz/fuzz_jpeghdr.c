/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_jpeghdr: libFuzzer harness for the JPEG header reader
 * (image/jpeghdr.c), which workers run on every image before any decoder
 * sees it. The input is the file. Any input may be refused, but:
 *   - a refusal is -EBADMSG or -ENODATA, with a message, and *out zeroed;
 *   - an accepted header has width and height > 0, 1 to 4 components,
 *     sampling factors 1..4 for each and 0 past them, a precision its
 *     process allows, its scan offset within the input, enums in range,
 *     an empty err, and an answer from jh_gpu_refusal (with and without
 *     limits);
 *   - a prefix of the input (half of it, and all but its last byte) gets
 *     -ENODATA or the same answer: the same code and message, or the same
 *     header;
 *   - where libjpeg's jpeg_read_header also reads the header, every field
 *     it reports agrees (jpeghdr.h's color space rule included);
 *   - the scan check (image/jpegscan.c, which walks the entropy-coded
 *     bytes) answers 0 or -EBADMSG with a message, and jh_gpu_takes is true
 *     only for an input whose header reads and whose scan check passes.
 * Any breach aborts (and ASan/UBSan catch the rest).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "image/jpeghdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct answer {
	int rc;
	struct jh_info info;
	char err[256];
};

static void parse(const uint8_t *data, size_t size, struct answer *a)
{
	memset(a, 0, sizeof(*a));
	memset(&a->info, 0x5A, sizeof(a->info)); /* must be overwritten either way */
	a->rc = jh_parse(data, size, &a->info, a->err, sizeof(a->err));
}

static void check_refusal(const struct answer *a)
{
	static const struct jh_info zero;
	if (a->rc != -EBADMSG && a->rc != -ENODATA)
		abort();
	if (a->err[0] == '\0' || memcmp(&a->info, &zero, sizeof(zero)) != 0)
		abort();
}

static void check_header(const struct jh_info *in, size_t size, const char *err)
{
	if (err[0] != '\0' || in->width == 0 || in->height == 0 || in->components < 1 ||
	    in->components > 4 || in->scan_offset > size || in->scan_offset < 2)
		abort();
	for (int c = 0; c < 4; c++) {
		bool used = c < in->components;
		if (used != (in->h[c] >= 1 && in->h[c] <= 4) || used != (in->v[c] >= 1 && in->v[c] <= 4))
			abort();
	}
	bool lossless = (in->sof & 3) == 3; /* SOF3, 7, 11, 15 */
	if (lossless ? in->precision < 2 || in->precision > 16
		     : in->precision != 8 && in->precision != 12)
		abort();
	if (in->process > JH_HIERARCHICAL || in->subsamp > JH_OTHER || in->color > JH_COLOR_YCCK ||
	    in->sof > 15 || in->sof == 4 || in->sof == 8 || in->sof == 12 ||
	    in->arithmetic != (in->sof >= 9))
		abort();
	if ((in->components == 1) != (in->subsamp == JH_GRAY))
		abort();
	const struct jh_limits lim = {.max_bytes = 1 << 20, .max_side = 4096,
				      .max_pixels = 1 << 22};
	const char *why = jh_gpu_refusal(in, size, NULL);
	const char *why_lim = jh_gpu_refusal(in, size, &lim);
	if ((why && (!why[0] || !why_lim || strcmp(why, why_lim) != 0)) ||
	    (why_lim && !why_lim[0]))
		abort();
}

/* A prefix gets -ENODATA or the same answer as the whole input: the same
 * code and message (but for the bytes "not a JPEG file" quotes, one in a
 * one-byte prefix, two otherwise), the same header. */
static void check_prefix(const uint8_t *data, size_t n, const struct answer *whole)
{
	static const char not_jpeg[] = "not a JPEG file (";
	static struct answer part;
	parse(data, n, &part);
	if (part.rc == -ENODATA)
		return;
	bool both_not_jpeg = strncmp(part.err, not_jpeg, sizeof(not_jpeg) - 1) == 0 &&
			     strncmp(whole->err, not_jpeg, sizeof(not_jpeg) - 1) == 0;
	if (part.rc != whole->rc || (!both_not_jpeg && strcmp(part.err, whole->err) != 0) ||
	    memcmp(&part.info, &whole->info, sizeof(part.info)) != 0)
		abort();
}

/* ---- libjpeg's reading of the same header ---- */

struct ref {
	struct jpeg_decompress_struct d;
	struct jpeg_error_mgr pub;
	jmp_buf jump;
};

static void ref_error_exit(j_common_ptr cinfo)
{
	struct ref *r = (struct ref *)((char *)cinfo->err - offsetof(struct ref, pub));
	longjmp(r->jump, 1);
}

static void ref_quiet(j_common_ptr cinfo, int level)
{
	(void)cinfo;
	(void)level;
}

static bool ref_read_header(struct ref *r, const uint8_t *data, size_t size)
{
	r->d.err = jpeg_std_error(&r->pub);
	r->pub.error_exit = ref_error_exit;
	r->pub.emit_message = ref_quiet;
	jpeg_create_decompress(&r->d);
	if (setjmp(r->jump)) {
		jpeg_destroy_decompress(&r->d);
		return false;
	}
	jpeg_mem_src(&r->d, data, (unsigned long)size);
	jpeg_read_header(&r->d, TRUE);
	return true;
}

static enum jh_color ref_color(J_COLOR_SPACE cs)
{
	switch (cs) {
	case JCS_GRAYSCALE:
		return JH_COLOR_GRAY;
	case JCS_YCbCr:
		return JH_COLOR_YCBCR;
	case JCS_RGB:
		return JH_COLOR_RGB;
	case JCS_CMYK:
		return JH_COLOR_CMYK;
	case JCS_YCCK:
		return JH_COLOR_YCCK;
	default:
		return JH_COLOR_UNKNOWN;
	}
}

static void check_against_libjpeg(const uint8_t *data, size_t size, const struct jh_info *in)
{
	static struct ref r;
	if (!ref_read_header(&r, data, size))
		return;
	const struct jpeg_decompress_struct *d = &r.d;
	bool same = in->width == d->image_width && in->height == d->image_height &&
		    in->components == d->num_components && in->precision == d->data_precision &&
		    (in->process == JH_PROGRESSIVE) == !!d->progressive_mode &&
		    in->arithmetic == !!d->arith_code && in->restart_interval == d->restart_interval &&
		    in->jfif == !!d->saw_JFIF_marker && in->adobe == !!d->saw_Adobe_marker &&
		    in->adobe_transform == (d->saw_Adobe_marker ? d->Adobe_transform : 0) &&
		    in->color == ref_color(d->jpeg_color_space) &&
		    in->single_scan == (d->comps_in_scan == d->num_components) &&
		    in->scan_offset == size - d->src->bytes_in_buffer;
	for (int c = 0; same && c < d->num_components; c++)
		same = c < 4 && in->h[c] == d->comp_info[c].h_samp_factor &&
		       in->v[c] == d->comp_info[c].v_samp_factor;
	jpeg_destroy_decompress(&r.d);
	if (!same)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct answer whole;
	parse(data, size, &whole);
	if (whole.rc < 0)
		check_refusal(&whole);
	else if (whole.rc == 0)
		check_header(&whole.info, size, whole.err);
	else
		abort();
	if (size > 0) {
		check_prefix(data, size / 2, &whole);
		check_prefix(data, size - 1, &whole);
	}
	if (whole.rc == 0)
		check_against_libjpeg(data, size, &whole.info);
	char err[256] = "";
	int scan = jh_check_scan(data, size, err, sizeof(err));
	if ((scan != 0 && scan != -EBADMSG) || (scan != 0 && err[0] == '\0'))
		abort();
	struct jh_info info;
	if (jh_gpu_takes(data, size, &(struct jh_limits){0}, &info) && (whole.rc != 0 || scan != 0))
		abort();
	return 0;
}
