/*
 * source: a pipeline's data source as the master sees it: the data file
 * checked against the declared layout, the number of samples, and the
 * layout of one batch in a staging slot (named tensors).
 *
 * source_open runs at start (and for --check-config); it reads file
 * metadata and headers only (a Megatron index, tar member headers, llm.c
 * shard headers), never a sample. Workers do the reading, using the
 * struct arena_pipeline this module fills in. The sample lists it builds
 * go into the arena's index area (source_arena.c), from which samples
 * are named in messages.
 */
#ifndef LDR_DAEMON_SOURCE_H
#define LDR_DAEMON_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/split.h"
#include "daemon/config/config.h"
#include "daemon/source/imagefolder.h"
#include "proto/proto.h"
#include "shm/arena.h"
#include "shm/layout.h"

#define SOURCE_TENSOR_ALIGN 256u /* byte alignment of each tensor in a slot */

/* One split of a token pipeline's dataset (common/split.h): a megatron
 * pipeline with `split` has three, every other token or raw pipeline only
 * train, which is all of it. A megatron split is a range of the index's
 * sequences, as megatron-core's GPTDataset splits it; its ends may fall
 * inside a document (desc.docs then orders the document's part in the
 * split as a document of its own). */
struct source_split {
	bool present;          /* the pipeline has this split (it may be empty) */
	uint64_t first_seq;    /* megatron: its sequences [first_seq, first_seq + n_seqs) */
	uint64_t n_seqs;
	uint64_t first_token;  /* its tokens in the data file, from this one on */
	uint64_t n_tokens;
	uint64_t n_samples;    /* windows of seq_len + 1 tokens; 0 when n_tokens <= seq_len */
};

struct source_member;

/* A blend's samples of one split (common/blend.h): sample i is
 * member[i]'s member_sample[i]-th of the epoch; taken[d] of them from
 * member d. 9 bytes a sample, for the daemon's lifetime. */
struct source_blend_split {
	uint8_t *member;
	uint64_t *member_sample;
	uint64_t taken[CONFIG_BLEND_MAX];
};

struct source {
	const struct pipeline_cfg *cfg;
	/* a blend (cfg->n_members > 0): its members, each opened as a lone
	 * source and given a table entry of its own in the arena (after the
	 * configured pipelines'), which work items name; the blend's own
	 * entry is never read by a worker */
	uint32_t n_members;
	struct source_member *members;
	struct source_blend_split blend[SPLIT_COUNT];
	uint64_t n_samples;    /* token pipelines: the train split's */
	bool has_splits;       /* megatron with `split`: valid and test exist too */
	struct source_split splits[SPLIT_COUNT];
	/* megatron with document_shuffle: the first token of each document
	 * the epochs order, then the end of the last ([n_documents + 1]):
	 * the index's documents, and with `split` only those in a split, a
	 * document that a split's end cuts counted once in each split it
	 * has sequences in; copied into the arena by source_fill_arena
	 * (desc.docs), which frees this copy */
	uint64_t *doc_tokens;
	uint64_t n_documents;
	uint64_t file_bytes;
	uint32_t chunk;        /* samples per work item, resolved */
	uint32_t n_tensors;
	struct proto_tensor tensors[PROTO_TENSORS_MAX]; /* shape[0] = batch_size */
	uint64_t row_bytes[PROTO_TENSORS_MAX];          /* bytes per sample per tensor */
	uint64_t batch_bytes;  /* bytes of a full batch in a slot, tensors aligned */
	uint64_t slot_bytes;   /* what a slot must hold: batch_bytes, and GPU decoding's
				* descriptors and JPEGs (struct arena_image_params) */
	struct arena_pipeline desc; /* what workers need; copied into the arena */
	struct image_index index;   /* imagefolder, tar: the sample list; llmc: the shards */
	char data_path[PATH_MAX];   /* raw, tokens, megatron: the file the samples are read from
				     * (llmc: none, the shards are in index) */
	uint64_t data_id;           /* source_data_id, at open */
};

/* A blend's member (source_blend.c). */
struct source_member {
	struct pipeline_cfg cfg; /* the pipeline's, with the member's kind and path */
	struct source src;
	double weight;           /* normalised */
	uint64_t key;            /* blend_member_key(seed, its index) */
	uint32_t arena_index;    /* its table entry in the arena */
};

/* The file a raw, tokens or megatron pipeline's samples are read from:
 * its path, or PREFIX.bin for megatron:PREFIX. Returns buf. */
const char *source_data_path(const struct pipeline_cfg *cfg, char *buf, size_t cap);

/*
 * Checks the pipeline's file (an imagefolder's tree: daemon/source/imagefolder.h;
 * tar shards: daemon/source/tarshard.h) and computes its layout. Never blocks on
 * a FIFO or opens a device (common/regfile.h). Returns 0, or -errno
 * with err = `pipeline "NAME": PATH: reason` (missing file, not a regular
 * file: "not a regular file (a FIFO)", size not fitting the layout, fewer
 * samples than one batch).
 */
