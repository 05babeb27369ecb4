/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for image/jpeghdr on hand-made byte strings, built segment by
 * segment here (in libjpeg's order, so that the frame header sits at offset
 * 158 as in libjpeg's files):
 *
 *   - a header with every kind of segment before the first scan (APP0,
 *     Exif APP1, APP14, COM, DQT after fill bytes, DRI, DAC, RST and TEM,
 *     DNL, DHT, SOF0, SOS after a fill byte): read as libjpeg reads it, and
 *     every prefix's message naming the segment it ends in and its offset;
 *   - not a JPEG, empty, NULL arguments, a short err buffer;
 *   - each malformed header with its exact message and offset: bytes
 *     between segments, a second SOI, EOI, reserved markers, lengths under
 *     2 or not matching Nf, Ns or DRI's 4, each frame header check (width
 *     0, height 0 for DNL, Nf 0 and 5, precision, sampling factors,
 *     quantization tables, repeated ids), two SOFs (known at the second
 *     marker code), SOS before SOF, each scan header check (unknown,
 *     repeated and out-of-order components, Ns 0 and 5, tables, scan
 *     parameters of each process, 12 blocks per MCU);
 *   - frames libjpeg does not read: 12-bit (refused for the GPU as
 *     "12-bit samples"), lossless, hierarchical (DHP, SOF13); a first scan
 *     with one of three components (single_scan false); 65535 x 65535;
 *     sampling layouts of class JH_OTHER and classes by ratio;
 *   - JFIF and Adobe markers at libjpeg's length thresholds, the last Adobe
 *     transform winning, markers after SOF, and the color space libjpeg
 *     infers from them, with jh_gpu_refusal's answer;
 *   - jh_gpu_refusal's limits (0 none, each side, no overflow), its order,
 *     and an answer for any struct at all.
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

struct hb {
	uint8_t b[4096];
	size_t n;
};

static void put(struct hb *h, const void *p, size_t n)
{
	assert_true(h->n + n <= sizeof(h->b));
	memcpy(h->b + h->n, p, n);
	h->n += n;
}

/* A marker segment with its length computed; returns its offset. */
static size_t put_seg(struct hb *h, unsigned code, const void *body, size_t n)
{
	size_t at = h->n;
	const uint8_t hdr[4] = {0xFF, (uint8_t)code, (uint8_t)((n + 2) >> 8), (uint8_t)(n + 2)};
	put(h, hdr, 4);
	put(h, body, n);
	return at;
}

struct frame {
	unsigned sof, precision, width, height, n;
	uint8_t id[6], hv[6], tq[6];
};

struct scan {
	unsigned n;
	uint8_t id[6], tables[6], ss, se, ahal;
};

static const struct frame frame420 = {0, 8, 640, 480, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0, 1, 1}};
static const struct scan scan3 = {3, {1, 2, 3}, {0x00, 0x11, 0x11}, 0, 63, 0};

static size_t put_sof(struct hb *h, const struct frame *f)
{
	uint8_t b[6 + 3 * 6] = {(uint8_t)f->precision, (uint8_t)(f->height >> 8), (uint8_t)f->height,
				(uint8_t)(f->width >> 8), (uint8_t)f->width, (uint8_t)f->n};
	for (unsigned c = 0; c < f->n && c < 6; c++) {
		b[6 + 3 * c] = f->id[c];
		b[7 + 3 * c] = f->hv[c];
		b[8 + 3 * c] = f->tq[c];
	}
	return put_seg(h, 0xC0 + f->sof, b, 6 + 3 * (f->n < 6 ? f->n : 6));
}

static size_t put_sos(struct hb *h, const struct scan *s)
{
	uint8_t b[1 + 2 * 6 + 3] = {(uint8_t)s->n};
	unsigned n = s->n < 6 ? s->n : 6;
	for (unsigned c = 0; c < n; c++) {
		b[1 + 2 * c] = s->id[c];
		b[2 + 2 * c] = s->tables[c];
	}
	b[1 + 2 * n] = s->ss;
	b[2 + 2 * n] = s->se;
	b[3 + 2 * n] = s->ahal;
	return put_seg(h, 0xDA, b, 4 + 2 * n);
}

static void put_soi(struct hb *h)
{
	put(h, "\xFF\xD8", 2);
}

static size_t put_jfif(struct hb *h)
{
	return put_seg(h, 0xE0, "JFIF\0\x01\x02\0\0\x01\0\x01\0\0", 14);
}

