/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_worker_tokens: the real loaderd-worker on the token rows of LLM
 * datasets (worker/token_rows.c), driven as the master drives it, each
 * with io_uring and with pread (worker_fixture.h):
 *  - splits: a command's split picks the split's first byte and bounds;
 *  - document-shuffled windows: documents (empty ones included) read
 *    from a Megatron .idx written beside the token file, which the worker
 *    maps (an index whose modification time is not the one checked at
 *    start fails the item with -ESTALE, naming the index, until it is
 *    again), windows of several epochs given by their
 *    block's first position and skip, each read piece by piece across the
 *    documents of the epoch's order, checked against a walk of that order
 *    done here; a position or skip outside the documents fails its row;
 *  - llm.c shards: windows within two shard files written here (1024-byte
 *    header, then the tokens), in shard order; a shard that is missing
 *    fails its rows with -ENOENT, and the other shards are served on.
 */
#include "common/docorder.h"
#include "daemon/source/llmc.h"
#include "worker_fixture.h"

#define ROW_BYTES ((TOK_SEQ_LEN + 1) * 2) /* uint16 tokens as stored */

/* A token pipeline over the fixture's token file, delivered as stored. */
static void token_pipeline(struct fixture *fx, uint32_t pipe, uint64_t n_samples)
{
	pipeline_fill(fx, pipe, ARENA_SOURCE_TOKENS, fx->tok_path, n_samples, ROW_BYTES,
		      TOK_SEQ_LEN * 2, 2, 2);
	struct arena_pipeline *p = arena_pipeline(&fx->arena, pipe);
	p->file_bytes = sizeof(fx->tokens);
	p->split_samples[0] = n_samples;
}

static void check_tokens(struct fixture *fx, uint32_t slot, uint32_t row, const uint16_t *want,
			 const char *what)
{
	const uint8_t *got = slot_row(fx, slot, row, ROW_BYTES);
	for (uint32_t j = 0; j <= TOK_SEQ_LEN; j++) {
		uint16_t v;
		memcpy(&v, got + 2 * j, sizeof(v));
		if (v != want[j])
			fail_msg("%s: row %u token %u: %u, expected %u", what, row, j, v, want[j]);
	}
}

/* Sends cmds (all for slot 0) and expects each to complete with status. */
static void run_all(struct fixture *fx, const struct work_cmd *cmds, size_t n, int status)
{
	send(fx, cmds, n);
	for (size_t i = 0; i < n; i++) {
		struct work_done d;
		assert_true(wait_done(fx, &d));
		if (d.status != status)
			fail_msg("item %llu: status %d, expected %d", (unsigned long long)d.item_id,
				 d.status, status);
	}
}

static void test_split_rows(void **state)
{
	struct fixture *fx = *state;
	token_pipeline(fx, PIPE_SPLIT, TOK_SAMPLES);
	struct arena_pipeline *p = arena_pipeline(&fx->arena, PIPE_SPLIT);
	const uint64_t first[3] = {0, 100, 900}, samples[3] = {10, 50, 60};
	for (int k = 0; k < 3; k++) {
		p->split_base[k] = first[k] * 2;
		p->split_samples[k] = samples[k];
	}
	start_worker(fx);
	for (uint32_t split = 0; split < 3; split++) {
		uint64_t rows[4] = {0, samples[split] - 1, 3, 7};
		struct work_cmd c = read_cmd(fx, PIPE_SPLIT, 0, 0, 4, rows);
		c.split = split;
		fill_slots(fx, 0xa5);
		run_all(fx, &c, 1, 0);
		for (uint32_t r = 0; r < 4; r++)
			check_tokens(fx, 0, r, fx->tokens + first[split] + rows[r] * TOK_SEQ_LEN, "split");
	}
	uint64_t past[1] = {50};
	struct work_cmd c = read_cmd(fx, PIPE_SPLIT, 0, 0, 1, past);
	c.split = 1; /* its last sample is 49 */
	run_all(fx, &c, 1, -EINVAL);
	c = read_cmd(fx, PIPE_SPLIT, 0, 0, 1, past);
	c.split = 3;
	run_all(fx, &c, 1, -EINVAL);
	stop_worker(fx);
}

