/* SPDX-License-Identifier: Apache-2.0 */
/*
 * blend: weighted blending of token datasets into one stream, as
 * Megatron-LM's BlendedDataset mixes corpora.
 *
 * Sample i of a blend of k members (normalised weights w[0..k)) comes from
 * the member d that is furthest behind its share after i + 1 samples:
 *
 *     d = argmax over d of (w[d] * (i + 1) - count[d]), ties to the lower d,
 *
 * count[d] being how many of samples 0..i-1 came from d; it is then that
 * member's count[d]-th sample of the blend. This is the greedy rule of
 * megatron-core's build_blending_indices (megatron/core/datasets/
 * helpers.cpp, called by blended_dataset.py), with one difference:
 * Megatron weighs by max(i, 1), the samples before i (i = 0 counted as 1),
 * we by i + 1, the samples once i is taken. The two agree on i = 0 and
 * differ by one step after; Megatron's lags its own targets (a member can
 * be more than one sample off its share: 1.3 measured with random
 * weights), ours does not:
 *
 *  - after any n samples, count[d] - w[d] * n < 1 for every member (the
 *    deficits w[d] * n - count[d] sum to 1 before each pick, so the one
 *    picked is at least 1/k behind and at most 1 - 1/k ahead after it);
 *  - with two or three members, also w[d] * n - count[d] < 1: every
 *    prefix holds each member's share to within one sample. With four or
 *    more members a member with a small weight can fall up to about 1.1
 *    samples behind before its turn comes (the greedy rule is not the
 *    optimal one there: tests/unit/test_blend.c measures both).
 *
 * The weights are normalised in double precision as Megatron does; every
 * computation is in double, so that the sequence is the same on every
 * machine (IEEE 754, no fused multiply-add: the expression is evaluated
 * as written).
 *
 * A member's k-th sample of an epoch is read in an order of its own:
 * pass p = k / size of the member (a member smaller than its share is
 * repeated, as Megatron builds each member dataset for as many samples as
 * the blend takes from it) draws a fresh permutation, the sampler's
 * (common/sampler.h) under the member's key, for epoch e's pass p. The
 * blend order itself is not shuffled again.
 *
 * Pure functions; safe from any thread.
 */
#ifndef LDR_COMMON_BLEND_H
#define LDR_COMMON_BLEND_H

#include <stdbool.h>
#include <stdint.h>

#define BLEND_MEMBERS_MAX 64u

/* raw[0..n) (n in 1..BLEND_MEMBERS_MAX, each finite and > 0) divided by
 * their sum into w. 0, or -EINVAL. */
int blend_normalise(const double *raw, uint32_t n, double *w);

/* The member sample i of the blend comes from, given count[d] of samples
 * 0..i-1 from each member (the rule above). */
uint32_t blend_pick(const double *w, uint32_t n, uint64_t i, const uint64_t *count);

/*
 * The blend's first n_samples samples: member[i] and member_sample[i]
 * (the member's count before i), and, when taken is not NULL, taken[d],
 * the samples from each member. Time O(n_samples * n). Either array may
 * be NULL when not wanted.
 */
void blend_build(const double *w, uint32_t n, uint64_t n_samples, uint8_t *member,
		 uint64_t *member_sample, uint64_t *taken);

/* The key of member d's sample orders, from the pipeline's seed. */
uint64_t blend_member_key(uint64_t seed, uint32_t d);

/* The epoch of the order a member's k-th sample of blend epoch `epoch` is
 * read in: epoch * passes + k / size, passes = ceil(taken / size) (at
 * least 1). Also the epoch of a megatron member's document order for it.
 * size > 0. */
uint64_t blend_member_epoch(uint64_t size, uint64_t taken, uint64_t epoch, uint64_t k);

/*
 * Which of its own size samples is a member's k-th sample of epoch
 * `epoch`, the member giving `taken` samples to each epoch of the blend:
 * pass k / size in a permutation of its own (epoch * passes + pass, passes
 * = ceil(taken / size)); identity within each pass when shuffle is off.
 * size > 0.
 */
uint64_t blend_member_sample(uint64_t size, uint64_t taken, uint64_t key, uint64_t epoch,
			     uint64_t k, bool shuffle);

#endif
