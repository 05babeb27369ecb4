/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/sampler: the per-epoch permutation is a bijection
 * that depends on (seed, epoch) only, and sharding plus batching match an
 * independent, literal reimplementation of PyTorch's DistributedSampler
 * followed by a BatchSampler, for fresh and resumed segments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "common/sampler.h"

/* Asserts every value of perm(seed, epoch) over [0, n) is < n and seen once. */
static void check_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
	uint8_t *seen = calloc(n, 1);
	assert_non_null(seen);
	for (uint64_t pos = 0; pos < n; pos++) {
		uint64_t v = sampler_permute(n, seed, epoch, pos);
		assert_true(v < n);
		assert_int_equal(seen[v], 0);
		seen[v] = 1;
	}
	free(seen);
}

static void test_permute_is_bijection(void **state)
{
	static const uint64_t sizes[] = {1, 2, 3, 5, 1000, 4097, 100003};
	static const uint64_t seeds[] = {0, 1, 0xdeadbeefcafef00dull};
	static const uint64_t epochs[] = {0, 1, 7, UINT64_MAX};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++)
			for (size_t e = 0; e < sizeof(epochs) / sizeof(epochs[0]); e++)
				check_bijection(sizes[i], seeds[k], epochs[e]);
}

/* Positions at which two permutations of [0, n) disagree. */
static uint64_t permutations_differ(uint64_t n, uint64_t seed_a, uint64_t epoch_a,
				    uint64_t seed_b, uint64_t epoch_b)
{
	uint64_t differ = 0;
	for (uint64_t pos = 0; pos < n; pos++)
		differ += sampler_permute(n, seed_a, epoch_a, pos) !=
			  sampler_permute(n, seed_b, epoch_b, pos);
	return differ;
}

static void test_permute_depends_on_seed_and_epoch(void **state)
{
	static const uint64_t sizes[] = {5, 1000, 4097};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t n = sizes[i];
		/* A fresh shuffle of n items keeps about one item in place; ask
		 * for most positions to move, with slack for the tiny n. */
		uint64_t want = n > 100 ? n * 9 / 10 : 1;
		assert_true(permutations_differ(n, 0, 0, 0, 1) >= want);
		assert_true(permutations_differ(n, 0, 1, 0, 2) >= want);
		assert_true(permutations_differ(n, 0, 0, 1, 0) >= want);
		assert_true(permutations_differ(n, 7, 3, 8, 3) >= want);
		/* Not the identity either. */
		uint64_t moved = 0;
		for (uint64_t pos = 0; pos < n; pos++)
			moved += sampler_permute(n, 0, 0, pos) != pos;
		assert_true(moved >= want);
	}
	/* Same (seed, epoch), same permutation. */
	assert_int_equal(permutations_differ(100003, 5, 9, 5, 9), 0);
}

/* Exact values, so a change of algorithm (which would reshuffle every
 * stored dataset order and invalidate saved positions) is noticed. */
static void test_permute_pinned_values(void **state)
{
	static const struct {
		uint64_t n, seed, epoch, pos, value;
	} pinned[] = {
		{2, 0, 0, 0, 1},
		{5, 0, 0, 0, 1},
		{5, 0, 0, 4, 3},
		{1000, 0, 0, 0, 518},
		{1000, 0, 0, 999, 670},
		{1000, 1, 0, 0, 787},
		{1000, 0, 1, 0, 822},
		{100003, 42, 7, 12345, 51362},
		{1000000000000ull, 3, 1, 0, 585379999245ull},
		{1000000000000ull, 3, 1, 999999999999ull, 673382212021ull},
		{UINT64_MAX, 0, 0, 0, 11716564151465275256ull},
	};
	for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++)
		assert_int_equal(sampler_permute(pinned[i].n, pinned[i].seed, pinned[i].epoch,
						 pinned[i].pos),
				 pinned[i].value);
	static const uint64_t ten[2][10] = {
		{1, 9, 2, 7, 5, 3, 8, 0, 4, 6},
		{6, 2, 1, 9, 4, 8, 3, 5, 7, 0},
	};
	for (uint64_t epoch = 0; epoch < 2; epoch++)
		for (uint64_t pos = 0; pos < 10; pos++)
			assert_int_equal(sampler_permute(10, 0, epoch, pos), ten[epoch][pos]);
}

