/* source: validate a pipeline's data file and lay out its batches (source.h). */
#include "daemon/source/source.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/docorder.h"
#include "common/escape.h"
#include "common/regfile.h"
#include "daemon/source/llmc.h"
#include "daemon/source/megatron.h"
#include "daemon/source/tarshard.h"
#include "image/jpeg.h"
#include "image/transform.h"

/* Work items aim at about this many bytes, so that every worker has a share
 * of the batch a client needs next while each item still amortises its
 * command and completion. */
#define SOURCE_ITEM_TARGET_BYTES (256u * 1024u)
/* Images per work item: decoding dominates, so small items spread a batch
 * over every worker. */
#define SOURCE_IMAGE_CHUNK 2u

static uint64_t align_tensor(uint64_t v)
{
	return (v + SOURCE_TENSOR_ALIGN - 1) & ~(uint64_t)(SOURCE_TENSOR_ALIGN - 1);
}

const char *source_data_path(const struct pipeline_cfg *cfg, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s", cfg->path, cfg->kind == SOURCE_MEGATRON ? ".bin" : "");
	return buf;
}

static int fail(char *err, size_t cap, const struct pipeline_cfg *cfg, int code,
		const char *reason)
{
	snprintf(err, cap, "pipeline \"%s\": %s: %s", cfg->name, cfg->path, reason);
	return code;
}

/* A tensor [batch_size, dims...] (n_dims of them, 0..3) after the others. */
static void add_tensor_dims(struct source *s, const char *name, uint32_t dtype,
			    const uint64_t *dims, uint32_t n_dims)
{
	struct proto_tensor *t = &s->tensors[s->n_tensors];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->dtype = dtype;
	t->ndim = 1 + n_dims;
	t->shape[0] = s->cfg->batch_size;
	uint64_t row_elems = 1;
	for (uint32_t d = 0; d < n_dims; d++) {
		t->shape[1 + d] = dims[d];
		row_elems *= dims[d];
	}
	t->offset = s->batch_bytes;
	s->row_bytes[s->n_tensors] = row_elems * proto_dtype_bytes(dtype);
	s->batch_bytes = align_tensor(t->offset + s->row_bytes[s->n_tensors] * s->cfg->batch_size);
	s->n_tensors++;
}

static void add_tensor(struct source *s, const char *name, uint32_t dtype, uint64_t row_elems)
{
	add_tensor_dims(s, name, dtype, &row_elems, 1);
}

static const uint32_t image_dtypes[] = {
	[IMAGE_UINT8] = PROTO_DTYPE_UINT8, [IMAGE_FLOAT16] = PROTO_DTYPE_FLOAT16,
	[IMAGE_FLOAT32] = PROTO_DTYPE_FLOAT32,
};

/* imagefolder and tar: the sample list, tensors "image" and "label", and what the
 * workers need. The index's place in the arena is filled in by the caller
 * that copies it there. */
static int open_images(const struct pipeline_cfg *cfg, struct source *out, char *err,
		       size_t err_cap)
{
	char reason[1024];
	struct tf_chain chain;
	if (tf_parse(cfg->transform, &chain, reason, sizeof(reason)) < 0)
		return fail(err, err_cap, cfg, -EINVAL, reason);
	int rc = cfg->kind == SOURCE_TAR ? tar_scan(cfg->path, &out->index, reason, sizeof(reason)) :
		 imagefolder_scan(cfg->path, &out->index, reason, sizeof(reason));
	if (rc < 0)
		return fail(err, err_cap, cfg, rc, reason);
	out->n_samples = out->index.n;
	uint64_t dims[3] = {3, chain.out_h, chain.out_w};
	if (cfg->layout == IMAGE_NHWC)
		dims[0] = chain.out_h, dims[1] = chain.out_w, dims[2] = 3;
	add_tensor_dims(out, "image", image_dtypes[cfg->dtype], dims, 3);
	add_tensor_dims(out, "label", PROTO_DTYPE_INT64, NULL, 0);
	struct arena_pipeline *d = &out->desc;
	d->kind = ARENA_SOURCE_IMAGES;
	struct arena_image_params *ip = &d->image;
	ip->seed = cfg->seed;
	ip->max_pixels = cfg->max_image_pixels;
	ip->max_decode_ms = cfg->max_decode_ms;
	ip->out_h = chain.out_h;
	ip->out_w = chain.out_w;
	ip->layout = cfg->layout;
	ip->dtype = image_dtypes[cfg->dtype];
	ip->on_error = cfg->on_error;
	ip->decode_scale = cfg->decode_scale == DECODE_SCALE_FULL ? JD_SCALE_FULL : JD_SCALE_FAST;
	ip->n_shards = out->index.n_shards;
	if (cfg->decode != DECODE_CPU) {
		/* After the tensors, a descriptor per row; each row's JPEG in the
		 * row itself, or, when max_image_bytes is more than a row holds,
		 * after the descriptors. */
		ip->gpu_share = cfg->decode == DECODE_GPU ? 1.0f :
				(float)cfg->gpu_decode_percent / 100.0f;
		ip->gpu_check = cfg->gpu_decode_check == GPU_CHECK_ENTROPY ?
					ARENA_GPU_CHECK_ENTROPY : ARENA_GPU_CHECK_STRUCTURE;
		ip->gpu_desc_offset = out->batch_bytes;
		uint64_t end = align_tensor(ip->gpu_desc_offset + (uint64_t)cfg->batch_size *
					    sizeof(struct arena_gpu_image));
		ip->gpu_data_offset = out->tensors[0].offset;
		ip->gpu_data_stride = out->row_bytes[0];
		if (cfg->max_image_bytes > out->row_bytes[0]) {
			ip->gpu_data_offset = end;
			ip->gpu_data_stride = cfg->max_image_bytes;
			end += (uint64_t)cfg->batch_size * cfg->max_image_bytes;
		}
		out->slot_bytes = end;
	}
	for (int c = 0; c < 3; c++) {
		ip->mean[c] = (float)cfg->mean[c];
		ip->std[c] = (float)cfg->std[c];
	}
	snprintf(ip->transform, sizeof(ip->transform), "%s", cfg->transform);
	return 0;
}

