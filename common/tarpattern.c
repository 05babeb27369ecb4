/* SPDX-License-Identifier: Apache-2.0 */
/* tarpattern: brace expansion of a shard pattern (tarpattern.h). */
#include "common/tarpattern.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"

struct tar_expansion {
	char **v;
	size_t n;
};

static void tar_expansion_free(struct tar_expansion *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
	e->v = NULL;
	e->n = 0;
}

/* why, with the brace body concerned when there is one (len > 0). */
static int tar_pattern_fail(char *err, size_t err_cap, const char *why, const char *at, size_t len)
{
	if (len)
		return errtext(err, err_cap, -EINVAL, "%s: \"{%.*s}\"", why,
			       (int)(len > 200 ? 200 : len), at);
	return errtext(err, err_cap, -EINVAL, "%s", why);
}

/* The items of one brace body (without the braces): a range A..B of
 * decimal numbers, or a list a,b,c. */
static int tar_brace_items(const char *body, size_t len, struct tar_expansion *items, char *err,
			   size_t err_cap)
{
	const char *dots = memmem(body, len, "..", 2);
	if (dots) {
		size_t la = (size_t)(dots - body), lb = len - la - 2;
		const char *b = dots + 2;
		if (la == 0 || lb == 0 || la > 18 || lb > 18 || strspn(body, "0123456789") != la ||
		    strspn(b, "0123456789") < lb)
			return tar_pattern_fail(err, err_cap,
						"a range must be {A..B} with decimal A and B", body,
						len);
		unsigned long long lo = strtoull(body, NULL, 10), hi = strtoull(b, NULL, 10);
		int width = (body[0] == '0' && la > 1) || (b[0] == '0' && lb > 1) ?
			    (int)(la > lb ? la : lb) : 0;
		unsigned long long count = (lo <= hi ? hi - lo : lo - hi) + 1;
		if (count > TAR_SHARDS_MAX)
			return tar_pattern_fail(err, err_cap,
						"the range names more than 1000000 shards", body,
						len);
		if (!(items->v = calloc(count, sizeof(char *))))
			return -ENOMEM;
		for (unsigned long long i = 0; i < count; i++) {
			unsigned long long x = lo <= hi ? lo + i : lo - i;
			char text[32];
			snprintf(text, sizeof(text), "%0*llu", width, x);
			if (!(items->v[items->n] = strdup(text)))
				return -ENOMEM;
			items->n++;
		}
		return 0;
	}
	if (!memchr(body, ',', len))
		return tar_pattern_fail(err, err_cap,
					"a brace must hold a range A..B or a list a,b", body, len);
	size_t count = 1;
	for (size_t i = 0; i < len; i++)
		count += body[i] == ',';
	if (!(items->v = calloc(count, sizeof(char *))))
		return -ENOMEM;
	for (const char *p = body, *end = body + len; p <= end;) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t n = (size_t)((comma ? comma : end) - p);
		if (n == 0)
			return tar_pattern_fail(err, err_cap, "a brace list has an empty item",
						body, len);
		if (!(items->v[items->n] = strndup(p, n)))
			return -ENOMEM;
		items->n++;
		p += n + 1;
	}
	return 0;
}

/* *acc becomes every string of *acc followed by every item. */
static int tar_expansion_product(struct tar_expansion *acc, const struct tar_expansion *items,
				 char *err, size_t err_cap)
{
	if (items->n != 0 && acc->n > TAR_SHARDS_MAX / items->n)
		return errtext(err, err_cap, -EINVAL, "the pattern names more than %u shards",
			       TAR_SHARDS_MAX);
	struct tar_expansion out = {.v = calloc(acc->n * items->n + 1, sizeof(char *))};
	if (!out.v)
		return -ENOMEM;
	for (size_t i = 0; i < acc->n; i++)
		for (size_t k = 0; k < items->n; k++) {
			size_t la = strlen(acc->v[i]), lk = strlen(items->v[k]);
			char *s = malloc(la + lk + 1);
			if (!s) {
				tar_expansion_free(&out);
				return -ENOMEM;
			}
			memcpy(s, acc->v[i], la);
			memcpy(s + la, items->v[k], lk + 1);
			out.v[out.n++] = s;
		}
	tar_expansion_free(acc);
	*acc = out;
	return 0;
}

int tar_pattern_expand(const char *pattern, char ***out, size_t *n_out, char *err, size_t err_cap)
{
	struct tar_expansion acc = {.v = calloc(1, sizeof(char *))};
	if (!acc.v || !(acc.v[0] = strdup(""))) {
		free(acc.v);
		return -ENOMEM;
	}
	acc.n = 1;
	int rc = 0;
	for (const char *p = pattern; rc == 0 && *p;) {
		const char *open = strchr(p, '{'), *close = strchr(p, '}');
		struct tar_expansion items = {0};
		if (close && (!open || close < open)) {
			rc = tar_pattern_fail(err, err_cap, "a '}' without its '{'", pattern, 0);
			break;
		}
		size_t literal = open ? (size_t)(open - p) : strlen(p);
		if (literal) {
			items.v = malloc(sizeof(char *));
			if (!items.v || !(items.v[0] = strndup(p, literal)))
				rc = -ENOMEM;
			else
				items.n = 1;
			p += literal;
		} else {
			const char *next_open = strchr(open + 1, '{');
			if (!close)
				rc = tar_pattern_fail(err, err_cap, "a '{' without its '}'",
						      pattern, 0);
			else if (next_open && next_open < close)
				rc = tar_pattern_fail(err, err_cap,
						      "nested braces are not supported", pattern,
						      0);
			else
				rc = tar_brace_items(open + 1, (size_t)(close - open - 1), &items,
						     err, err_cap);
			p = close ? close + 1 : p + strlen(p);
		}
		if (rc == 0)
			rc = tar_expansion_product(&acc, &items, err, err_cap);
		tar_expansion_free(&items);
	}
	if (rc == -ENOMEM)
		errtext(err, err_cap, rc, "out of memory expanding the pattern");
	if (rc < 0) {
		tar_expansion_free(&acc);
		return rc;
	}
	*out = acc.v;
	*n_out = acc.n;
	return 0;
}

void tar_pattern_free(char **paths, size_t n)
{
	struct tar_expansion e = {.v = paths, .n = n};
	tar_expansion_free(&e);
}