/* DQT tables 0 and 1 (8-bit), one segment each, as libjpeg writes them. */
static void put_dqt(struct hb *h)
{
	for (int t = 0; t < 2; t++) {
		uint8_t dqt[65];
		dqt[0] = (uint8_t)t;
		memset(dqt + 1, 16, 64);
		put_seg(h, 0xDB, dqt, sizeof(dqt));
	}
}

/* DHT: DC 0 and AC 0 with one code each, enough for libjpeg's header
 * reader. */
static void put_dht(struct hb *h)
{
	uint8_t dht[2 * 18] = {0x00, 1};
	dht[18] = 0x10;
	dht[19] = 1;
	put_seg(h, 0xC4, dht, sizeof(dht));
}

/* SOI, JFIF, DQT, the frame, DHT, in libjpeg's order, so that the frame
 * is at offset 158 as in libjpeg's files; returns the frame's offset. The
 * scan is left to the caller. */
static size_t put_head(struct hb *h, const struct frame *f)
{
	put_soi(h);
	put_jfif(h);
	put_dqt(h);
	size_t at = put_sof(h, f);
	put_dht(h);
	return at;
}

static void expect_error(const struct hb *h, int want_rc, const char *want)
{
	struct jh_info in;
	char err[160];
	memset(&in, 0xA5, sizeof(in));
	int rc = jh_parse(h->b, h->n, &in, err, sizeof(err));
	if (rc != want_rc || strcmp(err, want) != 0)
		fail_msg("%d \"%s\", expected %d \"%s\"", rc, err, want_rc, want);
	static const struct jh_info zero;
	assert_memory_equal(&in, &zero, sizeof(in));
}

static struct jh_info expect_ok(const struct hb *h)
{
	struct jh_info in;
	char err[160];
	int rc = jh_parse(h->b, h->n, &in, err, sizeof(err));
	if (rc != 0)
		fail_msg("%d \"%s\"", rc, err);
	return in;
}

static void test_every_segment_kind(void **state)
{
	/* Each kind of segment before the first scan, fill bytes before two
	 * markers, parameterless markers; each prefix must name the segment it
	 * ends in. */
	struct hb h = {0};
	/* Where each segment starts (its fill bytes included), its marker, its
	 * end. */
	struct span {
		size_t from, at, end;
		const char *name;
	} segs[16];
	int n = 0;
#define SEG(call, nm)                                                                         \
	do {                                                                                  \
		size_t from_ = h.n;                                                           \
		size_t at_ = (call);                                                          \
		segs[n++] = (struct span){from_, at_, h.n, nm};                               \
	} while (0)
	put_soi(&h);
	SEG(put_jfif(&h), "APP0");
	SEG(put_seg(&h, 0xE1, "Exif\0\0MM\0*\0\0\0\x08", 14), "APP1");
	SEG(put_seg(&h, 0xEE, "Adobe\0\x64\0\0\0\0\x01", 12), "APP14");
	SEG(put_seg(&h, 0xFE, "comment", 7), "COM");
	size_t fill_from = h.n;
	put(&h, "\xFF\xFF\xFF", 3); /* fill before DQT */
	{
		uint8_t dqt[65] = {0};
		memset(dqt + 1, 1, 64);
		size_t at = put_seg(&h, 0xDB, dqt, sizeof(dqt));
		segs[n++] = (struct span){fill_from, at, h.n, "DQT"};
	}
	SEG(put_seg(&h, 0xDD, "\x00\x07", 2), "DRI");
	SEG(put_seg(&h, 0xCC, "\x00\x10", 2), "DAC");
	put(&h, "\xFF\xD3", 2); /* RST3: no length */
	put(&h, "\xFF\x01", 2); /* TEM: no length */
	SEG(put_seg(&h, 0xDC, "\x01\xE0", 2), "DNL");
	{
		uint8_t dht[18] = {0x00, 1};
		SEG(put_seg(&h, 0xC4, dht, sizeof(dht)), "DHT");
	}
	struct frame f = frame420;
	f.tq[1] = f.tq[2] = 0;
	SEG(put_sof(&h, &f), "SOF0");
	put(&h, "\xFF", 1); /* fill before SOS */
	SEG(put_sos(&h, &scan3), "SOS");
	segs[n - 1].from--;
#undef SEG
	put(&h, "\x12\x34\xFF\xD9", 4); /* "entropy data", EOI */

	struct jh_info in = expect_ok(&h);
	assert_int_equal(in.width, 640);
	assert_int_equal(in.height, 480);
	assert_int_equal(in.restart_interval, 7);
	assert_true(in.jfif && in.adobe && in.adobe_transform == 1);
	assert_true(in.single_scan);
	assert_int_equal(in.scan_offset, h.n - 4);
	assert_int_equal(in.color, JH_COLOR_YCBCR);
	assert_null(jh_gpu_refusal(&in, h.n, NULL));
	assert_true(agrees_with_libjpeg("every segment kind", h.b, h.n, &in));
	check_prefixes("every segment kind", h.b, h.n, &in);

	/* The exact message of each prefix. */
	for (int i = 0; i < n; i++) {
		for (size_t cut = segs[i].from; cut < segs[i].end; cut++) {
			char want[96], err[128];
			if (cut < segs[i].at + 2)
				snprintf(want, sizeof(want), "truncated at offset %zu, before the first scan",
					 segs[i].from);
			else
				snprintf(want, sizeof(want), "truncated in %s at offset %zu", segs[i].name,
					 segs[i].at);
			assert_int_equal(jh_parse(h.b, cut, &in, err, sizeof(err)), -ENODATA);
			if (strcmp(err, want) != 0)
				fail_msg("cut at %zu: \"%s\", expected \"%s\"", cut, err, want);
		}
	}
	char err[64];
	assert_int_equal(jh_parse(h.b, 1, &in, err, sizeof(err)), -ENODATA);
	assert_string_equal(err, "truncated in SOI at offset 0");
}

