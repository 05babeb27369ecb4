/*
 * source_id: a pipeline's data identity (source.h, source_data_id), the
 * DATA field of its position tokens (common/position.h).
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

#include <string.h>

#include "common/hash.h"

#define SOURCE_ID_TAG 0x6c6472646174610aull /* "ldrdata\n": the hash's start */

/* The hash over a canonical description: each value mixed in turn. */
struct source_id {
	uint64_t h;
};

static void id_u64(struct source_id *x, uint64_t v)
{
	x->h = hash_mix64(x->h ^ v);
}

/* A string: its length, then its bytes, 8 to a word (the last word
 * zero-padded), so that no two strings or sequences of them mix alike. */
static void id_str(struct source_id *x, const char *s)
{
	size_t len = strlen(s);
	id_u64(x, len);
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = 0;
		for (size_t b = 0; b < 8 && i + b < len; b++)
			w |= (uint64_t)(unsigned char)s[i + b] << (8 * b);
		id_u64(x, w);
	}
}

static void id_images(struct source_id *x, const struct image_index *ix)
{
	id_u64(x, ix->n);
	for (uint64_t i = 0; i < ix->n; i++) {
		const struct arena_image *e = &ix->entries[i];
		id_str(x, ix->paths + e->path_offset);
		id_u64(x, e->file_bytes);
		id_u64(x, (uint64_t)e->label);
		id_u64(x, e->data_offset);
		id_u64(x, e->shard);
	}
}

static void id_shards(struct source_id *x, const struct image_index *ix)
{
	id_u64(x, ix->n_shards);
	for (uint32_t i = 0; i < ix->n_shards; i++) {
		const struct arena_shard *sh = &ix->shards[i];
		id_str(x, ix->paths + sh->path_offset);
		id_u64(x, sh->first_sample);
		id_u64(x, sh->n_samples);
	}
}

static void id_one(struct source_id *x, const struct source *s)
{
	const struct pipeline_cfg *cfg = s->cfg;
	id_u64(x, (uint64_t)cfg->kind);
	id_str(x, cfg->path);
	switch (cfg->kind) {
	case SOURCE_RAW:
		id_u64(x, s->file_bytes);
		id_u64(x, cfg->record_bytes);
		break;
	case SOURCE_TOKENS:
		id_u64(x, s->file_bytes);
		id_u64(x, cfg->token_bytes);
		id_u64(x, cfg->seq_len);
		break;
	case SOURCE_MEGATRON:
		id_u64(x, s->file_bytes);
		id_u64(x, cfg->seq_len);
		id_u64(x, cfg->document_shuffle);
		for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
			const struct source_split *sp = &s->splits[k];
			id_u64(x, sp->first_seq);
			id_u64(x, sp->n_seqs);
			id_u64(x, sp->first_token);
			id_u64(x, sp->n_tokens);
		}
		break;
	case SOURCE_LLMC:
		id_u64(x, cfg->seq_len);
		id_shards(x, &s->index);
		break;
	case SOURCE_IMAGEFOLDER:
	case SOURCE_TAR:
		id_images(x, &s->index);
		id_shards(x, &s->index);
		break;
	}
}

uint64_t source_data_id(const struct source *s)
{
	struct source_id x = {SOURCE_ID_TAG};
	id_u64(&x, s->n_members);
	if (s->n_members) {
		for (uint32_t m = 0; m < s->n_members; m++) {
			const struct source_member *mb = &s->members[m];
			uint64_t w;
			memcpy(&w, &mb->weight, sizeof(w)); /* normalised the same way each start */
			id_u64(&x, mb->src.data_id);
			id_u64(&x, w);
		}
		id_u64(&x, s->cfg->blend_samples);
	} else {
		id_one(&x, s);
	}
	id_u64(&x, s->cfg->shuffle);
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		id_u64(&x, s->splits[k].present);
		id_u64(&x, s->splits[k].n_samples);
	}
	return x.h;
}
