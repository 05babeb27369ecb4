/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_impl.h: what the kinds' files of daemon/source share (source.h
 * is the interface): the kinds' ops, the batch layout, the data file of
 * raw, tokens and megatron, the identity's hash, the common texts.
 * Nothing outside daemon/source includes it.
 */
#ifndef LDR_DAEMON_SOURCE_IMPL_H
#define LDR_DAEMON_SOURCE_IMPL_H

#include <stdint.h>

#include "daemon/source/source.h"

/* ---- the kinds (one file each), in the table of source.c ---- */
extern const struct source_ops source_raw;         /* source_raw.c */
extern const struct source_ops source_tokens;      /* source_tokens.c */
extern const struct source_ops source_megatron;    /* source_megatron.c */
extern const struct source_ops source_llmc;        /* source_llmc.c */
extern const struct source_ops source_imagefolder; /* source_image.c */
extern const struct source_ops source_tar;         /* source_image.c */
extern const struct source_ops source_blend;       /* source_blend.c: cfg->n_members > 0 */

/* ---- source.c ---- */

/* err = `pipeline "NAME": PATH: reason`; returns code. */
int source_fail(char *err, size_t cap, const struct pipeline_cfg *cfg, int code,
		const char *reason);
uint64_t source_align_tensor(uint64_t v);
/* A tensor [batch_size, dims...] (n_dims of them, 0..3) after the others. */
void source_add_tensor_dims(struct source *s, const char *name, uint32_t dtype,
			    const uint64_t *dims, uint32_t n_dims);
/* A tensor [batch_size, row_elems]. */
void source_add_tensor(struct source *s, const char *name, uint32_t dtype, uint64_t row_elems);
/* The token tensor, the document-aware outputs and what workers need of
 * a token pipeline, stored tokens of tb bytes delivered as out_dtype. */
void source_token_layout(const struct pipeline_cfg *cfg, struct source *out, uint64_t tb,
			 uint32_t out_dtype);
/* raw, tokens, megatron: opens the data file (source_data_path; refused
 * here, not by every worker, when it is not a readable regular file,
 * never blocking on a FIFO) and sets data_path and file_bytes. 0 or
 * -errno with err. */
int source_data_file(const struct pipeline_cfg *cfg, struct source *out, char *err,
		     size_t err_cap);
/* tokens, megatron: the data file's tokens of tb bytes (delivered as
 * out_dtype) against seq_len, each split's base and samples into desc,
 * and the layout. Splits a source without its own (tokens) has: train,
 * the whole file. 0 or -errno with err. */
int source_token_file(const struct pipeline_cfg *cfg, struct source *out, uint64_t tb,
		      uint32_t out_dtype, char *err, size_t err_cap);
/* The locate of raw, tokens and megatron: a sample is the split's base
 * plus index samples' stride into the data file, sample_read_bytes long;
 * under document order (megatron) no one range. */
void source_file_locate(const struct source *s, uint32_t split, uint64_t epoch, uint64_t index,
			struct source_place *out);
/* A data file's sample in a message (the `where` of raw, tokens and
 * megatron): its byte range in `split`, or with document order its
 * window of the epoch's order. Returns buf. */
const char *source_file_where(const struct source *s, const struct arena *arena, uint32_t entry,
			      uint32_t split, uint64_t index, char *buf, size_t cap);
/* The ERROR text of a failed batch read from a data file: the file and
 * the sample's byte range. Returns EIO. */
int source_file_error(const struct source *s, const struct arena *arena,
		      const struct source_failure *f, char *text, size_t cap);
/* The ERROR text of a failed batch whose sample is no one byte range
 * (document order, llm.c shards, a blend): the sample as `where` names
 * it. Returns EIO. */
int source_where_error(const struct source *s, const struct arena *arena,
		       const struct source_failure *f, char *text, size_t cap);
/* Why a worker could not read a sample of a data file (the last part of
 * the texts above). */
/* Why a document-shuffled megatron pipeline's .idx failed a worker
 * (error: -ESTALE, not the file checked at start; REGFILE_NOT_REGULAR;
 * another -errno of its open), for a message. */
void source_index_why(int error, char *buf, size_t cap);
void source_read_why(const struct source *s, const struct source_failure *f, char *buf,
		     size_t cap);
/* The status line of a lone source: its kind, path, samples and splits. */
void source_describe_line(const struct source *s, struct status_text *t);

/* ---- source_arena.c ---- */

/* The index area's bytes of an image index (tar: entries, shards, paths;
 * imagefolder: files, directories, paths; each ARENA_ALIGN-aligned, in
 * that order). */
uint64_t source_image_index_bytes(const struct image_index *ix);
/* An imagefolder's part of the index area: its files at 0, its
 * directories at *dirs_at, its paths at *paths_at; returns the bytes of
 * the whole (ARENA_ALIGN-aligned). */
uint64_t source_folder_layout(const struct image_index *ix, uint64_t *dirs_at, uint64_t *paths_at);

/* ---- source_id.c: the identity's hash ---- */

struct source_id {
	uint64_t h;
};
void source_id_u64(struct source_id *x, uint64_t v);
/* A string: its length, then its bytes. */
void source_id_str(struct source_id *x, const char *s);
/* What every lone source starts with: its kind and configured path. */
void source_id_file(struct source_id *x, const struct source *s);
/* An image list's entries; a list's shards. */
void source_id_images(struct source_id *x, const struct image_index *ix);
void source_id_shards(struct source_id *x, const struct image_index *ix);

#endif
