/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/docorder and common/docorder.h (the block
 * shuffle of an epoch's documents):
 *  - sampler_unpermute inverts sampler_permute for many sizes;
 *  - each epoch's order, for block sizes from 1 to more than the split,
 *    is a permutation of the split's documents (every document exactly
 *    once), whose blocks are runs of consecutive positions holding one
 *    stored block each, that differs between epochs and from the stored
 *    order; a split of one block is fully permuted; shuffle off is the
 *    stored order;
 *  - every window of an epoch is located (a block's first position and
 *    the tokens from there) where a direct walk over the epoch's order
 *    puts it, empty documents included, for several splits, blocks,
 *    epochs and window lengths; a window past the split is refused;
 *  - the cache answers the same after its entries are evicted;
 *  - with an offloader, an order not yet computed answers -EAGAIN, is
 *    computed once by the offloaded job, and the ready callback is called;
 *  - docorder_index_start reads a split's documents from a Megatron
 *    index's bytes: whole documents, a split that starts inside one (its
 *    document 0 from the cut), the end; an entry past sequence_count, a
 *    negative pointer, a document past document_indices are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/docorder.h"
#include "daemon/source/docorder.h"
#include "rng.h"

#define N_DOCS 300

static uint64_t doc_tokens[N_DOCS + 1];
static uint64_t sums[N_DOCS]; /* block sums, at most a block a document */
static uint64_t split_first;  /* the split's first document in doc_tokens */

static void make_docs(void)
{
	rng_state = RNG_SEED;
	doc_tokens[0] = 0;
	for (int d = 0; d < N_DOCS; d++) /* 0..40 tokens, about one document in 10 empty */
		doc_tokens[d + 1] = doc_tokens[d] + (rng_next() % 10 == 0 ? 0 : rng_range(1, 40));
}

static struct docorder_split split_of(uint64_t first, uint64_t n, uint64_t block, uint64_t key)
{
	split_first = first;
	struct docorder_split sp = {.block_tokens = sums,
				    .shape = {.n_docs = n, .block = block, .key = key, .shuffle = 1}};
	docorder_block_sums(doc_tokens, first, &sp.shape, sums);
	return sp;
}

/* The epoch's stream, token by token: for token x, its document position
 * and offset, walking the order from the start. */
static void walk(const struct docorder_split *sp, uint64_t epoch, uint64_t x, uint64_t *k,
		 uint64_t *skip)
{
	uint64_t at = 0;
	for (uint64_t i = 0; i < sp->shape.n_docs; i++) {
		uint64_t d = split_first + docorder_doc(&sp->shape, epoch, i);
		uint64_t len = doc_tokens[d + 1] - doc_tokens[d];
		if (x < at + len) {
			*k = i;
			*skip = x - at;
			return;
		}
		at += len;
	}
	fail_msg("token %llu is past the split", (unsigned long long)x);
}

/* From a block's first position k and the tokens skip from there, the
 * document position and offset, as the worker walks them. */
static void walk_block(const struct docorder_split *sp, uint64_t epoch, uint64_t k, uint64_t skip,
		       uint64_t *dk, uint64_t *dskip)
{
	for (uint64_t walked = 0; walked < sp->shape.block && k < sp->shape.n_docs; walked++, k++) {
		uint64_t d = split_first + docorder_doc(&sp->shape, epoch, k);
		uint64_t len = doc_tokens[d + 1] - doc_tokens[d];
		if (skip < len) {
			*dk = k;
			*dskip = skip;
			return;
		}
		skip -= len;
	}
	fail_msg("skip runs past the block");
}

static void test_unpermute(void **state)
{
	(void)state;
	const uint64_t sizes[] = {1, 2, 3, 5, 17, 64, 100, 1000, 4097};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (uint64_t pos = 0; pos < sizes[i]; pos++) {
			uint64_t v = sampler_permute(sizes[i], 11, 3, pos);
			assert_true(v < sizes[i]);
			assert_int_equal(sampler_unpermute(sizes[i], 11, 3, v), pos);
		}
	assert_int_equal(sampler_unpermute((uint64_t)1 << 40, 5, 1,
					   sampler_permute((uint64_t)1 << 40, 5, 1, 123456789)),
			 123456789);
}

