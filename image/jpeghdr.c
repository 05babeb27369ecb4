/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jpeghdr: a JPEG header reader that needs no libjpeg, and the hardware
 * decoder's rule (jpeghdr.h).
 *
 * One pass over the bytes, one marker at a time. Every read is preceded by
 * a check that the byte is below len (jh_need), so running out of data is
 * always -ENODATA and never a read past the end. Checks that decide a
 * header is malformed run as soon as the bytes they look at are there
 * (a second SOF at its marker code, a wrong SOF or SOS length as soon as
 * Nf or Ns is in), before the rest of the segment is required: every
 * prefix of a good file still runs out of data first, and a bad length is
 * reported as one even in a file that is also cut short.
 *
 * The loop advances by at least one byte per step (fill bytes one at a
 * time, markers by two, segments by their length, at least 2), so its work
 * is linear in len.
 */
#include "image/jpeghdr.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/errtext.h"

/* Marker codes (the byte after 0xFF), T.81 table B.1. */
enum {
	JH_TEM = 0x01,
	JH_SOF0 = 0xC0,
	JH_DHT = 0xC4,
	JH_JPG = 0xC8,
	JH_DAC = 0xCC,
	JH_SOF15 = 0xCF,
	JH_RST0 = 0xD0,
	JH_RST7 = 0xD7,
	JH_SOI = 0xD8,
	JH_EOI = 0xD9,
	JH_SOS = 0xDA,
	JH_DQT = 0xDB,
	JH_DNL = 0xDC,
	JH_DRI = 0xDD,
	JH_DHP = 0xDE,
	JH_EXP = 0xDF,
	JH_APP0 = 0xE0,
	JH_APP14 = 0xEE,
	JH_APP15 = 0xEF,
	JH_JPG0 = 0xF0,
	JH_JPG13 = 0xFD,
	JH_COM = 0xFE,
};

#define JH_MAX_COMPONENTS 4 /* what we accept in a frame; also T.81's limit per scan */
#define JH_MAX_MCU_BLOCKS 10 /* T.81 B.2.3: data units in an interleaved scan's MCU */

/* Bytes of APP0 and APP14 data libjpeg looks at for its JFIF and Adobe
 * markers (jdmarker.c: APP0_DATA_LEN, APP14_DATA_LEN); the same lengths
 * here keep jfif and adobe what libjpeg says. */
#define JH_JFIF_DATA_BYTES 14
#define JH_ADOBE_DATA_BYTES 12
#define JH_ADOBE_TRANSFORM_AT 11

struct jh_parser {
	const uint8_t *p;
	size_t len;
	char *err;
	size_t err_cap;
	struct jh_info *info;
	uint8_t ids[JH_MAX_COMPONENTS]; /* component identifiers, frame order */
	bool saw_sof, saw_dhp;
	size_t sof_at;
};

/* One marker segment: the marker at offset at (its 0xFF), its length
 * field seg_len, its parameters starting at body. */
struct jh_segment {
	uint8_t code;
	size_t at, body;
	unsigned seg_len;
};

/* The marker's name in messages: SOF2, DHT, APP14, RST3, JPG13, ...; a
 * reserved code as 0xnn. Made only for a message. */
static void jh_marker_name(uint8_t code, char name[8])
{
	static const char *const fixed[] = {
		[JH_DHT - JH_SOF0] = "DHT",  [JH_JPG - JH_SOF0] = "JPG",
		[JH_DAC - JH_SOF0] = "DAC",  [JH_SOI - JH_SOF0] = "SOI",
		[JH_EOI - JH_SOF0] = "EOI",  [JH_SOS - JH_SOF0] = "SOS",
		[JH_DQT - JH_SOF0] = "DQT",  [JH_DNL - JH_SOF0] = "DNL",
		[JH_DRI - JH_SOF0] = "DRI",  [JH_DHP - JH_SOF0] = "DHP",
		[JH_EXP - JH_SOF0] = "EXP",  [JH_COM - JH_SOF0] = "COM",
	};
	size_t i = (size_t)code - JH_SOF0;
	if (code >= JH_SOF0 && i < sizeof(fixed) / sizeof(fixed[0]) && fixed[i])
		snprintf(name, 8, "%s", fixed[i]);
	else if (code >= JH_SOF0 && code <= JH_SOF15)
		snprintf(name, 8, "SOF%d", code - JH_SOF0);
	else if (code >= JH_RST0 && code <= JH_RST7)
		snprintf(name, 8, "RST%d", code - JH_RST0);
	else if (code >= JH_APP0 && code <= JH_APP15)
		snprintf(name, 8, "APP%d", code - JH_APP0);
	else if (code >= JH_JPG0 && code <= JH_JPG13)
		snprintf(name, 8, "JPG%d", code - JH_JPG0);
	else if (code == JH_TEM)
		snprintf(name, 8, "TEM");
	else
		snprintf(name, 8, "0x%02x", code);
}

