/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_megatron: `source = megatron:PREFIX`, a Megatron indexed dataset
 * (PREFIX.idx read by megatron.c, the tokens in PREFIX.bin), packed
 * GPTDataset-style into windows of seq_len + 1 tokens; with `split`, the
 * train/valid/test ranges of its sequences; with document_shuffle, the
 * documents each split's epochs order, copied into the arena (struct
 * source_ops, source.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/docorder.h"
#include "daemon/source/docorder.h"
#include "daemon/source/megatron.h"
#include "daemon/source/source_impl.h"

/* The first token of sequence q of a checked index; n_tokens for q =
 * n_sequences. */
static uint64_t megatron_seq_token(const struct mg_index *ix, uint64_t q)
{
	/* token_bytes is 1, 2, 4 or 8: a shift, not a division, for each document */
	return q < ix->n_sequences ? (uint64_t)mg_pointer(ix, q) >> __builtin_ctz(ix->token_bytes) :
				     ix->n_tokens;
}

/*
 * document_shuffle: the documents each split's epochs order (desc.docs).
 * Without `split`, the index's documents. With it, the splits are ranges
 * of sequences (idx) and an end may fall inside a document: the document
 * is then cut there, its sequences before the end ordered with the split
 * before, those after with the next, each part a document of that
 * split's. A document holds a place in the split its first sequence is
 * in (an empty one, where the sequence after it is); those from idx[3]
 * on are in none. So each split orders exactly its sequences' tokens,
 * and a split that ends on document boundaries orders whole documents.
 * 0, or -ENOMEM with reason.
 */
static int megatron_doc_table(const struct pipeline_cfg *cfg, const struct mg_index *ix,
			      const int64_t idx[SPLIT_COUNT + 1], struct source *out, char *reason,
			      size_t cap)
{
	/* at most two cuts inside documents (the third end stops the table),
	 * and the end of the last */
	uint64_t *tokens = malloc((ix->n_documents + 3) * sizeof(*tokens));
	if (!tokens) {
		snprintf(reason, cap, "out of memory for the table of %" PRIu64 " documents",
			 ix->n_documents);
		return -ENOMEM;
	}
	uint64_t first[SPLIT_COUNT + 1] = {0}; /* each split's first entry, then the end */
	uint64_t n = 0;
	uint32_t k = 0; /* the split at hand; SPLIT_COUNT: past the last */
	bool cut = out->has_splits;
	for (uint64_t d = 0; d < ix->n_documents && k < SPLIT_COUNT; d++) {
		uint64_t from = (uint64_t)mg_doc_index(ix, d), to = (uint64_t)mg_doc_index(ix, d + 1);
		if (d % ((uint64_t)1 << 20) == 0 && d > 0) /* the walk's pages given back behind it */
			mg_index_drop_documents(ix, d - ((uint64_t)1 << 20), d);
		while (cut && k < SPLIT_COUNT && (uint64_t)idx[k + 1] <= from)
			first[++k] = n;
		if (k == SPLIT_COUNT)
			break;
		tokens[n++] = megatron_seq_token(ix, from);
		while (cut && k < SPLIT_COUNT && (uint64_t)idx[k + 1] < to) {
			first[++k] = n;
			if (k < SPLIT_COUNT)
				tokens[n++] = megatron_seq_token(ix, (uint64_t)idx[k]);
		}
	}
	while (k < SPLIT_COUNT)
		first[++k] = n;
	tokens[n] = megatron_seq_token(ix, cut ? (uint64_t)idx[SPLIT_COUNT] : ix->n_sequences);
	out->doc_tokens = tokens;
	out->n_documents = n;
	struct arena_doc_params *dp = &out->desc.docs;
	dp->n_documents = n;
	dp->block = cfg->document_shuffle_block;
	for (k = 0; k < SPLIT_COUNT; k++) {
		dp->key[k] = docorder_key(cfg->seed, k);
		dp->first_doc[k] = first[k];
		dp->n_docs[k] = first[k + 1] - first[k];
	}
	return 0;
}