static void test_not_a_jpeg(void **state)
{
	static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
	struct hb h = {0};
	put(&h, png, sizeof(png));
	expect_error(&h, -EBADMSG, "not a JPEG file (starts with 0x89 0x50)");
	h.n = 1;
	expect_error(&h, -EBADMSG, "not a JPEG file (starts with 0x89)");
	h.n = 0;
	put(&h, "\xFF\xD9", 2);
	expect_error(&h, -EBADMSG, "not a JPEG file (starts with 0xff 0xd9)");
	h.n = 0;
	put(&h, "\xFF\xFF\xD8", 3); /* no fill before SOI */
	expect_error(&h, -EBADMSG, "not a JPEG file (starts with 0xff 0xff)");

	struct jh_info in;
	char err[64];
	const uint8_t one[1] = {0xFF};
	assert_int_equal(jh_parse(one, 0, &in, err, sizeof(err)), -ENODATA);
	assert_string_equal(err, "empty file");
	assert_int_equal(jh_parse(NULL, 0, &in, err, sizeof(err)), -ENODATA);
	assert_string_equal(err, "empty file");
	assert_int_equal(jh_parse(NULL, 5, &in, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "invalid argument");
	assert_int_equal(jh_parse(one, 1, NULL, err, sizeof(err)), -EINVAL);
	/* err may be absent; a short one is cut, not overrun. */
	assert_int_equal(jh_parse(png, sizeof(png), &in, NULL, 0), -EBADMSG);
	char tiny[8];
	assert_int_equal(jh_parse(png, sizeof(png), &in, tiny, sizeof(tiny)), -EBADMSG);
	assert_string_equal(tiny, "not a J");
}

static void test_between_segments(void **state)
{
	struct hb h = {0};
	put_soi(&h);
	size_t app = put_jfif(&h);
	(void)app;
	size_t junk = h.n;
	put(&h, "\x00\xFF\xDB", 3);
	expect_error(&h, -EBADMSG, "expected a marker at offset 20, found 0x00");
	assert_int_equal(junk, 20);

	h.n = junk;
	put(&h, "\xFF\xFF\x00", 3);
	expect_error(&h, -EBADMSG, "expected a marker at offset 21, found 0xff 0x00");

	h.n = junk;
	put(&h, "\xFF\xD8", 2);
	expect_error(&h, -EBADMSG, "SOI at offset 20: a second start of image");
	h.n = junk;
	put(&h, "\xFF\xD9", 2);
	expect_error(&h, -EBADMSG, "EOI at offset 20: end of image before any scan");
	h.n = junk;
	put(&h, "\xFF\xC8\x00\x02", 4);
	expect_error(&h, -EBADMSG, "JPG at offset 20: reserved marker 0xc8: unsupported");
	h.n = junk;
	put(&h, "\xFF\xF7\x00\x02", 4); /* JPEG-LS's SOF55 */
	expect_error(&h, -EBADMSG, "JPG7 at offset 20: reserved marker 0xf7: unsupported");
	h.n = junk;
	put(&h, "\xFF\x02\x00\x02", 4);
	expect_error(&h, -EBADMSG, "0x02 at offset 20: reserved marker 0x02: unsupported");
}

static void test_lengths(void **state)
{
	struct hb h = {0};
	put_soi(&h);
	put(&h, "\xFF\xE1\x00\x01", 4);
	expect_error(&h, -EBADMSG, "APP1 at offset 2: length 1, less than 2");
	h.n = 2;
	put(&h, "\xFF\xDD\x00\x05\x00\x01\x00", 7);
	expect_error(&h, -EBADMSG, "DRI at offset 2: length 5, expected 4");
	h.n = 2;
	put(&h, "\xFF\xDD\x00\x04\x00", 5);
	expect_error(&h, -ENODATA, "truncated in DRI at offset 2");
	/* A length past the end of the data reads as a cut, not a bad length. */
	h.n = 2;
	put(&h, "\xFF\xFE\xFF\xFF\x00", 5);
	expect_error(&h, -ENODATA, "truncated in COM at offset 2");

	/* SOF: length against Nf, known as soon as Nf is in. */
	h.n = 0;
	put_soi(&h);
	put_jfif(&h);
	put_dqt(&h);
	size_t sof = h.n;
	assert_int_equal(sof, 158);
	put(&h, "\xFF\xC0\x00\x0E\x08\x01\xE0\x02\x80\x03", 10);
	expect_error(&h, -EBADMSG, "SOF0 at offset 158: length 14 does not match 3 components");
	h.n = sof;
	put(&h, "\xFF\xC2\x00\x07\x08\x01\xE0\x02\x80", 9);
	expect_error(&h, -EBADMSG, "SOF2 at offset 158: length 7, too short for a frame header");
	h.n = sof;
	put(&h, "\xFF\xC0\x00\x11\x08\x01\xE0\x02", 8);
	expect_error(&h, -ENODATA, "truncated in SOF0 at offset 158");

	/* SOS: length against Ns. */
	h.n = 0;
	put_head(&h, &frame420);
	size_t sos = h.n;
	put(&h, "\xFF\xDA\x00\x0A\x03\x01\x00", 7);
	char want[96];
	snprintf(want, sizeof(want), "SOS at offset %zu: length 10 does not match 3 components", sos);
	expect_error(&h, -EBADMSG, want);
	h.n = sos;
	put(&h, "\xFF\xDA\x00\x02", 4);
	snprintf(want, sizeof(want), "SOS at offset %zu: length 2, too short for a scan header", sos);
	expect_error(&h, -EBADMSG, want);
	h.n = sos;
	put(&h, "\xFF\xDA\x00\x0C\x03\x01\x00\x02\x11\x03\x11\x00\x3F", 13);
	snprintf(want, sizeof(want), "truncated in SOS at offset %zu", sos);
	expect_error(&h, -ENODATA, want);
}

static void test_frame_errors(void **state)
{
	struct {
		struct frame f;
		const char *want; /* after "SOF<n> at offset 158: " */
	} bad[] = {
		{{0, 8, 0, 480, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0}}, "width 0"},
		{{0, 8, 640, 0, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0}},
		 "height 0 (given later by a DNL marker): unsupported"},
		{{0, 8, 640, 480, 5, {1, 2, 3, 4, 5}, {0x11, 0x11, 0x11, 0x11, 0x11}, {0}},
		 "5 components: unsupported (1 to 4)"},
		{{0, 8, 640, 480, 0, {0}, {0}, {0}}, "no components"},
		{{0, 7, 640, 480, 1, {1}, {0x11}, {0}}, "precision 7, expected 8 or 12 bits"},
		{{2, 16, 640, 480, 1, {1}, {0x11}, {0}}, "precision 16, expected 8 or 12 bits"},
		{{3, 17, 640, 480, 1, {1}, {0x11}, {0}}, "precision 17, expected 2 to 16 bits"},
		{{0, 8, 640, 480, 3, {1, 2, 3}, {0x22, 0x01, 0x11}, {0}},
		 "component id 2: sampling factors 0x1, expected 1 to 4"},
		{{0, 8, 640, 480, 3, {1, 2, 3}, {0x25, 0x11, 0x11}, {0}},
		 "component id 1: sampling factors 2x5, expected 1 to 4"},
		{{0, 8, 640, 480, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0, 1, 4}},
		 "component id 3: quantization table 4, expected 0 to 3"},
		{{0, 8, 640, 480, 3, {1, 2, 1}, {0x22, 0x11, 0x11}, {0}}, "component id 1 appears twice"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct hb h = {0};
		size_t at = put_head(&h, &bad[i].f);
		assert_int_equal(at, 158);
		put_sos(&h, &(struct scan){1, {1}, {0}, 0, 63, 0});
		char want[160];
		snprintf(want, sizeof(want), "SOF%u at offset 158: %s", bad[i].f.sof, bad[i].want);
		expect_error(&h, -EBADMSG, want);
	}

	/* Two frame headers; a scan before any. */
	struct hb h = {0};
	put_head(&h, &frame420);
	struct frame second = frame420;
	second.sof = 2;
	size_t at = put_sof(&h, &second);
	char want[128];
	snprintf(want, sizeof(want),
		 "SOF2 at offset %zu: a second frame header (the first, SOF0, at offset 158)", at);
	expect_error(&h, -EBADMSG, want);
	h.n = at + 2; /* known at the marker code */
	expect_error(&h, -EBADMSG, want);

	h.n = 0;
	put_soi(&h);
	put_dqt(&h);
	put_dht(&h);
	at = put_sos(&h, &scan3);
	snprintf(want, sizeof(want), "SOS at offset %zu: a scan before the frame header (SOF)", at);
	expect_error(&h, -EBADMSG, want);
}

