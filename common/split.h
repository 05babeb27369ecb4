/*
 * split: the train, valid and test splits of a dataset of documents, as
 * Megatron-LM's `--split 969,30,1` divides them, and the splits' names as
 * clients, position tokens and messages spell them.
 *
 * A split is a range of consecutive documents. The rule is Megatron-LM's
 * get_train_valid_test_split_ (megatron/legacy/data/dataset_utils.py, the
 * rule megatron-core's builder kept): the weights are normalised by their
 * sum; idx[0] = 0 and idx[k+1] = idx[k] + int(round(w[k] * float(N))) for
 * the three weights, in double precision, round() being Python's (to the
 * nearest, ties to even); then idx[3] - N is subtracted from idx[1..3], so
 * that idx[3] = N. Split k is documents [idx[k], idx[k+1]).
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
 * Megatron's rule above over n_documents documents with the weights w[3]
 * (each finite and >= 0, their sum > 0), into idx[4]. Returns 0, or
 * -EINVAL for weights that break those conditions, or a result outside
 * what a range of documents can be (an index below 0 or past
 * n_documents, or a range that ends before it starts: possible only
 * through the rounding, with fewer documents than splits). -ERANGE for
 * n_documents above 2^53, where float(N) is no longer exact.
 */
int split_documents(const double w[SPLIT_COUNT], uint64_t n_documents, int64_t idx[SPLIT_COUNT + 1]);

#endif
