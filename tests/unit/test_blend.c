/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/blend: the greedy rule gives the member sequences
 * that a literal Python computation of it gives (pinned here), agrees with
 * a from-scratch recomputation at every step for random weights, breaks
 * ties to the lower member, keeps every prefix within one sample of each
 * member's share as blend.h states (over-serving never; falling behind
 * only with four or more members, measured), refuses weights it cannot
 * use; each member's sample order is a permutation of its samples in
 * every pass, a different one each pass and epoch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/blend.h"
#include "rng.h"

struct blend_case {
	double raw[3];
	uint32_t n;
	const char *members; /* sample i's member, as Python's literal rule gives it */
};

/* errs = [w[d] * (i + 1) - c[d] ...]; d = errs.index(max(errs)) */
static const struct blend_case cases[] = {
	{{0.7, 0.3}, 2, "01000100100100010010"},
	{{1, 1, 1}, 3, "012012012012"},
	{{5, 3, 2}, 3, "01200102100120010210"},
	{{1, 2}, 2, "101101101"},
	{{0.2, 0.5, 0.3}, 3, "12011210211201121021"},
};

static void test_pinned(void **state)
{
	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		double w[3];
		size_t len = strlen(cases[c].members);
		uint8_t member[32];
		uint64_t sample[32], taken[3], seen[3] = {0};
		assert_int_equal(blend_normalise(cases[c].raw, cases[c].n, w), 0);
		blend_build(w, cases[c].n, len, member, sample, taken);
		for (size_t i = 0; i < len; i++) {
			uint32_t d = (uint32_t)(cases[c].members[i] - '0');
			if (member[i] != d)
				fail_msg("case %zu sample %zu: member %u, Python's %u", c, i, member[i], d);
			assert_int_equal(sample[i], seen[d]);
			seen[d]++;
		}
		for (uint32_t d = 0; d < cases[c].n; d++)
			assert_int_equal(taken[d], seen[d]);
	}
}

/* The rule from scratch: each member's count before i recounted from the
 * members already chosen, every error compared with every other. */
static uint32_t literal_pick(const double *w, uint32_t n, const uint8_t *member, uint64_t i)
{
	double error[BLEND_MEMBERS_MAX];
	for (uint32_t d = 0; d < n; d++) {
		uint64_t c = 0;
		for (uint64_t j = 0; j < i; j++)
			c += member[j] == d;
		error[d] = w[d] * (double)(i + 1) - (double)c;
	}
	for (uint32_t d = 0; d < n; d++) {
		bool best = true;
		for (uint32_t e = 0; e < n; e++)
			if (error[e] > error[d] || (error[e] == error[d] && e < d))
				best = false;
		if (best)
			return d;
	}
	return UINT32_MAX;
}

static void test_literal(void **state)
{
	(void)state;
		enum { N = 600 };
	uint8_t member[N];
	uint64_t sample[N];
	for (int trial = 0; trial < 40; trial++) {
		uint32_t n = 1 + (uint32_t)(rng_next() % 6);
		double raw[6], w[6];
		for (uint32_t d = 0; d < n; d++)
			raw[d] = 0.01 + (double)(rng_next() % 1000) / 10.0;
		assert_int_equal(blend_normalise(raw, n, w), 0);
		blend_build(w, n, N, member, sample, NULL);
		for (uint64_t i = 0; i < N; i++)
			assert_int_equal(member[i], literal_pick(w, n, member, i));
	}
}

static void test_ties(void **state)
{
	(void)state;
	double raw[4] = {1, 1, 1, 1}, w[4];
	uint64_t count[4] = {0};
	assert_int_equal(blend_normalise(raw, 4, w), 0);
	assert_int_equal(blend_pick(w, 4, 0, count), 0); /* all four tied */
	count[0] = 1;
	assert_int_equal(blend_pick(w, 4, 1, count), 1); /* 1, 2, 3 tied */
	count[1] = 1;
	count[2] = 1;
	assert_int_equal(blend_pick(w, 4, 3, count), 3);
	count[3] = 1;
	assert_int_equal(blend_pick(w, 4, 4, count), 0); /* all tied again */
}

/* The largest count[d] - w[d] * n and w[d] * n - count[d] over every
 * prefix of n_samples samples. */
