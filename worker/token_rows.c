/* SPDX-License-Identifier: Apache-2.0 */
/*
 * token_rows: the worker's raw and token rows (reader_impl.h): a raw or
 * token pipeline's table entry checked, a row's read planned (one range of
 * the file, or, for a document-shuffled megatron pipeline, the pieces of
 * the documents a window spans in its epoch's order, read one after the
 * other into the row), and a finished row widened and given its
 * document-aware outputs.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/docorder.h"
#include "common/regfile.h"
#include "worker/reader_impl.h"

/* The .idx's header: magic, version, dtype code, the two counts
 * (daemon/source/megatron.h). */
#define MG_IDX_HEADER_BYTES 34u

/* log2 of the stored token's bytes (2 or 4, checked before). */
static unsigned in_shift(const struct arena_pipeline *p)
{
	return p->in_elem_bytes == 4 ? 2 : 1;
}

/* The split's document d (its place in stored order) and its tokens in
 * the file, [*first, *end): false when the index does not hold it. */
static bool token_doc_of(const struct reader_pipeline *p, const struct arena_doc_split *ds,
			 uint64_t d, uint64_t *first, uint64_t *end)
{
	const struct docorder_span span = {.first_doc = ds->first_doc, .cut_seq = ds->cut_seq,
					   .n_docs = ds->n_docs, .end_token = ds->end_token};
	return docorder_index_start(&p->idx, &span, d, first) &&
	       docorder_index_start(&p->idx, &span, d + 1, end) && *first <= *end &&
	       *end <= ds->end_token;
}

/* A token pipeline's document-aware outputs: each a tensor of its own
 * (not the tokens'), of the size struct arena_token_params gives. */
static int token_outputs_check(uint64_t slot_bytes, const struct arena_pipeline *p,
			     struct reader_pipeline *out)
{
	const struct arena_token_params *tp = &p->tokens;
	uint64_t inputs = p->sample_read_bytes / p->in_elem_bytes - 1;
	const uint8_t index[READER_DOC_COUNT] = {tp->positions, tp->loss_mask, tp->cu_seqlens,
						 tp->num_documents};
	const uint64_t bytes[READER_DOC_COUNT] = {inputs * 8, inputs * 4,
						  ((uint64_t)tp->max_documents + 1) * 4, 4};
	if ((tp->cu_seqlens != 0) != (tp->num_documents != 0) ||
	    (tp->cu_seqlens && tp->max_documents == 0))
		return -EINVAL;
	out->doc = *tp;
	for (int k = 0; k < READER_DOC_COUNT; k++) {
		if (index[k] == 0)
			continue;
		if (index[k] >= p->n_tensors || p->tensor_row_bytes[index[k]] != bytes[k] ||
		    p->tensor_offset[index[k]] > slot_bytes)
			return -EINVAL;
		out->doc_offset[k] = p->tensor_offset[index[k]];
		out->doc_row_bytes[k] = bytes[k];
		out->doc_any = true;
	}
	return 0;
}

/* A document-shuffled pipeline's spans of the .idx (struct
 * arena_doc_params): the index's arrays where its counts put them, each
 * split's documents within its document_indices, their ends within the
 * data file. What the mapped index then holds is checked document by
 * document as it is read (docorder_index_start), so no walk needs the
 * whole index in memory, nor trusts it. */
