/* SPDX-License-Identifier: Apache-2.0 */
/* position: resumable stream position tokens (position.h). */
#include "common/position.h"

#include "common/errtext.h"
#include "common/escape.h"
#include "common/split.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool position_name_valid(const char *name, size_t len)
{
	if (len < 1 || len > POSITION_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = name[i]; /* ASCII only, whatever the locale */
		if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') &&
		    !(ch >= '0' && ch <= '9') && ch != '_' && ch != '.' && ch != '-')
			return false;
	}
	return true;
}

int position_format(const struct position *p, char *buf, size_t cap)
{
	if (!position_name_valid(p->pipeline, strnlen(p->pipeline, sizeof(p->pipeline)))) {
		if (cap)
			buf[0] = '\0';
		return -EINVAL;
	}
	int n = snprintf(buf, cap, "ldr2:%s:%016" PRIx64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%"
			 PRIu64 "%s%s", p->pipeline, p->data, p->seed, p->n_samples, p->epoch,
			 p->offset, p->split ? ":" : "", p->split ? split_name(p->split) : "");
	return (n < 0 || (size_t)n >= cap) ? -ENOSPC : 0;
}

static const char *const field_names[] = {"SEED", "N", "EPOCH", "OFFSET"};
#define FIELD_QUOTE_MAX 32 /* bytes of a bad field shown in a message */

/* s[0..len) for a message, between quotes and escaped (common/escape.h),
 * at most FIELD_QUOTE_MAX bytes of it, "..." marking a cut. */
static void position_quote(const char *s, size_t len, char *out, size_t cap)
{
	char shown[ESCAPE_SIZE(FIELD_QUOTE_MAX)];
	escape_bytes(s, len < FIELD_QUOTE_MAX ? len : FIELD_QUOTE_MAX, shown, sizeof(shown));
	snprintf(out, cap, "\"%s%s\"", shown, len > FIELD_QUOTE_MAX ? "..." : "");
}

/* Field f, the len bytes at s: canonical decimal of a uint64_t. */
static int position_parse_field(const char *s, size_t len, int f, uint64_t *out, char *why,
				size_t cap)
{
	char q[FIELD_QUOTE_MAX * 4 + 8];
	position_quote(s, len, q, sizeof(q));
	if (len == 0)
		return errtext(why, cap, -EINVAL, "%s is empty", field_names[f]);
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return errtext(why, cap, -EINVAL,
				       "%s %s is not a decimal number (digits only)",
				       field_names[f], q);
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return errtext(why, cap, -EINVAL, "%s %s is larger than %" PRIu64,
				       field_names[f], q, UINT64_MAX);
		v = v * 10 + d;
	}
	if (len > 1 && s[0] == '0')
		return errtext(why, cap, -EINVAL, "%s %s has a leading zero", field_names[f], q);
	*out = v;
	return 0;
}

/* The fields after PIPELINE:DATA: (and after "ldr1:"), at s:
 * SEED:N:EPOCH:OFFSET[:SPLIT]; fmt names the format in messages. */
static int position_parse_tail(const char *s, const char *fmt, struct position *p, char *why,
			       size_t why_cap)
{
	uint64_t v[4];
	for (int f = 0; f < 4; f++) {
		size_t len = strcspn(s, ":");
		if (f < 3 && s[len] != ':')
			return errtext(why, why_cap, -EINVAL, "it has %d field%s where %s has "
				       "SEED:N:EPOCH:OFFSET", f + 1, f ? "s" : "", fmt);
		if (position_parse_field(s, len, f, &v[f], why, why_cap) < 0)
			return -EINVAL;
		s += len;
		if (*s == ':')
			s++;
	}
	uint32_t split = SPLIT_TRAIN;
	if (s[-1] == ':') { /* OFFSET is followed by a SPLIT field */
		size_t len = strlen(s);
		char q[FIELD_QUOTE_MAX * 4 + 8];
		position_quote(s, len, q, sizeof(q));
		if (strchr(s, ':'))
			return errtext(why, why_cap, -EINVAL, "it has a field after SPLIT (%s)", fmt);
		if (!split_from_name(s, &split) || split == SPLIT_TRAIN)
			return errtext(why, why_cap, -EINVAL, "SPLIT %s is not valid or test (a token "
				       "of the train split has no SPLIT field)", q);
	}
	if (v[2] >= POSITION_EPOCHS)
		return errtext(why, why_cap, -EINVAL,
			       "EPOCH %" PRIu64 " is not below %llu (2^32), the number of "
			       "epochs a stream has", v[2], POSITION_EPOCHS);
	if (v[3] > v[1])
		return errtext(why, why_cap, -EINVAL,
			       "OFFSET %" PRIu64 " is larger than N %" PRIu64, v[3], v[1]);
	p->seed = v[0];
	p->n_samples = v[1];
	p->epoch = v[2];
	p->offset = v[3];
	p->split = split;
	return 0;
}

