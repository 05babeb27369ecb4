/* SPDX-License-Identifier: Apache-2.0 */
/*
 * split: the train, valid and test splits of a Megatron dataset, as
 * megatron-core's dataset builder divides it for `--split 969,30,1`, and
 * the splits' names as clients, position tokens and messages spell them.
 *
 * A split is a range of consecutive elements: for GPTDataset (a megatron
 * pipeline) the index's sequences, not its documents. The rule is
 * megatron-core 0.16.1's (tests/data/megatron_split_ranges.txt holds its
 * own results, tools/megatron_split_reference.py says how they were made):
 *   - parse_and_normalize_split: the weights, padded with 0 to three, each
 *     >= 0, divided by their sum (summed left to right, as numpy.sum sums
 *     three doubles);
 *   - convert_split_vector_to_split_matrix: cum[0] = 0 and cum[k+1] =
 *     cum[k] + w[k] by double addition; split k's bookends are cum[k] and
 *     cum[k+1] (none when cum[k+1] <= cum[k]: the split is not built);
 *   - _build_megatron_dataset_splits: split k is elements
 *     [int(round(cum[k] * float(N))), int(round(cum[k+1] * float(N)))),
 *     round() being Python's (to the nearest, ties to even).
 * So idx[k] = round(cum[k] * N) for k = 0..3, and split k is
 * [idx[k], idx[k+1]); a split without bookends is the empty range where
 * its neighbours meet. There is no correction to make the last range end
 * at N: it does, to the last element, for every N below 2^50 (cum[3] is
 * within two units in the last place of 1).
 *
 * Pure functions; safe from any thread.
 */
#ifndef LDR_COMMON_SPLIT_H
#define LDR_COMMON_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

enum split_id { SPLIT_TRAIN = 0, SPLIT_VALID = 1, SPLIT_TEST = 2, SPLIT_COUNT = 3 };

#define SPLIT_NAME_MAX 16 /* the longest name a client may send, with its NUL */

/* "train", "valid", "test"; "invalid" for another value. */
const char *split_name(uint32_t id);

/* The split a name spells: exactly "train", "valid" or "test" (lowercase);
 * the empty string is train. false for any other text. */
bool split_from_name(const char *name, uint32_t *id);

/*
 * megatron-core's rule above over n_elements elements with the weights
 * w[3] (each finite and >= 0, their sum > 0), into idx[4]: split k is
 * elements [idx[k], idx[k+1]), idx[0] = 0. Returns 0, or -EINVAL for
 * weights that break those conditions or a last range that would end
 * past n_elements (possible only through the rounding, for N of 2^50 and
 * more); -ERANGE for n_elements above 2^53, where float(N) is no longer
 * exact.
 */
int split_ranges(const double w[SPLIT_COUNT], uint64_t n_elements, int64_t idx[SPLIT_COUNT + 1]);

#endif
