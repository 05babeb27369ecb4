/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sampler: which samples make which batch, for every rank, every epoch.
 *
 * Pure functions shared by the daemon (which schedules the reads) and the
 * client library (which names the sample behind each delivered row), so the
 * two can never disagree.
 *
 * Semantics follow PyTorch's DistributedSampler followed by batching:
 *  - each epoch e has a permutation perm_e of [0, n) that depends only on
 *    (seed, e) (identity when shuffle is off);
 *  - an epoch is consumed as a "segment" starting at global offset g (0 for
 *    a fresh epoch, > 0 when a run resumes mid-epoch, possibly with another
 *    world size); rank r receives global positions g + r + j*world, j = 0..;
 *  - drop_last: every rank gets floor((n-g)/world) samples, the tail is
 *    dropped, and an incomplete final batch is dropped;
 *    otherwise ceil((n-g)/world) samples, the positions past n wrap to the
 *    segment's start (DistributedSampler's padding), and the final batch may
 *    be shorter than batch_size.
 *
 * The permutation is a 4-round Feistel network over the next even power of
 * two with cycle walking: O(1) memory and O(1) expected time per index,
 * whatever n is, and identical on every machine.
 */
#ifndef LDR_COMMON_SAMPLER_H
#define LDR_COMMON_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

struct sampler {
	uint64_t n_samples;  /* dataset size, > 0 */
	uint64_t seed;
	uint32_t batch_size; /* > 0 */
	uint32_t rank;       /* < world */
	uint32_t world;      /* > 0 */
	bool shuffle;
	bool drop_last;
};

/* perm_e(pos) for pos < n. */
uint64_t sampler_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t pos);

/* Its inverse: the pos < n with perm_e(pos) == value, for value < n. */
uint64_t sampler_unpermute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t value);

/* Samples this rank receives from the segment that starts at offset g. */
uint64_t sampler_rank_samples(const struct sampler *s, uint64_t g);

/* Batches this rank receives from that segment. */
uint64_t sampler_batches(const struct sampler *s, uint64_t g);

/* Rows in batch b of that segment (batch_size, or fewer for the last). */
uint32_t sampler_batch_rows(const struct sampler *s, uint64_t g, uint64_t b);

/* Dataset index of the j-th sample this rank receives in epoch e's segment
 * starting at g (j < sampler_rank_samples). */
uint64_t sampler_sample(const struct sampler *s, uint64_t epoch, uint64_t g, uint64_t j);

#endif