static void test_orders(void **state)
{
	(void)state;
	const uint64_t blocks[] = {1, 3, 7, 16, 100, N_DOCS, 1000};
	for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
		struct docorder_shape sh = {.n_docs = N_DOCS, .block = blocks[b],
					    .key = docorder_key(7, 0), .shuffle = 1};
		uint64_t nb = docorder_blocks(&sh);
		static uint64_t order[3][N_DOCS];
		for (uint64_t epoch = 0; epoch < 3; epoch++) {
			uint8_t seen[N_DOCS] = {0};
			for (uint64_t q = 0; q < nb; q++) { /* each block position: one stored block */
				uint64_t from = docorder_block_start(&sh, epoch, q);
				uint64_t to = docorder_block_start(&sh, epoch, q + 1);
				uint64_t blk = docorder_block_at(&sh, epoch, q);
				assert_int_equal(to - from, docorder_block_docs(&sh, blk));
				for (uint64_t k = from; k < to; k++) {
					order[epoch][k] = docorder_doc(&sh, epoch, k);
					assert_true(order[epoch][k] < N_DOCS);
					assert_int_equal(order[epoch][k] / sh.block, blk);
					assert_int_equal(seen[order[epoch][k]]++, 0);
				}
			}
			assert_int_equal(docorder_block_start(&sh, epoch, nb), N_DOCS);
		}
		if (blocks[b] == 1)
			continue; /* blocks of one: only the blocks' order moves them */
		assert_memory_not_equal(order[0], order[1], sizeof(order[0]));
		assert_memory_not_equal(order[1], order[2], sizeof(order[0]));
		uint64_t identity = 0;
		for (uint64_t k = 0; k < N_DOCS; k++)
			identity += order[0][k] == k;
		assert_true(identity < N_DOCS / 10);
	}
	/* splits draw their own orders; shuffle off is the stored order */
	assert_true(docorder_key(7, 0) != docorder_key(7, 1) && docorder_key(7, 0) != docorder_key(8, 0));
	struct docorder_shape off = {.n_docs = N_DOCS, .block = 16, .key = docorder_key(7, 0)};
	for (uint64_t k = 0; k < N_DOCS; k++)
		assert_int_equal(docorder_doc(&off, 5, k), k);
}

static void test_locate_matches_walk(void **state)
{
	(void)state;
	make_docs();
	struct docorder_cache cache = {0};
	const uint64_t ranges[][2] = {{0, N_DOCS}, {100, 150}, {290, 10}};
	const uint64_t blocks[] = {1, 5, 16, 64, 1000};
	for (size_t r = 0; r < 3; r++) {
		for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
			struct docorder_split sp = split_of(ranges[r][0], ranges[r][1], blocks[b],
							    docorder_key(7, (uint32_t)r));
			docorder_cache_free(&cache); /* another block size: other sums */
			uint64_t total = doc_tokens[split_first + sp.shape.n_docs] -
					 doc_tokens[split_first];
			for (uint64_t epoch = 0; epoch < 3; epoch++) {
				for (uint64_t seq_len = 1; seq_len < 20; seq_len += 6) {
					for (uint64_t w = 0; w * seq_len + seq_len < total; w++) {
						uint64_t k = 0, skip = 0, wk = 0, wskip = 0, bk = 0, bskip = 0;
						assert_int_equal(docorder_locate(&cache, 0, (uint32_t)r, &sp,
										 epoch, seq_len, w, &k,
										 &skip), 0);
						walk(&sp, epoch, w * seq_len, &wk, &wskip);
						walk_block(&sp, epoch, k, skip, &bk, &bskip);
						assert_int_equal(bk, wk);
						assert_int_equal(bskip, wskip);
						assert_true(k <= wk && wk - k < sp.shape.block);
					}
				}
			}
			uint64_t k, skip;
			assert_int_equal(docorder_locate(&cache, 0, (uint32_t)r, &sp, 0, 1, total, &k,
							 &skip), -ERANGE);
		}
	}
	docorder_cache_free(&cache);
}

