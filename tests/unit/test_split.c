/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/split: the train/valid/test ranges are
 * megatron-core's, checked against every row of
 * tests/data/megatron_split_ranges.txt (megatron-core's own code run over
 * N = 1..20,000 elements for each of its split strings, by
 * tools/megatron_split_reference.py) and against values it gives for large
 * N; weights it cannot use are refused; the names parse and print as
 * clients spell them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/split.h"

struct split_case {
	double w[3];
	uint64_t n;
	int64_t idx[4];
};

/* Each idx from megatron-core 0.16.1: the split matrix of its
 * parse_and_normalize_split and convert_split_vector_to_split_matrix, and
 * its builder's int(round(bookend * float(N))) (tools/
 * megatron_split_reference.py runs them). */
static const struct split_case cases[] = {
	{{969, 30, 1}, 1000, {0, 969, 999, 1000}},
	{{969, 30, 1}, 60, {0, 58, 60, 60}},
	{{969, 30, 1}, 81, {0, 78, 81, 81}},
	{{1, 1, 1}, 10, {0, 3, 7, 10}},       /* 3.33.. -> 3, 6.66.. -> 7 */
	{{949, 50, 1}, 10, {0, 9, 10, 10}},   /* 9.49 -> 9, 9.99 -> 10 */
	{{80, 15, 5}, 997, {0, 798, 947, 997}},
	{{1, 1, 1}, 2, {0, 1, 1, 2}},
	{{0, 1, 1}, 3, {0, 0, 2, 3}},         /* train not built; 1.5 -> 2 */
	{{1, 1, 0}, 5, {0, 2, 5, 5}},         /* 2.5 -> 2 (ties to even) */
	{{1, 1, 0}, 3, {0, 2, 3, 3}},         /* 1.5 -> 2 */
	{{0.5, 0.25, 0.25}, 6, {0, 3, 4, 6}}, /* 1.5 -> 2 ... 4.5 -> 4 */
	{{98, 2, 0}, 50, {0, 49, 50, 50}},
	{{1, 0, 0}, 0, {0, 0, 0, 0}},
	{{949, 50, 1}, 100000, {0, 94900, 99900, 100000}},
	{{969, 30, 1}, 123456789, {0, 119629629, 123333332, 123456789}},
	{{969, 30, 1}, 1099511627783ull, {0, 1065426767322ll, 1098412116155ll, 1099511627783ll}},
	{{90, 5, 5}, 1ull << 53, {0, 8106479329266893ll, 8556839292003943ll, 9007199254740992ll}},
};

static void test_megatron_core_rule(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct split_case *c = &cases[i];
		int64_t idx[4] = {-7, -7, -7, -7};
		assert_int_equal(split_ranges(c->w, c->n, idx), 0);
		for (int k = 0; k < 4; k++) {
			if (idx[k] != c->idx[k])
				fail_msg("case %zu (%g,%g,%g over %llu): idx[%d] = %lld, megatron-core's %lld", i,
					 c->w[0], c->w[1], c->w[2], (unsigned long long)c->n, k,
					 (long long)idx[k], (long long)c->idx[k]);
		}
	}
}

/* ---- the fixture: megatron-core's ranges for N = 1..max_n ---- */

#define FIXTURE_BLOCKS_MAX 64
#define FIXTURE_N_MAX 100000

struct fixture_block {
	char text[128];          /* the split string */
	double w[3];
	int32_t *ends[3];        /* [n + 1]: where each split ends for N = 0..n */
	int same;                /* >= 0: no ends, the ranges of this earlier block */
};

struct fixture {
	FILE *f;
	const char *path;
	char word[128];          /* the word at hand; "" at the end of the file */
	unsigned long n;
	size_t n_blocks;
	struct fixture_block blocks[FIXTURE_BLOCKS_MAX];
};

/* The next word into fx->word, past `#` comments. */
static void fixture_next(struct fixture *fx)
{
	int ch;
	for (;;) {
		while ((ch = fgetc(fx->f)) != EOF && isspace(ch))
			;
		if (ch != '#')
			break;
		while ((ch = fgetc(fx->f)) != EOF && ch != '\n')
			;
	}
	size_t len = 0;
	while (ch != EOF && !isspace(ch)) {
		if (len + 1 < sizeof(fx->word))
			fx->word[len++] = (char)ch;
		ch = fgetc(fx->f);
	}
	fx->word[len] = '\0';
}