/* A token pipeline's document-aware outputs after its tokens (struct
 * arena_token_params). */
static void add_document_outputs(const struct pipeline_cfg *cfg, struct source *out)
{
	struct arena_token_params *tp = &out->desc.tokens;
	tp->eod_token = cfg->eod_token;
	tp->eod_mask_loss = cfg->eod_mask_loss;
	tp->max_documents = cfg->max_documents;
	if (cfg->outputs & CONFIG_OUTPUT_POSITIONS) {
		tp->positions = (uint8_t)out->n_tensors;
		add_tensor(out, "positions", PROTO_DTYPE_INT64, cfg->seq_len);
	}
	if (cfg->outputs & CONFIG_OUTPUT_LOSS_MASK) {
		tp->loss_mask = (uint8_t)out->n_tensors;
		add_tensor(out, "loss_mask", PROTO_DTYPE_FLOAT32, cfg->seq_len);
	}
	if (cfg->outputs & CONFIG_OUTPUT_CU_SEQLENS) {
		tp->cu_seqlens = (uint8_t)out->n_tensors;
		add_tensor(out, "cu_seqlens", PROTO_DTYPE_INT32, (uint64_t)cfg->max_documents + 1);
		tp->num_documents = (uint8_t)out->n_tensors;
		add_tensor_dims(out, "num_documents", PROTO_DTYPE_INT32, NULL, 0);
	}
}

/* The first token of sequence q of a checked index; n_tokens for q =
 * n_sequences. */