/* More epochs than the cache holds, visited back and forth. */
static void test_cache_eviction(void **state)
{
	(void)state;
	make_docs();
	struct docorder_cache cache = {0};
	struct docorder_split sp = split_of(0, N_DOCS, 8, docorder_key(3, 0));
	uint64_t first[2 * DOCORDER_CACHED][2];
	for (int pass = 0; pass < 3; pass++) {
		for (uint64_t e = 0; e < 2 * DOCORDER_CACHED; e++) {
			uint64_t epoch = pass == 1 ? 2 * DOCORDER_CACHED - 1 - e : e;
			uint64_t k, skip;
			assert_int_equal(docorder_locate(&cache, 1, 0, &sp, epoch, 5, 17, &k, &skip), 0);
			if (pass == 0) {
				first[epoch][0] = k;
				first[epoch][1] = skip;
			}
			assert_int_equal(k, first[epoch][0]);
			assert_int_equal(skip, first[epoch][1]);
		}
	}
	docorder_cache_free(&cache);
	docorder_cache_free(&cache); /* an emptied cache is usable and freeable */
}

/* An offloader that keeps the jobs for the test to run. */
struct queued {
	void (*fn)(void *);
	void (*done)(void *);
	void *arg;
};
static struct queued queue[4];
static int n_queued, n_ready;

static int keep_job(void *ctx, void (*fn)(void *), void (*done)(void *), void *arg)
{
	(void)ctx;
	if (n_queued == 4)
		return -EAGAIN;
	queue[n_queued++] = (struct queued){fn, done, arg};
	return 0;
}

static void on_ready(void *ctx)
{
	(void)ctx;
	n_ready++;
}

static void test_offloaded(void **state)
{
	(void)state;
	make_docs();
	struct docorder_split sp = split_of(0, N_DOCS, 8, docorder_key(4, 0));
	struct docorder_cache direct = {0}, cache;
	docorder_cache_init(&cache, keep_job, NULL, on_ready, NULL);
	uint64_t k, skip, dk, dskip;
	assert_int_equal(docorder_locate(&cache, 2, 0, &sp, 1, 5, 30, &k, &skip), -EAGAIN);
	assert_int_equal(n_queued, 1);
	assert_false(docorder_ready(&cache, 2, 0, 1));
	assert_int_equal(docorder_locate(&cache, 2, 0, &sp, 1, 5, 30, &k, &skip), -EAGAIN);
	assert_int_equal(docorder_prepare(&cache, 2, 0, &sp, 1), 0);
	assert_int_equal(n_queued, 1); /* asked for once */
	assert_int_equal(docorder_prepare(&cache, 2, 0, &sp, 2), 0);
	assert_int_equal(n_queued, 2);
	for (int i = 0; i < n_queued; i++) {
		queue[i].fn(queue[i].arg);
		queue[i].done(queue[i].arg);
	}
	assert_int_equal(n_ready, 2);
	assert_true(docorder_ready(&cache, 2, 0, 1) && docorder_ready(&cache, 2, 0, 2));
	for (uint64_t epoch = 1; epoch <= 2; epoch++) {
		assert_int_equal(docorder_locate(&cache, 2, 0, &sp, epoch, 5, 30, &k, &skip), 0);
		assert_int_equal(docorder_locate(&direct, 2, 0, &sp, epoch, 5, 30, &dk, &dskip), 0);
		assert_int_equal(k, dk);
		assert_int_equal(skip, dskip);
	}
	/* one dropped while its job runs: the job's result is thrown away */
	n_queued = 0;
	assert_int_equal(docorder_prepare(&cache, 3, 0, &sp, 0), 0);
	docorder_cache_drop(&cache, 3);
	queue[0].fn(queue[0].arg);
	queue[0].done(queue[0].arg);
	assert_false(docorder_ready(&cache, 3, 0, 0));
	/* one still queued when the cache is freed: its done frees it */
	n_queued = 0;
	assert_int_equal(docorder_prepare(&cache, 3, 0, &sp, 1), 0);
	queue[0].fn(queue[0].arg);
	docorder_cache_free(&cache);
	queue[0].done(queue[0].arg);
	docorder_cache_free(&cache);
	docorder_cache_free(&direct);
}