/* The train/valid/test sequence ranges of `split` (common/split.h), or
 * train alone, all sequences, without it; with document_shuffle, the
 * documents each orders. 0, or -errno with reason. */
static int megatron_splits(const struct pipeline_cfg *cfg, const struct mg_index *ix,
			   struct source *out, char *reason, size_t cap)
{
	int64_t idx[SPLIT_COUNT + 1] = {0, (int64_t)ix->n_sequences, (int64_t)ix->n_sequences,
					(int64_t)ix->n_sequences};
	out->has_splits = cfg->split[0] + cfg->split[1] + cfg->split[2] > 0;
	if (out->has_splits && split_ranges(cfg->split, ix->n_sequences, idx) < 0) {
		snprintf(reason, cap, "split = %g,%g,%g over the index's %" PRIu64 " sequences gives "
			 "ranges that are not ranges of its sequences (megatron-core's rounding would "
			 "end the last past them)", cfg->split[0], cfg->split[1], cfg->split[2],
			 ix->n_sequences);
		return -EINVAL;
	}
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		struct source_split *sp = &out->splits[k];
		if (k != SPLIT_TRAIN && !out->has_splits)
			break;
		sp->present = true;
		sp->first_seq = (uint64_t)idx[k];
		sp->n_seqs = (uint64_t)(idx[k + 1] - idx[k]);
		sp->first_token = megatron_seq_token(ix, sp->first_seq);
		sp->n_tokens = megatron_seq_token(ix, sp->first_seq + sp->n_seqs) - sp->first_token;
		sp->n_samples = sp->n_tokens > cfg->seq_len ? (sp->n_tokens - 1) / cfg->seq_len : 0;
	}
	if (!cfg->document_shuffle)
		return 0;
	return megatron_doc_table(cfg, ix, idx, out, reason, cap);
}

/* megatron: PREFIX.idx read and checked against PREFIX.bin (daemon/source/megatron.h),
 * the stored token type and the delivered one, the splits. 0, or -errno
 * with reason. */
static int open_megatron(const struct pipeline_cfg *cfg, struct source *out,
			 uint64_t *token_bytes, uint32_t *out_dtype, char *reason, size_t cap)
{
	struct mg_index ix;
	int rc = mg_index_open(cfg->path, &ix, reason, cap);
	if (rc < 0)
		return rc;
	uint32_t stored = ix.dtype_code == MG_UINT16 ? PROTO_DTYPE_UINT16 :
			  ix.dtype_code == MG_INT32 ? PROTO_DTYPE_INT32 : 0;
	if (!stored) {
		snprintf(reason, cap, "the index's tokens are %s; loaderd reads uint16 and int32 tokens "
			 "(what Megatron's preprocessing writes for vocabularies up to 65,500 and beyond)",
			 mg_dtype_name(ix.dtype_code));
		mg_index_free(&ix);
		return -EINVAL;
	}
	*token_bytes = ix.token_bytes;
	rc = megatron_splits(cfg, &ix, out, reason, cap);
	mg_index_free(&ix);
	if (rc < 0)
		return rc;
	*out_dtype = cfg->token_out_dtype ? cfg->token_out_dtype : stored;
	uint64_t out_bytes = proto_dtype_bytes(*out_dtype);
	if (out_bytes < *token_bytes) {
		snprintf(reason, cap, "token_output %s is narrower than the index's %s tokens",
			 proto_dtype_name(*out_dtype), proto_dtype_name(stored));
		return -EINVAL;
	}
	if (cfg->direct && out_bytes != *token_bytes) {
		snprintf(reason, cap, "direct = on needs tokens delivered as stored (%s), but "
			 "token_output is %s", proto_dtype_name(stored), proto_dtype_name(*out_dtype));
		return -EINVAL;
	}
	return 0;
}