#define N_DOCS 150

/* Documents over the whole token file: lengths 0..19 (one in five
 * empty), the last one taking the rest; their first tokens, then the end,
 * into table (the test's own view). The dataset's index, one sequence a
 * document, is written beside the token file (tokens.idx, in Megatron's
 * layout), and the pipeline's entry names its spans: the worker reads
 * the documents from it. */
static uint64_t table[N_DOCS + 1];

static void put_le(uint8_t *at, uint64_t v, int bytes)
{
	for (int b = 0; b < bytes; b++)
		at[b] = (uint8_t)(v >> (8 * b));
}

static void doc_index(struct fixture *fx, struct arena_doc_params *dp)
{
	uint64_t seed = 77, at = 0;
	for (uint32_t d = 0; d < N_DOCS; d++) {
		table[d] = at;
		uint64_t len = rng_next(&seed) % 5 == 0 ? 0 : rng_next(&seed) % 19 + 1;
		at = at + len < TOK_N_TOKENS ? at + len : TOK_N_TOKENS;
	}
	table[N_DOCS] = TOK_N_TOKENS;
	static uint8_t idx[34 + 12 * N_DOCS + 8 * (N_DOCS + 1)];
	memcpy(idx, "MMIDIDX\0\0", 9);
	put_le(idx + 9, 1, 8);
	idx[17] = 8; /* uint16 */
	put_le(idx + 18, N_DOCS, 8);
	put_le(idx + 26, N_DOCS + 1, 8);
	for (uint32_t d = 0; d <= N_DOCS; d++) {
		if (d < N_DOCS) {
			put_le(idx + 34 + 4 * d, table[d + 1] - table[d], 4);
			put_le(idx + 34 + 4 * N_DOCS + 8 * d, table[d] * 2, 8);
		}
		put_le(idx + 34 + 12 * N_DOCS + 8 * d, d, 8);
	}
	snprintf(fx->idx_path, sizeof(fx->idx_path), "%s/tokens.idx", fx->dir);
	write_file(fx->idx_path, idx, sizeof(idx));
	struct stat st;
	assert_int_equal(stat(fx->idx_path, &st), 0);
	*dp = (struct arena_doc_params){
		.n_documents = N_DOCS, .block = 16, .idx_bytes = sizeof(idx),
		.idx_dev = (uint64_t)st.st_dev, .idx_ino = (uint64_t)st.st_ino,
		.idx_mtime_sec = st.st_mtim.tv_sec, .idx_mtime_nsec = st.st_mtim.tv_nsec,
		.n_sequences = N_DOCS, .n_entries = N_DOCS + 1, .pointers_offset = 34 + 4 * N_DOCS,
		.doc_indices_offset = 34 + 12 * N_DOCS,
		.split = {{.key = docorder_key(9, 0), .n_docs = N_DOCS, .first_doc = 0,
			   .cut_seq = DOCORDER_NO_CUT, .end_token = TOK_N_TOKENS},
			  {.n_docs = 0, .first_doc = N_DOCS, .cut_seq = DOCORDER_NO_CUT,
			   .end_token = TOK_N_TOKENS},
			  {.n_docs = 0, .first_doc = N_DOCS, .cut_seq = DOCORDER_NO_CUT,
			   .end_token = TOK_N_TOKENS}},
	};
}

/* Sets the .idx's modification time: another file, as the worker sees it. */
static void touch_index(struct fixture *fx, int64_t sec, int64_t nsec)
{
	struct timespec ts[2] = {{.tv_sec = sec, .tv_nsec = nsec}, {.tv_sec = sec, .tv_nsec = nsec}};
	assert_int_equal(utimensat(AT_FDCWD, fx->idx_path, ts, 0), 0);
}

