/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for image/jpeghdr on real files, made here, in memory, by
 * libjpeg's own compressor. Every field jh_parse reports is checked against
 * what libjpeg's jpeg_read_header says about the same bytes (dimensions,
 * components, precision, progressive and arithmetic coding, sampling
 * factors, restart interval, JFIF and Adobe markers and transform, color
 * space, components in the first scan, where its data starts;
 * jpeghdr_check.h):
 *
 *   - baseline 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 4:1:0, equal factors
 *     (2x1 on every component), grayscale, progressive, arithmetic,
 *     extended (SOF1), CMYK, YCCK, RGB (Adobe and by component ids), two
 *     components, no JFIF marker, JFIF and Adobe together, restart
 *     intervals, COM/Exif/ICC segments, scans of one or two components,
 *     1x1, 65500x16 and 16x65500; each with its subsampling class, process,
 *     SOF marker and jh_gpu_refusal's answer;
 *   - every prefix of every one of them is -ENODATA ("truncated ...") up
 *     to the end of the first SOS segment, and the same header from there
 *     on;
 *   - random damage to their headers: only documented codes, sane fields
 *     on success, and wherever libjpeg also reads the damaged header, the
 *     same fields. Under ASan (-DLOADERD_SANITIZE=address,undefined) this
 *     is where a read past the end would show: each damaged file is a heap
 *     block of exactly its length.
 *
 * Hand-made byte strings (each error, its message and offset) are in
 * test_jpeghdr_bytes.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "image/jpeghdr.h"
#include "jpeghdr_check.h"

/* ---- files from libjpeg's compressor ---- */

enum kind { KIND_YCC, KIND_GRAY, KIND_CMYK, KIND_YCCK, KIND_RGB, KIND_TWO };

struct enc {
	enum kind kind;
	int hs, vs;                /* luma's (and YCCK's K) sampling factors */
	bool equal;                /* every component hs x vs */
	bool progressive, arith;
	bool extended;             /* a 16-bit quantization table: libjpeg writes SOF1 */
	bool no_jfif, adobe, no_adobe;
	bool markers;              /* COM, Exif APP1 and ICC APP2 segments */
	unsigned restart_interval; /* MCUs */
	int restart_rows;
	const jpeg_scan_info *scans;
	int n_scans;
};

static uint8_t *encode(uint32_t w, uint32_t h, const struct enc *e, size_t *len)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr jerr;
	c.err = jpeg_std_error(&jerr); /* an encoder error here is a broken test: exits */
	jerr.emit_message = quiet;    /* "tables are too coarse for baseline": meant */
	jpeg_create_compress(&c);
	unsigned char *out = NULL;
	unsigned long out_len = 0;
	jpeg_mem_dest(&c, &out, &out_len);
	c.image_width = w;
	c.image_height = h;
	static const J_COLOR_SPACE in_space[] = {JCS_RGB,  JCS_GRAYSCALE, JCS_CMYK,
						 JCS_CMYK, JCS_RGB,       JCS_UNKNOWN};
	static const int comps[] = {3, 1, 4, 4, 3, 2};
	c.input_components = comps[e->kind];
	c.in_color_space = in_space[e->kind];
	jpeg_set_defaults(&c);
	if (e->kind == KIND_YCCK)
		jpeg_set_colorspace(&c, JCS_YCCK);
	if (e->kind == KIND_RGB)
		jpeg_set_colorspace(&c, JCS_RGB);
	jpeg_set_quality(&c, 85, TRUE);
	if (e->kind == KIND_YCC || e->kind == KIND_YCCK || e->equal) {
		for (int i = 0; i < c.num_components; i++) {
			bool full = e->equal || i == 0 || i == 3;
			c.comp_info[i].h_samp_factor = full ? e->hs : 1;
			c.comp_info[i].v_samp_factor = full ? e->vs : 1;
		}
	}
	if (e->extended) {
		unsigned big[64];
		for (int i = 0; i < 64; i++)
			big[i] = 300;
		jpeg_add_quant_table(&c, 1, big, 100, FALSE);
	}
	c.write_JFIF_header = c.write_JFIF_header && !e->no_jfif;
	c.write_Adobe_marker = (c.write_Adobe_marker || e->adobe) && !e->no_adobe;
	c.arith_code = e->arith;
	if (e->progressive)
		jpeg_simple_progression(&c);
	if (e->scans) {
		c.scan_info = e->scans;
		c.num_scans = e->n_scans;
	}
	c.restart_interval = e->restart_interval;
	c.restart_in_rows = e->restart_rows;
	jpeg_start_compress(&c, TRUE);
	if (e->markers) {
		static const char exif[] = "Exif\0\0MM\0*\0\0\0\x08\0\0";
		static const char icc[] = "ICC_PROFILE\0\x01\x01 not a real profile";
		jpeg_write_marker(&c, JPEG_COM, (const JOCTET *)"a comment", 9);
		jpeg_write_marker(&c, JPEG_APP0 + 1, (const JOCTET *)exif, sizeof(exif));
		jpeg_write_marker(&c, JPEG_APP0 + 2, (const JOCTET *)icc, sizeof(icc));
	}
	JSAMPLE *row = malloc((size_t)w * 4);
	assert_non_null(row);
	while (c.next_scanline < h) {
		for (uint32_t x = 0; x < w * (uint32_t)c.input_components; x++)
			row[x] = (JSAMPLE)((x * 7 + c.next_scanline * 3) & 0xFF);
		JSAMPROW r = row;
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(row);
	*len = out_len;
	return out;
}