static void test_identity_without_shuffle(void **state)
{
	struct sampler s = {.n_samples = 1000, .seed = 99, .batch_size = 7, .rank = 0,
			    .world = 1, .shuffle = false, .drop_last = false};
	for (uint64_t epoch = 0; epoch < 3; epoch++)
		for (uint64_t j = 0; j < 1000; j++)
			assert_int_equal(sampler_sample(&s, epoch, 0, j), j);
	/* Sharded and resumed, still the position itself; the one padding
	 * row wraps to the segment's first position. */
	s.world = 4;
	s.rank = 3;
	assert_int_equal(sampler_rank_samples(&s, 101), 225);
	for (uint64_t j = 0; j < 225; j++) {
		uint64_t p = 101 + 3 + j * 4;
		assert_int_equal(sampler_sample(&s, 5, 101, j), p < 1000 ? p : 101);
	}
}

/*
 * The reference: DistributedSampler.__iter__ and BatchSampler.__iter__,
 * transcribed line by line on the segment's list perm[g:n].
 */
struct ref_rank {
	uint64_t num_samples;   /* DistributedSampler.num_samples */
	uint64_t *indices;      /* indices[rank:total_size:world] */
	uint64_t n_batches;
	uint64_t *batch_rows;   /* rows of each batch */
};

static void ref_rank_build(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle, uint64_t g,
			   uint32_t world, uint32_t rank, bool drop_last, uint32_t batch_size,
			   struct ref_rank *out)
{
	uint64_t len = n - g;
	/* indices = perm list of the segment */
	uint64_t *indices = malloc((len + world) * sizeof(uint64_t));
	assert_non_null(indices);
	for (uint64_t k = 0; k < len; k++)
		indices[k] = shuffle ? sampler_permute(n, seed, epoch, g + k) : g + k;

	/* if drop_last and len % num_replicas != 0:
	 *     num_samples = ceil((len - num_replicas) / num_replicas)
	 * else: num_samples = ceil(len / num_replicas) */
	uint64_t num_samples;
	if (drop_last && len % world != 0) {
		if (len < world) /* ceil of a fraction in (-1, 0) */
			num_samples = 0;
		else
			num_samples = (len - world + world - 1) / world;
	} else {
		num_samples = (len + world - 1) / world;
	}
	uint64_t total_size = num_samples * world;
	uint64_t have = len;
	if (!drop_last) {
		uint64_t padding_size = total_size - have;
		if (padding_size <= have) {
			/* indices += indices[:padding_size] */
			memcpy(indices + have, indices, padding_size * sizeof(uint64_t));
		} else {
			/* indices += (indices * ceil(padding_size / len))[:padding_size] */
			uint64_t copies = (padding_size + have - 1) / have;
			uint64_t added = 0;
			for (uint64_t c = 0; c < copies; c++)
				for (uint64_t k = 0; k < have && added < padding_size; k++)
					indices[have + added++] = indices[k];
		}
	}
	/* else: indices = indices[:total_size] (nothing to copy) */

	out->num_samples = num_samples;
	out->indices = malloc((num_samples + 1) * sizeof(uint64_t));
	assert_non_null(out->indices);
	uint64_t taken = 0;
	for (uint64_t k = rank; k < total_size; k += world)
		out->indices[taken++] = indices[k];
	assert_int_equal(taken, num_samples);
	free(indices);

	/* BatchSampler: full batches, then the rest unless drop_last. */
	out->batch_rows = malloc((num_samples / batch_size + 1) * sizeof(uint64_t));
	assert_non_null(out->batch_rows);
	out->n_batches = 0;
	uint64_t in_batch = 0;
	for (uint64_t k = 0; k < num_samples; k++) {
		if (++in_batch == batch_size) {
			out->batch_rows[out->n_batches++] = in_batch;
			in_batch = 0;
		}
	}
	if (in_batch > 0 && !drop_last)
		out->batch_rows[out->n_batches++] = in_batch;
}

static void ref_rank_free(struct ref_rank *r)
{
	free(r->indices);
	free(r->batch_rows);
}

/*
 * One configuration: every rank's counts, batch rows and samples agree
 * with the reference, and the delivered batches of all ranks together
 * cover the segment exactly once (plus DistributedSampler's padding, or
 * minus the dropped tail).
 */
