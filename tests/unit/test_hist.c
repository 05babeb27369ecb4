/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/hist: which bucket every bound and its
 * neighbours fall in, against the bounds computed here independently;
 * merging (plain and from the atomic form); quantile estimates against
 * samples whose quantiles are known, within a bucket's resolution.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/hist.h"

/* Bucket i's upper bound, written out: 16 us doubled i times. */
static uint64_t bound(uint32_t i)
{
	uint64_t b = 16000;
	for (uint32_t k = 0; k < i; k++)
		b *= 2;
	return b;
}

static void test_buckets(void **state)
{
	(void)state;
	assert_int_equal(hist_bucket(0), 0);
	assert_int_equal(hist_bucket(1), 0);
	for (uint32_t i = 0; i < HIST_FINITE; i++) {
		assert_int_equal(HIST_BOUND_NS(i), bound(i));
		/* the bound itself is in its bucket (le), one more is in the next */
		assert_int_equal(hist_bucket(bound(i)), i);
		assert_int_equal(hist_bucket(bound(i) + 1), i + 1);
		if (i > 0)
			assert_int_equal(hist_bucket(bound(i - 1) + bound(i - 1) / 2), i);
	}
	assert_int_equal(bound(HIST_FINITE - 1), 33554432000ull); /* about 33.6 s */
	assert_int_equal(hist_bucket(bound(HIST_FINITE - 1) + 1), HIST_FINITE);
	assert_int_equal(hist_bucket(UINT64_MAX), HIST_FINITE);
	/* every duration is in exactly the bucket whose range holds it */
	for (uint64_t ns = 1; ns < 100000000ull; ns = ns * 3 / 2 + 1) {
		uint32_t i = hist_bucket(ns);
		assert_true(ns <= bound(i));
		assert_true(i == 0 || ns > bound(i - 1));
	}
}

static void test_add_merge(void **state)
{
	(void)state;
	struct hist a = {0}, b = {0};
	hist_add(&a, 10000);   /* bucket 0 */
	hist_add(&a, 20000);   /* bucket 1 */
	hist_add(&b, 20000);
	hist_add(&b, 5000000000ull); /* 5 s: bucket 19 (4.19 s < 5 s <= 8.39 s) */
	hist_merge(&a, &b);
	assert_int_equal(a.count, 4);
	assert_int_equal(a.sum_ns, 10000 + 20000 + 20000 + 5000000000ull);
	assert_int_equal(a.bucket[0], 1);
	assert_int_equal(a.bucket[1], 2);
	assert_int_equal(a.bucket[19], 1);
	uint64_t n = 0;
	for (uint32_t i = 0; i < HIST_BUCKETS; i++)
		n += a.bucket[i];
	assert_int_equal(n, a.count);

	/* the atomic form: one writer's and several writers' adds read back alike */
	struct hist_atomic at;
	memset(&at, 0, sizeof(at));
	hist_atomic_add_own(&at, 10000);
	hist_atomic_add(&at, 20000);
	hist_atomic_add(&at, 20000);
	hist_atomic_add_own(&at, 5000000000ull);
	struct hist r = {0};
	hist_atomic_read(&at, &r);
	assert_memory_equal(&r, &a, sizeof(r));
	hist_atomic_read(&at, &r); /* reads add up */
	assert_int_equal(r.count, 8);
	hist_atomic_clear(&at);
	struct hist z = {0}, zr = {0};
	hist_atomic_read(&at, &zr);
	assert_memory_equal(&zr, &z, sizeof(z));
}

static void test_quantiles(void **state)
{
	(void)state;
	struct hist h = {0};
	assert_true(hist_quantile_ns(&h, 0.5) == 0.0);
	/* 1000 samples spread evenly over 1..1000 us */
	for (uint64_t us = 1; us <= 1000; us++)
		hist_add(&h, us * 1000);
	double true_q[] = {0.5, 0.9, 0.99};
	for (size_t k = 0; k < 3; k++) {
		double want = true_q[k] * 1000e3; /* ns */
		double got = hist_quantile_ns(&h, true_q[k]);
		/* within the bucket holding the true value: at most a factor 2 off */
		uint32_t i = hist_bucket((uint64_t)want);
		double lo = i ? (double)bound(i - 1) : 0.0;
		assert_true(got >= lo && got <= (double)bound(i));
		assert_true(fabs(got - want) / want < 0.5);
	}
	/* monotonic in q */
	double last = 0.0;
	for (double q = 0.0; q <= 1.0; q += 0.01) {
		double v = hist_quantile_ns(&h, q);
		assert_true(v >= last);
		last = v;
	}
	/* every sample in one bucket: interpolated inside it */
	struct hist one = {0};
	for (int i = 0; i < 100; i++)
		hist_add(&one, 100000); /* 100 us: bucket 3, (64, 128] us */
	double med = hist_quantile_ns(&one, 0.5);
	assert_true(med > 64000.0 && med <= 128000.0);
	assert_true(fabs(med - 96000.0) < 1.0);
	/* the unbounded bucket answers the last finite bound */
	struct hist big = {0};
	hist_add(&big, 100ull * 1000000000ull); /* 100 s */
	assert_true(hist_quantile_ns(&big, 0.99) == (double)bound(HIST_FINITE - 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets),
		cmocka_unit_test(test_add_merge),
		cmocka_unit_test(test_quantiles),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