static void test_scan_errors(void **state)
{
	struct {
		struct frame f;
		struct scan s;
		const char *want; /* after "SOS at offset N: " */
	} bad[] = {
		{frame420, {3, {1, 2, 9}, {0, 0x11, 0x11}, 0, 63, 0}, "component id 9 is not in the frame"},
		{frame420, {2, {2, 2}, {0x11, 0x11}, 0, 63, 0}, "component id 2 appears twice"},
		{frame420, {2, {2, 1}, {0x11, 0}, 0, 63, 0}, "component id 1 out of the frame's order"},
		{frame420, {0, {0}, {0}, 0, 63, 0}, "no components"},
		{frame420, {5, {1, 2, 3, 4, 5}, {0}, 0, 63, 0}, "5 components, more than 4"},
		{frame420, {3, {1, 2, 3}, {0, 0x14, 0x11}, 0, 63, 0},
		 "component id 2: entropy tables 1/4, expected 0 to 3"},
		{frame420, {3, {1, 2, 3}, {0, 0x11, 0x11}, 0, 62, 0},
		 "Ss 0, Se 62, Ah 0, Al 0 do not fit a sequential scan"},
		{frame420, {3, {1, 2, 3}, {0, 0x11, 0x11}, 0, 63, 0x01},
		 "Ss 0, Se 63, Ah 0, Al 1 do not fit a sequential scan"},
		{{2, 8, 64, 64, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0}}, {3, {1, 2, 3}, {0}, 0, 5, 0},
		 "Ss 0, Se 5, Ah 0, Al 0 do not fit a progressive scan"},
		{{2, 8, 64, 64, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0}}, {2, {1, 2}, {0}, 1, 5, 0},
		 "Ss 1, Se 5, Ah 0, Al 0 do not fit a progressive scan"},
		{{2, 8, 64, 64, 1, {1}, {0x11}, {0}}, {1, {1}, {0}, 1, 64, 0},
		 "Ss 1, Se 64, Ah 0, Al 0 do not fit a progressive scan"},
		{{2, 8, 64, 64, 1, {1}, {0x11}, {0}}, {1, {1}, {0}, 0, 0, 0xE0},
		 "Ss 0, Se 0, Ah 14, Al 0 do not fit a progressive scan"},
		{{3, 8, 64, 64, 1, {1}, {0x11}, {0}}, {1, {1}, {0}, 0, 0, 0},
		 "Ss 0, Se 0, Ah 0, Al 0 do not fit a lossless scan"},
		/* 4 + 4 + 4 blocks: T.81 allows 10 in an interleaved MCU. */
		{{0, 8, 64, 64, 3, {1, 2, 3}, {0x22, 0x22, 0x22}, {0}}, scan3, "12 blocks per MCU, more than 10"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct hb h = {0};
		put_head(&h, &bad[i].f);
		size_t at = put_sos(&h, &bad[i].s);
		char want[160];
		snprintf(want, sizeof(want), "SOS at offset %zu: %s", at, bad[i].want);
		expect_error(&h, -EBADMSG, want);
	}
}

