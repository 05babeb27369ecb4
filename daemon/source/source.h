/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source: a pipeline's data source as the master sees it. Every kind of
 * source (raw, tokens, megatron, llmc, imagefolder, tar, and a blend of
 * token sources) is one implementation of one interface, struct
 * source_ops, in a file of its own; this header is the interface and
 * the calls the rest of the daemon makes, which dispatch on the source's
 * ops (source.c).
 *
 * The folder's contract:
 *  - It owns: checking a pipeline's data at start (source_open: file
 *    metadata and headers only, never a sample), the sample counts of
 *    each split, the layout of a batch in a staging slot (named tensors),
 *    the description workers read (struct arena_pipeline, shm/layout.h)
 *    and the sample lists in the arena's index area (source_arena.c),
 *    where a sample lives (source_locate), the texts that name a sample
 *    or a failed batch, the data identity a position token names
 *    (source_id.c), the status line, and a blend's members and table.
 *  - It may call: daemon/config (the pipeline's config), daemon/core
 *    (status text), and below the daemon common/, shm/, proto/, image/
 *    (the transform chain) and worker/worker.h (what a worker reports).
 *    Never daemon/sched, daemon/gpu, daemon/pool or daemon/server.
 *  - It is called by: start-up (daemon/preflight.c opens the sources,
 *    daemon/main.c fills the arena), the scheduler (daemon/sched: counts,
 *    locate, texts, status), the GPU threads (daemon/gpu: the layout and
 *    the texts). Workers never call it: they read the arena's copy.
 *  - Threads: source_open and source_fill_arena at start, the rest on
 *    the loop thread or the GPU threads, reading what start-up built
 *    (nothing here changes after source_fill_arena). A pipeline a reload
 *    adds (daemon/pipetable.h) is opened on a thread of libuv's pool, into
 *    a source of its own that nothing else reads until the loop has it;
 *    its sample lists are copied into its reserved share of the index
 *    area on the pool too (source_place_index), and its table entry
 *    filled on the loop (source_fill_arena_entry).
 *
 * The files: source.c (the table of kinds, the dispatch, what every kind
 * shares: the batch layout, the data file, the texts), source_arena.c
 * (the index area), source_id.c (the data identity), one file a kind:
 * source_raw.c, source_tokens.c, source_megatron.c (with the index
 * reader megatron.c), source_llmc.c (with the shard reader llmc.c),
 * source_image.c (imagefolder and tar, with the scanners imagefolder.c
 * and tarshard.c; a shard pattern's braces are common/tarpattern.h),
 * source_blend.c; docorder.c (the epochs'
 * document orders the scheduler computes); source_impl.h is what the
 * kinds' files share, included by nothing outside this folder.
 *
 * Adding a kind of source (say parquet:PATH):
 *  1. daemon/config: its enum source_kind value (config.h), its word in
 *     config_source_name and the `source =` parser (config_source.c) and
 *     the keys it takes (config_keys.c, config_check.c). The config stays below the
 *     sources, so the text of `source = KIND:...` is mapped there.
 *  2. daemon/source/source_parquet.c: a `const struct source_ops
 *     source_parquet` with at least open, identify and where (and the
 *     other operations it needs: a sample list in the arena, its own
 *     failure text, locate for a data file's byte range); its reader
 *     beside it when it has one. Helpers every kind may use are in
 *     source_impl.h.
 *  3. The table in source.c (source_kinds[]), its extern in
 *     source_impl.h, and the file in daemon/CMakeLists.txt.
 * Nothing in the scheduler, the GPU threads or start-up changes. A
 * source whose samples a worker cannot read as raw records, token
 * windows or JPEGs (arena_pipeline.kind) also needs a reader in worker/.
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
struct source_ops;
struct source_id;
struct status_text;

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
	const struct source_ops *ops; /* its kind's implementation (source_open sets it) */
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
	/* megatron with document_shuffle: the tokens of each split's blocks
	 * of documents, split after split ([n_blocks], 8 bytes a block, never
	 * a document), summed from the index at open (off the loop) or read
	 * from the index cache (megatron_cache.h); copied into the arena by
	 * source_fill_arena or source_place_index (desc.docs.sums_offset),
	 * which frees this copy. The documents themselves stay in the .idx, which
	 * the workers map (shm/layout.h, struct arena_doc_params). */
	uint64_t *block_tokens;
	uint64_t n_blocks;
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
	bool added;                 /* added by a reload while loaderd runs (daemon/pipetable.h):
				     * the GPU threads, which sized their decoding and
				     * page-locked direct files at start, leave it to the
				     * workers and to staging */
};

/* A blend's member (source_blend.c). */
struct source_member {
	struct pipeline_cfg cfg; /* the pipeline's, with the member's kind and path */
	struct source src;
	double weight;           /* normalised */
	uint64_t key;            /* blend_member_key(seed, its index) */
	uint32_t arena_index;    /* its table entry in the arena */
};

/* Where a sample lives (source_locate): the source that holds it (a
 * blend's member, or the source itself), its index and epoch there, and,
 * for a sample that is one byte range of the data file (raw, tokens, a
 * megatron source without document_shuffle), that range. */
struct source_place {
	uint32_t member;   /* a blend: the member (its index in members); else 0 */
	uint64_t sample;   /* the sample in that source's split */
	uint64_t epoch;    /* the epoch of that source's order */
	uint64_t offset;   /* its bytes in the data file, when bytes > 0 */
	uint64_t bytes;    /* 0: not one range of a file (images, llm.c, document order) */
};

/* A batch whose item failed, as the scheduler knows it (source_batch_error). */
struct source_failure {
	uint32_t entry;    /* the pipeline's table entry in the arena */
	uint32_t split;    /* the split the client streams */
	uint64_t epoch;
	uint64_t index;    /* the failed row's sample, in the split's order */
	int error;         /* the worker's -errno */
	uint64_t detail;   /* the worker's detail (worker/worker.h) */
};

/*
 * One kind of source. Every operation takes the source that open filled.
 * Operations marked optional may be NULL: the dispatch then does what the
 * comment says.
 */
struct source_ops {
	/* Checks the pipeline's data and fills out (already zeroed, cfg and
	 * ops set): splits[] (each split's sample count; a source without
	 * splits has only train, present), n_samples (train's), has_splits,
	 * the tensors (source_add_tensor), desc (what workers read: kind,
	 * the read and stride of a sample, the kind's parameters), file_bytes,
	 * data_path and its sample list (index, block_tokens) if it has one.
	 * 0, or -errno with err = `pipeline "NAME": PATH: reason`, naming the
	 * file at fault (source_fail). source.c then checks the count against
	 * the batch, picks the chunk and fills the common fields of desc; a
	 * source with members (a blend) does all of that itself. */
	int (*open)(const struct pipeline_cfg *cfg, struct source *out, char *err, size_t err_cap);
	/* Mixes into x what decides which sample each index is (source_id.c):
	 * source_id_file first, then what the kind read at start. */
	void (*identify)(const struct source *s, struct source_id *x);
	/* Optional (NULL: 0, none): bytes its sample list takes in the
	 * arena's index area. */
	uint64_t (*index_bytes)(const struct source *s);
	/* Optional (NULL: only its table entry): copies its table entry, and
	 * its sample list to index_at[entry] in the index area (unless
	 * place_index did), into the arena; logs the list's start-up lines;
	 * frees the list. */
	void (*fill_arena)(struct source *s, uint32_t entry, const uint64_t *index_at,
			   struct arena *arena);
	/* Optional (NULL: fill_arena copies the list): copies its sample list
	 * to index_at[entry] and frees it, ahead of fill_arena, on any thread,
	 * while nothing reads that part of the index area (a reload's, on the
	 * thread pool: what is proportional to the data stays off the loop). */
	void (*place_index)(struct source *s, uint32_t entry, const uint64_t *index_at,
			    struct arena *arena);
	/* Optional (NULL: the sample is itself, and no one byte range):
	 * where sample `index` of `split` in `epoch` lives. */
	void (*locate)(const struct source *s, uint32_t split, uint64_t epoch, uint64_t index,
		       struct source_place *out);
	/* Names sample `index` of `split` (SPLIT_COUNT: not known) for a
	 * message, from the arena's copy of its list where it has one (the
	 * source's table entry is `entry`). Returns buf. */
	const char *(*where)(const struct source *s, const struct arena *arena, uint32_t entry,
			     uint32_t split, uint64_t index, char *buf, size_t cap);
	/* Optional (NULL: source_file_error): the ERROR text of a batch whose
	 * item failed; returns the ERROR's positive errno. */
	int (*batch_error)(const struct source *s, const struct arena *arena,
			   const struct source_failure *f, char *text, size_t cap);
	/* Optional (NULL: source_describe_line): its lines of `loaderd status`. */
	void (*describe)(const struct source *s, struct status_text *t);
	/* Optional: frees what open allocated beyond index and block_tokens
	 * (which source_close frees); takes a half-opened source. */
	void (*close)(struct source *s);
};

/*
 * Opens the pipeline's source with its kind's ops: checks its data and
 * computes its layout. Never blocks on a FIFO or opens a device
 * (common/regfile.h). Returns 0, or -errno with err = `pipeline "NAME":
 * PATH: reason` (missing file, not a regular file: "not a regular file (a
 * FIFO)", size not fitting the layout, fewer samples than one batch).
 */
int source_open(const struct pipeline_cfg *cfg, struct source *out, char *err, size_t err_cap);
/* source_open of a blend's member: it may have fewer samples than a batch. */
int source_open_member(const struct pipeline_cfg *cfg, struct source *out, char *err,
		       size_t err_cap);
/* Frees what source_open allocated; takes a half-opened or closed source. */
void source_close(struct source *s);

/* The file a raw, tokens or megatron pipeline's samples are read from:
 * its path, or PREFIX.bin for megatron:PREFIX. Returns buf. */
const char *source_data_path(const struct pipeline_cfg *cfg, char *buf, size_t cap);

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

/* The split a client asks for by name (HELLO's `split`, "" for train):
 * 0 with *id, or -EINVAL with err naming the split and the pipeline (an
 * unknown name, a split the pipeline does not have, an empty one). */
int source_split_find(const struct source *src, const char *name, uint32_t *id, char *err,
		      size_t cap);

/* Where sample `index` of `split` in `epoch` lives (struct source_place). */
void source_locate(const struct source *src, uint32_t split, uint64_t epoch, uint64_t index,
		   struct source_place *out);

/* Names sample `index` of pipeline `pipeline` (its table entry) for
 * messages: an image pipeline's file (ROOT/CLASS/NAME.jpg) or tar shard,
 * member and data offset, read from the arena's copy of the list; an
 * llm.c pipeline's shard and window; a blend's member and its sample;
 * another pipeline's data file and byte range within `split`
 * (SPLIT_COUNT: not known, the range is then not given for a pipeline
 * with splits). Returns buf. */
const char *source_sample_where(const struct source *src, const struct arena *arena,
				uint32_t pipeline, uint32_t split, uint64_t index, char *buf,
				size_t cap);

/* The ERROR text of a batch whose item failed (the pipeline, the file or
 * sample, why, and for images the on_error policy); returns the ERROR's
 * positive errno. */
int source_batch_error(const struct source *src, const struct arena *arena,
		       const struct source_failure *f, char *text, size_t cap);

/* The pipeline's lines of `loaderd status`. */
void source_describe(const struct source *src, struct status_text *t);

/* Why an image is bad, from the worker's -errno for it (source_image.c). */
const char *source_image_why(int status);

/* How imagefolder trees are listed from now on, by every source_open
 * (source_image.c): the directory their listings are cached in ("" or
 * NULL: none; [daemon] cache_dir) and the scan threads ([daemon]
 * scan_threads). Set before any source opens, on the thread that opens
 * them; a pipeline added later lists its tree the same way. */
void source_set_listing(const char *cache_dir, uint32_t scan_threads);

/* Where megatron indexes' checks and block sums are cached from now on,
 * by every source_open (source_megatron.c, megatron_cache.h): [daemon]
 * cache_dir ("" or NULL: none). Set before any source opens, on the
 * thread that opens them; a pipeline added later uses the same. */
void source_set_index_cache(const char *cache_dir);

/* ---- the sample lists in the arena (source_arena.c) ----
 * An image pipeline's sample list (its arena_image entries, its tar shards,
 * their paths), a document-shuffled megatron pipeline's document table and
 * an llm.c pipeline's shards and paths are copied into the arena's index
 * area at start, where workers read them; the master names samples from
 * that copy. */

/* Bytes the sample list takes in the index area (0 for a source without
 * one; a blend's members count on their own). */
uint64_t source_index_bytes(const struct source *src);

/* Copies every pipeline's table entry (and its sample list, at
 * index_at[i] in the arena's index area) into the arena, logs each list's
 * start-up lines, and frees the lists (the arena holds them from here
 * on). */
void source_fill_arena(struct source *sources, size_t n, const uint64_t *index_at,
		       struct arena *arena);
/* The same for one source at table entry `entry` (its blend members at
 * theirs), while loaderd runs: a pipeline a reload added
 * (daemon/pipetable.h), before any work item names it. */
void source_fill_arena_entry(struct source *src, uint32_t entry, const uint64_t *index_at,
			     struct arena *arena);

/* A pipeline a reload adds: its sample lists (its blend members' too)
 * copied into the index area at index_at[entry] (place_index) before
 * source_fill_arena_entry, on a thread of the pool, so that the fill on
 * the loop writes only the table entries. */
void source_place_index(struct source *src, uint32_t entry, const uint64_t *index_at,
			struct arena *arena);

/* ---- a blend's members (source_blend.c) ---- */

/* Table entries the sources' members take after the n configured
 * pipelines: each member's arena_index set, counted from n. Returns the
 * total of entries. */
uint32_t source_blend_number(struct source *sources, size_t n);

/* The member whose arena table entry is arena_index, and its blend
 * (*owner, *owner_index); NULL when none is. */
const struct source_member *source_member_at(const struct source *sources, size_t n,
					     uint32_t arena_index, const struct source **owner,
					     uint32_t *owner_index);

#endif