static void check_segment(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle, uint64_t g,
			  uint32_t world, uint32_t batch_size, bool drop_last)
{
	uint32_t *count = calloc(n, sizeof(uint32_t));
	assert_non_null(count);
	uint64_t delivered = 0;
	for (uint32_t rank = 0; rank < world; rank++) {
		struct sampler s = {.n_samples = n, .seed = seed, .batch_size = batch_size,
				    .rank = rank, .world = world, .shuffle = shuffle,
				    .drop_last = drop_last};
		struct ref_rank ref;
		ref_rank_build(n, seed, epoch, shuffle, g, world, rank, drop_last, batch_size, &ref);
		assert_int_equal(sampler_rank_samples(&s, g), ref.num_samples);
		for (uint64_t j = 0; j < ref.num_samples; j++)
			assert_int_equal(sampler_sample(&s, epoch, g, j), ref.indices[j]);
		assert_int_equal(sampler_batches(&s, g), ref.n_batches);
		for (uint64_t b = 0; b < ref.n_batches; b++) {
			uint32_t rows = sampler_batch_rows(&s, g, b);
			assert_int_equal(rows, ref.batch_rows[b]);
			for (uint32_t i = 0; i < rows; i++) {
				uint64_t v = sampler_sample(&s, epoch, g, b * batch_size + i);
				assert_true(v < n);
				count[v]++;
				delivered++;
			}
		}
		if (!drop_last)
			assert_int_equal(sampler_batch_rows(&s, g, ref.n_batches), 0);
		ref_rank_free(&ref);
	}

	/* Coverage, from first principles rather than from the reference. */
	uint64_t len = n - g;
	for (uint64_t p = 0; p < n; p++) {
		uint64_t v = shuffle ? sampler_permute(n, seed, epoch, p) : p;
		if (p < g) {
			assert_int_equal(count[v], 0); /* consumed before the segment */
		} else if (!drop_last) {
			/* padding position q (0-based past the end) repeats the
			 * segment's (q mod len)-th sample */
			uint64_t padding = (len + world - 1) / world * world - len;
			uint64_t k = p - g;
			uint64_t extra = padding / len + (k < padding % len);
			assert_int_equal(count[v], 1 + extra);
		} else {
			assert_true(count[v] <= 1);
		}
	}
	if (drop_last) {
		uint64_t per_rank = len / world / batch_size * batch_size;
		assert_int_equal(delivered, per_rank * world);
		/* What is delivered is the head of the segment's rank-major
		 * interleave: the first per_rank*world positions. */
		for (uint64_t p = g; p < g + per_rank * world; p++)
			assert_int_equal(count[shuffle ? sampler_permute(n, seed, epoch, p) : p], 1);
	} else {
		assert_int_equal(delivered, (len + world - 1) / world * world);
	}
	free(count);
}

static void test_sharding_matches_distributed_sampler(void **state)
{
	static const uint64_t sizes[] = {1, 2, 3, 7, 64, 100, 257, 1000};
	static const uint32_t batch_sizes[] = {1, 3, 8, 32};
	static const struct {
		uint64_t seed, epoch;
	} streams[] = {{0, 0}, {42, 3}};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t n = sizes[i];
		uint64_t starts[] = {0, n / 3, n - 1};
		for (uint32_t world = 1; world <= 8; world++)
			for (size_t b = 0; b < sizeof(batch_sizes) / sizeof(batch_sizes[0]); b++)
				for (size_t k = 0; k < sizeof(streams) / sizeof(streams[0]); k++)
					for (size_t gi = 0; gi < 3; gi++)
						for (int flags = 0; flags < 4; flags++)
							check_segment(n, streams[k].seed,
								      streams[k].epoch, flags & 1,
								      starts[gi], world,
								      batch_sizes[b], flags & 2);
	}
}

/*
 * A run saved after some batches at one world size and resumed at another:
 * the new ranks together receive exactly the positions the old ones had
 * not reached, and nothing the old ones had.
 */
