/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docorder (daemon side): where each window of an epoch starts in the
 * epoch's document order (common/docorder.h), for a megatron pipeline with
 * document_shuffle on.
 *
 * Finding the document that holds token x of an epoch's stream needs the
 * running sum of document lengths in that epoch's order: one pass over the
 * split's documents (8 bytes each), kept for the few (pipeline, split,
 * epoch) that clients are in, the least recently used dropped first. A
 * window is then one binary search: the document position k where it
 * starts and the tokens of that document it skips. The workers walk the
 * documents from there (worker/reader.c).
 *
 * Threads: the scheduler's loop only.
 */
#ifndef LDR_DAEMON_DOCORDER_H
#define LDR_DAEMON_DOCORDER_H

#include <stdint.h>

/* Epoch orders kept at once: a few for the epochs clients are in, and one
 * more for each member a blend reads in turn (a blend's rows alternate
 * between its members, each a pipeline of its own here: fewer entries
 * than members would recompute an order for every row). */
#define DOCORDER_CACHED 20

/* A split's documents: doc_tokens[first_doc .. first_doc + n_docs] are the
 * first token of each document in the data file, then the end of the last
 * one (non-decreasing: empty documents are allowed). */
struct docorder_split {
	const uint64_t *doc_tokens;
	uint64_t first_doc;
	uint64_t n_docs;
	uint64_t key;  /* docorder_key(seed, split) */
	int shuffle;
};

struct docorder_entry {
	uint32_t pipeline, split;
	uint64_t epoch;
	uint64_t *prefix; /* [n_docs + 1]: tokens before position k; NULL when unused */
	uint64_t n_docs;
	uint64_t used;    /* the cache's clock when last used */
};

struct docorder_cache {
	struct docorder_entry entries[DOCORDER_CACHED];
	uint64_t clock;
};

/*
 * Where window `window` (of seq_len + 1 tokens, seq_len apart) of `epoch`
 * starts: *k, the position in the epoch's order of the document holding
 * its first token, and *skip, the tokens of that document before it.
 * Computes and caches the epoch's running sums when they are not cached.
 * 0, -ERANGE when the window lies past the split's tokens, -ENOMEM.
 */
int docorder_locate(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		    const struct docorder_split *sp, uint64_t epoch, uint64_t seq_len,
		    uint64_t window, uint64_t *k, uint64_t *skip);

/* Frees the orders cached for pipeline (a table entry a reload removed,
 * which may be filled again with another pipeline). */
void docorder_cache_drop(struct docorder_cache *c, uint32_t pipeline);

/* Frees every cached order; the cache is then empty and usable. */
void docorder_cache_free(struct docorder_cache *c);

#endif