/* ---- the cases ---- */

static const jpeg_scan_info one_by_one[] = {
	{1, {0}, 0, 63, 0, 0}, {1, {1}, 0, 63, 0, 0}, {1, {2}, 0, 63, 0, 0}};
static const jpeg_scan_info two_then_one[] = {{2, {0, 1}, 0, 63, 0, 0}, {1, {2}, 0, 63, 0, 0}};

struct jcase {
	const char *name;
	uint32_t w, h;
	struct enc e;
	enum jh_process process;
	enum jh_subsamp subsamp;
	const char *refusal; /* jh_gpu_refusal without limits */
};

#define YCC(h, v) .kind = KIND_YCC, .hs = h, .vs = v

static const struct jcase cases[] = {
	{"ycc444", 203, 157, {YCC(1, 1)}, JH_BASELINE, JH_444, NULL},
	{"ycc422", 203, 157, {YCC(2, 1)}, JH_BASELINE, JH_422, NULL},
	{"ycc420", 203, 157, {YCC(2, 2)}, JH_BASELINE, JH_420, NULL},
	{"ycc440", 203, 157, {YCC(1, 2)}, JH_BASELINE, JH_440, NULL},
	{"ycc411", 203, 157, {YCC(4, 1)}, JH_BASELINE, JH_411, "4:1:1 subsampling"},
	{"ycc410", 203, 157, {YCC(4, 2)}, JH_BASELINE, JH_410, "4:1:0 subsampling"},
	{"ycc_equal_2x1", 203, 157, {YCC(2, 1), .equal = true}, JH_BASELINE, JH_444,
	 "chroma sampling factors not 1x1"},
	{"gray", 203, 157, {.kind = KIND_GRAY, .hs = 1, .vs = 1}, JH_BASELINE, JH_GRAY, NULL},
	{"ycc420_progressive", 203, 157, {YCC(2, 2), .progressive = true}, JH_PROGRESSIVE, JH_420,
	 "progressive"},
	{"ycc444_progressive", 203, 157, {YCC(1, 1), .progressive = true}, JH_PROGRESSIVE, JH_444,
	 "progressive"},
	{"gray_progressive", 203, 157, {.kind = KIND_GRAY, .progressive = true}, JH_PROGRESSIVE,
	 JH_GRAY, "progressive"},
	{"ycc420_arith", 203, 157, {YCC(2, 2), .arith = true}, JH_EXTENDED, JH_420,
	 "arithmetic coding"},
	{"ycc420_arith_progressive", 203, 157, {YCC(2, 2), .arith = true, .progressive = true},
	 JH_PROGRESSIVE, JH_420, "arithmetic coding"},
	{"ycc420_extended", 203, 157, {YCC(2, 2), .extended = true}, JH_EXTENDED, JH_420,
	 "extended sequential (SOF1)"},
	{"cmyk", 203, 157, {.kind = KIND_CMYK}, JH_BASELINE, JH_444, "4 components (CMYK/YCCK)"},
	{"ycck", 203, 157, {.kind = KIND_YCCK, .hs = 1, .vs = 1}, JH_BASELINE, JH_444,
	 "4 components (CMYK/YCCK)"},
	{"ycck420", 203, 157, {.kind = KIND_YCCK, .hs = 2, .vs = 2}, JH_BASELINE, JH_420,
	 "4 components (CMYK/YCCK)"},
	{"rgb_adobe", 203, 157, {.kind = KIND_RGB}, JH_BASELINE, JH_444, "RGB (Adobe transform 0)"},
	{"rgb_ids", 203, 157, {.kind = KIND_RGB, .no_adobe = true}, JH_BASELINE, JH_444,
	 "RGB (component ids R, G, B)"},
	{"two_components", 203, 157, {.kind = KIND_TWO}, JH_BASELINE, JH_444, "2 components"},
	{"ycc420_no_jfif", 203, 157, {YCC(2, 2), .no_jfif = true}, JH_BASELINE, JH_420, NULL},
	{"ycc420_adobe_ycc", 203, 157, {YCC(2, 2), .no_jfif = true, .adobe = true}, JH_BASELINE,
	 JH_420, NULL},
	{"ycc420_jfif_and_adobe", 203, 157, {YCC(2, 2), .adobe = true}, JH_BASELINE, JH_420, NULL},
	{"ycc420_restart", 203, 157, {YCC(2, 2), .restart_interval = 3}, JH_BASELINE, JH_420, NULL},
	{"ycc422_restart_rows", 203, 157, {YCC(2, 1), .restart_rows = 2}, JH_BASELINE, JH_422,
	 NULL},
	{"ycc420_progressive_restart", 203, 157,
	 {YCC(2, 2), .progressive = true, .restart_interval = 5}, JH_PROGRESSIVE, JH_420,
	 "progressive"},
	{"ycc420_markers", 203, 157, {YCC(2, 2), .markers = true}, JH_BASELINE, JH_420, NULL},
	{"ycc444_scan_per_component", 64, 48, {YCC(1, 1), .scans = one_by_one, .n_scans = 3},
	 JH_BASELINE, JH_444, "components in separate scans"},
	{"ycc420_two_scans", 64, 48, {YCC(2, 2), .scans = two_then_one, .n_scans = 2}, JH_BASELINE,
	 JH_420, "components in separate scans"},
	{"ycc420_1x1", 1, 1, {YCC(2, 2)}, JH_BASELINE, JH_420, NULL},
	{"ycc420_2x9", 2, 9, {YCC(2, 2)}, JH_BASELINE, JH_420, NULL},
	{"ycc420_3x9", 3, 9, {YCC(2, 2)}, JH_BASELINE, JH_420, "chroma 2 samples wide"},
	{"ycc422_4x9", 4, 9, {YCC(2, 1)}, JH_BASELINE, JH_422, "chroma 2 samples wide"},
	{"ycc422_5x9", 5, 9, {YCC(2, 1)}, JH_BASELINE, JH_422, NULL},
	{"ycc440_3x9", 3, 9, {YCC(1, 2)}, JH_BASELINE, JH_440, NULL},
	{"ycc444_4x9", 4, 9, {YCC(1, 1)}, JH_BASELINE, JH_444, NULL},
	{"ycc420_9x3", 9, 3, {YCC(2, 2)}, JH_BASELINE, JH_420, NULL},
	{"gray_1x1", 1, 1, {.kind = KIND_GRAY}, JH_BASELINE, JH_GRAY, NULL},
	{"ycc420_65500x16", 65500, 16, {YCC(2, 2)}, JH_BASELINE, JH_420, NULL},
	{"ycc422_16x65500", 16, 65500, {YCC(2, 1)}, JH_BASELINE, JH_422, NULL},
};

