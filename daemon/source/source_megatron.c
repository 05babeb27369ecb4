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

#include "common/docorder.h"
#include "common/log.h"
#include "daemon/source/docorder.h"
#include "daemon/source/megatron.h"
#include "daemon/source/megatron_cache.h"
#include "daemon/source/source_impl.h"
#include "worker/worker.h"

/* source_set_index_cache's: written before the opens that read it */
static char index_cache_dir[PATH_MAX];

void source_set_index_cache(const char *cache_dir)
{
	snprintf(index_cache_dir, sizeof(index_cache_dir), "%s", cache_dir ? cache_dir : "");
}

/* The first token of sequence q of a checked index; n_tokens for q =
 * n_sequences. */
static uint64_t megatron_seq_token(const struct mg_index *ix, uint64_t q)
{
	/* token_bytes is 1, 2, 4 or 8: a shift, not a division, for each document */
	return q < ix->n_sequences ? (uint64_t)mg_pointer(ix, q) >> __builtin_ctz(ix->token_bytes) :
				     ix->n_tokens;
}

/* Documents whose blocks are summed between two givings back of the
 * index's pages: the walk reads two entries a block, but each fault maps
 * the pages around it too (fault-around), so the walk's pages are about
 * all of those of the documents it passes: 16 bytes a document. */
#define MEGATRON_DROP_DOCS ((uint64_t)1 << 20)

/* The first entry d of document_indices[lo .. hi) that is >= q, hi if
 * none (the entries are non-decreasing). */
