/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-docorder-bench: what the block shuffle of an epoch's documents
 * (common/docorder.h) gives up against a full permutation, and what it
 * costs, for N documents and several block sizes (docs/config.md,
 * "Per-epoch document shuffle", quotes its figures).
 *
 *   loaderd-docorder-bench [N [SEQ_LEN [MEAN_TOKENS]]]
 *
 * Documents of 1..2*MEAN_TOKENS-1 tokens (uniform). For each block size
 * (and "full": one block, a full permutation of the N documents) it prints:
 *  - adjacent docs: of documents next to each other in the epoch's order,
 *    the median distance in stored order, and the share that lie within
 *    `block` documents of each other in stored order (within one block);
 *  - window docs: the same for the first and last document of a window
 *    (the documents that share a window);
 *  - consecutive samples: the same for the first documents of two windows
 *    a rank receives one after the other (the sampler's window shuffle on);
 *  - walk_us: the mean time to walk a block from its start to a window, as
 *    a worker does for each row (docorder_doc for each document passed).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/docorder.h"
#include "common/sampler.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Median and the share below `near` of d[0..n). */
static void stats(uint64_t *d, size_t n, uint64_t near, uint64_t *median, double *share)
{
	size_t in = 0;
	for (size_t i = 0; i < n; i++)
		in += d[i] < near;
	qsort(d, n, sizeof(*d), cmp_u64);
	*median = d[n / 2];
	*share = (double)in / (double)n;
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
	uint64_t seq_len = argc > 2 ? strtoull(argv[2], NULL, 10) : 4096;
	uint64_t mean = argc > 3 ? strtoull(argv[3], NULL, 10) : 1000;
	uint64_t *len = malloc(n * sizeof(*len));
	if (!len)
		return 1;
	uint64_t x = 88172645463325252ull, total = 0;
	for (uint64_t d = 0; d < n; d++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		len[d] = 1 + x % (2 * mean - 1);
		total += len[d];
	}
	const size_t samples = 200000;
	uint64_t *d1 = malloc(samples * sizeof(uint64_t)), *d2 = malloc(samples * sizeof(uint64_t)),
		 *d3 = malloc(samples * sizeof(uint64_t));
	if (!d1 || !d2 || !d3)
		return 1;
	const uint64_t blocks[] = {1024, 4096, 8192, 16384, 65536, 0};
	printf("%" PRIu64 " documents, %" PRIu64 " tokens, windows of %" PRIu64 "\n", n, total,
	       seq_len);
	printf("%-8s %28s %28s %28s %10s\n", "block", "adjacent docs: median, near",
	       "window docs: median, near", "consecutive samples", "walk_us");
	for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
		struct docorder_shape sh = {.n_docs = n, .block = blocks[b] ? blocks[b] : n,
					    .key = docorder_key(1234, 0), .shuffle = 1};
		uint64_t near = blocks[b] ? blocks[b] : DOCORDER_BLOCK_DEFAULT;
		/* adjacent documents, at positions spread over the epoch */
		for (size_t i = 0; i < samples; i++) {
			uint64_t k = sampler_permute(n - 1, 5, 0, i % (n - 1));
			d1[i] = dist(docorder_doc(&sh, 0, k), docorder_doc(&sh, 0, k + 1));
		}
		/* windows: the documents from a window's start to its end */
		double walk = 0;
		size_t n_windows = samples / 20;
		uint64_t prev_first = 0;
		for (size_t i = 0; i < n_windows; i++) {
			/* a window starting in block position q, at a random document of it */
			uint64_t q = sampler_permute(docorder_blocks(&sh), 6, 0, i % docorder_blocks(&sh));
			uint64_t from = docorder_block_start(&sh, 0, q);
			uint64_t to = docorder_block_start(&sh, 0, q + 1);
			uint64_t target = from + sampler_permute(to - from, 7, i, 0) % (to - from);
			uint64_t k = from, tokens = 0, first = 0;
			double t0 = now_s();
			if (blocks[b]) { /* full: the window's document is found by a search, not a walk */
				struct docorder_cursor cur;
				docorder_cursor_at(&sh, 0, k, &cur);
				for (; k < target; k++, docorder_cursor_next(&cur))
					tokens += len[docorder_cursor_doc(&cur)];
			}
			k = target;
			first = docorder_doc(&sh, 0, k);
			walk += now_s() - t0;
			uint64_t last = first, at = len[first];
			while (at < seq_len + 1 && k + 1 < n) {
				last = docorder_doc(&sh, 0, ++k);
				at += len[last];
			}
			d2[i] = dist(first, last);
			d3[i] = dist(first, prev_first);
			prev_first = first;
			(void)tokens;
		}
		uint64_t m1, m2, m3;
		double s1, s2, s3;
		stats(d1, samples, near, &m1, &s1);
		stats(d2, n_windows, near, &m2, &s2);
		stats(d3 + 1, n_windows - 1, near, &m3, &s3);
		char name[32];
		if (blocks[b])
			snprintf(name, sizeof(name), "%" PRIu64, blocks[b]);
		else
			snprintf(name, sizeof(name), "full");
		printf("%-8s %14" PRIu64 " %12.4f%% %14" PRIu64 " %12.4f%% %14" PRIu64 " %12.4f%% %10.1f\n",
		       name, m1, 100 * s1, m2, 100 * s2, m3, 100 * s3, 1e6 * walk / (double)n_windows);
		fflush(stdout);
	}
	free(len);
	free(d1);
	free(d2);
	free(d3);
	return 0;
}