static int token_docs_check(const struct arena_pipeline *p, struct reader_pipeline *out)
{
	const struct arena_doc_params *dp = &p->docs;
	uint64_t s = dp->n_sequences, e = dp->n_entries, bytes;
	uint64_t file_tokens = p->file_bytes >> in_shift(p);
	if (s > (UINT64_MAX - MG_IDX_HEADER_BYTES) / 12 || e == 0 ||
	    e > (UINT64_MAX - MG_IDX_HEADER_BYTES - 12 * s) / 8)
		return -EINVAL;
	bytes = MG_IDX_HEADER_BYTES + 12 * s + 8 * e;
	if (dp->idx_bytes != bytes || dp->pointers_offset != MG_IDX_HEADER_BYTES + 4 * s ||
	    dp->doc_indices_offset != MG_IDX_HEADER_BYTES + 12 * s || bytes > SIZE_MAX)
		return -EINVAL;
	if (dp->block == 0 || dp->block > DOCORDER_BLOCK_MAX)
		return -EINVAL;
	uint64_t total = 0;
	for (int k = 0; k < 3; k++) {
		const struct arena_doc_split *sp = &dp->split[k];
		uint64_t cut = sp->cut_seq != DOCORDER_NO_CUT;
		if ((cut && sp->cut_seq >= s) || sp->first_doc > e || sp->end_token > file_tokens ||
		    sp->n_docs > e - sp->first_doc + cut || sp->n_docs > UINT64_MAX - total)
			return -EINVAL;
		total += sp->n_docs;
	}
	if (total != dp->n_documents)
		return -EINVAL;
	size_t n = strnlen(p->path, sizeof(p->path));
	if (n < 4 || strcmp(p->path + n - 4, ".bin") != 0)
		return -EINVAL;
	out->docs = *dp;
	out->docs_on = true;
	out->idx = (struct docorder_index){
		.n_sequences = s, .n_entries = e, .pointers_at = dp->pointers_offset,
		.doc_indices_at = dp->doc_indices_offset, .n_tokens = file_tokens,
		.token_shift = (uint32_t)in_shift(p),
	};
	return 0;
}

int token_index_map(struct reader_pipeline *p, const char *data_path)
{
	char path[ARENA_PATH_MAX];
	size_t n = strlen(data_path); /* token_docs_check: it ends in ".bin" */
	if (n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, data_path, n - 4);
	memcpy(path + n - 4, ".idx", 5);
	struct stat st;
	int fd = regfile_open(AT_FDCWD, path, &st);
	if (fd < 0)
		return fd;
	int rc = p->roots ? confine_fd(fd, p->roots) : 0;
	const struct arena_doc_params *dp = &p->docs;
	if (rc == 0 && ((uint64_t)st.st_size != dp->idx_bytes || (uint64_t)st.st_dev != dp->idx_dev ||
			(uint64_t)st.st_ino != dp->idx_ino ||
			(int64_t)st.st_mtim.tv_sec != dp->idx_mtime_sec ||
			(int64_t)st.st_mtim.tv_nsec != dp->idx_mtime_nsec))
		rc = -ESTALE;
	void *map = MAP_FAILED;
	if (rc == 0) {
		map = mmap(NULL, (size_t)dp->idx_bytes, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED)
			rc = -errno;
	}
	close(fd);
	if (rc < 0)
		return rc;
	p->idx_map = map;
	p->idx_map_bytes = (size_t)dp->idx_bytes;
	p->idx.map = map;
	return 0;
}

void token_index_unmap(struct reader_pipeline *p)
{
	if (p->idx_map)
		munmap(p->idx_map, p->idx_map_bytes);
	p->idx_map = NULL;
	p->idx.map = NULL;
}

/* An llm.c pipeline's shard table inside the arena: every path a string
 * of the paths, the shards' windows consecutive ranges of the samples. */
static int token_shards_check(struct arena *arena, const struct arena_pipeline *p,
			      struct reader_pipeline *out)
{
	const struct arena_shard_params *sp = &p->shards;
	const struct arena_shard *sh = arena_range(arena, sp->shards_offset,
						   (uint64_t)sp->n_shards * sizeof(*sh));
	if (!sh || sp->paths_bytes == 0 || !arena_range(arena, sp->paths_offset, sp->paths_bytes) ||
	    arena->base[sp->paths_offset + sp->paths_bytes - 1] != '\0' ||
	    sp->header_bytes > (uint64_t)INT64_MAX / 2)
		return -EINVAL;
	uint64_t next = 0;
	for (uint32_t i = 0; i < sp->n_shards; i++) {
		if (sh[i].path_offset >= sp->paths_bytes || sh[i].first_sample != next ||
		    sh[i].n_samples > p->n_samples - next)
			return -EINVAL;
		next += sh[i].n_samples;
	}
	if (next != p->n_samples)
		return -EINVAL;
	out->shard_fds = malloc((size_t)sp->n_shards * sizeof(int));
	if (!out->shard_fds)
		return -ENOMEM;
	for (uint32_t i = 0; i < sp->n_shards; i++)
		out->shard_fds[i] = -1;
	out->shards = sh;
	out->n_shards = sp->n_shards;
	out->paths = (const char *)arena->base + sp->paths_offset;
	out->paths_bytes = sp->paths_bytes;
	out->header_bytes = sp->header_bytes;
	return 0;
}