static int jh_fail(struct jh_parser *ps, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int jh_fail(struct jh_parser *ps, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verrtext(ps->err, ps->err_cap, rc, fmt, ap);
	va_end(ap);
	return rc;
}

/* A segment's own complaint: "<name> at offset N: <what>". */
static int jh_bad(struct jh_parser *ps, const struct jh_segment *s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int jh_bad(struct jh_parser *ps, const struct jh_segment *s, const char *fmt, ...)
{
	char what[160], name[8];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	jh_marker_name(s->code, name);
	return jh_fail(ps, -EBADMSG, "%s at offset %zu: %s", name, s->at, what);
}

/* 0 when data[0..end) is there, else -ENODATA naming the segment. */
static int jh_need(struct jh_parser *ps, const struct jh_segment *s, size_t end)
{
	if (end <= ps->len)
		return 0;
	char name[8];
	jh_marker_name(s->code, name);
	return jh_fail(ps, -ENODATA, "truncated in %s at offset %zu", name, s->at);
}

static unsigned jh_be16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

static bool jh_is_sof(uint8_t code)
{
	return code >= JH_SOF0 && code <= JH_SOF15 && code != JH_DHT && code != JH_JPG &&
	       code != JH_DAC;
}

/* What the frame's SOFn says about the scans: sequential DCT, progressive
 * DCT or lossless (T.81 table B.1; the differential ones alike). */
enum jh_kind { JH_KIND_SEQUENTIAL, JH_KIND_PROGRESSIVE, JH_KIND_LOSSLESS };

static enum jh_kind jh_kind_of(uint8_t sof)
{
	switch (sof & 3) {
	case 2:
		return JH_KIND_PROGRESSIVE;
	case 3:
		return JH_KIND_LOSSLESS;
	default:
		return JH_KIND_SEQUENTIAL;
	}
}

static enum jh_process jh_process_of(uint8_t sof)
{
	if (sof == 0)
		return JH_BASELINE;
	if ((sof & 7) >= 5) /* SOF5-7, SOF13-15: differential */
		return JH_HIERARCHICAL;
	switch (jh_kind_of(sof)) {
	case JH_KIND_PROGRESSIVE:
		return JH_PROGRESSIVE;
	case JH_KIND_LOSSLESS:
		return JH_LOSSLESS;
	case JH_KIND_SEQUENTIAL:
		break;
	}
	return JH_EXTENDED;
}

/* The subsampling class (jpeghdr.h, enum jh_subsamp). */
static enum jh_subsamp jh_classify(const struct jh_info *in)
{
	static const struct {
		uint8_t h, v;
		enum jh_subsamp subsamp;
	} ratios[] = {
		{1, 1, JH_444}, {2, 1, JH_422}, {2, 2, JH_420},
		{1, 2, JH_440}, {4, 1, JH_411}, {4, 2, JH_410},
	};
	if (in->components == 1)
		return JH_GRAY;
	if (in->components == 4 && (in->h[3] != in->h[0] || in->v[3] != in->v[0]))
		return JH_OTHER;
	int last_chroma = in->components >= 3 ? 2 : 1;
	unsigned rh = 0, rv = 0;
	for (int c = 1; c <= last_chroma; c++) {
		if (in->h[0] % in->h[c] || in->v[0] % in->v[c])
			return JH_OTHER;
		unsigned h = in->h[0] / in->h[c], v = in->v[0] / in->v[c];
		if (c > 1 && (h != rh || v != rv))
			return JH_OTHER;
		rh = h;
		rv = v;
	}
	for (size_t i = 0; i < sizeof(ratios) / sizeof(ratios[0]); i++)
		if (ratios[i].h == rh && ratios[i].v == rv)
			return ratios[i].subsamp;
	return JH_OTHER;
}

/* libjpeg-turbo's jpeg_color_space for the header (jpeghdr.h, enum jh_color). */
static enum jh_color jh_color_of(const struct jh_info *in, const uint8_t *ids)
{
	switch (in->components) {
	case 1:
		return JH_COLOR_GRAY;
	case 3:
		if (in->jfif)
			return JH_COLOR_YCBCR;
		if (in->adobe)
			return in->adobe_transform == 0 ? JH_COLOR_RGB : JH_COLOR_YCBCR;
		if (ids[0] == 'R' && ids[1] == 'G' && ids[2] == 'B')
			return JH_COLOR_RGB;
		return JH_COLOR_YCBCR;
	case 4:
		if (in->adobe && in->adobe_transform != 0)
			return JH_COLOR_YCCK;
		return JH_COLOR_CMYK;
	default:
		return JH_COLOR_UNKNOWN;
	}
}

/* Length checks that need at most the first parameter byte: done before
 * the rest of the segment is required (see the top of the file). */
static int jh_check_length(struct jh_parser *ps, const struct jh_segment *s)
{
	int rc;
	if (s->code == JH_DRI && s->seg_len != 4)
		return jh_bad(ps, s, "length %u, expected 4", s->seg_len);
	if (jh_is_sof(s->code)) {
		if (s->seg_len < 8)
			return jh_bad(ps, s, "length %u, too short for a frame header", s->seg_len);
		if ((rc = jh_need(ps, s, s->body + 6)) < 0)
			return rc;
		unsigned nf = ps->p[s->body + 5];
		if (s->seg_len != 8 + 3 * nf)
			return jh_bad(ps, s, "length %u does not match %u components", s->seg_len, nf);
	}
	if (s->code == JH_SOS) {
		if (s->seg_len < 3)
			return jh_bad(ps, s, "length %u, too short for a scan header", s->seg_len);
		if ((rc = jh_need(ps, s, s->body + 1)) < 0)
			return rc;
		unsigned ns = ps->p[s->body];
		if (s->seg_len != 6 + 2 * ns)
			return jh_bad(ps, s, "length %u does not match %u components", s->seg_len, ns);
	}
	return 0;
}

/* The frame header, whole and of the right length. */
static int jh_frame(struct jh_parser *ps, const struct jh_segment *s)
{
	const uint8_t *b = ps->p + s->body;
	struct jh_info *in = ps->info;
	unsigned precision = b[0], height = jh_be16(b + 1), width = jh_be16(b + 3), nf = b[5];
	uint8_t sof = (uint8_t)(s->code - JH_SOF0);

	if (nf == 0)
		return jh_bad(ps, s, "no components");
	if (nf > JH_MAX_COMPONENTS)
		return jh_bad(ps, s, "%u components: unsupported (1 to %d)", nf, JH_MAX_COMPONENTS);
	if (jh_kind_of(sof) == JH_KIND_LOSSLESS) {
		if (precision < 2 || precision > 16)
			return jh_bad(ps, s, "precision %u, expected 2 to 16 bits", precision);
	} else if (precision != 8 && precision != 12) {
		return jh_bad(ps, s, "precision %u, expected 8 or 12 bits", precision);
	}
	if (width == 0)
		return jh_bad(ps, s, "width 0");
	if (height == 0)
		return jh_bad(ps, s, "height 0 (given later by a DNL marker): unsupported");
	for (unsigned c = 0; c < nf; c++) {
		const uint8_t *cp = b + 6 + 3 * c;
		unsigned h = cp[1] >> 4, v = cp[1] & 15, tq = cp[2];
		for (unsigned k = 0; k < c; k++)
			if (ps->ids[k] == cp[0])
				return jh_bad(ps, s, "component id %u appears twice", cp[0]);
		if (h < 1 || h > 4 || v < 1 || v > 4)
			return jh_bad(ps, s, "component id %u: sampling factors %ux%u, expected 1 to 4",
				      cp[0], h, v);
		if (tq > 3)
			return jh_bad(ps, s, "component id %u: quantization table %u, expected 0 to 3",
				      cp[0], tq);
		ps->ids[c] = cp[0];
		in->h[c] = (uint8_t)h;
		in->v[c] = (uint8_t)v;
	}
	in->width = width;
	in->height = height;
	in->components = (uint8_t)nf;
	in->precision = (uint8_t)precision;
	in->sof = sof;
	in->process = jh_process_of(sof);
	in->arithmetic = sof >= 9;
	in->subsamp = jh_classify(in);
	return 0;
}

/* Ss, Se, Ah, Al against what the frame's process allows (jpeghdr.h). */
static bool jh_scan_params_ok(uint8_t sof, unsigned ns, unsigned ss, unsigned se, unsigned ah,
			      unsigned al)
{
	switch (jh_kind_of(sof)) {
	case JH_KIND_SEQUENTIAL:
		return ss == 0 && se == 63 && ah == 0 && al == 0;
	case JH_KIND_PROGRESSIVE:
		if (ss > se || se > 63 || ah > 13 || al > 13)
			return false;
		return ss == 0 ? se == 0 : ns == 1;
	case JH_KIND_LOSSLESS:
		break;
	}
	return ss >= 1 && ss <= 7 && se == 0 && ah == 0;
}

/* The first scan header, whole and of the right length. */
static int jh_scan(struct jh_parser *ps, const struct jh_segment *s)
{
	const uint8_t *b = ps->p + s->body;
	struct jh_info *in = ps->info;
	unsigned ns = b[0], blocks = 0;
	int prev = -1;

	if (ns == 0)
		return jh_bad(ps, s, "no components");
	if (ns > JH_MAX_COMPONENTS)
		return jh_bad(ps, s, "%u components, more than %d", ns, JH_MAX_COMPONENTS);
	for (unsigned i = 0; i < ns; i++) {
		unsigned id = b[1 + 2 * i], td = b[2 + 2 * i] >> 4, ta = b[2 + 2 * i] & 15;
		int c = 0;
		while (c < in->components && ps->ids[c] != id)
			c++;
		if (c == in->components)
			return jh_bad(ps, s, "component id %u is not in the frame", id);
		if (c == prev)
			return jh_bad(ps, s, "component id %u appears twice", id);
		if (c < prev)
			return jh_bad(ps, s, "component id %u out of the frame's order", id);
		if (td > 3 || ta > 3)
			return jh_bad(ps, s, "component id %u: entropy tables %u/%u, expected 0 to 3",
				      id, td, ta);
		prev = c;
		blocks += (unsigned)in->h[c] * in->v[c];
	}
	if (ns > 1 && blocks > JH_MAX_MCU_BLOCKS)
		return jh_bad(ps, s, "%u blocks per MCU, more than %d", blocks, JH_MAX_MCU_BLOCKS);
	unsigned ss = b[1 + 2 * ns], se = b[2 + 2 * ns], ah = b[3 + 2 * ns] >> 4,
		 al = b[3 + 2 * ns] & 15;
	if (!jh_scan_params_ok(in->sof, ns, ss, se, ah, al))
		return jh_bad(ps, s, "Ss %u, Se %u, Ah %u, Al %u do not fit a %s scan", ss, se, ah,
			      al,
			      jh_kind_of(in->sof) == JH_KIND_PROGRESSIVE ? "progressive"
			      : jh_kind_of(in->sof) == JH_KIND_LOSSLESS  ? "lossless"
									 : "sequential");
	in->single_scan = ns == in->components;
	return 0;
}

/* APP0 and APP14: the JFIF and Adobe markers, by libjpeg's tests. */
static void jh_app(struct jh_parser *ps, const struct jh_segment *s)
{
	const uint8_t *b = ps->p + s->body;
	size_t n = s->seg_len - 2;
	if (s->code == JH_APP0 && n >= JH_JFIF_DATA_BYTES && memcmp(b, "JFIF", 5) == 0)
		ps->info->jfif = true;
	if (s->code == JH_APP14 && n >= JH_ADOBE_DATA_BYTES && memcmp(b, "Adobe", 5) == 0) {
		ps->info->adobe = true;
		ps->info->adobe_transform = b[JH_ADOBE_TRANSFORM_AT];
	}
}

/* One marker segment with a length, at s->at. 1 when it was the first SOS,
 * 0 to go on, or a -errno. */
static int jh_segment(struct jh_parser *ps, struct jh_segment *s)
{
	int rc;
	if ((rc = jh_need(ps, s, s->at + 4)) < 0)
		return rc;
	s->seg_len = jh_be16(ps->p + s->at + 2);
	s->body = s->at + 4;
	if (s->seg_len < 2)
		return jh_bad(ps, s, "length %u, less than 2", s->seg_len);
	if ((rc = jh_check_length(ps, s)) < 0)
		return rc;
	if ((rc = jh_need(ps, s, s->at + 2 + s->seg_len)) < 0)
		return rc;

	if (jh_is_sof(s->code)) {
		if ((rc = jh_frame(ps, s)) < 0)
			return rc;
		ps->saw_sof = true;
		ps->sof_at = s->at;
		return 0;
	}
	switch (s->code) {
	case JH_SOS:
		if ((rc = jh_scan(ps, s)) < 0)
			return rc;
		ps->info->scan_offset = s->at + 2 + s->seg_len;
		return 1;
	case JH_DRI:
		ps->info->restart_interval = (uint16_t)jh_be16(ps->p + s->body);
		return 0;
	case JH_APP0:
	case JH_APP14:
		jh_app(ps, s);
		return 0;
	case JH_DHP:
		ps->saw_dhp = true;
		return 0;
	default: /* other APPn, COM, DQT, DHT, DAC, DNL, EXP: skipped */
		return 0;
	}
}

/* Whether a code after 0xFF starts a segment this reader passes over or
 * reads (everything but the reserved codes, SOI and EOI). */
static bool jh_known_segment(uint8_t code)
{
	if (code == JH_JPG || (code >= JH_JPG0 && code <= JH_JPG13) || code < JH_SOF0)
		return false;
	return code != JH_SOI && code != JH_EOI;
}

static int jh_walk(struct jh_parser *ps)
{
	const uint8_t *p = ps->p;
	const size_t len = ps->len;

	if (p[0] != 0xFF || (len > 1 && p[1] != JH_SOI)) {
		if (len == 1)
			return jh_fail(ps, -EBADMSG, "not a JPEG file (starts with 0x%02x)", p[0]);
		return jh_fail(ps, -EBADMSG, "not a JPEG file (starts with 0x%02x 0x%02x)", p[0],
			       p[1]);
	}
	if (len < 2)
		return jh_fail(ps, -ENODATA, "truncated in SOI at offset 0");

	size_t pos = 2;
	for (;;) {
		if (pos >= len)
			return jh_fail(ps, -ENODATA, "truncated at offset %zu, before the first scan",
				       pos);
		if (p[pos] != 0xFF)
			return jh_fail(ps, -EBADMSG, "expected a marker at offset %zu, found 0x%02x",
				       pos, p[pos]);
		size_t first_ff = pos;
		while (pos < len && p[pos] == 0xFF) /* fill bytes */
			pos++;
		if (pos >= len)
			return jh_fail(ps, -ENODATA, "truncated at offset %zu, before the first scan",
				       first_ff);
		struct jh_segment s = {.code = p[pos], .at = pos - 1};
		pos++;
		if (s.code == 0x00)
			return jh_fail(ps, -EBADMSG, "expected a marker at offset %zu, found 0xff 0x00",
				       s.at);
		if ((s.code >= JH_RST0 && s.code <= JH_RST7) || s.code == JH_TEM)
			continue; /* no length, nothing to read */
		if (s.code == JH_SOI)
			return jh_bad(ps, &s, "a second start of image");
		if (s.code == JH_EOI)
			return jh_bad(ps, &s, "end of image before any scan");
		if (!jh_known_segment(s.code))
			return jh_bad(ps, &s, "reserved marker 0x%02x: unsupported", s.code);
		if (jh_is_sof(s.code) && ps->saw_sof) {
			char first[8];
			jh_marker_name((uint8_t)(JH_SOF0 + ps->info->sof), first);
			return jh_bad(ps, &s, "a second frame header (the first, %s, at offset %zu)",
				      first, ps->sof_at);
		}
		if (s.code == JH_SOS && !ps->saw_sof)
			return jh_bad(ps, &s, "a scan before the frame header (SOF)");

		int rc = jh_segment(ps, &s);
		if (rc < 0)
			return rc;
		if (rc == 1)
			break;
		pos = s.at + 2 + s.seg_len;
	}

	struct jh_info *in = ps->info;
	if (ps->saw_dhp)
		in->process = JH_HIERARCHICAL;
	in->color = jh_color_of(in, ps->ids);
	return 0;
}

int jh_parse(const uint8_t *data, size_t len, struct jh_info *out, char *err, size_t err_cap)
{
	errtext(err, err_cap, 0, "%s", "");
	if (!out || (!data && len > 0))
		return errtext(err, err_cap, -EINVAL, "invalid argument");
	memset(out, 0, sizeof(*out));
	if (len == 0)
		return errtext(err, err_cap, -ENODATA, "empty file");
	struct jh_parser ps = {.p = data, .len = len, .err = err, .err_cap = err_cap, .info = out};
	int rc = jh_walk(&ps);
	if (rc < 0)
		memset(out, 0, sizeof(*out));
	return rc;
}

/* The hardware decoder's rule, in the order jpeghdr.h lists it. */
static const char *jh_format_refusal(const struct jh_info *in)
{
	switch (in->process) {
	case JH_HIERARCHICAL:
		return "hierarchical";
	case JH_LOSSLESS:
		return "lossless";
	default:
		break;
	}
	if (in->precision != 8)
		return "12-bit samples";
	if (in->arithmetic)
		return "arithmetic coding";
	if (in->process == JH_PROGRESSIVE)
		return "progressive";
	if (in->process != JH_BASELINE)
		return "extended sequential (SOF1)";
	if (in->components == 4)
		return "4 components (CMYK/YCCK)";
	if (in->components == 2)
		return "2 components";
	if (in->components == 3) {
		if (in->adobe && in->adobe_transform == 0)
			return "RGB (Adobe transform 0)";
		if (in->adobe && in->adobe_transform != 1)
			return "Adobe transform other than 0 or 1";
		if (in->color != JH_COLOR_YCBCR)
			return "RGB (component ids R, G, B)";
		switch (in->subsamp) {
		case JH_411:
			return "4:1:1 subsampling";
		case JH_410:
			return "4:1:0 subsampling";
		case JH_444:
		case JH_422:
		case JH_420:
		case JH_440:
			break;
		default:
			return "unusual subsampling";
		}
		for (int c = 1; c < 3; c++)
			if (in->h[c] != 1 || in->v[c] != 1)
				return "chroma sampling factors not 1x1";
	}
	if (!in->single_scan)
		return "components in separate scans";
	return NULL;
}

const char *jh_gpu_refusal(const struct jh_info *info, uint64_t file_bytes,
			   const struct jh_limits *lim)
{
	if (!info || info->components < 1 || info->components > 4)
		return "no header";
	const char *why = jh_format_refusal(info);
	if (why)
		return why;
	/* libjpeg-turbo upsamples a chroma plane of 2 samples or fewer across
	 * by repeating its samples (jdsample.c: fancy upsampling only for a
	 * downsampled_width over 2), where the engines interpolate, as they
	 * do for every wider plane. With one sample the two agree; with two
	 * (an image 3 or 4 pixels wide) every pixel is an edge pixel, and
	 * they differ everywhere. */
	if ((info->subsamp == JH_422 || info->subsamp == JH_420) &&
	    (info->width == 3 || info->width == 4))
		return "chroma 2 samples wide";
	if (!lim)
		return NULL;
	if (lim->max_bytes && file_bytes > lim->max_bytes)
		return "over max_bytes";
	if (lim->max_side && (info->width > lim->max_side || info->height > lim->max_side))
		return "over max_side";
	if (lim->max_pixels && (uint64_t)info->width * info->height > lim->max_pixels)
		return "over max_pixels";
	return NULL;
}