static uint64_t megatron_doc_at_or_after(const struct mg_index *ix, uint64_t lo, uint64_t hi,
					 uint64_t q)
{
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if ((uint64_t)mg_doc_index(ix, mid) < q)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The index's arrays as docorder reads them in place (common/docorder.h). */
static struct docorder_index megatron_docorder_index(const struct mg_index *ix)
{
	return (struct docorder_index){
		.map = ix->data, .n_sequences = ix->n_sequences, .n_entries = ix->n_documents + 1,
		.pointers_at = mg_pointers_at(ix), .doc_indices_at = mg_doc_indices_at(ix),
		.n_tokens = ix->n_tokens, .token_shift = (uint32_t)__builtin_ctz(ix->token_bytes),
	};
}

/* The tokens of each block of the split's documents (span), into
 * sums: two entries of the index read a block, the walk's pages given back
 * behind it (bounded memory). 0, or -EINVAL when the index's documents do
 * not end where they began (a file changed under us). */
static int megatron_block_sums(const struct mg_index *ix, const struct docorder_index *di,
			       const struct docorder_span *span, uint64_t block, uint64_t *sums)
{
	const struct docorder_shape sh = {.n_docs = span->n_docs, .block = block};
	uint64_t nbk = docorder_blocks(&sh), start = 0, end = 0;
	uint64_t kept = span->first_doc; /* the index's documents from here on not given back */
	uint64_t kept_j = 0;              /* and the split's */
	bool ok = docorder_index_start(di, span, 0, &start);
	for (uint64_t b = 0; ok && b < nbk; b++) {
		uint64_t j = b * block + docorder_block_docs(&sh, b);
		ok = docorder_index_start(di, span, j, &end) && end >= start;
		sums[b] = end - start;
		start = end;
		if (j - kept_j >= MEGATRON_DROP_DOCS) {
			uint64_t d = span->first_doc + j - (span->cut_seq != DOCORDER_NO_CUT);
			d = d < ix->n_documents ? d : ix->n_documents;
			mg_index_drop_documents(ix, kept, d);
			kept = d;
			kept_j = j;
		}
	}
	return ok ? 0 : -EINVAL;
}

/* The split's sums from the cache, when it has its shape and they add up
 * to the split's tokens as the index has them (O(1) entries read). */
static bool megatron_cached_sums(const struct docorder_index *di, const struct docorder_span *span,
				 const struct mgcache_shape *shape, const struct mgcache_use *cache,
				 uint64_t *sums)
{
	uint64_t start;
	if (shape->n_blocks == 0 || !mgcache_sums(cache, shape, sums))
		return false;
	uint64_t total = 0; /* no overflow: the decoder held the sums to the index's tokens */
	for (uint64_t b = 0; b < shape->n_blocks; b++)
		total += sums[b];
	if (docorder_index_start(di, span, 0, &start) && start <= span->end_token &&
	    total == span->end_token - start)
		return true;
	log_warning("pipeline \"%s\": the index cache %s: the sums of a split's blocks do not add "
		    "up to its tokens; summed again from the index", cache->pipeline, cache->path);
	return false;
}

/*
 * document_shuffle: the documents each split's epochs order (desc.docs),
 * as spans of the index (struct arena_doc_split), and the tokens of each
 * split's blocks. Without `split`, the index's documents. With it, the
 * splits are ranges of sequences (idx) and an end may fall inside a
 * document: the document is then cut there, its sequences before the end
 * ordered with the split before, those after with the next, each part a
 * document of that split's. A document holds a place in the split its
 * first sequence is in (an empty one, where the sequence after it is);
 * those from idx[3] on are in none. So each split orders exactly its
 * sequences' tokens, and a split that ends on document boundaries orders
 * whole documents. A split's documents are found by two binary searches;
 * its block sums are the index cache's (megatron_cache.h) when it holds
 * its shape, else read two entries of the index a block, on the thread
 * that opens the source (start-up's, or the pool's for a reload), never
 * the loop. 0, or -ENOMEM / -EINVAL with reason.
 */
static int megatron_doc_spans(const struct pipeline_cfg *cfg, const struct mg_index *ix,
			      const int64_t idx[SPLIT_COUNT + 1], struct mgcache_use *cache,
			      struct source *out, char *reason, size_t cap)
{
	struct arena_doc_params *dp = &out->desc.docs;
	const uint64_t docs = ix->n_documents;
	dp->block = cfg->document_shuffle_block;
	dp->n_documents = 0;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		struct arena_doc_split *sp = &dp->split[k];
		sp->key = docorder_key(cfg->seed, k);
		sp->cut_seq = DOCORDER_NO_CUT;
		if (!out->has_splits) { /* train: every document, trailing empty ones too */
			sp->first_doc = k == SPLIT_TRAIN ? 0 : docs;
			sp->n_docs = k == SPLIT_TRAIN ? docs : 0;
			sp->end_token = ix->n_tokens;
		} else {
			uint64_t a = (uint64_t)idx[k], b = (uint64_t)idx[k + 1];
			/* its whole documents: those whose first sequence is in [a, b) */
			uint64_t lo = megatron_doc_at_or_after(ix, 0, docs, a);
			uint64_t hi = megatron_doc_at_or_after(ix, lo, docs, b);
			/* a starts inside document lo - 1 when that one ends past it */
			bool cut = lo > 0 && (uint64_t)mg_doc_index(ix, lo - 1) < a &&
				   (uint64_t)mg_doc_index(ix, lo) > a;
			sp->first_doc = lo;
			sp->n_docs = (hi - lo) + cut;
			if (cut)
				sp->cut_seq = a;
			sp->end_token = megatron_seq_token(ix, b);
		}
		dp->n_documents += sp->n_docs;
	}
	if (dp->n_documents == 0)
		return 0;
	uint64_t nb = 0;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++)
		nb += docorder_blocks(&(struct docorder_shape){.n_docs = dp->split[k].n_docs,
							       .block = dp->block});
	uint64_t *sums = malloc((nb ? nb : 1) * sizeof(*sums));
	if (!sums) {
		snprintf(reason, cap, "out of memory for the tokens of %" PRIu64 " blocks of "
			 "documents", nb);
		return -ENOMEM;
	}
	const struct docorder_index di = megatron_docorder_index(ix);
	uint64_t *at = sums;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		const struct arena_doc_split *sp = &dp->split[k];
		const struct docorder_span span = {
			.first_doc = sp->first_doc, .cut_seq = sp->cut_seq, .n_docs = sp->n_docs,
			.end_token = sp->end_token,
		};
		const struct mgcache_shape shape = {
			.first_doc = sp->first_doc, .n_docs = sp->n_docs, .cut_seq = sp->cut_seq,
			.end_token = sp->end_token, .block = dp->block,
			.n_blocks = docorder_blocks(&(struct docorder_shape){.n_docs = sp->n_docs,
									     .block = dp->block}),
		};
		int rc = 0;
		if (!megatron_cached_sums(&di, &span, &shape, cache, at)) {
			rc = megatron_block_sums(ix, &di, &span, dp->block, at);
			if (rc == 0 && shape.n_blocks > 0)
				mgcache_add(cache, &shape, at);
		}
		if (rc < 0) { /* the index was checked: only a file changed under us */
			free(sums);
			snprintf(reason, cap, "the index changed while it was read (its documents "
				 "no longer end where they began)");
			return -EINVAL;
		}
		at += shape.n_blocks;
	}
	out->block_tokens = sums;
	out->n_blocks = nb;
	out->desc.docs.idx_bytes = ix->map_bytes;
	out->desc.docs.idx_dev = ix->idx_dev;
	out->desc.docs.idx_ino = ix->idx_ino;
	out->desc.docs.idx_mtime_sec = ix->idx_mtime_sec;
	out->desc.docs.idx_mtime_nsec = ix->idx_mtime_nsec;
	out->desc.docs.n_sequences = ix->n_sequences;
	out->desc.docs.n_entries = ix->n_documents + 1;
	out->desc.docs.pointers_offset = mg_pointers_at(ix);
	out->desc.docs.doc_indices_offset = mg_doc_indices_at(ix);
	return 0;
}