int token_pipeline_check(struct arena *arena, uint64_t slot_bytes, const struct arena_pipeline *p,
			 struct reader_pipeline *out)
{
	uint32_t in = p->in_elem_bytes;
	uint32_t elem_out = p->out_elem_bytes;
	if (p->kind == ARENA_SOURCE_RAW) {
		if (in != 1 || elem_out != 1)
			return -EINVAL;
	} else if (p->kind == ARENA_SOURCE_TOKENS) {
		/* Narrowing would need a range check per token: not a worker job. */
		if ((in != 2 && in != 4) || (elem_out != 2 && elem_out != 4 && elem_out != 8) ||
		    elem_out < in)
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (p->sample_read_bytes == 0 || p->sample_read_bytes % in != 0 ||
	    p->sample_read_bytes > slot_bytes)
		return -EINVAL;
	uint64_t out_row_bytes = p->sample_read_bytes / in * elem_out;
	if (p->tensor_row_bytes[0] < out_row_bytes || p->tensor_row_bytes[0] > slot_bytes ||
	    p->tensor_offset[0] > slot_bytes)
		return -EINVAL;
	if (p->path[0] == '\0' || memchr(p->path, '\0', sizeof(p->path)) == NULL)
		return -EINVAL;
	out->kind = p->kind;
	out->in_elem_bytes = in;
	out->out_elem_bytes = elem_out;
	out->n_samples = p->n_samples;
	out->file_bytes = p->file_bytes;
	out->read_bytes = p->sample_read_bytes;
	out->stride = p->sample_stride;
	for (int k = 0; k < 3; k++) {
		if (p->split_base[k] > p->file_bytes)
			return -EINVAL;
		out->split_base[k] = p->split_base[k];
		out->split_samples[k] = p->split_samples[k];
	}
	out->tensor_offset = p->tensor_offset[0];
	out->row_bytes = p->tensor_row_bytes[0];
	out->out_row_bytes = out_row_bytes;
	if (p->kind != ARENA_SOURCE_TOKENS)
		return 0;
	int err = token_outputs_check(slot_bytes, p, out);
	if (err == 0 && p->docs.n_documents)
		err = token_docs_check(p, out);
	if (err == 0 && p->shards.n_shards)
		err = p->docs.n_documents ? -EINVAL : token_shards_check(arena, p, out);
	return err;
}

/* Split `split`'s document at position k of the epoch's order and its
 * tokens in the file: [*first, *end), read from the mapped index. false
 * when the index does not hold a document there (not the index checked
 * at start, or a command that does not fit it). */
static bool token_doc_at(const struct reader_pipeline *p, uint32_t split, uint64_t epoch,
			 uint64_t k, uint64_t *first, uint64_t *end)
{
	const struct arena_doc_split *ds = &p->docs.split[split];
	const struct docorder_shape sh = {.n_docs = ds->n_docs, .block = p->docs.block,
					  .key = ds->key, .shuffle = 1};
	return token_doc_of(p, ds, docorder_doc(&sh, epoch, k), first, end);
}

/* rd's current piece: from token `first` of the file, at most the tokens
 * the row still needs and at most up to `end`. */
static void token_piece(struct reader_read *rd, uint64_t first, uint64_t end)
{
	uint32_t in = rd->item->pipe->in_elem_bytes;
	uint64_t want = (rd->len - rd->done_bytes) / in;
	uint64_t n = end - first < want ? end - first : want;
	rd->offset = first * in;
	rd->piece_start = rd->done_bytes;
	rd->piece_end = rd->done_bytes + n * in;
}

bool token_next_piece(struct reader_read *rd)
{
	const struct reader_pipeline *p = rd->item->pipe;
	uint64_t first = 0, end = 0;
	while (first == end) { /* empty documents hold nothing to read */
		if (++rd->doc_k >= p->docs.split[rd->split].n_docs) {
			/* the window runs past the split's last document: the
			 * command's doc_pos/doc_skip do not fit its sample */
			reader_item_fail(rd->item, rd->row, -EINVAL, 0);
			return false;
		}
		if (!token_doc_at(p, rd->split, rd->item->epoch, rd->doc_k, &first, &end)) {
			reader_item_fail(rd->item, rd->row, -EINVAL, 0);
			return false;
		}
	}
	token_piece(rd, first, end);
	return true;
}

/* The first piece of a document-shuffled row: from the document at the
 * command's doc_pos (the first of a block in the epoch's order), the
 * window starts doc_skip tokens on, within that block: the block's
 * documents are walked to it. */
static int token_plan_docs(struct reader_read *rd, const struct work_cmd *cmd, uint32_t k)
{
	const struct reader_pipeline *p = rd->item->pipe;
	const struct arena_doc_params *dp = &p->docs;
	const struct arena_doc_split *ds = &dp->split[cmd->split];
	const struct docorder_shape sh = {.n_docs = ds->n_docs, .block = dp->block,
					  .key = ds->key, .shuffle = 1};
	uint64_t skip = cmd->doc_skip[k];
	if (cmd->doc_pos[k] >= sh.n_docs)
		return -EINVAL;
	struct docorder_cursor cur;
	docorder_cursor_at(&sh, cmd->epoch, cmd->doc_pos[k], &cur);
	for (uint64_t walked = 0;; walked++) {
		uint64_t first, end;
		if (!token_doc_of(p, ds, docorder_cursor_doc(&cur), &first, &end))
			return -EINVAL;
		if (skip < end - first) {
			rd->split = cmd->split;
			rd->doc_k = cur.k;
			token_piece(rd, first + skip, end);
			return 0;
		}
		skip -= end - first;
		if (walked + 1 >= dp->block || !docorder_cursor_next(&cur))
			return -EINVAL; /* past the block, or the split */
	}
}

/* An llm.c pipeline's row: window j of the shard that holds the sample,
 * from the shard's file. 0 or -errno (-EINVAL, or the shard's open). */
static int token_plan_shard(struct reader_read *rd, uint64_t sample)
{
	struct reader_pipeline *p = rd->item->pipe;
	uint32_t lo = 0, hi = p->n_shards; /* the last shard starting at or before sample */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (p->shards[mid].first_sample <= sample)
			lo = mid;
		else
			hi = mid;
	}
	const struct arena_shard *sh = &p->shards[lo];
	uint64_t j = sample - sh->first_sample;
	if (sample < sh->first_sample || j >= sh->n_samples ||
	    j > ((uint64_t)INT64_MAX - p->header_bytes - p->read_bytes) / p->stride)
		return -EINVAL;
	int fd = reader_shard_fd(p, lo);
	if (fd < 0)
		return fd;
	rd->fd = fd;
	rd->offset = p->header_bytes + j * p->stride;
	return 0;
}