static uint64_t megatron_seq_token(const struct mg_index *ix, uint64_t q)
{
	return q < ix->n_sequences ? (uint64_t)ix->pointers[q] / ix->token_bytes : ix->n_tokens;
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
		uint64_t from = (uint64_t)ix->doc_index[d], to = (uint64_t)ix->doc_index[d + 1];
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

/* The token tensor and what workers need of a token pipeline, stored
 * tokens of tb bytes delivered as out_dtype. */
static void token_layout(const struct pipeline_cfg *cfg, struct source *out, uint64_t tb,
			 uint32_t out_dtype)
{
	struct arena_pipeline *d = &out->desc;
	add_tensor(out, "tokens", out_dtype, cfg->seq_len + 1);
	add_document_outputs(cfg, out);
	d->kind = ARENA_SOURCE_TOKENS;
	d->sample_read_bytes = (cfg->seq_len + 1) * tb;
	d->sample_stride = cfg->seq_len * tb;
	d->in_elem_bytes = (uint32_t)tb;
	d->out_elem_bytes = (uint32_t)proto_dtype_bytes(out_dtype);
}

/* llmc: the shards of the pattern, each header checked (daemon/source/llmc.h);
 * the list goes into the arena's index area. */
static int open_llmc(const struct pipeline_cfg *cfg, struct source *out, char *err,
		     size_t err_cap)
{
	char reason[1024];
	int rc = llmc_scan(cfg->path, cfg->seq_len, &out->index, &out->n_samples, reason,
			   sizeof(reason));
	if (rc < 0)
		return fail(err, err_cap, cfg, rc, reason);
	out->splits[SPLIT_TRAIN] = (struct source_split){.present = true,
							 .n_samples = out->n_samples};
	out->desc.split_samples[SPLIT_TRAIN] = out->n_samples;
	out->desc.shards.n_shards = out->index.n_shards;
	out->desc.shards.header_bytes = LLMC_HEADER_BYTES;
	token_layout(cfg, out, LLMC_TOKEN_BYTES, cfg->token_out_dtype);
	return 0;
}

/* raw, tokens and megatron: the data file's size against the layout. */
static int open_data_file(const struct pipeline_cfg *cfg, struct source *out, char *err,
			  size_t err_cap)
{
	char reason[1024];
	uint64_t tb = cfg->token_bytes;
	uint32_t out_dtype = cfg->token_out_dtype;
	if (cfg->kind == SOURCE_MEGATRON) {
		int rc = open_megatron(cfg, out, &tb, &out_dtype, reason, sizeof(reason));
		if (rc < 0)
			return fail(err, err_cap, cfg, rc, reason);
	}

	/* Opened (so that an unreadable file is refused here, not by every
	 * worker) without ever blocking on a FIFO. */
	struct stat st;
	int fd = regfile_open(AT_FDCWD, source_data_path(cfg, out->data_path,
							 sizeof(out->data_path)), &st);
	if (fd == REGFILE_NOT_REGULAR) {
		snprintf(reason, sizeof(reason), "not a regular file (%s)", regfile_kind(st.st_mode));
		return fail(err, err_cap, cfg, -EINVAL, reason);
	}
	if (fd < 0)
		return fail(err, err_cap, cfg, fd, strerror(-fd));
	close(fd);
	out->file_bytes = (uint64_t)st.st_size;

	struct arena_pipeline *d = &out->desc;
	if (cfg->kind == SOURCE_RAW) {
		if (out->file_bytes % cfg->record_bytes != 0) {
			snprintf(reason, sizeof(reason),
				 "size %" PRIu64 " is not a multiple of record_bytes %" PRIu64,
				 out->file_bytes, cfg->record_bytes);
			return fail(err, err_cap, cfg, -EINVAL, reason);
		}
		out->n_samples = out->file_bytes / cfg->record_bytes;
		out->splits[SPLIT_TRAIN] = (struct source_split){.present = true,
								 .n_samples = out->n_samples};
		d->split_samples[SPLIT_TRAIN] = out->n_samples;
		add_tensor(out, "data", PROTO_DTYPE_UINT8, cfg->record_bytes);
		d->kind = ARENA_SOURCE_RAW;
		d->sample_read_bytes = cfg->record_bytes;
		d->sample_stride = cfg->record_bytes;
		d->in_elem_bytes = 1;
		d->out_elem_bytes = 1;
	} else {
		if (out->file_bytes % tb != 0) {
			snprintf(reason, sizeof(reason), "size %" PRIu64 " is not a multiple of the %" PRIu64
				 "-byte token size", out->file_bytes, tb);
			return fail(err, err_cap, cfg, -EINVAL, reason);
		}
		uint64_t n_tokens = out->file_bytes / tb;
		if (n_tokens < cfg->seq_len + 1) {
			snprintf(reason, sizeof(reason), "%" PRIu64 " tokens, fewer than seq_len + 1 = %" PRIu64,
				 n_tokens, cfg->seq_len + 1);
			return fail(err, err_cap, cfg, -EINVAL, reason);
		}
		if (cfg->kind != SOURCE_MEGATRON)
			out->splits[SPLIT_TRAIN] = (struct source_split){
				.present = true, .n_tokens = n_tokens,
				.n_samples = (n_tokens - 1) / cfg->seq_len};
		out->n_samples = out->splits[SPLIT_TRAIN].n_samples;
		for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
			d->split_base[k] = out->splits[k].first_token * tb;
			d->split_samples[k] = out->splits[k].n_samples;
		}
		token_layout(cfg, out, tb, out_dtype);
	}
	return 0;
}

int source_open(const struct pipeline_cfg *cfg, struct source *out, char *err, size_t err_cap)
{
	if (cfg->n_members)
		return source_blend_open(cfg, out, err, err_cap);
	return source_open_one(cfg, out, false, err, err_cap);
}