/* Frames libjpeg does not read: 12-bit, lossless, hierarchical; a scan of
 * one of three components; the largest dimensions. */
static void test_other_frames(void **state)
{
	struct hb h = {0};
	struct frame f = frame420;
	f.sof = 1;
	f.precision = 12;
	put_head(&h, &f);
	put_sos(&h, &scan3);
	struct jh_info in = expect_ok(&h);
	assert_int_equal(in.precision, 12);
	assert_int_equal(in.process, JH_EXTENDED);
	assert_false(in.arithmetic);
	assert_int_equal(in.subsamp, JH_420);
	assert_string_equal(jh_gpu_refusal(&in, h.n, NULL), "12-bit samples");
	f.sof = 0; /* baseline is 8-bit; a 12-bit SOF0 is read, and refused the same */
	h.n = 0;
	put_head(&h, &f);
	put_sos(&h, &scan3);
	in = expect_ok(&h);
	assert_string_equal(jh_gpu_refusal(&in, h.n, NULL), "12-bit samples");

	h.n = 0;
	put_head(&h, &(struct frame){3, 16, 300, 200, 1, {1}, {0x11}, {0}});
	put_sos(&h, &(struct scan){1, {1}, {0}, 1, 0, 0});
	in = expect_ok(&h);
	assert_int_equal(in.process, JH_LOSSLESS);
	assert_int_equal(in.precision, 16);
	assert_int_equal(in.subsamp, JH_GRAY);
	assert_string_equal(jh_gpu_refusal(&in, h.n, NULL), "lossless");

	h.n = 0;
	put_head(&h, &(struct frame){11, 8, 300, 200, 1, {1}, {0x11}, {0}});
	put_sos(&h, &(struct scan){1, {1}, {0}, 7, 0, 0x03});
	in = expect_ok(&h);
	assert_int_equal(in.process, JH_LOSSLESS);
	assert_true(in.arithmetic);

	h.n = 0; /* DHP, then a baseline first frame */
	put_soi(&h);
	put_seg(&h, 0xDE, "\x08\x00\xC8\x01\x2C\x01\x01\x11\x00", 9);
	put_dqt(&h);
	put_sof(&h, &(struct frame){0, 8, 300, 200, 1, {1}, {0x11}, {0}});
	put_dht(&h);
	put_sos(&h, &(struct scan){1, {1}, {0}, 0, 63, 0});
	in = expect_ok(&h);
	assert_int_equal(in.process, JH_HIERARCHICAL);
	assert_int_equal(in.sof, 0);
	assert_string_equal(jh_gpu_refusal(&in, h.n, NULL), "hierarchical");

	h.n = 0;
	put_head(&h, &(struct frame){13, 8, 300, 200, 1, {1}, {0x11}, {0}});
	put_sos(&h, &(struct scan){1, {1}, {0}, 0, 63, 0});
	in = expect_ok(&h);
	assert_int_equal(in.process, JH_HIERARCHICAL);
	assert_true(in.arithmetic);

	/* The first scan carries one of the three components. */
	h.n = 0;
	put_head(&h, &frame420);
	put_sos(&h, &(struct scan){1, {1}, {0}, 0, 63, 0});
	in = expect_ok(&h);
	assert_false(in.single_scan);
	assert_int_equal(in.subsamp, JH_420);
	assert_string_equal(jh_gpu_refusal(&in, h.n, NULL), "components in separate scans");
	assert_true(agrees_with_libjpeg("one of three", h.b, h.n, &in));

	/* 65535 x 65535, beyond libjpeg's 65500. */
	h.n = 0;
	put_head(&h, &(struct frame){0, 8, 65535, 65535, 3, {1, 2, 3}, {0x22, 0x11, 0x11}, {0}});
	put_sos(&h, &scan3);
	in = expect_ok(&h);
	assert_int_equal(in.width, 65535);
	assert_int_equal(in.height, 65535);
	assert_null(jh_gpu_refusal(&in, h.n, NULL));

	/* Odd layouts: 3x1 luma, chroma of two ratios, chroma above luma,
	 * larger factors of a known ratio, K unlike luma, two components. */
	const struct {
		struct frame f;
		enum jh_subsamp subsamp;
	} layouts[] = {
		{{0, 8, 64, 64, 3, {1, 2, 3}, {0x31, 0x11, 0x11}, {0}}, JH_OTHER},
		{{0, 8, 64, 64, 3, {1, 2, 3}, {0x22, 0x11, 0x21}, {0}}, JH_OTHER},
		{{0, 8, 64, 64, 3, {1, 2, 3}, {0x12, 0x21, 0x21}, {0}}, JH_OTHER},
		{{0, 8, 64, 64, 3, {1, 2, 3}, {0x42, 0x21, 0x21}, {0}}, JH_420},
		{{0, 8, 64, 64, 3, {1, 2, 3}, {0x22, 0x21, 0x21}, {0}}, JH_440},
		{{0, 8, 64, 64, 4, {1, 2, 3, 4}, {0x22, 0x11, 0x11, 0x11}, {0}}, JH_OTHER},
		{{0, 8, 64, 64, 2, {1, 2}, {0x21, 0x11}, {0}}, JH_422},
	};
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		h.n = 0;
		put_head(&h, &layouts[i].f);
		put_sos(&h, &(struct scan){1, {1}, {0}, 0, 63, 0}); /* no MCU limit */
		in = expect_ok(&h);
		if (in.subsamp != layouts[i].subsamp)
			fail_msg("layout %zu: class %d, expected %d", i, in.subsamp, layouts[i].subsamp);
	}
	h.n = 0;
	put_head(&h, &layouts[0].f);
	put_sos(&h, &scan3);
	in = expect_ok(&h);
	assert_string_equal(jh_gpu_refusal(&in, h.n, NULL), "unusual subsampling");
}