int token_plan(struct arena *arena, uint64_t slot_bytes, struct reader_item *it,
	       const struct work_cmd *cmd, uint32_t k, struct reader_read *rd)
{
	const struct reader_pipeline *p = it->pipe;
	uint64_t sample = cmd->sample_index[k];
	uint64_t row = (uint64_t)cmd->first_row + k;
	uint64_t offset, file_end, row_start, row_end;
	if (cmd->split >= 3 || sample >= p->split_samples[cmd->split] ||
	    __builtin_mul_overflow(sample, p->stride, &offset) ||
	    __builtin_add_overflow(offset, p->split_base[cmd->split], &offset) ||
	    __builtin_add_overflow(offset, p->read_bytes, &file_end) ||
	    (p->n_shards == 0 && file_end > p->file_bytes) || file_end > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (__builtin_mul_overflow(row, p->row_bytes, &row_start) ||
	    __builtin_add_overflow(row_start, p->tensor_offset, &row_start) ||
	    __builtin_add_overflow(row_start, p->out_row_bytes, &row_end) || row_end > slot_bytes)
		return -EINVAL;
	uint8_t *dst = arena_range(arena, cmd->slot_offset + row_start, p->out_row_bytes);
	if (dst == NULL)
		return -EINVAL;
	*rd = (struct reader_read){.item = it, .dst = dst, .fd = p->fd, .len = p->read_bytes,
				   .offset = offset, .sample = sample, .row = (uint32_t)row};
	for (int t = 0; p->doc_any && t < READER_DOC_COUNT; t++) {
		if (p->doc_row_bytes[t] == 0)
			continue;
		uint64_t at, end;
		if (__builtin_mul_overflow(row, p->doc_row_bytes[t], &at) ||
		    __builtin_add_overflow(at, p->doc_offset[t], &at) ||
		    __builtin_add_overflow(at, p->doc_row_bytes[t], &end) || end > slot_bytes)
			return -EINVAL;
		rd->doc[t] = arena_range(arena, cmd->slot_offset + at, p->doc_row_bytes[t]);
		if (rd->doc[t] == NULL)
			return -EINVAL;
	}
	if (p->n_shards)
		return token_plan_shard(rd, sample);
	return p->docs_on ? token_plan_docs(rd, cmd, k) : 0;
}

/* Zero-extends the n tokens at the start of row in place, last to first:
 * token i is written at or after where it was read, so it only overwrites
 * tokens that are already done. File and tensors are little-endian. */
static void token_widen_row(uint8_t *row, uint64_t n, uint32_t in, uint32_t out)
{
	for (uint64_t i = n; i-- > 0;) {
		uint64_t v;
		if (in == 2) {
			uint16_t x;
			memcpy(&x, row + i * 2, sizeof(x));
			v = le16toh(x);
		} else {
			uint32_t x;
			memcpy(&x, row + i * 4, sizeof(x));
			v = le32toh(x);
		}
		if (out == 4) {
			uint32_t y = htole32((uint32_t)v);
			memcpy(row + i * 4, &y, sizeof(y));
		} else {
			uint64_t y = htole64(v);
			memcpy(row + i * 8, &y, sizeof(y));
		}
	}
}

static uint64_t token_value(const uint8_t *row, uint64_t i, uint32_t bytes)
{
	if (bytes == 2) {
		uint16_t x;
		memcpy(&x, row + i * 2, sizeof(x));
		return le16toh(x);
	}
	if (bytes == 4) {
		uint32_t x;
		memcpy(&x, row + i * 4, sizeof(x));
		return le32toh(x);
	}
	uint64_t x;
	memcpy(&x, row + i * 8, sizeof(x));
	return le64toh(x);
}

/* The document-aware outputs of rd's sample, from its tokens as
 * delivered (struct arena_token_params says what each holds). */
static void token_documents(const struct reader_read *rd)
{
	const struct reader_pipeline *p = rd->item->pipe;
	const struct arena_token_params *tp = &p->doc;
	uint64_t inputs = p->read_bytes / p->in_elem_bytes - 1;
	uint32_t max_docs = tp->max_documents, docs = 0;
	int64_t pos = 0;
	for (uint64_t i = 0; i < inputs; i++) {
		bool eod = token_value(rd->dst, i, p->out_elem_bytes) == tp->eod_token;
		if (rd->doc[READER_DOC_POSITIONS]) {
			uint64_t v = htole64((uint64_t)pos);
			memcpy(rd->doc[READER_DOC_POSITIONS] + i * 8, &v, sizeof(v));
		}
		if (rd->doc[READER_DOC_LOSS_MASK]) {
			float f = eod && tp->eod_mask_loss ? 0.0f : 1.0f;
			uint32_t v;
			memcpy(&v, &f, sizeof(v));
			v = htole32(v);
			memcpy(rd->doc[READER_DOC_LOSS_MASK] + i * 4, &v, sizeof(v));
		}
		/* a document ends after this input: its end in cu_seqlens */
		if (eod && i + 1 < inputs && rd->doc[READER_DOC_CU_SEQLENS] && docs + 1 < max_docs) {
			uint32_t v = htole32((uint32_t)(i + 1));
			memcpy(rd->doc[READER_DOC_CU_SEQLENS] + (uint64_t)(docs + 1) * 4, &v, sizeof(v));
			docs++;
		}
		pos = eod ? 0 : pos + 1;
	}
	if (rd->doc[READER_DOC_CU_SEQLENS]) {
		uint32_t zero = 0, end = htole32((uint32_t)inputs);
		memcpy(rd->doc[READER_DOC_CU_SEQLENS], &zero, sizeof(zero));
		for (uint32_t k = docs + 1; k <= max_docs; k++)
			memcpy(rd->doc[READER_DOC_CU_SEQLENS] + (uint64_t)k * 4, &end, sizeof(end));
		uint32_t n = htole32(docs + 1);
		memcpy(rd->doc[READER_DOC_COUNT_ROW], &n, sizeof(n));
	}
}

void token_finish(struct reader_read *rd)
{
	const struct reader_pipeline *p = rd->item->pipe;
	if (p->out_elem_bytes > p->in_elem_bytes)
		token_widen_row(rd->dst, p->read_bytes / p->in_elem_bytes, p->in_elem_bytes,
				p->out_elem_bytes);
	if (p->doc_any)
		token_documents(rd);
}