static void run_case(void **state)
{
	const struct jcase *c = *state;
	size_t len;
	uint8_t *jpg = encode(c->w, c->h, &c->e, &len);
	struct jh_info in;
	char err[128] = "x";
	int rc = jh_parse(jpg, len, &in, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s: %d \"%s\"", c->name, rc, err);
	assert_string_equal(err, "");
	assert_true(agrees_with_libjpeg(c->name, jpg, len, &in));
	assert_int_equal(in.width, c->w);
	assert_int_equal(in.height, c->h);
	assert_int_equal(in.process, c->process);
	if (in.subsamp != c->subsamp)
		fail_msg("%s: subsampling class %d, expected %d", c->name, in.subsamp, c->subsamp);
	const char *why = jh_gpu_refusal(&in, len, NULL);
	if (!why != !c->refusal || (why && strcmp(why, c->refusal) != 0))
		fail_msg("%s: refusal \"%s\", expected \"%s\"", c->name, why ? why : "(none)",
			 c->refusal ? c->refusal : "(none)");
	if (c->e.restart_interval)
		assert_int_equal(in.restart_interval, c->e.restart_interval);
	if (c->e.restart_rows)
		assert_true(in.restart_interval > 0);
	assert_int_equal(in.sof, c->e.arith ? (c->e.progressive ? 10 : 9)
				 : c->e.progressive ? 2
				 : c->e.extended    ? 1
						    : 0);
	check_prefixes(c->name, jpg, len, &in);
	free(jpg);
}

