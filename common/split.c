/* SPDX-License-Identifier: Apache-2.0 */
/* split: megatron-core's train/valid/test ranges (split.h). */
#include "common/split.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const split_names[SPLIT_COUNT] = {"train", "valid", "test"};

const char *split_name(uint32_t id)
{
	return id < SPLIT_COUNT ? split_names[id] : "invalid";
}

bool split_from_name(const char *name, uint32_t *id)
{
	if (name[0] == '\0') {
		*id = SPLIT_TRAIN;
		return true;
	}
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		if (strcmp(name, split_names[k]) == 0) {
			*id = k;
			return true;
		}
	}
	return false;
}

int split_ranges(const double w[SPLIT_COUNT], uint64_t n_elements, int64_t idx[SPLIT_COUNT + 1])
{
	if (n_elements > (1ull << 53))
		return -ERANGE;
	double sum = 0.0; /* numpy.sum of three: left to right */
	for (int k = 0; k < SPLIT_COUNT; k++) {
		if (!isfinite(w[k]) || w[k] < 0.0)
			return -EINVAL;
		sum += w[k];
	}
	if (!(sum > 0.0) || !isfinite(sum))
		return -EINVAL;
	double n = (double)n_elements;
	double cum = 0.0;
	idx[0] = 0;
	for (int k = 0; k < SPLIT_COUNT; k++) {
		cum += w[k] / sum;
		/* int(round(bookend * float(N))): rint rounds ties to even in
		 * the default rounding mode, as Python's round() does. A split
		 * without bookends (cum unchanged) gets the same value as the
		 * one before, and is empty. */
		idx[k + 1] = (int64_t)rint(cum * n);
	}
	if (idx[SPLIT_COUNT] > (int64_t)n_elements)
		return -EINVAL;
	return 0;
}
