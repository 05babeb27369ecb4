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

int position_format(const struct position *p, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "ldr1:%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 "%s%s",
			 p->seed, p->n_samples, p->epoch, p->offset, p->split ? ":" : "",
			 p->split ? split_name(p->split) : "");
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

int position_parse(const char *text, struct position *p, char *why, size_t why_cap)
{
	uint64_t v[4];
	if (strncmp(text, "ldr1:", 5) != 0)
		return errtext(why, why_cap, -EINVAL, "it does not start with \"ldr1:\"");
	const char *s = text + 5;
	for (int f = 0; f < 4; f++) {
		size_t len = strcspn(s, ":");
		if (f < 3 && s[len] != ':')
			return errtext(why, why_cap, -EINVAL,
				       "it has %d field%s after \"ldr1:\", not 4 "
				       "(SEED:N:EPOCH:OFFSET)", f + 1, f ? "s" : "");
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
			return errtext(why, why_cap, -EINVAL,
				       "it has more than 5 fields after \"ldr1:\" "
				       "(SEED:N:EPOCH:OFFSET[:SPLIT])");
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
	*p = (struct position){.seed = v[0], .n_samples = v[1], .epoch = v[2], .offset = v[3],
			       .split = split};
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
