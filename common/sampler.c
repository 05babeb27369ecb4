/* SPDX-License-Identifier: Apache-2.0 */
/* sampler: seeded per-epoch permutation, sharding and batching (sampler.h). */
#include "common/sampler.h"

#include "common/hash.h"


/* The network's shape for n: half-width and its mask, and the round key. */
static void sampler_shape(uint64_t n, uint64_t seed, uint64_t epoch, unsigned *half,
			  uint64_t *mask, uint64_t *key)
{
	unsigned bits = 64 - (unsigned)__builtin_clzll(n - 1); /* 2^bits >= n */
	if (bits < 2)
		bits = 2;
	bits += bits & 1; /* balanced halves */
	*half = bits / 2;
	*mask = (*half == 64) ? ~0ull : ((1ull << *half) - 1);
	*key = hash_mix64(seed ^ hash_mix64(epoch ^ 0x6c6f61646572ull));
}

uint64_t sampler_unpermute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t value)
{
	if (n <= 1)
		return value;
	unsigned half;
	uint64_t mask, key;
	sampler_shape(n, seed, epoch, &half, &mask, &key);
	uint64_t x = value;
	/* The rounds backwards; cycle walking backwards leaves the cycle
	 * where sampler_permute entered it. */
	do {
		uint64_t left = x >> half, right = x & mask;
		for (uint64_t round = 4; round-- > 0;) {
			uint64_t f = hash_mix64(left ^ key ^ (round * 0xd6e8feb86659fd93ull)) & mask;
			uint64_t prev = right ^ f;
			right = left;
			left = prev;
		}
		x = (left << half) | right;
	} while (x >= n);
	return x;
}

uint64_t sampler_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t pos)
{
	if (n <= 1)
		return pos;
	unsigned half;
	uint64_t mask, key;
	sampler_shape(n, seed, epoch, &half, &mask, &key);
	uint64_t x = pos;
	/* Cycle walking: the network permutes [0, 2^bits); iterate until the
	 * value falls back into [0, n). Expected < 4 rounds since 2^bits < 4n. */
	do {
		uint64_t left = x >> half, right = x & mask;
		for (uint64_t round = 0; round < 4; round++) {
			uint64_t f = hash_mix64(right ^ key ^ (round * 0xd6e8feb86659fd93ull)) & mask;
			uint64_t next = left ^ f;
			left = right;
			right = next;
		}
		x = (left << half) | right;
	} while (x >= n);
	return x;
}

uint64_t sampler_rank_samples(const struct sampler *s, uint64_t g)
{
	if (g >= s->n_samples)
		return 0;
	uint64_t remaining = s->n_samples - g;
	if (s->drop_last)
		return remaining / s->world;
	return (remaining + s->world - 1) / s->world;
}

uint64_t sampler_batches(const struct sampler *s, uint64_t g)
{
	uint64_t k = sampler_rank_samples(s, g);
	if (s->drop_last)
		return k / s->batch_size;
	return (k + s->batch_size - 1) / s->batch_size;
}

uint32_t sampler_batch_rows(const struct sampler *s, uint64_t g, uint64_t b)
{
	uint64_t k = sampler_rank_samples(s, g);
	uint64_t first = b * s->batch_size;
	if (first >= k)
		return 0;
	uint64_t rows = k - first;
	return rows < s->batch_size ? (uint32_t)rows : s->batch_size;
}

uint64_t sampler_sample(const struct sampler *s, uint64_t epoch, uint64_t g, uint64_t j)
{
	uint64_t n = s->n_samples;
	uint64_t p = g + s->rank + j * s->world;
	if (p >= n) /* padding: wrap to the segment's start */
		p = g + (p - n) % (n - g);
	return s->shuffle ? sampler_permute(n, s->seed, epoch, p) : p;
}