/* Random damage to the headers of real files (and to the first bytes of
 * their scans), and random cuts. */
static void test_random_damage(void **state)
{
	const struct enc encs[] = {
		{YCC(2, 2)}, {YCC(2, 1), .progressive = true, .restart_interval = 2},
		{.kind = KIND_CMYK}, {.kind = KIND_GRAY, .markers = true}, {YCC(4, 1), .arith = true},
		{YCC(1, 1), .scans = one_by_one, .n_scans = 3},
	};
	uint64_t rs = 99;
	int outcomes[3] = {0}, compared = 0;
	for (size_t k = 0; k < sizeof(encs) / sizeof(encs[0]); k++) {
		size_t len;
		uint8_t *jpg = encode(40, 24, &encs[k], &len);
		struct jh_info good;
		assert_int_equal(jh_parse(jpg, len, &good, NULL, 0), 0);
		size_t span = good.scan_offset + 8 < len ? good.scan_offset + 8 : len;
		uint8_t *bad = malloc(len);
		assert_non_null(bad);
		for (int iter = 0; iter < 3000; iter++) {
			memcpy(bad, jpg, len);
			size_t blen = len;
			int edits = 1 + (int)(rng_next(&rs) % 3);
			for (int e = 0; e < edits; e++) {
				size_t at = rng_next(&rs) % span;
				uint64_t r = rng_next(&rs);
				if (r & 1)
					bad[at] = (uint8_t)(r >> 8);
				else if (r & 2)
					bad[at] ^= (uint8_t)(1u << ((r >> 8) % 8));
				else
					bad[at] = (r & 4) ? 0xFF : 0x00;
			}
			if (rng_next(&rs) % 4 == 0)
				blen = 1 + rng_next(&rs) % (len - 1);
			/* A copy of exactly blen bytes, so that ASan sees any read past it. */
			uint8_t *cut = malloc(blen);
			assert_non_null(cut);
			memcpy(cut, bad, blen);
			struct jh_info in;
			char err[160] = "";
			int rc = jh_parse(cut, blen, &in, err, sizeof(err));
			if (rc == 0) {
				assert_true(in.width > 0 && in.height > 0);
				assert_true(in.components >= 1 && in.components <= 4);
				assert_true(in.scan_offset <= blen);
				for (int c = 0; c < 4; c++)
					assert_true(c < in.components ? in.h[c] >= 1 && in.h[c] <= 4 &&
									in.v[c] >= 1 && in.v[c] <= 4
								      : in.h[c] == 0 && in.v[c] == 0);
				assert_true(in.subsamp <= JH_OTHER && in.color <= JH_COLOR_YCCK);
				assert_string_equal(err, "");
				(void)jh_gpu_refusal(&in, blen, NULL);
				compared += agrees_with_libjpeg("damaged file", cut, blen, &in);
				outcomes[0]++;
			} else if (rc == -EBADMSG || rc == -ENODATA) {
				assert_true(err[0] != '\0');
				outcomes[rc == -EBADMSG ? 1 : 2]++;
			} else {
				fail_msg("damaged file: unexpected %d \"%s\"", rc, err);
			}
			free(cut);
		}
		free(bad);
		free(jpg);
	}
	print_message("random damage: %d read (%d also by libjpeg, the same), %d EBADMSG, "
		      "%d ENODATA\n",
		      outcomes[0], compared, outcomes[1], outcomes[2]);
	assert_true(outcomes[0] > 0 && outcomes[1] > 0 && outcomes[2] > 0 && compared > 0);
}