int source_open_one(const struct pipeline_cfg *cfg, struct source *out, bool member, char *err,
		    size_t err_cap)
{
	char reason[160];
	memset(out, 0, sizeof(*out));
	out->cfg = cfg;
	bool images = cfg->kind == SOURCE_IMAGEFOLDER || cfg->kind == SOURCE_TAR;
	int rc = images ? open_images(cfg, out, err, err_cap) :
		 cfg->kind == SOURCE_LLMC ? open_llmc(cfg, out, err, err_cap) :
		 open_data_file(cfg, out, err, err_cap);
	if (rc < 0)
		goto close_source;
	if (images) /* the whole list is its one split */
		out->splits[SPLIT_TRAIN] = (struct source_split){.present = true,
								 .n_samples = out->n_samples};
	if (out->slot_bytes < out->batch_bytes)
		out->slot_bytes = out->batch_bytes;
	/* With splits, each is checked when a client asks for it: a split
	 * may be left empty on purpose (weight 0). */
	if (out->n_samples < cfg->batch_size && !out->has_splits && !member) {
		snprintf(reason, sizeof(reason), "dataset has %" PRIu64 " samples, fewer than batch_size %u",
			 out->n_samples, cfg->batch_size);
		rc = fail(err, err_cap, cfg, -EINVAL, reason);
		goto close_source;
	}
	struct arena_pipeline *d = &out->desc;

	uint64_t sample_bytes = 0;
	for (uint32_t t = 0; t < out->n_tensors; t++)
		sample_bytes += out->row_bytes[t];
	out->chunk = cfg->chunk;
	if (out->chunk == 0 && images)
		out->chunk = SOURCE_IMAGE_CHUNK;
	if (out->chunk == 0) {
		uint64_t c = SOURCE_ITEM_TARGET_BYTES / (sample_bytes ? sample_bytes : 1);
		out->chunk = (uint32_t)(c < 1 ? 1 : c > WORK_CHUNK_MAX ? WORK_CHUNK_MAX : c);
	}

	d->n_tensors = out->n_tensors;
	d->n_samples = out->n_samples;
	d->file_bytes = out->file_bytes;
	for (uint32_t t = 0; t < out->n_tensors; t++) {
		d->tensor_offset[t] = out->tensors[t].offset;
		d->tensor_row_bytes[t] = out->row_bytes[t];
	}
	snprintf(d->name, sizeof(d->name), "%s", cfg->name);
	snprintf(d->path, sizeof(d->path), "%s", images || cfg->kind == SOURCE_LLMC ? cfg->path :
		 source_data_path(cfg, out->data_path, sizeof(out->data_path)));
	out->data_id = source_data_id(out);
	return 0;
close_source:
	source_close(out);
	return rc;
}

void source_close(struct source *s)
{
	source_blend_close(s);
	image_index_free(&s->index);
	free(s->doc_tokens);
	s->doc_tokens = NULL;
}

int source_split_find(const struct source *src, const char *name, uint32_t *id, char *err,
		      size_t cap)
{
	char shown[ESCAPE_SIZE(SPLIT_NAME_MAX - 1)];
	const char *pipeline = src->cfg->name;
	if (!split_from_name(name, id)) {
		snprintf(err, cap, "pipeline \"%s\": unknown split \"%s\" (train, valid or test)",
			 pipeline, escape_str(name, shown, sizeof(shown)));
		return -EINVAL;
	}
	const struct source_split *sp = &src->splits[*id];
	if (!sp->present && src->n_members) {
		snprintf(err, cap, "pipeline \"%s\" has no split \"%s\": a blend has valid and test "
			 "only when every member is a megatron source (with `split`); this one streams "
			 "all its data as train", pipeline, split_name(*id));
		return -EINVAL;
	}
	if (!sp->present) {
		snprintf(err, cap, "pipeline \"%s\" has no split \"%s\": only a megatron pipeline with "
			 "`split` has valid and test; this one streams all its data as train", pipeline,
			 split_name(*id));
		return -EINVAL;
	}
	if (sp->n_samples == 0 && src->n_members) {
		uint32_t m = 0;
		while (m + 1 < src->n_members && src->members[m].src.splits[*id].n_samples)
			m++;
		snprintf(err, cap, "pipeline \"%s\": split \"%s\" is empty: blend member %u (%s) has "
			 "no window of seq_len + 1 = %" PRIu64 " tokens in it", pipeline, split_name(*id),
			 m + 1, src->members[m].cfg.path, src->cfg->seq_len + 1);
		return -EINVAL;
	}
	if (sp->n_samples == 0) {
		const double *w = src->cfg->split;
		snprintf(err, cap, "pipeline \"%s\": split \"%s\" is empty: split = %g,%g,%g gives it "
			 "sequences %" PRIu64 "..%" PRIu64 " of %" PRIu64 " (%" PRIu64 " tokens), not "
			 "one window of seq_len + 1 = %" PRIu64 " tokens", pipeline, split_name(*id),
			 w[0], w[1], w[2], sp->first_seq, sp->first_seq + sp->n_seqs,
			 src->splits[SPLIT_TRAIN].n_seqs + src->splits[SPLIT_VALID].n_seqs +
			 src->splits[SPLIT_TEST].n_seqs, sp->n_tokens, src->cfg->seq_len + 1);
		return -EINVAL;
	}
	return 0;
}