/* JFIF and Adobe markers by libjpeg's tests: the data lengths it looks at,
 * the last Adobe marker's transform, markers after the frame header; and
 * the color space that follows, libjpeg's. */
static void test_app_markers(void **state)
{
	static const struct {
		const char *app0, *app14, *app14_after; /* data, NULL for none */
		size_t app0_len, app14_len;
		unsigned n;
		bool jfif, adobe;
		uint8_t transform;
		enum jh_color color;
		const char *refusal;
	} apps[] = {
		{"JFIF\0\x01\x02\0\0\x01\0\x01\0", NULL, NULL, 13, 0, 3, false, false, 0,
		 JH_COLOR_YCBCR, NULL},
		{"JFIF\0\x01\x02\0\0\x01\0\x01\0\0", NULL, NULL, 14, 0, 3, true, false, 0,
		 JH_COLOR_YCBCR, NULL},
		{"JFXX\0\x10\0\0\0\0\0\0\0\0", NULL, NULL, 14, 0, 3, false, false, 0,
		 JH_COLOR_YCBCR, NULL},
		{NULL, "Adobe\0\x64\0\0\0\0", NULL, 0, 11, 3, false, false, 0, JH_COLOR_YCBCR,
		 NULL},
		{NULL, "Adobe\0\x64\0\0\0\0\x00", NULL, 0, 12, 3, false, true, 0, JH_COLOR_RGB,
		 "RGB (Adobe transform 0)"},
		{NULL, "Adobe\0\x64\0\0\0\0\x02", NULL, 0, 12, 3, false, true, 2, JH_COLOR_YCBCR,
		 "Adobe transform other than 0 or 1"},
		{NULL, "Adobe\0\x64\0\0\0\0\x00", "Adobe\0\x64\0\0\0\0\x01", 0, 12, 3, false,
		 true, 1, JH_COLOR_YCBCR, NULL},
		{"JFIF\0\x01\x02\0\0\x01\0\x01\0\0", "Adobe\0\x64\0\0\0\0\x00", NULL, 14, 12,
		 3, true, true, 0, JH_COLOR_YCBCR, "RGB (Adobe transform 0)"},
		{NULL, NULL, NULL, 0, 0, 4, false, false, 0, JH_COLOR_CMYK, "4 components (CMYK/YCCK)"},
		{NULL, "Adobe\0\x64\0\0\0\0\x01", NULL, 0, 12, 4, false, true, 1, JH_COLOR_YCCK,
		 "4 components (CMYK/YCCK)"},
		{NULL, NULL, "Adobe\0\x64\0\0\0\0\x02", 0, 12, 4, false, true, 2, JH_COLOR_YCCK,
		 "4 components (CMYK/YCCK)"},
	};
	for (size_t i = 0; i < sizeof(apps) / sizeof(apps[0]); i++) {
		struct hb h = {0};
		put_soi(&h);
		if (apps[i].app0)
			put_seg(&h, 0xE0, apps[i].app0, apps[i].app0_len);
		if (apps[i].app14)
			put_seg(&h, 0xEE, apps[i].app14, apps[i].app14_len);
		put_dqt(&h);
		put_sof(&h, &(struct frame){0, 8, 64, 48, apps[i].n, {1, 2, 3, 4},
					    {0x11, 0x11, 0x11, 0x11}, {0}});
		if (apps[i].app14_after)
			put_seg(&h, 0xEE, apps[i].app14_after, apps[i].app14_len);
		put_dht(&h);
		put_sos(&h, &(struct scan){apps[i].n, {1, 2, 3, 4}, {0}, 0, 63, 0});
		struct jh_info in = expect_ok(&h);
		char what[32];
		snprintf(what, sizeof(what), "APP case %zu", i);
		assert_true(agrees_with_libjpeg(what, h.b, h.n, &in));
		if (in.jfif != apps[i].jfif || in.adobe != apps[i].adobe ||
		    in.adobe_transform != apps[i].transform || in.color != apps[i].color)
			fail_msg("%s: jfif %d adobe %d transform %u color %d", what, in.jfif, in.adobe,
				 in.adobe_transform, in.color);
		const char *why = jh_gpu_refusal(&in, h.n, NULL);
		if (!why != !apps[i].refusal || (why && strcmp(why, apps[i].refusal) != 0))
			fail_msg("%s: refusal \"%s\"", what, why ? why : "(none)");
	}
}