/* An index's arrays, as a .idx lays them out: sequences of `lengths`
 * (uint16 tokens), documents starting at `starts`, then the count. */
#define IX_SEQS 7
#define IX_ENTRIES 5

static void put64(uint8_t *at, uint64_t v)
{
	for (int b = 0; b < 8; b++)
		at[b] = (uint8_t)(v >> (8 * b));
}

static void test_index_start(void **state)
{
	(void)state;
	static const uint64_t lengths[IX_SEQS] = {3, 0, 5, 2, 4, 1, 6};
	static const uint64_t starts[IX_ENTRIES] = {0, 2, 2, 5, IX_SEQS}; /* an empty document */
	uint8_t map[34 + 12 * IX_SEQS + 8 * IX_ENTRIES] = {0};
	uint64_t first[IX_SEQS + 1] = {0};
	for (int q = 0; q < IX_SEQS; q++) {
		first[q + 1] = first[q] + lengths[q];
		put64(map + 34 + 4 * IX_SEQS + 8 * q, first[q] * 2);
	}
	for (int d = 0; d < IX_ENTRIES; d++)
		put64(map + 34 + 12 * IX_SEQS + 8 * d, starts[d]);
	const struct docorder_index ix = {
		.map = map, .n_sequences = IX_SEQS, .n_entries = IX_ENTRIES,
		.pointers_at = 34 + 4 * IX_SEQS, .doc_indices_at = 34 + 12 * IX_SEQS,
		.n_tokens = first[IX_SEQS], .token_shift = 1,
	};
	uint64_t t = 0;
	/* every document: 0, 3 (sequence 2), 3 (empty), 15 (sequence 5), then the end */
	const struct docorder_span all = {.first_doc = 0, .cut_seq = DOCORDER_NO_CUT, .n_docs = 4,
					  .end_token = first[IX_SEQS]};
	const uint64_t want[5] = {0, first[2], first[2], first[5], first[IX_SEQS]};
	for (uint64_t j = 0; j <= 4; j++) {
		assert_true(docorder_index_start(&ix, &all, j, &t));
		assert_int_equal(t, want[j]);
	}
	assert_false(docorder_index_start(&ix, &all, 5, &t)); /* past the end */
	/* a split of sequences 3..7: it starts inside document 2 (2..5), cut
	 * at sequence 3, then document 3 */
	const struct docorder_span cut = {.first_doc = 3, .cut_seq = 3, .n_docs = 2,
					  .end_token = first[IX_SEQS]};
	assert_true(docorder_index_start(&ix, &cut, 0, &t));
	assert_int_equal(t, first[3]);
	assert_true(docorder_index_start(&ix, &cut, 1, &t));
	assert_int_equal(t, first[5]);
	assert_true(docorder_index_start(&ix, &cut, 2, &t));
	assert_int_equal(t, first[IX_SEQS]);
	/* a document past document_indices */
	const struct docorder_span wide = {.first_doc = 3, .cut_seq = DOCORDER_NO_CUT, .n_docs = 4,
					   .end_token = first[IX_SEQS]};
	assert_true(docorder_index_start(&ix, &wide, 1, &t)); /* entry 4: the count */
	assert_false(docorder_index_start(&ix, &wide, 2, &t));
	/* an entry past sequence_count, a negative pointer */
	put64(map + 34 + 12 * IX_SEQS + 8 * 1, IX_SEQS + 1);
	assert_false(docorder_index_start(&ix, &all, 1, &t));
	put64(map + 34 + 12 * IX_SEQS + 8 * 1, 2);
	put64(map + 34 + 4 * IX_SEQS + 8 * 2, UINT64_MAX);
	assert_false(docorder_index_start(&ix, &all, 1, &t));
	const struct docorder_span past = {.first_doc = 0, .cut_seq = IX_SEQS + 1, .n_docs = 1,
					   .end_token = 0};
	assert_false(docorder_index_start(&ix, &past, 0, &t));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unpermute),
		cmocka_unit_test(test_orders),
		cmocka_unit_test(test_locate_matches_walk),
		cmocka_unit_test(test_cache_eviction),
		cmocka_unit_test(test_offloaded),
		cmocka_unit_test(test_index_start),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