/* The word at hand, which must be `what`, then the next. */
static void fixture_expect(struct fixture *fx, const char *what, const char *block)
{
	if (strcmp(fx->word, what) != 0)
		fail_msg("%s: %s: \"%s\" where \"%s\" belongs", fx->path, block, fx->word, what);
	fixture_next(fx);
}

static unsigned long fixture_number(const struct fixture *fx)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(fx->word, &end, 10);
	if (errno || end == fx->word || *end)
		fail_msg("%s: \"%s\" is not a number", fx->path, fx->word);
	return v;
}

/* A split's words, `NAME SIGN GAPS...`, into ends[0..n]. */
static void fixture_split(struct fixture *fx, const struct fixture_block *b, const char *name,
			  int32_t *ends)
{
	fixture_expect(fx, name, b->text);
	if (strcmp(fx->word, "+") != 0 && strcmp(fx->word, "-") != 0)
		fail_msg("%s: %s: %s: \"%s\", not + or -", fx->path, b->text, name, fx->word);
	uint8_t listed_step = fx->word[0] == '+';
	uint8_t *listed = calloc(fx->n + 1, 1); /* the N the gaps name */
	assert_non_null(listed);
	unsigned long at = 0;
	for (fixture_next(fx); isdigit((unsigned char)fx->word[0]); fixture_next(fx)) {
		at += fixture_number(fx);
		if (at == 0 || at > fx->n)
			fail_msg("%s: %s: %s: N = %lu is outside 1..%lu", fx->path, b->text, name, at,
				 fx->n);
		listed[at] = 1;
	}
	/* + lists the N where the end steps by 1, - those where it stays */
	ends[0] = 0;
	for (unsigned long n = 1; n <= fx->n; n++)
		ends[n] = ends[n - 1] + (listed[n] == listed_step);
	free(listed);
}

static void fixture_load(struct fixture *fx, const char *path)
{
	static const char *const names[3] = {"train", "valid", "test"};
	memset(fx, 0, sizeof(*fx));
	fx->path = path;
	fx->f = fopen(path, "r");
	if (!fx->f)
		fail_msg("%s: %s", path, strerror(errno));
	fixture_next(fx);
	fixture_expect(fx, "n", "the header");
	fx->n = fixture_number(fx);
	if (fx->n == 0 || fx->n > FIXTURE_N_MAX)
		fail_msg("%s: n %lu", path, fx->n);
	for (fixture_next(fx); fx->word[0];) {
		if (fx->n_blocks == FIXTURE_BLOCKS_MAX)
			fail_msg("%s: more than %d blocks", path, FIXTURE_BLOCKS_MAX);
		struct fixture_block *b = &fx->blocks[fx->n_blocks++];
		fixture_expect(fx, "split", "a block");
		snprintf(b->text, sizeof(b->text), "%s", fx->word);
		b->same = -1;
		for (int k = 0; k < 3; k++) {
			fixture_next(fx);
			char *end;
			b->w[k] = strtod(fx->word, &end);
			if (end == fx->word || *end)
				fail_msg("%s: %s: weight %d \"%s\"", path, b->text, k, fx->word);
		}
		fixture_next(fx);
		if (strcmp(fx->word, "same") == 0) {
			fixture_next(fx);
			for (size_t i = 0; i + 1 < fx->n_blocks; i++)
				if (fx->blocks[i].same < 0 && strcmp(fx->blocks[i].text, fx->word) == 0)
					b->same = (int)i;
			if (b->same < 0)
				fail_msg("%s: %s: same as \"%s\", not written before", path, b->text, fx->word);
			fixture_next(fx);
			continue;
		}
		for (int k = 0; k < 3; k++) {
			b->ends[k] = malloc((fx->n + 1) * sizeof(int32_t));
			assert_non_null(b->ends[k]);
			fixture_split(fx, b, names[k], b->ends[k]);
		}
		fixture_expect(fx, "end", b->text);
	}
	fclose(fx->f);
	fx->f = NULL;
}

static void fixture_free(struct fixture *fx)
{
	for (size_t i = 0; i < fx->n_blocks; i++)
		for (int k = 0; k < 3; k++)
			free(fx->blocks[i].ends[k]);
}

/* Every row of tests/data/megatron_split_ranges.txt: the split strings'
 * weights over N = 0..max_n give megatron-core's ranges. */
