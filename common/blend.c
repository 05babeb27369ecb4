/* SPDX-License-Identifier: Apache-2.0 */
/* blend: the greedy blending rule and each member's sample orders (blend.h). */
#include "common/blend.h"

#include <errno.h>
#include <math.h>

#include "common/hash.h"
#include "common/sampler.h"

#define BLEND_SALT 0x626c656e646564ull /* "blended" */

int blend_normalise(const double *raw, uint32_t n, double *w)
{
	if (n == 0 || n > BLEND_MEMBERS_MAX)
		return -EINVAL;
	double sum = 0.0;
	for (uint32_t d = 0; d < n; d++) {
		if (!isfinite(raw[d]) || !(raw[d] > 0.0))
			return -EINVAL;
		sum += raw[d];
	}
	if (!isfinite(sum))
		return -EINVAL;
	for (uint32_t d = 0; d < n; d++)
		w[d] = raw[d] / sum;
	return 0;
}

uint32_t blend_pick(const double *w, uint32_t n, uint64_t i, const uint64_t *count)
{
	double t = (double)(i + 1);
	uint32_t best = 0;
	double best_error = w[0] * t - (double)count[0];
	for (uint32_t d = 1; d < n; d++) {
		double error = w[d] * t - (double)count[d];
		if (error > best_error) {
			best_error = error;
			best = d;
		}
	}
	return best;
}

void blend_build(const double *w, uint32_t n, uint64_t n_samples, uint8_t *member,
		 uint64_t *member_sample, uint64_t *taken)
{
	uint64_t count[BLEND_MEMBERS_MAX] = {0};
	for (uint64_t i = 0; i < n_samples; i++) {
		uint32_t d = blend_pick(w, n, i, count);
		if (member)
			member[i] = (uint8_t)d;
		if (member_sample)
			member_sample[i] = count[d];
		count[d]++;
	}
	for (uint32_t d = 0; taken && d < n; d++)
		taken[d] = count[d];
}

uint64_t blend_member_key(uint64_t seed, uint32_t d)
{
	return hash_sample(seed, BLEND_SALT, d, 0);
}

uint64_t blend_member_epoch(uint64_t size, uint64_t taken, uint64_t epoch, uint64_t k)
{
	uint64_t passes = taken / size + (taken % size != 0);
	return epoch * (passes ? passes : 1) + k / size;
}

uint64_t blend_member_sample(uint64_t size, uint64_t taken, uint64_t key, uint64_t epoch,
			     uint64_t k, bool shuffle)
{
	if (!shuffle)
		return k % size;
	return sampler_permute(size, key, blend_member_epoch(size, taken, epoch, k), k % size);
}
