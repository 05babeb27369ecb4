/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docorder (daemon side): where each window of an epoch starts in the
 * epoch's document order (common/docorder.h), for a megatron pipeline with
 * document_shuffle on.
 *
 * The order is a permutation of blocks of documents, then of the
 * documents inside each block. The tokens of each stored block are summed
 * once, when the pipeline's source is opened (from its index); an
 * epoch's running sum of them in the epoch's block order (8 bytes a
 * block, never a document) is kept for the few (pipeline, split, epoch)
 * that clients are in, the least recently used dropped first. A window
 * is then one binary search over blocks: the position where the block
 * holding its first token starts, and the tokens of the epoch's stream
 * from there to it. The workers walk the block's documents to the window
 * and on (worker/token_rows.c), so nothing here is proportional to the
 * documents of a block either.
 *
 * An epoch's sums are computed on a thread of libuv's pool, never on the
 * loop: docorder_locate answers -EAGAIN while they are not ready, and the
 * scheduler starts another client's batch meanwhile; the order of the
 * next epoch is asked for while a client is in the last part of its own.
 *
 * Threads: the scheduler's loop only (the pool's thread touches only its
 * own entry's sums while the entry is computing).
 */
#ifndef LDR_DAEMON_DOCORDER_H
#define LDR_DAEMON_DOCORDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/docorder.h"

/* Epoch orders kept at once: a few for the epochs clients are in, and one
 * more for each member a blend reads in turn (a blend's rows alternate
 * between its members, each a pipeline of its own here: fewer entries
 * than members would recompute an order for every row). */
#define DOCORDER_CACHED 40

/* A split's documents as the order sees them: block_tokens[b] the tokens
 * of stored block b of the split (summed where the documents are known:
 * daemon/source/source_megatron.c, from the index). */
struct docorder_split {
	const uint64_t *block_tokens;
	struct docorder_shape shape;
};

enum docorder_state { DOCORDER_FREE, DOCORDER_COMPUTING, DOCORDER_READY };

struct docorder_entry {
	enum docorder_state state;
	uint32_t pipeline, split;
	uint64_t epoch;
	uint64_t *prefix; /* [n_blocks + 1]: tokens before block position q */
	uint64_t n_blocks;
	uint64_t used;    /* the cache's clock when last used */
	struct docorder_job *job; /* while computing */
};

struct docorder_cache;
struct docorder_job;

/* Runs fn(arg) off the loop and then done(arg) on it (the scheduler's
 * libuv pool); NULL: fn runs at once, on the caller's thread (tests, and
 * a scheduler without a loop). 0 or -errno. */
typedef int (*docorder_offload_fn)(void *ctx, void (*fn)(void *arg), void (*done)(void *arg),
				   void *arg);

struct docorder_cache {
	struct docorder_entry entries[DOCORDER_CACHED];
	uint64_t clock;
	docorder_offload_fn offload;
	void *offload_ctx;
	void (*ready)(void *ctx); /* called on the loop when an order is ready; may be NULL */
	void *ready_ctx;
	uint64_t computed;        /* orders computed since start */
	/* the threads' count of computations touching the sums, which
	 * docorder_cache_free waits to see at 0 */
	pthread_mutex_t lock;
	pthread_cond_t idle;
	uint32_t running;
	bool lock_ready;
};

/*
 * Where window `window` (of seq_len + 1 tokens, seq_len apart) of `epoch`
 * starts: *k, the position in the epoch's order of the first document of
 * the block holding its first token, and *skip, the tokens of the epoch's
 * stream from that document to it. 0; -EAGAIN when the epoch's sums are
 * being computed (cache->ready is called once they are); -ERANGE when the
 * window lies past the split's tokens; -ENOMEM.
 */
int docorder_locate(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		    const struct docorder_split *sp, uint64_t epoch, uint64_t seq_len,
		    uint64_t window, uint64_t *k, uint64_t *skip);

/* Starts computing the epoch's sums if they are neither ready nor being
 * computed (a client nearing the end of the epoch before). 0, -ENOMEM,
 * or -EBUSY when every entry is in use by a computation. */
int docorder_prepare(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		     const struct docorder_split *sp, uint64_t epoch);

/* Whether the epoch's sums are computed (no computation is started). */
bool docorder_ready(const struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		    uint64_t epoch);

/* block_tokens[b] = the tokens of stored block b of the split whose
 * documents start at doc_tokens[first_doc], from a table of the
 * documents' first tokens (the unit tests hold one; the daemon keeps no
 * such table and sums a megatron index's blocks in place:
 * daemon/source/source_megatron.c). */
void docorder_block_sums(const uint64_t *doc_tokens, uint64_t first_doc,
			 const struct docorder_shape *sh, uint64_t *block_tokens);

/* Frees the orders cached for pipeline (a table entry a reload removed,
 * which may be filled again with another pipeline). */
void docorder_cache_drop(struct docorder_cache *c, uint32_t pipeline);

/* An empty cache whose computations run through offload (NULL: at once);
 * ready(ready_ctx) is called on the loop when one is done. */
void docorder_cache_init(struct docorder_cache *c, docorder_offload_fn offload, void *offload_ctx,
			 void (*ready)(void *ctx), void *ready_ctx);

/* Frees every cached order; one being computed is freed when its done
 * callback runs (which the offloader's loop must still run), after this
 * waits for its thread to stop reading the block sums. */
void docorder_cache_free(struct docorder_cache *c);

#endif
