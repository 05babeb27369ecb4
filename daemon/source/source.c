/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source: the table of source kinds, the dispatch of every call of
 * source.h to the source's ops, and what the kinds share: the batch
 * layout, the data file of raw, tokens and megatron, the common texts
 * (source_impl.h).
 */
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

#include "common/escape.h"
#include "common/regfile.h"
#include "common/suggest.h"
#include "daemon/core/status.h"
#include "daemon/source/source_impl.h"
#include "worker/worker.h"

/* The kinds of source, by the config's enum source_kind (`source =
 * KIND:PATH`); a pipeline with blend members is a blend (source_blend). */
static const struct source_ops *const source_kinds[] = {
	[SOURCE_RAW] = &source_raw,
	[SOURCE_TOKENS] = &source_tokens,
	[SOURCE_IMAGEFOLDER] = &source_imagefolder,
	[SOURCE_TAR] = &source_tar,
	[SOURCE_MEGATRON] = &source_megatron,
	[SOURCE_LLMC] = &source_llmc,
};

/* Work items aim at about this many bytes, so that every worker has a share
 * of the batch a client needs next while each item still amortises its
 * command and completion. */
#define SOURCE_ITEM_TARGET_BYTES (256u * 1024u)

static const struct source_ops *ops_of(const struct pipeline_cfg *cfg)
{
	if (cfg->n_members)
		return &source_blend;
	if ((size_t)cfg->kind < sizeof(source_kinds) / sizeof(source_kinds[0]))
		return source_kinds[cfg->kind];
	return NULL;
}

uint64_t source_align_tensor(uint64_t v)
{
	return (v + SOURCE_TENSOR_ALIGN - 1) & ~(uint64_t)(SOURCE_TENSOR_ALIGN - 1);
}

const char *source_data_path(const struct pipeline_cfg *cfg, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s", cfg->path, cfg->kind == SOURCE_MEGATRON ? ".bin" : "");
	return buf;
}

int source_fail(char *err, size_t cap, const struct pipeline_cfg *cfg, int code,
		const char *reason)
{
	snprintf(err, cap, "pipeline \"%s\": %s: %s", cfg->name, cfg->path, reason);
	return code;
}

void source_add_tensor_dims(struct source *s, const char *name, uint32_t dtype,
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
	s->batch_bytes = source_align_tensor(t->offset +
					     s->row_bytes[s->n_tensors] * s->cfg->batch_size);
	s->n_tensors++;
}

void source_add_tensor(struct source *s, const char *name, uint32_t dtype, uint64_t row_elems)
{
	source_add_tensor_dims(s, name, dtype, &row_elems, 1);
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
		source_add_tensor(out, "positions", PROTO_DTYPE_INT64, cfg->seq_len);
	}
	if (cfg->outputs & CONFIG_OUTPUT_LOSS_MASK) {
		tp->loss_mask = (uint8_t)out->n_tensors;
		source_add_tensor(out, "loss_mask", PROTO_DTYPE_FLOAT32, cfg->seq_len);
	}
	if (cfg->outputs & CONFIG_OUTPUT_CU_SEQLENS) {
		tp->cu_seqlens = (uint8_t)out->n_tensors;
		source_add_tensor(out, "cu_seqlens", PROTO_DTYPE_INT32, (uint64_t)cfg->max_documents + 1);
		tp->num_documents = (uint8_t)out->n_tensors;
		source_add_tensor_dims(out, "num_documents", PROTO_DTYPE_INT32, NULL, 0);
	}
}

void source_token_layout(const struct pipeline_cfg *cfg, struct source *out, uint64_t tb,
			 uint32_t out_dtype)
{
	struct arena_pipeline *d = &out->desc;
	source_add_tensor(out, "tokens", out_dtype, cfg->seq_len + 1);
	add_document_outputs(cfg, out);
	d->kind = ARENA_SOURCE_TOKENS;
	d->sample_read_bytes = (cfg->seq_len + 1) * tb;
	d->sample_stride = cfg->seq_len * tb;
	d->in_elem_bytes = (uint32_t)tb;
	d->out_elem_bytes = (uint32_t)proto_dtype_bytes(out_dtype);
}

