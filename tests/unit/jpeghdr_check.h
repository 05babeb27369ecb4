/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jpeghdr_check: what the header reader's tests (test_jpeghdr.c,
 * test_jpeghdr_bytes.c) share: libjpeg's own reading of a header, to check
 * every field jh_parse reports against, and the check of every prefix of a
 * file.
 *
 * Header only, every function static inline (a test is one file: no
 * warning for what it does not use). Include it after cmocka.h.
 */
#ifndef LDR_TESTS_JPEGHDR_CHECK_H
#define LDR_TESTS_JPEGHDR_CHECK_H

#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#include "image/jpeghdr.h"

static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* libjpeg's warnings and traces: not printed. */
static inline void quiet(j_common_ptr cinfo, int level)
{
	(void)cinfo;
	(void)level;
}

/* ---- libjpeg's reading of a header ---- */

struct ref_err {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
};

static inline void ref_error_exit(j_common_ptr cinfo)
{
	longjmp(((struct ref_err *)cinfo->err)->jump, 1);
}

static inline enum jh_color color_of(J_COLOR_SPACE cs)
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

/* libjpeg's decompressor and error manager, owned by the caller of the
 * function that calls setjmp, so that nothing the error path reads is a
 * local changed after the setjmp. */
struct ref {
	struct jpeg_decompress_struct d;
	struct ref_err e;
};

/* jpeg_read_header on data[0..len), its warnings ignored. true when it
 * read the header; r->d must then be destroyed. */
static inline bool ref_read_header(struct ref *r, const uint8_t *data, size_t len)
{
	r->d.err = jpeg_std_error(&r->e.pub);
	r->e.pub.error_exit = ref_error_exit;
	r->e.pub.emit_message = quiet;
	jpeg_create_decompress(&r->d);
	if (setjmp(r->e.jump)) {
		jpeg_destroy_decompress(&r->d);
		return false;
	}
	jpeg_mem_src(&r->d, data, (unsigned long)len);
	jpeg_read_header(&r->d, TRUE);
	return true;
}

/*
 * When libjpeg's jpeg_read_header accepts data[0..len), checks that *in
 * says what it says and returns true; false when libjpeg refuses the
 * header. what names the file in failures.
 */
static inline bool agrees_with_libjpeg(const char *what, const uint8_t *data, size_t len,
				       const struct jh_info *in)
{
	struct ref r;
	if (!ref_read_header(&r, data, len))
		return false;
	const struct jpeg_decompress_struct *d = &r.d;
	char diff[256] = "";
#define SAME(ours, theirs)                                                                    \
	do {                                                                                  \
		if (!diff[0] && (long long)(ours) != (long long)(theirs))                     \
			snprintf(diff, sizeof(diff), "%s is %lld, libjpeg says %lld", #ours,   \
				 (long long)(ours), (long long)(theirs));                     \
	} while (0)
	SAME(in->width, d->image_width);
	SAME(in->height, d->image_height);
	SAME(in->components, d->num_components);
	SAME(in->precision, d->data_precision);
	SAME(in->process == JH_PROGRESSIVE, d->progressive_mode);
	SAME(in->arithmetic, d->arith_code);
	for (int c = 0; c < d->num_components && c < 4; c++) {
		SAME(in->h[c], d->comp_info[c].h_samp_factor);
		SAME(in->v[c], d->comp_info[c].v_samp_factor);
	}
	SAME(in->restart_interval, d->restart_interval);
	SAME(in->jfif, d->saw_JFIF_marker);
	SAME(in->adobe, d->saw_Adobe_marker);
	SAME(in->adobe_transform, d->saw_Adobe_marker ? d->Adobe_transform : 0);
	SAME(in->color, color_of(d->jpeg_color_space));
	SAME(in->single_scan, d->comps_in_scan == d->num_components);
	SAME(in->scan_offset, len - d->src->bytes_in_buffer);
#undef SAME
	jpeg_destroy_decompress(&r.d);
	if (diff[0])
		fail_msg("%s: %s", what, diff);
	return true;
}

/* ---- every prefix ---- */

/* jh_parse on each prefix of data: -ENODATA with a "truncated" message
 * (or "empty file") up to the end of the first SOS segment, then *full. */
static inline void check_prefixes(const char *what, const uint8_t *data, size_t len,
				  const struct jh_info *full)
{
	for (size_t n = 0; n <= len; n++) {
		struct jh_info in;
		char err[128];
		int rc = jh_parse(data, n, &in, err, sizeof(err));
		if (n < full->scan_offset) {
			if (rc != -ENODATA ||
			    strncmp(err, n ? "truncated" : "empty file", n ? 9 : 10) != 0)
				fail_msg("%s: first %zu bytes: %d \"%s\", expected -ENODATA", what, n,
					 rc, err);
		} else if (rc != 0 || memcmp(&in, full, sizeof(in)) != 0 || err[0]) {
			fail_msg("%s: first %zu bytes (the header ends at %zu): %d \"%s\"", what, n,
				 full->scan_offset, rc, err);
		}
	}
}

#endif