static void test_megatron_core_fixture(void **state)
{
	(void)state;
	const char *src = getenv("LOADERD_SOURCE_DIR");
	if (!src || !*src)
		fail_msg("LOADERD_SOURCE_DIR is not set (ctest sets it): it names the tree whose "
			 "tests/data/megatron_split_ranges.txt this test reads");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/tests/data/megatron_split_ranges.txt", src);
	static struct fixture fx;
	fixture_load(&fx, path);
	assert_true(fx.n_blocks >= 5);
	unsigned long rows = 0, wrong = 0;
	for (size_t i = 0; i < fx.n_blocks; i++) {
		const struct fixture_block *b = &fx.blocks[i];
		const struct fixture_block *ref = b->same >= 0 ? &fx.blocks[b->same] : b;
		for (unsigned long n = 0; n <= fx.n; n++, rows++) {
			int64_t idx[4] = {-7, -7, -7, -7};
			int rc = split_ranges(b->w, n, idx);
			bool same = rc == 0 && idx[0] == 0;
			for (int k = 0; k < 3; k++)
				same = same && idx[k + 1] == ref->ends[k][n];
			if (same)
				continue;
			if (wrong++ < 10)
				print_message("split %s over N = %lu: %d, %lld..%lld / %lld..%lld / "
					      "%lld..%lld; megatron-core: 0..%d / %d..%d / %d..%d\n",
					      b->text, n, rc, (long long)idx[0], (long long)idx[1],
					      (long long)idx[1], (long long)idx[2], (long long)idx[2],
					      (long long)idx[3], ref->ends[0][n], ref->ends[0][n],
					      ref->ends[1][n], ref->ends[1][n], ref->ends[2][n]);
		}
	}
	print_message("%lu rows of %zu split strings, %lu differ from megatron-core's\n", rows,
		      fx.n_blocks, wrong);
	fixture_free(&fx);
	assert_int_equal(wrong, 0);
}

/* The ranges tile [0, N) for ordinary weights and any N, each within one
 * element of its share. */
static void test_ranges_tile(void **state)
{
	(void)state;
	const double weights[][3] = {{969, 30, 1}, {8, 1, 1}, {1, 1, 1}, {90, 5, 5}, {7, 2, 0},
				     {0, 1, 1}, {0, 0, 1}};
	for (size_t w = 0; w < sizeof(weights) / sizeof(weights[0]); w++) {
		for (uint64_t n = 0; n < 300000; n += 7) {
			int64_t idx[4];
			assert_int_equal(split_ranges(weights[w], n, idx), 0);
			assert_int_equal(idx[0], 0);
			assert_int_equal(idx[3], (int64_t)n);
			assert_true(idx[1] <= idx[2] && idx[2] <= idx[3]);
			double sum = weights[w][0] + weights[w][1] + weights[w][2];
			for (int k = 0; k < 3; k++)
				assert_true(fabs((double)(idx[k + 1] - idx[k]) - weights[w][k] / sum * (double)n) <= 1.0);
		}
	}
}

static void test_refused(void **state)
{
	(void)state;
	int64_t idx[4];
	assert_int_equal(split_ranges((double[3]){0, 0, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_ranges((double[3]){-1, 2, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_ranges((double[3]){NAN, 1, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_ranges((double[3]){INFINITY, 1, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_ranges((double[3]){1, 0, 0}, (1ull << 53) + 1, idx), -ERANGE);
}

static void test_names(void **state)
{
	(void)state;
	uint32_t id = 99;
	assert_true(split_from_name("", &id) && id == SPLIT_TRAIN);
	assert_true(split_from_name("train", &id) && id == SPLIT_TRAIN);
	assert_true(split_from_name("valid", &id) && id == SPLIT_VALID);
	assert_true(split_from_name("test", &id) && id == SPLIT_TEST);
	assert_false(split_from_name("validation", &id));
	assert_false(split_from_name("Train", &id));
	assert_false(split_from_name("tes", &id));
	assert_string_equal(split_name(SPLIT_TRAIN), "train");
	assert_string_equal(split_name(SPLIT_VALID), "valid");
	assert_string_equal(split_name(SPLIT_TEST), "test");
	assert_string_equal(split_name(3), "invalid");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_megatron_core_rule),
		cmocka_unit_test(test_megatron_core_fixture),
		cmocka_unit_test(test_ranges_tile),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
