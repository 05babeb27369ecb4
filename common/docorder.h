/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docorder: the order of a token dataset's documents in each epoch, before
 * it is cut into windows as Megatron-LM's GPTDataset cuts them: the
 * documents of one split, in an order drawn from (seed, split, epoch)
 * alone, are concatenated, and window w of the epoch is tokens
 * [w * L, w * L + L + 1) of that stream.
 *
 * The order is a block shuffle, so that nothing about it grows with the
 * corpus: the split's documents are cut into blocks of `block`
 * consecutive documents (the last block may be shorter); an epoch's
 * order is a keyed permutation of the blocks, and inside each block a
 * keyed permutation of its documents. Both are the sampler's permutation
 * (common/sampler.h: a Feistel network with cycle walking, O(1) per
 * position, no state) under keys of their own, so the document order
 * and the window order of an epoch are independent draws. A split of at
 * most `block` documents is one block: its order is a full permutation.
 *
 * The daemon (which finds the block where each window starts,
 * daemon/source/docorder.h) and the workers (which read a window's
 * documents one after another, from that block on) both call it, and so
 * agree on every order by construction.
 */
#ifndef LDR_COMMON_DOCORDER_H
#define LDR_COMMON_DOCORDER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/hash.h"
#include "common/sampler.h"

#define DOCORDER_SALT 0x646f63756d656e74ull /* "document" */
#define DOCORDER_BLOCK_SALT 0x626c6f636b73ull /* "blocks" */

/* The order's version, part of a pipeline's data identity: a position
 * token saved under another order is refused, not resumed on other data. */
#define DOCORDER_VERSION 2

/* Documents a block holds by default (document_shuffle_block) and at most. */
#define DOCORDER_BLOCK_DEFAULT 4096u
#define DOCORDER_BLOCK_MAX (1u << 24)

/* One split's documents as the order sees them. */
struct docorder_shape {
	uint64_t n_docs; /* the split's documents */
	uint64_t block;  /* documents a block, > 0 */
	uint64_t key;    /* docorder_key(seed, split) */
	int shuffle;     /* 0: the stored order */
};

/* The key of a split's document permutations, from the pipeline's seed. */
static inline uint64_t docorder_key(uint64_t seed, uint32_t split)
{
	return hash_sample(seed, DOCORDER_SALT, split, 0);
}

/* Blocks of the split: ceil(n_docs / block). */
static inline uint64_t docorder_blocks(const struct docorder_shape *sh)
{
	return sh->n_docs / sh->block + (sh->n_docs % sh->block != 0);
}

/* Documents of stored block b (block, or fewer for the last). */
static inline uint64_t docorder_block_docs(const struct docorder_shape *sh, uint64_t b)
{
	uint64_t first = b * sh->block;
	return sh->n_docs - first < sh->block ? sh->n_docs - first : sh->block;
}

/* The stored block at position q (< docorder_blocks) of the epoch's order. */
uint64_t docorder_block_at(const struct docorder_shape *sh, uint64_t epoch, uint64_t q);

/* The position in the epoch's order of the first document of the block at
 * position q (q == docorder_blocks: n_docs). */
uint64_t docorder_block_start(const struct docorder_shape *sh, uint64_t epoch, uint64_t q);

/* The document at position k (< n_docs) of the epoch's order, counted from
 * the split's first document; k itself when shuffle is 0. */
uint64_t docorder_doc(const struct docorder_shape *sh, uint64_t epoch, uint64_t k);

/*
 * A split's documents as they lie in a Megatron-LM .idx (daemon/source/
 * megatron.h: sequence_pointers, then document_indices, int64 each,
 * little-endian, at any alignment), read in place from a mapping of the
 * file, so that nothing per document is ever copied. The split's
 * sequences are a range of the index's; where the range starts inside a
 * document (`split` cuts it), the split's document 0 is that document's
 * part from cut_seq on and document j is the index's document first_doc +
 * j - 1; otherwise document j is the index's document first_doc + j. The
 * end of the split's last document is end_token. The daemon sums its
 * blocks with it, and each worker walks a window's documents with it.
 */
#define DOCORDER_NO_CUT UINT64_MAX

struct docorder_index {
	const uint8_t *map;       /* the .idx's bytes */
	uint64_t n_sequences;     /* sequence_count */
	uint64_t n_entries;       /* document_indices' entries: documents + 1 */
	uint64_t pointers_at;     /* byte offset of sequence_pointers */
	uint64_t doc_indices_at;  /* byte offset of document_indices */
	uint64_t n_tokens;        /* the .bin's tokens: the first token of sequence n_sequences */
	uint32_t token_shift;     /* log2 of the token's bytes */
};

struct docorder_span {
	uint64_t first_doc; /* document_indices entry of its first whole document */
	uint64_t cut_seq;   /* DOCORDER_NO_CUT, or the sequence its document 0 starts at */
	uint64_t n_docs;
	uint64_t end_token; /* the end of its last document */
};

/* The first token of document j (<= n_docs: the end of the last) of the
 * split sp into *token. false when the index's entries are out of range
 * (a document index past sequence_count, a negative pointer): not the
 * index checked at start. */
bool docorder_index_start(const struct docorder_index *ix, const struct docorder_span *sp,
			  uint64_t j, uint64_t *token);

/* A walk over consecutive positions of one epoch's order, the block's
 * permutation found once per block rather than once per document (the
 * worker walks a block to a window's start with it). */
struct docorder_cursor {
	const struct docorder_shape *sh;
	uint64_t epoch;
	uint64_t k;      /* the position at hand, < n_docs */
	uint64_t q;      /* its block's position */
	uint64_t first;  /* the position of its block's first document */
	uint64_t size;   /* documents in its block */
	uint64_t base;   /* its block's first document in stored order */
	uint64_t inner;  /* the key of the permutation inside its block */
};

/* A cursor at position k (< n_docs). */
void docorder_cursor_at(const struct docorder_shape *sh, uint64_t epoch, uint64_t k,
			struct docorder_cursor *c);
/* The document at the cursor's position (docorder_doc's answer). */
uint64_t docorder_cursor_doc(const struct docorder_cursor *c);
/* On to the next position; false, the cursor unchanged, past the last. */
bool docorder_cursor_next(struct docorder_cursor *c);

#endif
