/* position: resumable stream position tokens (position.h). */
#include "common/position.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int position_format(const struct position *p, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "ldr1:%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64,
			 p->seed, p->n_samples, p->epoch, p->offset);
	return (n < 0 || (size_t)n >= cap) ? -ENOSPC : 0;
}

/* One decimal field, digits only, no sign, no overflow; *text moves past it. */
static int parse_field(const char **text, char end, uint64_t *out)
{
	const char *s = *text;
	uint64_t v = 0;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		uint64_t d = (uint64_t)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (*s != end)
		return -EINVAL;
	*out = v;
	*text = end ? s + 1 : s;
	return 0;
}

int position_parse(const char *text, struct position *p)
{
	struct position q;
	if (strncmp(text, "ldr1:", 5) != 0)
		return -EINVAL;
	text += 5;
	if (parse_field(&text, ':', &q.seed) < 0 || parse_field(&text, ':', &q.n_samples) < 0 ||
	    parse_field(&text, ':', &q.epoch) < 0 || parse_field(&text, '\0', &q.offset) < 0)
		return -EINVAL;
	if (q.offset > q.n_samples)
		return -EINVAL;
	*p = q;
	return 0;
}

void position_after_batch(uint64_t seed, uint64_t n_samples, uint32_t world,
			  uint64_t epoch, uint64_t g, uint64_t first_j,
			  uint32_t rows, int last, struct position *out)
{
	out->seed = seed;
	out->n_samples = n_samples;
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
