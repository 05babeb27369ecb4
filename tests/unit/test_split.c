/*
 * Unit tests for common/split: the train/valid/test document ranges are
 * Megatron-LM's (get_train_valid_test_split_), checked against values that
 * rule gives in Python for many weights and document counts, rounding ties
 * to even included; weights and results it cannot use are refused; the
 * names parse and print as clients spell them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "common/split.h"

struct split_case {
	double w[3];
	uint64_t n;
	int64_t idx[4];
};

/* Each idx computed by Megatron's own function in Python. */
static const struct split_case cases[] = {
	{{969, 30, 1}, 1000, {0, 969, 999, 1000}},
	{{969, 30, 1}, 60, {0, 58, 60, 60}},
	{{969, 30, 1}, 7, {0, 7, 7, 7}},
	{{949, 50, 1}, 100000, {0, 94900, 99900, 100000}},
	{{969, 30, 1}, 123456789, {0, 119629628, 123333332, 123456789}},
	{{1, 1, 1}, 10, {0, 4, 7, 10}},   /* 3 + 3 + 3 = 9: every index after the first + 1 */
	{{1, 1, 1}, 1, {0, 1, 1, 1}},
	{{1, 1, 1}, 2, {0, 0, 1, 2}},     /* 1 + 1 + 1 = 3: - 1, leaving train empty */
	{{98, 2, 0}, 50, {0, 49, 50, 50}},
	{{1, 0, 0}, 5, {0, 5, 5, 5}},
	{{0, 1, 0}, 5, {0, 0, 5, 5}},
	{{3, 3, 3}, 4, {0, 2, 3, 4}},
	{{0.5, 0.25, 0.25}, 6, {0, 2, 4, 6}}, /* 1.5 rounds to 2 (ties to even) */
	{{1, 1, 0}, 3, {0, 1, 3, 3}},     /* 1.5 and 1.5 round to 2 and 2 */
	{{1, 1, 0}, 5, {0, 3, 5, 5}},     /* 2.5 rounds to 2: 2 + 2 = 4, then + 1 */
	{{2, 1, 1}, 2, {0, 2, 2, 2}},
	{{100, 0, 0}, 1, {0, 1, 1, 1}},
	{{1, 0, 0}, 0, {0, 0, 0, 0}},
};

static void test_megatron_rule(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct split_case *c = &cases[i];
		int64_t idx[4] = {-7, -7, -7, -7};
		assert_int_equal(split_documents(c->w, c->n, idx), 0);
		for (int k = 0; k < 4; k++) {
			if (idx[k] != c->idx[k])
				fail_msg("case %zu (%g,%g,%g over %llu): idx[%d] = %lld, Megatron's %lld", i,
					 c->w[0], c->w[1], c->w[2], (unsigned long long)c->n, k,
					 (long long)idx[k], (long long)c->idx[k]);
		}
	}
}

/* The ranges always tile [0, N) for ordinary weights and any N. */
static void test_ranges_tile(void **state)
{
	(void)state;
	const double weights[][3] = {{969, 30, 1}, {8, 1, 1}, {1, 1, 1}, {90, 5, 5}, {7, 2, 0}};
	for (size_t w = 0; w < sizeof(weights) / sizeof(weights[0]); w++) {
		for (uint64_t n = 3; n < 3000; n += 7) {
			int64_t idx[4];
			assert_int_equal(split_documents(weights[w], n, idx), 0);
			assert_int_equal(idx[0], 0);
			assert_int_equal(idx[3], (int64_t)n);
			assert_true(idx[1] <= idx[2] && idx[2] <= idx[3]);
			/* each within one document of its share */
			double sum = weights[w][0] + weights[w][1] + weights[w][2];
			for (int k = 0; k < 3; k++)
				assert_true(fabs((double)(idx[k + 1] - idx[k]) - weights[w][k] / sum * (double)n) <= 2.0);
		}
	}
}

static void test_refused(void **state)
{
	(void)state;
	int64_t idx[4];
	assert_int_equal(split_documents((double[3]){0, 0, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_documents((double[3]){-1, 2, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_documents((double[3]){NAN, 1, 0}, 10, idx), -EINVAL);
	assert_int_equal(split_documents((double[3]){INFINITY, 1, 0}, 10, idx), -EINVAL);
	/* 0,1,1 over 3: 0 + 2 + 2 = 4, less 1 makes train end at -1, which
	 * Megatron would index from the end; refused */
	assert_int_equal(split_documents((double[3]){0, 1, 1}, 3, idx), -EINVAL);
	assert_int_equal(split_documents((double[3]){1, 0, 0}, (1ull << 53) + 1, idx), -ERANGE);
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
		cmocka_unit_test(test_megatron_rule),
		cmocka_unit_test(test_ranges_tile),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