int source_open(const struct pipeline_cfg *cfg, struct source *out, char *err, size_t err_cap);
void source_close(struct source *s);

/* source_open of one source; a blend's member (member true) may have
 * fewer samples than a batch. */
int source_open_one(const struct pipeline_cfg *cfg, struct source *out, bool member, char *err,
		    size_t err_cap);

/*
 * The source's data identity (source_id.c): a hash of what decides which
 * sample each place of its stream is (files' names and sizes, the sample
 * list, the keys that cut samples, the order, a blend's members and
 * weights, the splits), the same across restarts, reloads and worker
 * counts; what a position token names as DATA. Reads only what
 * source_open already holds (the sample lists, before source_fill_arena
 * frees them): source_open sets data_id with it.
 */
uint64_t source_data_id(const struct source *s);

/* ---- blends (source_blend.c) ---- */

/* source_open of a blend: every member opened and checked (errors name
 * the member's file), their token layouts the same, the blend's table of
 * each split built. 0 or -errno with err. */
int source_blend_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
		      size_t err_cap);
void source_blend_close(struct source *s);

/* Table entries the sources' members take after the n configured
 * pipelines: each member's arena_index set, counted from n. Returns the
 * total of entries. */
uint32_t source_blend_number(struct source *sources, size_t n);

/* Blended sample `index` of `split` in `epoch`: the member (its index
 * in src->members), the member's sample in its split and the epoch of
 * the member's order it is read in (common/blend.h). */
void source_blend_sample(const struct source *src, uint32_t split, uint64_t epoch, uint64_t index,
			 uint32_t *member, uint64_t *sample, uint64_t *member_epoch);

/* Names blended sample `index` of `split` (SPLIT_COUNT: train) for
 * messages: its member, the member's file and the member's sample count.
 * Returns buf. */
const char *source_blend_where(const struct source *src, uint32_t split, uint64_t index, char *buf,
			       size_t cap);

/* A blend's lines of `loaderd status`: the pipeline, then each member
 * with its weight (normalised), its samples and those the blend takes
 * from it an epoch, per split. */
struct status_text;
void source_blend_describe(const struct source *src, struct status_text *t);

/* The member whose arena table entry is arena_index, and its blend
 * (*owner, *owner_index); NULL when none is. */
const struct source_member *source_member_at(const struct source *sources, size_t n,
					     uint32_t arena_index, const struct source **owner,
					     uint32_t *owner_index);

/* ---- the sample lists in the arena (source_arena.c) ----
 * An image pipeline's sample list (its arena_image entries, its tar shards,
 * their paths), a document-shuffled megatron pipeline's document table and
 * an llm.c pipeline's shards and paths are copied into the arena's index
 * area at start, where workers read them; the master names samples from
 * that copy. */

/* Bytes the sample list takes in the index area: the entries, the shards
 * and the paths, each ARENA_ALIGN-aligned, in that order; a
 * document-shuffled megatron pipeline's document table. 0 for a source
 * without one. */
uint64_t source_index_bytes(const struct source *src);

/* Copies every pipeline's table entry (and an image pipeline's sample
 * list, at index_at[i] into the arena's index area) into the arena, logs
 * each image list's start-up lines, and frees the lists (the arena holds
 * them from here on). */
void source_fill_arena(struct source *sources, size_t n, const uint64_t *index_at,
		       struct arena *arena);

/* Names sample `index` of pipeline `pipeline` for messages: an image
 * pipeline's file (ROOT/CLASS/NAME.jpg) or tar shard, member and data
 * offset, read from the arena's copy of the list; another pipeline's data
 * file and byte range within `split` (SPLIT_COUNT: not known, the range
 * is then not given for a pipeline with splits). Returns buf. */
const char *source_sample_where(const struct source *src, const struct arena *arena,
				uint32_t pipeline, uint32_t split, uint64_t index, char *buf,
				size_t cap);

/* The split a client asks for by name (HELLO's `split`, "" for train):
 * 0 with *id, or -EINVAL with err naming the split and the pipeline (an
 * unknown name, a split the pipeline does not have, an empty one). */
int source_split_find(const struct source *src, const char *name, uint32_t *id, char *err,
		      size_t cap);

/* Why an image is bad, from the worker's -errno for it. */
const char *source_image_why(int status);

/* The tar shard of image sample `index`: its path into buf and its sample
 * count; false for an imagefolder or a sample the list does not hold. */
bool source_image_shard(const struct arena *arena, uint32_t pipeline, uint64_t index, char *buf,
			size_t cap, uint64_t *n_samples);

#endif
