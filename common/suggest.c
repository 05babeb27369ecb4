/* SPDX-License-Identifier: Apache-2.0 */
/* suggest: close matches for a misspelt name (suggest.h). */
#include "common/suggest.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static char suggest_lower(char ch)
{
	return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

static size_t min3(size_t a, size_t b, size_t c)
{
	size_t m = a < b ? a : b;
	return m < c ? m : c;
}

size_t suggest_distance(const char *a, size_t a_len, const char *b, size_t b_len)
{
	if (a_len > SUGGEST_NAME_MAX || b_len > SUGGEST_NAME_MAX)
		return SIZE_MAX;
	/* d[i][j]: the distance between a's first i and b's first j characters. */
	size_t d[SUGGEST_NAME_MAX + 1][SUGGEST_NAME_MAX + 1];
	for (size_t i = 0; i <= a_len; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= b_len; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= a_len; i++) {
		char ai = suggest_lower(a[i - 1]);
		for (size_t j = 1; j <= b_len; j++) {
			char bj = suggest_lower(b[j - 1]);
			size_t cost = ai == bj ? 0 : 1;
			d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
			if (i > 1 && j > 1 && ai == suggest_lower(b[j - 2]) &&
			    suggest_lower(a[i - 2]) == bj && d[i - 2][j - 2] + 1 < d[i][j])
				d[i][j] = d[i - 2][j - 2] + 1; /* a transposition */
		}
	}
	return d[a_len][b_len];
}

void suggest_init(struct suggest *s, const char *word, size_t word_len)
{
	s->word = word;
	s->word_len = word_len;
	s->best = NULL;
	s->best_distance = SIZE_MAX;
}

void suggest_offer(struct suggest *s, const char *candidate)
{
	size_t len = strlen(candidate);
	size_t d = suggest_distance(s->word, s->word_len, candidate, len);
	if (d == SIZE_MAX)
		return;
	if (d == 0 && len == s->word_len && memcmp(s->word, candidate, len) == 0)
		return; /* the word itself */
	if (s->best && d >= s->best_distance)
		return;
	size_t longer = len > s->word_len ? len : s->word_len;
	size_t limit = longer / 3 ? longer / 3 : 1;
	if (d > limit || (d && (d >= len || d >= s->word_len)))
		return;
	s->best = candidate;
	s->best_distance = d;
}

const char *suggest_best(const struct suggest *s)
{
	return s->best;
}

const char *suggest_among(const char *word, size_t word_len, const char *const *candidates)
{
	struct suggest s;
	suggest_init(&s, word, word_len);
	for (size_t i = 0; candidates[i]; i++)
		suggest_offer(&s, candidates[i]);
	return suggest_best(&s);
}

const char *suggest_unknown_text(const char *what, const char *word, const char *shown,
				 const char *const *names, size_t n, char *buf, size_t cap)
{
	if (cap == 0)
		return buf;
	struct suggest sg;
	suggest_init(&sg, word, strlen(word));
	for (size_t i = 0; i < n; i++)
		suggest_offer(&sg, names[i]);
	if (n == 0) {
		snprintf(buf, cap, "unknown %s \"%s\" (no %ss)", what, shown, what);
		return buf;
	}
	int head;
	if (suggest_best(&sg))
		head = snprintf(buf, cap, "unknown %s \"%s\" (did you mean \"%s\"? %ss: ", what,
				shown, suggest_best(&sg), what);
	else
		head = snprintf(buf, cap, "unknown %s \"%s\" (%ss: ", what, shown, what);
	size_t len = head < 0 ? 0 : (size_t)head < cap ? (size_t)head : cap - 1;
	for (size_t i = 0; i < n; i++) {
		char more[48];
		size_t left = n - i - 1;
		snprintf(more, sizeof(more), ", and %zu more)", left);
		/* this name, and room for ", and N more)" after it unless it is the last */
		size_t need = (i ? 2 : 0) + strlen(names[i]) + (left ? strlen(more) : 1);
		if (len + need >= cap) {
			snprintf(more, sizeof(more), "%s%zu more)", i ? ", and " : "", n - i);
			if (len + strlen(more) < cap)
				memcpy(buf + len, more, strlen(more) + 1);
			return buf;
		}
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", names[i]);
	}
	if (len + 1 < cap)
		memcpy(buf + len, ")", 2);
	return buf;
}