/* The train/valid/test sequence ranges of `split` (common/split.h), or
 * train alone, all sequences, without it; with document_shuffle, the
 * documents each orders. 0, or -errno with reason. */
static int megatron_splits(const struct pipeline_cfg *cfg, const struct mg_index *ix,
			   struct mgcache_use *cache, struct source *out, char *reason, size_t cap)
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
	return megatron_doc_spans(cfg, ix, idx, cache, out, reason, cap);
}

/* megatron: PREFIX.idx read and checked against PREFIX.bin (daemon/source/megatron.h),
 * the stored token type and the delivered one, the splits. 0, or -errno
 * with reason. */
static int open_megatron(const struct pipeline_cfg *cfg, struct source *out,
			 uint64_t *token_bytes, uint32_t *out_dtype, char *reason, size_t cap)
{
	struct mg_index ix;
	struct mgcache_use *cache = malloc(sizeof(*cache));
	if (!cache) {
		snprintf(reason, cap, "%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	int rc = mgcache_open_index(cache, index_cache_dir, cfg->name, cfg->path, &ix, reason, cap);
	if (rc < 0) {
		mgcache_use_free(cache);
		free(cache);
		return rc;
	}
	uint32_t stored = ix.dtype_code == MG_UINT16 ? PROTO_DTYPE_UINT16 :
			  ix.dtype_code == MG_INT32 ? PROTO_DTYPE_INT32 : 0;
	if (!stored) {
		snprintf(reason, cap, "the index's tokens are %s; loaderd reads uint16 and int32 tokens "
			 "(what Megatron's preprocessing writes for vocabularies up to 65,500 and beyond)",
			 mg_dtype_name(ix.dtype_code));
		rc = -EINVAL;
	}
	*token_bytes = ix.token_bytes;
	if (rc == 0)
		rc = megatron_splits(cfg, &ix, cache, out, reason, cap);
	if (rc == 0) /* a good index only: the sums are still out's */
		mgcache_store(cache, &ix);
	mgcache_use_free(cache);
	free(cache);
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

/* document_shuffle: the tokens of each split's blocks (desc.docs). */
static uint64_t megatron_index_bytes(const struct source *s)
{
	if (!s->block_tokens)
		return 0;
	return arena_align(s->n_blocks * sizeof(*s->block_tokens));
}

/* The block sums into the index area (on the pool for a pipeline a
 * reload adds: 20 MB at 10^10 documents stay off the loop). */
static void megatron_place_index(struct source *s, uint32_t entry, const uint64_t *index_at,
				 struct arena *arena)
{
	if (!s->block_tokens)
		return;
	struct arena_doc_params *dp = &s->desc.docs;
	dp->sums_offset = arena_indexes_offset(arena) + index_at[entry];
	memcpy(arena->base + dp->sums_offset, s->block_tokens, s->n_blocks * sizeof(*s->block_tokens));
	source_close(s); /* the arena holds the sums from here on */
}

static void megatron_fill_arena(struct source *s, uint32_t entry, const uint64_t *index_at,
				struct arena *arena)
{
	megatron_place_index(s, entry, index_at, arena); /* unless a reload's pool did */
	*arena_pipeline(arena, entry) = s->desc;
}

/* A failed batch: one whose worker could not use the .idx names it (the
 * documents' bounds are read from it); any other, as a data file's. */
static int megatron_batch_error(const struct source *s, const struct arena *arena,
				const struct source_failure *f, char *text, size_t cap)
{
	if (!(f->detail & WORKER_DETAIL_INDEX))
		return source_file_error(s, arena, f, text, cap);
	char why[200];
	source_index_why(f->error, why, sizeof(why));
	size_t n = strnlen(s->data_path, sizeof(s->data_path));
	int stem = n >= 4 ? (int)(n - 4) : (int)n; /* data_path is PREFIX.bin */
	snprintf(text, cap, "pipeline \"%s\": epoch %" PRIu64 " sample %" PRIu64 ": %.*s.idx: %s",
		 s->cfg->name, f->epoch, f->index, stem, s->data_path, why);
	return EIO;
}

const struct source_ops source_megatron = {
	.open = megatron_open,
	.identify = megatron_identify,
	.index_bytes = megatron_index_bytes,
	.fill_arena = megatron_fill_arena,
	.place_index = megatron_place_index,
	.locate = source_file_locate,
	.where = source_file_where,
	.batch_error = megatron_batch_error,
};
