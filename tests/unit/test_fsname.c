/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/fsname: every kind of ill-formed UTF-8 decoded to
 * the code points Python's surrogateescape gives, and random names sorted
 * as Python's sorted() sorts them (both from fsname_cases.h, written by
 * tests/tools/fsname_cases.py with Python itself).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/fsname.h"
#include "fsname_cases.h"
#include "rng.h"

#define N_SORTED (sizeof(fsname_sorted) / sizeof(fsname_sorted[0]))

static void test_decodes(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(fsname_decodes) / sizeof(fsname_decodes[0]); c++) {
		const struct fsname_decode_case *dc = &fsname_decodes[c];
		const unsigned char *s = (const unsigned char *)dc->bytes;
		size_t len = strlen(dc->bytes), at = 0, n = 0;
		while (at < len) {
			size_t used;
			uint32_t cp = fsname_decode(s + at, len - at, &used);
			if (n >= dc->n || cp != dc->cps[n])
				fail_msg("case %zu, code point %zu: got U+%04X, Python U+%04X", c, n,
					 cp, n < dc->n ? dc->cps[n] : 0);
			assert_true(used >= 1 && used <= 4 && at + used <= len);
			at += used;
			n++;
		}
		if (n != dc->n)
			fail_msg("case %zu: %zu code points, Python %zu", c, n, dc->n);
	}
}

/* The brief's three classes: a stray byte, U+E000, an emoji. */
static void test_escaped_byte_before_private_use(void **state)
{
	(void)state;
	assert_true(fsname_cmp("\377", "\356\200\200") < 0);
	assert_true(fsname_cmp("\356\200\200", "\360\237\230\200") < 0);
	assert_true(fsname_cmp("\377", "\360\237\230\200") < 0);
	assert_true(fsname_cmp("\355\237\277", "\200") < 0); /* U+D7FF, U+DC80 */
	assert_true(fsname_cmp("a", "a\377") < 0);
	assert_true(fsname_cmp("a\377", "a") > 0);
	assert_int_equal(fsname_cmp("", ""), 0);
	assert_int_equal(fsname_cmp("a\377b", "a\377b"), 0);
}

/* Every pair of the fixture compares as its indexes do. */
static void test_pairs_in_python_order(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_SORTED; i++)
		for (size_t k = 0; k < N_SORTED; k++) {
			int got = fsname_cmp(fsname_sorted[i], fsname_sorted[k]);
			int want = (i > k) - (i < k);
			if ((got > 0) - (got < 0) != want)
				fail_msg("names %zu and %zu: compared %d, Python's order says %d", i,
					 k, got, want);
		}
}

static int cmp_names(const void *a, const void *b)
{
	return fsname_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shuffled copy, sorted with qsort, comes back in Python's order. */
static void test_qsort_gives_python_order(void **state)
{
	(void)state;
	const char **v = malloc(sizeof(fsname_sorted));
	assert_non_null(v);
	memcpy(v, fsname_sorted, sizeof(fsname_sorted));
	for (int round = 0; round < 5; round++) {
		for (size_t i = N_SORTED - 1; i > 0; i--) {
			size_t j = rng_range(0, (uint32_t)i);
			const char *t = v[i];
			v[i] = v[j];
			v[j] = t;
		}
		qsort(v, N_SORTED, sizeof(*v), cmp_names);
		for (size_t i = 0; i < N_SORTED; i++)
			if (v[i] != fsname_sorted[i])
				fail_msg("round %d: position %zu holds a different name", round, i);
	}
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decodes),
		cmocka_unit_test(test_escaped_byte_before_private_use),
		cmocka_unit_test(test_pairs_in_python_order),
		cmocka_unit_test(test_qsort_gives_python_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
