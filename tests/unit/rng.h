/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rng.h: the tests' random numbers, splitmix64 (common/hash.h) over a
 * state each test seeds with a constant (or its --seed), so that a failure
 * reproduces. Define RNG_SEED before including it to choose the start.
 */
#ifndef LDR_TESTS_RNG_H
#define LDR_TESTS_RNG_H

#include <stdint.h>

#include "common/hash.h"

#ifndef RNG_SEED
#define RNG_SEED 0x5eed5eed12345678ull
#endif

static uint64_t rng_state = RNG_SEED;

static inline uint64_t rng_next(void)
{
	uint64_t z = hash_mix64(rng_state);
	rng_state += HASH_GOLDEN;
	return z;
}

/* Uniform in [lo, hi]. */
static inline uint32_t rng_range(uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(rng_next() % ((uint64_t)hi - lo + 1));
}

/* Uniform in [lo, hi). */
static inline double rng_real(double lo, double hi)
{
	return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53;
}

#endif
