/* SPDX-License-Identifier: Apache-2.0 */
/*
 * suggest: "did you mean ...?" for a name that is not one of a known set
 * (a config key, a section, a transform op, a source kind, a choice, a
 * pipeline a client asks for).
 *
 * The distance is the optimal string alignment form of the
 * Damerau-Levenshtein distance: insertions, deletions, substitutions and
 * transpositions of two adjacent characters each cost 1, compared without
 * regard to ASCII letter case ("trian" is 1 from "train", "batchsize" 1
 * from "batch_size"). A candidate is close enough when its distance is at
 * most a third of the longer of the two names (at least 1), and below the
 * length of each: a one-letter name is never "close" to another.
 *
 * Pure: no allocation, no I/O; safe from any thread.
 */
#ifndef LDR_COMMON_SUGGEST_H
#define LDR_COMMON_SUGGEST_H

#include <stddef.h>

/* Names longer than this are never close to anything (the distance is
 * computed in a fixed table). */
#define SUGGEST_NAME_MAX 64

/* The distance between a[0..a_len) and b[0..b_len); SIZE_MAX when either
 * is longer than SUGGEST_NAME_MAX. */
size_t suggest_distance(const char *a, size_t a_len, const char *b, size_t b_len);

/* The closest candidate offered so far: suggest_init, suggest_offer for
 * each candidate, then suggest_best. */
struct suggest {
	const char *word;
	size_t word_len;
	const char *best;     /* NULL: none close enough yet */
	size_t best_distance;
};

void suggest_init(struct suggest *s, const char *word, size_t word_len);
/* Offers candidate (NUL-terminated; kept by pointer, not copied). Of
 * candidates equally close, the first offered wins; one equal to word
 * byte for byte is a match, not a suggestion, and is ignored (one that
 * differs in letter case only is the closest there is). */
void suggest_offer(struct suggest *s, const char *candidate);
/* The closest candidate close enough (see above), or NULL. */
const char *suggest_best(const struct suggest *s);

/* suggest_init and suggest_offer over a NULL-terminated list. */
const char *suggest_among(const char *word, size_t word_len, const char *const *candidates);

/* A refusal of a name that is none of names[0..n):
 *   unknown WHAT "SHOWN" (did you mean "CLOSEST"? WHATs: A, B, C)
 * ("did you mean" only when one is close to word; SHOWN is word as the
 * message may show it, escaped by the caller), with as many names as fit
 * in cap, then ", and N more)"; "(no WHATs)" for none. Returns buf. */
const char *suggest_unknown_text(const char *what, const char *word, const char *shown,
				 const char *const *names, size_t n, char *buf, size_t cap);

#endif