static void test_document_pieces(void **state)
{
	struct fixture *fx = *state;
	token_pipeline(fx, PIPE_DOCS, TOK_SAMPLES);
	struct arena_pipeline *p = arena_pipeline(&fx->arena, PIPE_DOCS);
	doc_index(fx, &p->docs);
	/* an index rewritten since start fails the item, naming the index
	 * (WORKER_DETAIL_INDEX), until it is the one checked again */
	touch_index(fx, p->docs.idx_mtime_sec + 10, 0);
	start_worker(fx);
	{
		uint64_t w0[1] = {0};
		struct work_cmd c = read_cmd(fx, PIPE_DOCS, 0, 0, 1, w0);
		send(fx, &c, 1);
		struct work_done d;
		assert_true(wait_done(fx, &d));
		assert_int_equal(d.status, -ESTALE);
		assert_true((d.detail & WORKER_DETAIL_INDEX) != 0);
	}
	touch_index(fx, p->docs.idx_mtime_sec, p->docs.idx_mtime_nsec);
	const struct docorder_shape sh = {.n_docs = N_DOCS, .block = 16, .key = p->docs.split[0].key,
					  .shuffle = 1};
	static uint16_t stream[TOK_N_TOKENS];
	static uint64_t pos_of[TOK_N_TOKENS], skip_of[TOK_N_TOKENS];
	for (uint64_t epoch = 0; epoch < 3; epoch++) {
		uint64_t at = 0, q = 0, block_at = 0; /* the block at hand and its first token */
		for (uint64_t k = 0; k < N_DOCS; k++) { /* the epoch's stream, walked here */
			if (k == docorder_block_start(&sh, epoch, q + 1)) {
				q++;
				block_at = at;
			}
			uint64_t d = docorder_doc(&sh, epoch, k);
			for (uint64_t t = table[d]; t < table[d + 1]; t++, at++) {
				stream[at] = fx->tokens[t];
				pos_of[at] = docorder_block_start(&sh, epoch, q);
				skip_of[at] = at - block_at;
			}
		}
		assert_int_equal(q + 1, docorder_blocks(&sh));
		assert_int_equal(at, TOK_N_TOKENS);
		/* every window of the epoch, 64 to an item, in 4 items */
		struct work_cmd cmds[4];
		for (uint32_t i = 0; i < 4; i++) {
			uint64_t w[WORK_CHUNK_MAX];
			uint32_t count = i < 3 ? WORK_CHUNK_MAX : TOK_SAMPLES - 3 * WORK_CHUNK_MAX;
			for (uint32_t r = 0; r < count; r++)
				w[r] = (i * WORK_CHUNK_MAX + r) * 37 % TOK_SAMPLES;
			cmds[i] = read_cmd(fx, PIPE_DOCS, 0, i * WORK_CHUNK_MAX, count, w);
			cmds[i].epoch = epoch;
			for (uint32_t r = 0; r < count; r++) {
				cmds[i].doc_pos[r] = pos_of[w[r] * TOK_SEQ_LEN];
				cmds[i].doc_skip[r] = skip_of[w[r] * TOK_SEQ_LEN];
			}
		}
		fill_slots(fx, 0xa5);
		run_all(fx, cmds, 4, 0);
		for (uint32_t i = 0; i < 4; i++)
			for (uint32_t r = 0; r < cmds[i].count; r++)
				check_tokens(fx, 0, cmds[i].first_row + r,
					     stream + cmds[i].sample_index[r] * TOK_SEQ_LEN, "documents");
	}
	/* a position past the documents, a skip past its block */
	uint64_t w[1] = {0};
	struct work_cmd c = read_cmd(fx, PIPE_DOCS, 0, 0, 1, w);
	c.doc_pos[0] = N_DOCS;
	run_all(fx, &c, 1, -EINVAL);
	c = read_cmd(fx, PIPE_DOCS, 0, 0, 1, w);
	uint64_t block_tokens = 0;
	for (uint64_t k = 0; k < docorder_block_start(&sh, 0, 1); k++) {
		uint64_t d = docorder_doc(&sh, 0, k);
		block_tokens += table[d + 1] - table[d];
	}
	c.doc_skip[0] = block_tokens + TOK_N_TOKENS;
	run_all(fx, &c, 1, -EINVAL);
	stop_worker(fx);
}