int source_data_file(const struct pipeline_cfg *cfg, struct source *out, char *err,
		     size_t err_cap)
{
	char reason[1024];
	struct stat st;
	int fd = regfile_open(AT_FDCWD, source_data_path(cfg, out->data_path,
							 sizeof(out->data_path)), &st);
	if (fd == REGFILE_NOT_REGULAR) {
		snprintf(reason, sizeof(reason), "not a regular file (%s)", regfile_kind(st.st_mode));
		return source_fail(err, err_cap, cfg, -EINVAL, reason);
	}
	if (fd < 0)
		return source_fail(err, err_cap, cfg, fd, strerror(-fd));
	close(fd);
	out->file_bytes = (uint64_t)st.st_size;
	return 0;
}

int source_token_file(const struct pipeline_cfg *cfg, struct source *out, uint64_t tb,
		      uint32_t out_dtype, char *err, size_t err_cap)
{
	char reason[1024];
	struct arena_pipeline *d = &out->desc;
	if (out->file_bytes % tb != 0) {
		snprintf(reason, sizeof(reason), "size %" PRIu64 " is not a multiple of the %" PRIu64
			 "-byte token size", out->file_bytes, tb);
		return source_fail(err, err_cap, cfg, -EINVAL, reason);
	}
	uint64_t n_tokens = out->file_bytes / tb;
	if (n_tokens < cfg->seq_len + 1) {
		snprintf(reason, sizeof(reason), "%" PRIu64 " tokens, fewer than seq_len + 1 = %" PRIu64,
			 n_tokens, cfg->seq_len + 1);
		return source_fail(err, err_cap, cfg, -EINVAL, reason);
	}
	if (!out->splits[SPLIT_TRAIN].present)
		out->splits[SPLIT_TRAIN] = (struct source_split){
			.present = true, .n_tokens = n_tokens,
			.n_samples = (n_tokens - 1) / cfg->seq_len};
	out->n_samples = out->splits[SPLIT_TRAIN].n_samples;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		d->split_base[k] = out->splits[k].first_token * tb;
		d->split_samples[k] = out->splits[k].n_samples;
	}
	source_token_layout(cfg, out, tb, out_dtype);
	return 0;
}

/* What every lone source has once its kind's open has run: at least a
 * batch of samples (unless a blend's member, or with splits, each checked
 * when a client asks for it: a split may be left empty on purpose), the
 * chunk, and desc's common fields. */
static int finish_open(const struct pipeline_cfg *cfg, struct source *out, bool member,
		       char *err, size_t err_cap)
{
	char reason[160];
	if (out->slot_bytes < out->batch_bytes)
		out->slot_bytes = out->batch_bytes;
	if (out->n_samples < cfg->batch_size && !out->has_splits && !member) {
		snprintf(reason, sizeof(reason), "dataset has %" PRIu64 " samples, fewer than batch_size %u",
			 out->n_samples, cfg->batch_size);
		return source_fail(err, err_cap, cfg, -EINVAL, reason);
	}
	struct arena_pipeline *d = &out->desc;
	uint64_t sample_bytes = 0;
	for (uint32_t t = 0; t < out->n_tensors; t++)
		sample_bytes += out->row_bytes[t];
	if (cfg->chunk) /* else the kind's own (images), or by the bytes of a sample */
		out->chunk = cfg->chunk;
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
	snprintf(d->path, sizeof(d->path), "%s", out->data_path[0] ? out->data_path : cfg->path);
	_Static_assert(sizeof(d->roots) == sizeof(cfg->roots), "a declared pipeline's roots fit");
	memcpy(d->roots, cfg->roots, sizeof(d->roots));
	return 0;
}

static int open_as(const struct pipeline_cfg *cfg, struct source *out, bool member, char *err,
		   size_t err_cap)
{
	memset(out, 0, sizeof(*out));
	out->cfg = cfg;
	out->ops = ops_of(cfg);
	if (!out->ops) { /* the config parser admits only the table's kinds */
		snprintf(err, err_cap, "pipeline \"%s\": %s: unknown kind of source %d", cfg->name,
			 cfg->path, (int)cfg->kind);
		return -EINVAL;
	}
	int rc = out->ops->open(cfg, out, err, err_cap);
	if (rc == 0 && !out->n_members) /* a blend lays itself out from its members */
		rc = finish_open(cfg, out, member, err, err_cap);
	if (rc < 0) {
		source_close(out);
		return rc;
	}
	out->data_id = source_data_id(out);
	return 0;
}