/* The workers' split: what jh_gpu_takes sends to the GPU, what it keeps
 * for the CPU decoder (which handles bad files by on_error). */
static void test_gpu_takes(void **state)
{
	struct jh_info info;
	struct jh_limits none = {0};
	size_t len;
	uint8_t *jpg = encode(97, 61, &(struct enc){.kind = KIND_YCC, .hs = 2, .vs = 2}, &len);
	assert_true(jh_gpu_takes(jpg, len, &none, &info));
	assert_int_equal(info.width, 97);
	assert_int_equal(info.height, 61);
	/* limits: bytes, side, pixels */
	assert_false(jh_gpu_takes(jpg, len, &(struct jh_limits){.max_bytes = len - 1}, &info));
	assert_true(jh_gpu_takes(jpg, len, &(struct jh_limits){.max_bytes = len}, &info));
	assert_false(jh_gpu_takes(jpg, len, &(struct jh_limits){.max_side = 96}, &info));
	assert_false(jh_gpu_takes(jpg, len, &(struct jh_limits){.max_pixels = 97 * 61 - 1}, &info));
	/* cut inside the scan; a marker inside the scan */
	assert_false(jh_gpu_takes(jpg, len - 40, &none, &info));
	uint8_t *bad = malloc(len);
	memcpy(bad, jpg, len);
	bad[len - 30] = 0xff;
	bad[len - 29] = 0xd8; /* a start-of-image inside the scan */
	assert_false(jh_gpu_takes(bad, len, &none, &info));
	free(bad);
	free(jpg);
	/* what the engines do not take */
	jpg = encode(64, 48, &(struct enc){.kind = KIND_YCC, .hs = 2, .vs = 2, .progressive = true}, &len);
	assert_false(jh_gpu_takes(jpg, len, &none, &info));
	free(jpg);
	jpg = encode(64, 48, &(struct enc){.kind = KIND_CMYK, .hs = 1, .vs = 1}, &len);
	assert_false(jh_gpu_takes(jpg, len, &none, &info));
	free(jpg);
	jpg = encode(64, 48, &(struct enc){.kind = KIND_YCC, .hs = 4, .vs = 1}, &len);
	assert_false(jh_gpu_takes(jpg, len, &none, &info));
	free(jpg);
	jpg = encode(64, 48, &(struct enc){.kind = KIND_GRAY, .hs = 1, .vs = 1}, &len);
	assert_true(jh_gpu_takes(jpg, len, &none, &info));
	free(jpg);
	assert_false(jh_gpu_takes((const uint8_t *)"not a jpeg", 10, &none, &info));
}

int main(void)
{
	enum { N_CASES = sizeof(cases) / sizeof(cases[0]) };
	struct CMUnitTest tests[N_CASES + 2];
	size_t n = 0;
	for (size_t i = 0; i < N_CASES; i++)
		tests[n++] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL,
						 (void *)&cases[i]};
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_random_damage);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_gpu_takes);
	return _cmocka_run_group_tests("jpeghdr", tests, n, NULL, NULL);
}