/* Shard s: tokens [first, first + n) of the fixture's, after an llm.c header. */
static void write_shard(struct fixture *fx, const char *path, uint64_t first, uint64_t n)
{
	uint8_t header[LLMC_HEADER_BYTES] = {0};
	int32_t fields[3] = {LLMC_MAGIC, LLMC_VERSION, (int32_t)n};
	memcpy(header, fields, sizeof(fields)); /* little-endian, as on this host */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, header, sizeof(header)), (ssize_t)sizeof(header));
	assert_int_equal(write(fd, fx->tokens + first, n * 2), (ssize_t)(n * 2));
	assert_int_equal(close(fd), 0);
}

static void test_llmc_shards(void **state)
{
	struct fixture *fx = *state;
	const uint64_t first[3] = {0, 200, 0}, tokens[3] = {100, 60, 50};
	char paths[3][192];
	uint64_t windows[3], total = 0;
	struct arena_shard *sh = (struct arena_shard *)(fx->arena.base +
							 arena_indexes_offset(&fx->arena));
	char *names = (char *)(sh + 3);
	uint64_t names_bytes = 0;
	for (int s = 0; s < 3; s++) {
		snprintf(paths[s], sizeof(paths[s]), "%s/shard_%d.bin", fx->dir, s);
		if (s < 2) /* shard 2 is missing */
			write_shard(fx, paths[s], first[s], tokens[s]);
		windows[s] = (tokens[s] - 1) / TOK_SEQ_LEN;
		sh[s] = (struct arena_shard){.path_offset = names_bytes, .first_sample = total,
					     .n_samples = windows[s]};
		memcpy(names + names_bytes, paths[s], strlen(paths[s]) + 1);
		names_bytes += strlen(paths[s]) + 1;
		total += windows[s];
	}
	token_pipeline(fx, PIPE_LLMC, total);
	struct arena_pipeline *p = arena_pipeline(&fx->arena, PIPE_LLMC);
	p->shards = (struct arena_shard_params){
		.shards_offset = arena_indexes_offset(&fx->arena),
		.paths_offset = arena_indexes_offset(&fx->arena) + 3 * sizeof(*sh),
		.paths_bytes = names_bytes, .header_bytes = LLMC_HEADER_BYTES, .n_shards = 3,
	};
	start_worker(fx);
	uint64_t w[WORK_CHUNK_MAX];
	uint32_t n = (uint32_t)(windows[0] + windows[1]);
	for (uint32_t r = 0; r < n; r++)
		w[r] = (r * 5 + 3) % n;
	struct work_cmd c = read_cmd(fx, PIPE_LLMC, 0, 0, n, w);
	fill_slots(fx, 0xa5);
	run_all(fx, &c, 1, 0);
	for (uint32_t r = 0; r < n; r++) {
		int s = w[r] >= windows[0];
		uint64_t j = w[r] - sh[s].first_sample;
		check_tokens(fx, 0, r, fx->tokens + first[s] + j * TOK_SEQ_LEN, "llm.c shard");
	}
	uint64_t missing[1] = {total - 1};
	c = read_cmd(fx, PIPE_LLMC, 0, 0, 1, missing);
	run_all(fx, &c, 1, -ENOENT);
	c = read_cmd(fx, PIPE_LLMC, 0, 0, 1, w); /* and the others are served on */
	run_all(fx, &c, 1, 0);
	uint64_t past[1] = {total};
	c = read_cmd(fx, PIPE_LLMC, 0, 0, 1, past);
	run_all(fx, &c, 1, -EINVAL);
	stop_worker(fx);
	unlink(paths[0]);
	unlink(paths[1]);
}

int main(void)
{
	if (getenv("LOADERD_BUILD_DIR") == NULL) {
		fprintf(stderr, "test_worker_tokens: LOADERD_BUILD_DIR is not set: skipped\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		BOTH_MODES(test_split_rows),
		BOTH_MODES(test_document_pieces),
		BOTH_MODES(test_llmc_shards),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
