/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_id: a pipeline's data identity (source.h, source_data_id), the
 * DATA field of its position tokens (common/position.h), and the hash
 * the kinds' identify operations mix into (source_impl.h).
 *
 * A token says "the k-th sample of epoch e"; the identity is a 64-bit hash
 * of what decides which sample that is, apart from the seed and the sample
 * count (the token carries both on their own):
 *  - the sample index space: the kind, the configured path, and what the
 *    daemon read of the files at start: a data file's size; an image
 *    source's whole sample list (each file's or tar member's name, size,
 *    label and place, each shard's path and sample range); an llm.c
 *    source's shards and their sample ranges; a Megatron index's split
 *    ranges (documents and tokens); the keys that cut samples out of the
 *    bytes (record_bytes, token_dtype, seq_len);
 *  - the order of an epoch: shuffle, and document_shuffle for Megatron;
 *  - a blend: each member's identity and normalised weight, blend_samples;
 *  - every split's sample count.
 * What does not change which sample an index means is left out, so that a
 * token survives it: the transform and every other key of how a sample is
 * decoded or laid out (layout, dtype, mean, std, outputs, token_output,
 * on_error, decode), batch_size, drop_last, chunk, direct, the workers,
 * a reload, a restart, another host with the same files at the same paths.
 *
 * Only names and sizes are read, never contents, so that a start stays
 * cheap for terabytes of data. The price: a file rewritten in place with
 * the same size (another tokenisation of the same length, images replaced
 * by others of the same byte count) keeps its identity; and data moved to
 * another path changes it, though the samples are the same.
 */
#include "daemon/source/source.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "daemon/source/source_impl.h"

#define SOURCE_ID_TAG 0x6c6472646174610aull /* "ldrdata\n": the hash's start */

void source_id_u64(struct source_id *x, uint64_t v)
{
	x->h = hash_mix64(x->h ^ v);
}

/* A string: its length, then its bytes, 8 to a word (the last word
 * zero-padded), so that no two strings or sequences of them mix alike. */
void source_id_str(struct source_id *x, const char *s)
{
	size_t len = strlen(s);
	source_id_u64(x, len);
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = 0;
		for (size_t b = 0; b < 8 && i + b < len; b++)
			w |= (uint64_t)(unsigned char)s[i + b] << (8 * b);
		source_id_u64(x, w);
	}
}

void source_id_file(struct source_id *x, const struct source *s)
{
	source_id_u64(x, (uint64_t)s->cfg->kind);
	source_id_str(x, s->cfg->path);
}

/* An imagefolder's list mixes in as the same list of arena_image entries
 * (path, size, label, 0, 0) would, so that its identity does not depend
 * on how the list is held. */
static void source_id_folder(struct source_id *x, const struct image_index *ix)
{
	for (uint32_t d = 0; d < ix->n_dirs; d++) {
		const struct arena_folder_dir *dir = &ix->dirs[d];
		const char *path = ix->paths + dir->path_offset;
		size_t dir_len = strlen(path);
		char buf[PATH_MAX];
		memcpy(buf, path, dir_len);
		buf[dir_len] = '/';
		for (uint64_t i = dir->first_sample; i < dir->first_sample + dir->n_samples; i++) {
			const struct arena_folder_file *f = &ix->files[i];
			snprintf(buf + dir_len + 1, sizeof(buf) - dir_len - 1, "%s",
				 ix->paths + dir->names_offset + f->name_offset);
			source_id_str(x, buf);
			source_id_u64(x, f->file_bytes);
			source_id_u64(x, dir->label);
			source_id_u64(x, 0); /* data_offset */
			source_id_u64(x, 0); /* shard */
		}
	}
}

void source_id_images(struct source_id *x, const struct image_index *ix)
{
	source_id_u64(x, ix->n);
	if (ix->files) {
		source_id_folder(x, ix);
		return;
	}
	for (uint64_t i = 0; i < ix->n; i++) {
		const struct arena_image *e = &ix->entries[i];
		source_id_str(x, ix->paths + e->path_offset);
		source_id_u64(x, e->file_bytes);
		source_id_u64(x, (uint64_t)e->label);
		source_id_u64(x, e->data_offset);
		source_id_u64(x, e->shard);
	}
}

void source_id_shards(struct source_id *x, const struct image_index *ix)
{
	source_id_u64(x, ix->n_shards);
	for (uint32_t i = 0; i < ix->n_shards; i++) {
		const struct arena_shard *sh = &ix->shards[i];
		source_id_str(x, ix->paths + sh->path_offset);
		source_id_u64(x, sh->first_sample);
		source_id_u64(x, sh->n_samples);
	}
}

/* What every source ends with: how many members it has before its kind's
 * part (none for a lone source), then its order and splits. */
uint64_t source_data_id(const struct source *s)
{
	struct source_id x = {SOURCE_ID_TAG};
	source_id_u64(&x, s->n_members);
	s->ops->identify(s, &x);
	source_id_u64(&x, s->cfg->shuffle);
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		source_id_u64(&x, s->splits[k].present);
		source_id_u64(&x, s->splits[k].n_samples);
	}
	return x.h;
}