int source_open(const struct pipeline_cfg *cfg, struct source *out, char *err, size_t err_cap)
{
	return open_as(cfg, out, false, err, err_cap);
}

int source_open_member(const struct pipeline_cfg *cfg, struct source *out, char *err,
		       size_t err_cap)
{
	return open_as(cfg, out, true, err, err_cap);
}

void source_close(struct source *s)
{
	if (s->ops && s->ops->close)
		s->ops->close(s);
	image_index_free(&s->index);
	free(s->block_tokens);
	s->block_tokens = NULL;
}

/* ---- locating and naming samples ---- */

void source_locate(const struct source *src, uint32_t split, uint64_t epoch, uint64_t index,
		   struct source_place *out)
{
	*out = (struct source_place){.sample = index, .epoch = epoch};
	if (src->ops->locate)
		src->ops->locate(src, split, epoch, index, out);
}

void source_file_locate(const struct source *s, uint32_t split, uint64_t epoch, uint64_t index,
			struct source_place *out)
{
	(void)epoch;
	if (s->desc.docs.n_documents || split >= SPLIT_COUNT)
		return;
	out->offset = s->desc.split_base[split] + index * s->desc.sample_stride;
	out->bytes = s->desc.sample_read_bytes;
}

const char *source_sample_where(const struct source *src, const struct arena *arena,
				uint32_t pipeline, uint32_t split, uint64_t index, char *buf,
				size_t cap)
{
	return src->ops->where(src, arena, pipeline, split, index, buf, cap);
}

const char *source_file_where(const struct source *s, const struct arena *arena, uint32_t entry,
			      uint32_t split, uint64_t index, char *buf, size_t cap)
{
	(void)arena, (void)entry;
	if (split >= SPLIT_COUNT && s->has_splits) {
		snprintf(buf, cap, "%.1000s sample %" PRIu64 " of one of its splits", s->data_path,
			 index);
		return buf;
	}
	uint64_t k = split < SPLIT_COUNT ? split : SPLIT_TRAIN;
	if (s->desc.docs.n_documents) { /* no one range: the epoch's documents */
		snprintf(buf, cap, "%.1000s split %s window %" PRIu64 " (tokens %" PRIu64 "..%"
			 PRIu64 " of the epoch's document order)", s->data_path,
			 split_name((uint32_t)k), index, index * s->cfg->seq_len,
			 (index + 1) * s->cfg->seq_len + 1);
		return buf;
	}
	uint64_t offset = s->desc.split_base[k] + index * s->desc.sample_stride;
	snprintf(buf, cap, "%.1000s%s%s bytes %" PRIu64 "..%" PRIu64, s->data_path,
		 s->has_splits ? " split " : "", s->has_splits ? split_name(split) : "",
		 offset, offset + s->desc.sample_read_bytes);
	return buf;
}

/* ---- a failed batch's text ---- */

int source_batch_error(const struct source *src, const struct arena *arena,
		       const struct source_failure *f, char *text, size_t cap)
{
	if (src->ops->batch_error)
		return src->ops->batch_error(src, arena, f, text, cap);
	return source_file_error(src, arena, f, text, cap);
}

void source_read_why(const struct source *s, const struct source_failure *f, char *buf,
		     size_t cap)
{
	if (f->detail & WORKER_DETAIL_INDEX) { /* the dataset's .idx, not the data file */
		char why[200];
		source_index_why(f->error, why, sizeof(why));
		snprintf(buf, cap, "its .idx: %s", why);
	}
	else if (f->error == -ENODATA)
		snprintf(buf, cap, "file is shorter than at start (read %" PRIu64 " of %" PRIu64 " bytes)",
			 f->detail, s->desc.sample_read_bytes);
	else if (f->error == REGFILE_NOT_REGULAR)
		snprintf(buf, cap, "not a regular file any more (replaced since start)");
	else
		snprintf(buf, cap, "%s", strerror(-f->error));
}