static int megatron_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
			 size_t err_cap)
{
	char reason[1024];
	uint64_t tb;
	uint32_t out_dtype;
	int rc = open_megatron(cfg, out, &tb, &out_dtype, reason, sizeof(reason));
	if (rc < 0)
		return source_fail(err, err_cap, cfg, rc, reason);
	rc = source_data_file(cfg, out, err, err_cap);
	if (rc < 0)
		return rc;
	return source_token_file(cfg, out, tb, out_dtype, err, err_cap);
}

static void megatron_identify(const struct source *s, struct source_id *x)
{
	source_id_file(x, s);
	source_id_u64(x, s->file_bytes);
	source_id_u64(x, s->cfg->seq_len);
	source_id_u64(x, s->cfg->document_shuffle);
	if (s->cfg->document_shuffle) { /* the order's kind and its block */
		source_id_u64(x, DOCORDER_VERSION);
		source_id_u64(x, s->cfg->document_shuffle_block);
	}
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		const struct source_split *sp = &s->splits[k];
		source_id_u64(x, sp->first_seq);
		source_id_u64(x, sp->n_seqs);
		source_id_u64(x, sp->first_token);
		source_id_u64(x, sp->n_tokens);
	}
}

/* Blocks of the document order, the splits' together. */
static uint64_t megatron_blocks(const struct arena_doc_params *dp)
{
	uint64_t n = 0;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		const struct docorder_shape sh = {.n_docs = dp->n_docs[k], .block = dp->block};
		n += docorder_blocks(&sh);
	}
	return n;
}

/* document_shuffle: the document table in the index area (desc.docs),
 * then the tokens of each split's blocks. */
static uint64_t megatron_index_bytes(const struct source *s)
{
	if (!s->doc_tokens)
		return 0;
	return arena_align((s->n_documents + 1) * sizeof(*s->doc_tokens)) +
	       arena_align(megatron_blocks(&s->desc.docs) * sizeof(uint64_t));
}

/* Copies the document table into the arena a stretch at a time, giving
 * the heap copy's pages back behind the copy, so that the two copies are
 * never whole at once (the heap copy is freed just after; only its pages
 * wholly inside what was copied are given back). */
static void megatron_move_table(uint8_t *dst, uint64_t *src, size_t bytes)
{
	const size_t stretch = (size_t)64 << 20;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	for (size_t at = 0; at < bytes; at += stretch) {
		size_t n = bytes - at < stretch ? bytes - at : stretch;
		memcpy(dst + at, (uint8_t *)src + at, n);
		uintptr_t a = ((uintptr_t)src + at + page - 1) & ~(page - 1);
		uintptr_t b = ((uintptr_t)src + at + n) & ~(page - 1);
		if (bytes > stretch && b > a)
			madvise((void *)a, b - a, MADV_DONTNEED);
	}
}

static void megatron_fill_arena(struct source *s, uint32_t entry, const uint64_t *index_at,
				struct arena *arena)
{
	if (s->doc_tokens) {
		struct arena_doc_params *dp = &s->desc.docs;
		dp->docs_offset = arena_indexes_offset(arena) + index_at[entry];
		dp->sums_offset = dp->docs_offset +
				  arena_align((s->n_documents + 1) * sizeof(*s->doc_tokens));
		const uint64_t *table = (const uint64_t *)(arena->base + dp->docs_offset);
		megatron_move_table(arena->base + dp->docs_offset, s->doc_tokens,
				    (s->n_documents + 1) * sizeof(*s->doc_tokens));
		uint64_t *sums = (uint64_t *)(arena->base + dp->sums_offset);
		for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
			const struct docorder_shape sh = {.n_docs = dp->n_docs[k], .block = dp->block};
			docorder_block_sums(table, dp->first_doc[k], &sh, sums);
			sums += docorder_blocks(&sh);
		}
		source_close(s); /* the arena holds the table from here on */
	}
	*arena_pipeline(arena, entry) = s->desc;
}

const struct source_ops source_megatron = {
	.open = megatron_open,
	.identify = megatron_identify,
	.index_bytes = megatron_index_bytes,
	.fill_arena = megatron_fill_arena,
	.locate = source_file_locate,
	.where = source_file_where,
};