static void test_refusal_limits_and_order(void **state)
{
	struct hb h = {0};
	put_head(&h, &frame420);
	put_sos(&h, &scan3);
	struct jh_info in = expect_ok(&h);
	struct jh_limits lim = {0};
	assert_null(jh_gpu_refusal(&in, 1u << 30, &lim)); /* 0: no limit */
	lim = (struct jh_limits){.max_bytes = 1000, .max_side = 640, .max_pixels = 640 * 480};
	assert_null(jh_gpu_refusal(&in, 1000, &lim));
	assert_string_equal(jh_gpu_refusal(&in, 1001, &lim), "over max_bytes");
	lim.max_side = 639;
	assert_string_equal(jh_gpu_refusal(&in, 1000, &lim), "over max_side");
	lim.max_side = 479; /* each side */
	in.width = 479;
	assert_string_equal(jh_gpu_refusal(&in, 1000, &lim), "over max_side");
	in.width = 640;
	lim.max_side = 0;
	lim.max_pixels = 640 * 480 - 1;
	assert_string_equal(jh_gpu_refusal(&in, 1000, &lim), "over max_pixels");
	in.height = 100000; /* no header has these; the struct can */
	in.width = 100000;
	lim.max_pixels = 100000ull * 100000 - 1; /* no 32-bit overflow */
	assert_string_equal(jh_gpu_refusal(&in, 1000, &lim), "over max_pixels");

	/* The format comes first, then the limits; and the format's own order. */
	in = expect_ok(&h);
	in.process = JH_PROGRESSIVE;
	in.components = 4;
	assert_string_equal(jh_gpu_refusal(&in, 1u << 30, &lim), "progressive");
	in.arithmetic = true;
	assert_string_equal(jh_gpu_refusal(&in, 1u << 30, &lim), "arithmetic coding");
	in.precision = 12;
	assert_string_equal(jh_gpu_refusal(&in, 1u << 30, &lim), "12-bit samples");
	in.process = JH_LOSSLESS;
	assert_string_equal(jh_gpu_refusal(&in, 1u << 30, &lim), "lossless");
	in = expect_ok(&h);
	in.adobe = true;
	in.adobe_transform = 2;
	assert_string_equal(jh_gpu_refusal(&in, 0, NULL), "Adobe transform other than 0 or 1");
	in.adobe_transform = 0;
	assert_string_equal(jh_gpu_refusal(&in, 0, NULL), "RGB (Adobe transform 0)");
	assert_string_equal(jh_gpu_refusal(NULL, 0, NULL), "no header");

	/* Any struct at all, however it came to be, gets an answer. */
	uint64_t rs = 5;
	for (int i = 0; i < 10000; i++) {
		uint8_t raw[sizeof(in)];
		for (size_t k = 0; k < sizeof(raw); k++)
			raw[k] = (uint8_t)rng_next(&rs);
		raw[offsetof(struct jh_info, jfif)] &= 1; /* a bool holds 0 or 1 */
		raw[offsetof(struct jh_info, adobe)] &= 1;
		raw[offsetof(struct jh_info, arithmetic)] &= 1;
		raw[offsetof(struct jh_info, single_scan)] &= 1;
		memcpy(&in, raw, sizeof(in));
		(void)jh_gpu_refusal(&in, rng_next(&rs), &lim);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_segment_kind),
		cmocka_unit_test(test_not_a_jpeg),
		cmocka_unit_test(test_between_segments),
		cmocka_unit_test(test_lengths),
		cmocka_unit_test(test_frame_errors),
		cmocka_unit_test(test_scan_errors),
		cmocka_unit_test(test_other_frames),
		cmocka_unit_test(test_app_markers),
		cmocka_unit_test(test_refusal_limits_and_order),
	};
	return cmocka_run_group_tests_name("jpeghdr_bytes", tests, NULL, NULL);
}
