/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash: the one per-sample hash of loaderd. Every choice that must be the
 * same whatever the worker count, timing or restarts (the epoch's
 * permutation, a sample's crop and flip, the sample that replaces a bad
 * one) is drawn from these, so the bytes of a batch depend only on the
 * seed, epoch and sample index. Changing a constant here changes every
 * delivered batch: tests/unit/test_hash.c pins the values.
 */
#ifndef LDR_COMMON_HASH_H
#define LDR_COMMON_HASH_H

#include <stdint.h>

/* splitmix64's increment: also the step between a stream's outputs. */
#define HASH_GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's finaliser (Steele, Lea, Flood 2014): a fast, well-mixed
 * 64-bit hash. */
static inline uint64_t hash_mix64(uint64_t x)
{
	x += HASH_GOLDEN;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The key of sample `index` of `epoch` for one use of randomness: salt
 * tells the uses apart (transforms, substitutes), so that they draw
 * independent values from the same (seed, epoch, index). */
static inline uint64_t hash_sample(uint64_t seed, uint64_t salt, uint64_t epoch, uint64_t index)
{
	return hash_mix64(hash_mix64(hash_mix64(seed ^ salt) ^ epoch) ^ index);
}

#endif