void source_index_why(int error, char *buf, size_t cap)
{
	if (error == -ESTALE)
		snprintf(buf, cap, "not the index checked at start any more (its size, device, inode "
			 "or modification time differs: replaced or rewritten since start)");
	else if (error == REGFILE_NOT_REGULAR)
		snprintf(buf, cap, "not a regular file any more (replaced since start)");
	else
		snprintf(buf, cap, "%s", strerror(-error));
}

int source_where_error(const struct source *s, const struct arena *arena,
		       const struct source_failure *f, char *text, size_t cap)
{
	char where[1200], why[256];
	source_read_why(s, f, why, sizeof(why));
	source_sample_where(s, arena, f->entry, f->split, f->index, where, sizeof(where));
	snprintf(text, cap, "pipeline \"%s\": epoch %" PRIu64 " sample %" PRIu64 ": %.700s: %s",
		 s->cfg->name, f->epoch, f->index, where, why);
	return EIO;
}

int source_file_error(const struct source *s, const struct arena *arena,
		      const struct source_failure *f, char *text, size_t cap)
{
	if (s->desc.docs.n_documents) /* no one range: the window in the epoch's order */
		return source_where_error(s, arena, f, text, cap);
	char path[PATH_MAX], why[256];
	source_read_why(s, f, why, sizeof(why));
	uint64_t offset = s->desc.split_base[f->split] + f->index * s->desc.sample_stride;
	snprintf(text, cap, "pipeline \"%s\": %.700s: %s%s%ssample %" PRIu64 " (bytes %"
		 PRIu64 "..%" PRIu64 "): %s", s->cfg->name,
		 source_data_path(s->cfg, path, sizeof(path)),
		 s->has_splits ? "split " : "", s->has_splits ? split_name(f->split) : "",
		 s->has_splits ? " " : "", f->index, offset, offset + s->desc.sample_read_bytes, why);
	return EIO;
}

/* ---- status ---- */

void source_describe(const struct source *src, struct status_text *t)
{
	if (src->ops->describe)
		src->ops->describe(src, t);
	else
		source_describe_line(src, t);
}

void source_describe_line(const struct source *s, struct status_text *t)
{
	const struct pipeline_cfg *cfg = s->cfg;
	status_field(t, "name", "  pipeline %s", cfg->name);
	status_field(t, "source", " source %s", config_source_name(cfg->kind));
	status_field(t, "path", ":%s", cfg->path);
	status_field(t, "samples", " samples %" PRIu64, s->n_samples);
	status_field(t, "batch_size", " batch_size %u", cfg->batch_size);
	status_field(t, "shuffle", " shuffle %d", cfg->shuffle);
	status_field(t, "drop_last", " drop_last %d", cfg->drop_last);
	/* samples is the train split's; each split's sequences and samples */
	if (s->has_splits)
		status_array(t, "splits");
	for (uint32_t k = 0; s->has_splits && k < SPLIT_COUNT; k++) {
		status_object(t, NULL);
		status_field(t, "split", " split %s", split_name(k));
		status_field(t, "first_sequence", " sequences %" PRIu64, s->splits[k].first_seq);
		status_field(t, "end_sequence", "..%" PRIu64, s->splits[k].first_seq + s->splits[k].n_seqs);
		status_field(t, "samples", " samples %" PRIu64, s->splits[k].n_samples);
		status_close(t);
	}
	if (s->has_splits)
		status_close(t);
	status_printf(t, "\n");
}

int source_split_find(const struct source *src, const char *name, uint32_t *id, char *err,
		      size_t cap)
{
	char shown[ESCAPE_SIZE(SPLIT_NAME_MAX - 1)];
	const char *pipeline = src->cfg->name;
	if (!split_from_name(name, id)) {
		static const char *const names[] = {"train", "valid", "test", NULL};
		const char *best = suggest_among(name, strlen(name), names);
		snprintf(err, cap, "pipeline \"%s\": unknown split \"%s\" (%s%s%strain, valid or "
			 "test)", pipeline, escape_str(name, shown, sizeof(shown)),
			 best ? "did you mean \"" : "", best ? best : "", best ? "\"? " : "");
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
