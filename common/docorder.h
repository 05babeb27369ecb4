/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docorder: the order of a token dataset's documents in each epoch, as
 * Megatron-LM's GPTDataset shuffles them before it cuts windows: the
 * documents of one split, in an order that is a permutation of them drawn
 * from (seed, split, epoch) alone, are concatenated, and window w of the
 * epoch is tokens [w * L, w * L + L + 1) of that stream.
 *
 * The permutation is the sampler's (common/sampler.h: a Feistel network
 * with cycle walking, O(1) per position) under a key of its own, so the
 * document order and the window order of an epoch are independent draws.
 * The daemon (which finds where each window starts, daemon/source/docorder.h)
 * and the workers (which read a window's documents one after another)
 * both call it, and so agree on every order by construction.
 */
#ifndef LDR_COMMON_DOCORDER_H
#define LDR_COMMON_DOCORDER_H

#include <stdint.h>

#include "common/hash.h"
#include "common/sampler.h"

#define DOCORDER_SALT 0x646f63756d656e74ull /* "document" */

/* The key of a split's document permutations, from the pipeline's seed. */
static inline uint64_t docorder_key(uint64_t seed, uint32_t split)
{
	return hash_sample(seed, DOCORDER_SALT, split, 0);
}

/* The document at position k (< n_docs) of the epoch's order, counted from
 * the split's first document; identity when shuffle is 0. */
static inline uint64_t docorder_doc(uint64_t n_docs, uint64_t key, uint64_t epoch, uint64_t k,
				    int shuffle)
{
	return shuffle ? sampler_permute(n_docs, key, epoch, k) : k;
}

#endif
