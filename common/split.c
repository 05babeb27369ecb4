/* split: Megatron-LM's train/valid/test document ranges (split.h). */
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

int split_documents(const double w[SPLIT_COUNT], uint64_t n_documents, int64_t idx[SPLIT_COUNT + 1])
{
	if (n_documents > (1ull << 53))
		return -ERANGE;
	double sum = 0.0; /* Python's sum(): left to right */
	for (int k = 0; k < SPLIT_COUNT; k++) {
		if (!isfinite(w[k]) || w[k] < 0.0)
			return -EINVAL;
		sum += w[k];
	}
	if (!(sum > 0.0) || !isfinite(sum))
		return -EINVAL;
	double n = (double)n_documents;
	idx[0] = 0;
	for (int k = 0; k < SPLIT_COUNT; k++) {
		/* int(round(split * float(size))): rint rounds ties to even in
		 * the default rounding mode, as Python's round() does. */
		double part = rint((w[k] / sum) * n);
		idx[k + 1] = idx[k] + (int64_t)part;
	}
	int64_t diff = idx[SPLIT_COUNT] - (int64_t)n_documents;
	for (int k = 1; k <= SPLIT_COUNT; k++)
		idx[k] -= diff;
	for (int k = 0; k < SPLIT_COUNT; k++)
		if (idx[k] < 0 || idx[k + 1] < idx[k] || idx[k + 1] > (int64_t)n_documents)
			return -EINVAL;
	return 0;
}
