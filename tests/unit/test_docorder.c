/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/docorder and common/docorder.h: every window of an
 * epoch is located where a direct walk over the epoch's document order
 * puts it (empty documents included), for several splits, epochs and
 * window lengths; each epoch's order is a permutation of the split's
 * documents that differs between epochs and from the stored order; the
 * cache answers the same after its entries are evicted; a window past the
 * split's tokens is refused.
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

static void make_docs(void)
{
	rng_state = RNG_SEED;
	doc_tokens[0] = 0;
	for (int d = 0; d < N_DOCS; d++) /* 0..40 tokens, about one document in 10 empty */
		doc_tokens[d + 1] = doc_tokens[d] + (rng_next() % 10 == 0 ? 0 : rng_range(1, 40));
}

/* The epoch's stream, token by token: for token x, its document position
 * and offset, walking the order from the start. */
static void walk(const struct docorder_split *sp, uint64_t epoch, uint64_t x, uint64_t *k,
		 uint64_t *skip)
{
	uint64_t at = 0;
	for (uint64_t i = 0; i < sp->n_docs; i++) {
		uint64_t d = sp->first_doc + docorder_doc(sp->n_docs, sp->key, epoch, i, sp->shuffle);
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

static void test_locate_matches_walk(void **state)
{
	(void)state;
	make_docs();
	struct docorder_cache cache = {0};
	const uint64_t ranges[][2] = {{0, N_DOCS}, {100, 150}, {290, 10}};
	for (size_t r = 0; r < 3; r++) {
		struct docorder_split sp = {.doc_tokens = doc_tokens, .first_doc = ranges[r][0],
					    .n_docs = ranges[r][1], .key = docorder_key(7, (uint32_t)r),
					    .shuffle = 1};
		uint64_t total = doc_tokens[sp.first_doc + sp.n_docs] - doc_tokens[sp.first_doc];
		for (uint64_t epoch = 0; epoch < 3; epoch++) {
			for (uint64_t seq_len = 1; seq_len < 20; seq_len += 6) {
				for (uint64_t w = 0; w * seq_len + seq_len < total; w++) {
					uint64_t k, skip, wk, wskip;
					assert_int_equal(docorder_locate(&cache, 0, (uint32_t)r, &sp, epoch,
									 seq_len, w, &k, &skip), 0);
					walk(&sp, epoch, w * seq_len, &wk, &wskip);
					assert_int_equal(k, wk);
					assert_int_equal(skip, wskip);
				}
			}
		}
		uint64_t k, skip;
		assert_int_equal(docorder_locate(&cache, 0, (uint32_t)r, &sp, 0, 1, total, &k, &skip),
				 -ERANGE);
	}
	docorder_cache_free(&cache);
}

static void test_orders(void **state)
{
	(void)state;
	uint64_t key = docorder_key(7, 0);
	uint64_t order[3][N_DOCS];
	for (uint64_t epoch = 0; epoch < 3; epoch++) {
		uint8_t seen[N_DOCS] = {0};
		for (uint64_t k = 0; k < N_DOCS; k++) {
			order[epoch][k] = docorder_doc(N_DOCS, key, epoch, k, 1);
			assert_true(order[epoch][k] < N_DOCS);
			assert_int_equal(seen[order[epoch][k]]++, 0);
		}
	}
	assert_memory_not_equal(order[0], order[1], sizeof(order[0]));
	assert_memory_not_equal(order[1], order[2], sizeof(order[0]));
	uint64_t identity = 0;
	for (uint64_t k = 0; k < N_DOCS; k++)
		identity += order[0][k] == k;
	assert_true(identity < N_DOCS / 10);
	/* splits draw their own orders; shuffle off is the stored order */
	assert_true(docorder_key(7, 0) != docorder_key(7, 1) && docorder_key(7, 0) != docorder_key(8, 0));
	for (uint64_t k = 0; k < N_DOCS; k++)
		assert_int_equal(docorder_doc(N_DOCS, key, 5, k, 0), k);
}

/* More epochs than the cache holds, visited back and forth. */
static void test_cache_eviction(void **state)
{
	(void)state;
	make_docs();
	struct docorder_cache cache = {0};
	struct docorder_split sp = {.doc_tokens = doc_tokens, .first_doc = 0, .n_docs = N_DOCS,
				    .key = docorder_key(3, 0), .shuffle = 1};
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_locate_matches_walk),
		cmocka_unit_test(test_orders),
		cmocka_unit_test(test_cache_eviction),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