static void test_resumed_segment_covers_remaining(void **state)
{
	const uint64_t n = 1009;
	const uint64_t seed = 17, epoch = 2;
	static const struct {
		uint32_t old_world, new_world, batch_size, batches_done;
	} cases[] = {
		{8, 3, 16, 5}, {3, 8, 10, 7}, {1, 7, 100, 3}, {5, 5, 1, 150}, {7, 1, 9, 14},
		{2, 6, 64, 7},
	};
	uint32_t *count = calloc(n, sizeof(uint32_t));
	assert_non_null(count);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		memset(count, 0, n * sizeof(uint32_t));
		uint64_t first = 0;
		for (uint32_t rank = 0; rank < cases[c].old_world; rank++) {
			struct sampler s = {.n_samples = n, .seed = seed,
					    .batch_size = cases[c].batch_size, .rank = rank,
					    .world = cases[c].old_world, .shuffle = true};
			uint64_t rows = 0;
			for (uint64_t b = 0; b < cases[c].batches_done; b++)
				rows += sampler_batch_rows(&s, 0, b);
			for (uint64_t j = 0; j < rows; j++)
				count[sampler_sample(&s, epoch, 0, j)]++;
			first += rows;
		}
		uint64_t g = first; /* what position_after_batch records */
		assert_true(g < n);
		uint64_t second = 0;
		for (uint32_t rank = 0; rank < cases[c].new_world; rank++) {
			struct sampler s = {.n_samples = n, .seed = seed,
					    .batch_size = cases[c].batch_size, .rank = rank,
					    .world = cases[c].new_world, .shuffle = true};
			for (uint64_t b = 0; b < sampler_batches(&s, g); b++) {
				uint32_t rows = sampler_batch_rows(&s, g, b);
				for (uint32_t i = 0; i < rows; i++) {
					uint64_t j = b * cases[c].batch_size + i;
					/* rows past the end are padding: they repeat
					 * the segment's head and are not counted */
					if (g + rank + j * cases[c].new_world < n) {
						count[sampler_sample(&s, epoch, g, j)]++;
						second++;
					}
				}
			}
		}
		assert_int_equal(first + second, n);
		for (uint64_t v = 0; v < n; v++)
			assert_int_equal(count[v], 1);
	}
	free(count);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static long max_rss_kib(void)
{
	struct rusage ru;
	assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
	return ru.ru_maxrss;
}

/* Datasets far larger than memory: no table is ever built. */
static void test_large_dataset(void **state)
{
	enum { probes = 100000 };
	static uint64_t values[probes];
	static const uint64_t sizes[] = {1000000000000ull, (1ull << 63) + 1, UINT64_MAX};
	long rss_before = max_rss_kib();
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t n = sizes[i];
		/* Distinct values < n over the head, the tail and a stride. */
		for (uint64_t k = 0; k < probes; k++) {
			uint64_t pos = k < probes / 3 ? k
				       : k < 2 * probes / 3 ? n - 1 - k
				       : k * 10000019ull;
			values[k] = sampler_permute(n, 3, 1, pos);
			assert_true(values[k] < n);
		}
		qsort(values, probes, sizeof(values[0]), cmp_u64);
		for (uint64_t k = 1; k < probes; k++)
			assert_true(values[k - 1] != values[k]);
	}
	/* Every rank's last sample, padding included, at n = 1e12. */
	uint64_t n = 1000000000000ull;
	for (uint32_t world = 1; world <= 8; world++)
		for (uint32_t rank = 0; rank < world; rank++) {
			struct sampler s = {.n_samples = n, .seed = 1, .batch_size = 4096,
					    .rank = rank, .world = world, .shuffle = true};
			uint64_t k = sampler_rank_samples(&s, 12345);
			assert_int_equal(k, (n - 12345 + world - 1) / world);
			assert_true(sampler_sample(&s, 9, 12345, k - 1) < n);
			assert_int_equal(sampler_batches(&s, 12345), (k + 4095) / 4096);
		}
	/* The values array is static; anything O(n) would need terabytes. */
	assert_true(max_rss_kib() - rss_before < 64 * 1024);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_permute_is_bijection),
		cmocka_unit_test(test_permute_depends_on_seed_and_epoch),
		cmocka_unit_test(test_permute_pinned_values),
		cmocka_unit_test(test_identity_without_shuffle),
		cmocka_unit_test(test_sharding_matches_distributed_sampler),
		cmocka_unit_test(test_resumed_segment_covers_remaining),
		cmocka_unit_test(test_large_dataset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