#define POSITION_V2 "ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT]"
#define POSITION_V1 "ldr1:SEED:N:EPOCH:OFFSET[:SPLIT]"

int position_parse(const char *text, struct position *p, char *why, size_t why_cap)
{
	if (strncmp(text, "ldr1:", 5) == 0)
		return errtext(why, why_cap, -EPROTONOSUPPORT, "it is a token of an older format "
			       "(ldr1), which names no pipeline and no data, so it cannot be checked");
	if (strncmp(text, "ldr2:", 5) != 0)
		return errtext(why, why_cap, -EINVAL, "it does not start with \"ldr2:\" (%s)",
			       POSITION_V2);
	struct position t = {0};
	const char *s = text + 5;
	char q[FIELD_QUOTE_MAX * 4 + 8];
	size_t len = strcspn(s, ":");
	position_quote(s, len, q, sizeof(q));
	if (s[len] != ':')
		return errtext(why, why_cap, -EINVAL, "it has no DATA field after PIPELINE %s (%s)",
			       q, POSITION_V2);
	if (!position_name_valid(s, len))
		return errtext(why, why_cap, -EINVAL, "PIPELINE %s is not a pipeline name (1 to %d "
			       "characters of A-Z a-z 0-9 _ . -)", q, POSITION_NAME_MAX);
	memcpy(t.pipeline, s, len);
	s += len + 1;
	len = strcspn(s, ":");
	position_quote(s, len, q, sizeof(q));
	if (s[len] != ':')
		return errtext(why, why_cap, -EINVAL, "it has no SEED field after DATA %s (%s)", q,
			       POSITION_V2);
	if (len != POSITION_DATA_DIGITS)
		return errtext(why, why_cap, -EINVAL, "DATA %s is not %d lower-case hex digits", q,
			       POSITION_DATA_DIGITS);
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		if (!(ch >= '0' && ch <= '9') && !(ch >= 'a' && ch <= 'f'))
			return errtext(why, why_cap, -EINVAL, "DATA %s is not %d lower-case hex "
				       "digits", q, POSITION_DATA_DIGITS);
		t.data = t.data << 4 | (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
	}
	if (position_parse_tail(s + len + 1, POSITION_V2, &t, why, why_cap) < 0)
		return -EINVAL;
	*p = t;
	return 0;
}

int position_parse_v1(const char *text, struct position *p, char *why, size_t why_cap)
{
	if (strncmp(text, "ldr1:", 5) != 0)
		return errtext(why, why_cap, -EINVAL, "it does not start with \"ldr1:\"");
	struct position t = {0};
	if (position_parse_tail(text + 5, POSITION_V1, &t, why, why_cap) < 0)
		return -EINVAL;
	*p = t;
	return 0;
}

void position_after_batch(uint64_t seed, uint64_t n_samples, uint32_t world,
			  uint64_t epoch, uint64_t g, uint64_t first_j,
			  uint32_t rows, int last, struct position *out)
{
	out->seed = seed;
	out->n_samples = n_samples;
	out->split = SPLIT_TRAIN;
	if (last) {
		out->epoch = epoch + 1;
		out->offset = 0;
		return;
	}
	out->epoch = epoch;
	out->offset = g + (first_j + rows) * (uint64_t)world;
	if (out->offset > n_samples)
		out->offset = n_samples;
}