static void prefix_errors(const double *w, uint32_t n, uint64_t n_samples, double *ahead,
			  double *behind)
{
	uint8_t *member = malloc(n_samples);
	assert_non_null(member);
	blend_build(w, n, n_samples, member, NULL, NULL);
	uint64_t count[BLEND_MEMBERS_MAX] = {0};
	*ahead = *behind = 0.0;
	for (uint64_t i = 0; i < n_samples; i++) {
		count[member[i]]++;
		for (uint32_t d = 0; d < n; d++) {
			double e = (double)count[d] - w[d] * (double)(i + 1);
			*ahead = e > *ahead ? e : *ahead;
			*behind = -e > *behind ? -e : *behind;
		}
	}
	free(member);
}

static void test_prefix_bound(void **state)
{
	(void)state;
		double worst_behind_many = 0.0;
	for (int trial = 0; trial < 600; trial++) {
		uint32_t n = 2 + (uint32_t)(rng_next() % 7);
		double raw[8], w[8], ahead, behind;
		for (uint32_t d = 0; d < n; d++) {
			double x = (double)(rng_next() % 100000 + 1) / 100000.0;
			raw[d] = trial % 3 == 0 ? x * x * x * x : x; /* some very small weights */
		}
		assert_int_equal(blend_normalise(raw, n, w), 0);
		prefix_errors(w, n, 3000, &ahead, &behind);
		if (ahead >= 1.0 - 1.0 / n + 1e-9)
			fail_msg("trial %d (%u members): a member %.6f samples ahead", trial, n, ahead);
		if (n <= 3 && behind >= 1.0)
			fail_msg("trial %d (%u members): a member %.6f samples behind", trial, n, behind);
		if (n > 3 && behind > worst_behind_many)
			worst_behind_many = behind;
	}
	/* blend.h's "about 1.1": measured, not a bound the rule guarantees */
	assert_true(worst_behind_many < 1.25);
}

static void test_refused(void **state)
{
	(void)state;
	double w[3];
	const double zero[2] = {1, 0}, negative[2] = {1, -1}, nan2[2] = {1, NAN},
		     inf2[2] = {1, INFINITY}, huge[2] = {1e308, 1e308};
	assert_int_equal(blend_normalise(zero, 2, w), -EINVAL);
	assert_int_equal(blend_normalise(negative, 2, w), -EINVAL);
	assert_int_equal(blend_normalise(nan2, 2, w), -EINVAL);
	assert_int_equal(blend_normalise(inf2, 2, w), -EINVAL);
	assert_int_equal(blend_normalise(huge, 2, w), -EINVAL); /* the sum overflows */
	assert_int_equal(blend_normalise(zero, 0, w), -EINVAL);
	const double ok[3] = {7, 2, 1};
	assert_int_equal(blend_normalise(ok, 3, w), 0);
	assert_true(fabs(w[0] - 0.7) < 1e-15 && fabs(w[1] - 0.2) < 1e-15 && fabs(w[2] - 0.1) < 1e-15);
}

/* Each pass of a member's order is a permutation of its samples; passes
 * and epochs draw different ones; shuffle off is the identity. */
static void test_member_order(void **state)
{
	(void)state;
	enum { SIZE = 50, TAKEN = 120 }; /* three passes: 50, 50, 20 */
	uint64_t key = blend_member_key(1234, 1), first[SIZE], other[SIZE];
	assert_true(key != blend_member_key(1234, 0) && key != blend_member_key(1235, 1));
	for (uint64_t epoch = 0; epoch < 2; epoch++) {
		for (uint64_t pass = 0; pass < 2; pass++) {
			uint8_t seen[SIZE] = {0};
			for (uint64_t k = 0; k < SIZE; k++) {
				uint64_t s = blend_member_sample(SIZE, TAKEN, key, epoch, pass * SIZE + k, true);
				assert_true(s < SIZE);
				assert_int_equal(seen[s], 0);
				seen[s] = 1;
				if (epoch == 0 && pass == 0)
					first[k] = s;
				else
					other[k] = s;
			}
			if (epoch || pass)
				assert_true(memcmp(first, other, sizeof(first)) != 0);
		}
	}
	/* epoch 1's first pass is not epoch 0's third */
	for (uint64_t k = 0; k < SIZE; k++) {
		first[k] = blend_member_sample(SIZE, TAKEN, key, 0, 2 * SIZE + k, true);
		other[k] = blend_member_sample(SIZE, TAKEN, key, 1, k, true);
	}
	assert_true(memcmp(first, other, sizeof(first)) != 0);
	for (uint64_t k = 0; k < 2 * SIZE; k++)
		assert_int_equal(blend_member_sample(SIZE, TAKEN, key, 3, k, false), k % SIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pinned),
		cmocka_unit_test(test_literal),
		cmocka_unit_test(test_ties),
		cmocka_unit_test(test_prefix_bound),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_member_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
