/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reader_impl: what the worker's event loop (reader.c) and its image rows
 * (image_rows.c) share: the checked pipeline, a work item and its reads.
 * Not an interface: nothing outside worker/reader*.c and image_rows.c
 * includes it.
 */
#ifndef LDR_WORKER_READER_IMPL_H
#define LDR_WORKER_READER_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/docorder.h"
#include "common/hist.h"
#include "shm/arena.h"
#include "shm/layout.h"
#include "image/image_sample.h"

/* A pipeline table entry, checked once and copied: the worker acts only on
 * fields it has validated, and the table is read-only after start. */
/* A token pipeline's document-aware outputs (reader.c) */
enum { READER_DOC_POSITIONS, READER_DOC_LOSS_MASK, READER_DOC_CU_SEQLENS, READER_DOC_COUNT_ROW,
       READER_DOC_COUNT };

struct reader_pipeline {
	int state; /* 0: not checked yet, 1: usable, -EINVAL: not usable */
	uint32_t generation; /* of the table entry checked (arena_pipeline.generation) */
	const char *roots;   /* a declared pipeline's: every file opened must lie in them
			      * (arena_pipeline.roots); NULL for the file's */
	int fd;    /* data file (imagefolder: the root directory; tar: unused), -1 until first used */
	uint32_t kind; /* enum arena_source_kind */
	/* images: the sample list in the arena, the label tensor, the decoder */
	const struct arena_image *index;  /* tar: n_samples of them */
	const struct arena_folder_file *files; /* imagefolder: n_samples of them */
	const struct arena_folder_dir *dirs;   /* imagefolder: n_dirs of them, checked */
	uint32_t n_dirs;
	const struct arena_shard *shards; /* tar, llm.c: n_shards of them */
	uint32_t n_shards;
	int *shard_fds;                   /* tar: each shard's descriptor, -1 until used */
	const char *paths;
	uint64_t paths_bytes;
	uint64_t label_offset;
	struct image_sampler *img;
	/* GPU decoding (struct arena_image_params): 0 gpu_desc_offset for none */
	uint64_t gpu_desc_offset, gpu_data_offset, gpu_data_stride;
	uint32_t in_elem_bytes;
	uint32_t out_elem_bytes;
	uint64_t n_samples;
	uint64_t file_bytes;
	uint64_t read_bytes;
	uint64_t stride;
	uint64_t split_base[3];    /* struct arena_pipeline's: each split's first byte */
	uint64_t split_samples[3]; /* and its samples */
	/* document-shuffled megatron (arena_doc_params, checked): the .idx
	 * mapped read-only (the page cache's pages, shared by every process),
	 * NULL until first used; docs_on false for none */
	struct arena_doc_params docs;
	bool docs_on;
	struct docorder_index idx;
	void *idx_map;
	size_t idx_map_bytes;
	uint64_t header_bytes;     /* llm.c shards: where each shard's tokens start */
	uint64_t tensor_offset;
	uint64_t row_bytes;
	uint64_t out_row_bytes; /* bytes a row takes once widened */
	/* tokens: document-aware outputs (struct arena_token_params), by
	 * READER_DOC_*: their tensor's offset and row bytes, 0 bytes for none */
	struct arena_token_params doc;
	uint64_t doc_offset[READER_DOC_COUNT], doc_row_bytes[READER_DOC_COUNT];
	bool doc_any;
};

struct reader_item;

/* One sample: len bytes from fd at offset into buf (images: the whole
 * file, decoded into dst once read) or straight into dst. */
struct reader_read {
	struct reader_item *item;
	uint8_t *dst;
	uint8_t *buf;     /* images: the file's bytes (owned), else NULL */
	int fd;           /* imagefolder: the sample's file (owned); tar: its shard's;
			   * else the pipeline's */
	uint64_t len;
	uint64_t offset;      /* of the current piece's first byte in the file */
	uint64_t done_bytes;
	/* document-shuffled tokens: the row is read in pieces, one per
	 * document; the current one fills done_bytes piece_start..piece_end
	 * from offset on. 0 piece_end: the row is one piece (offset is its
	 * start, piece_start 0). */
	uint64_t piece_start, piece_end;
	uint64_t doc_k;       /* the current piece's document: its position in the epoch's order */
	uint32_t split;
	uint64_t sample;  /* the sample being read (images: a replacement after a bad one) */
	uint64_t asked;   /* images: the sample the command named */
	uint8_t *label;   /* images: the row's int64 label */
	uint32_t attempt; /* images: replacements tried */
	int32_t asked_status; /* images: why the sample asked for was bad (-errno) */
	uint32_t row;
	uint32_t retries;
	/* stage timing: when its sample's first read was issued, and (io_uring)
	 * when the worker first saw the completion of its latest one */
	uint64_t t_read, t_seen;
	/* tokens: the row of each document-aware output, NULL for none */
	uint8_t *doc[READER_DOC_COUNT];
	/* images, GPU decoding: the row's descriptor and its JPEG's place */
	struct arena_gpu_image *gpu_desc;
	uint8_t *gpu_data;
};

struct reader_item {
	uint64_t item_id;
	struct reader_pipeline *pipe;
	struct worker_beat *beat; /* the worker's sign of life (shm/layout.h) */
	/* its pipeline's stage figures in the worker's stats block
	 * (PSTAGE_READ .. PSTAGE_TRANSFORM); NULL: stage timing is off */
	struct hist_atomic *hist;
	uint32_t pipeline;
	uint32_t count;   /* reads planned */
	uint32_t pending; /* reads queued or in flight (io_uring mode) */
	int32_t status;   /* 0 or -errno of the lowest failing row */
	uint32_t bad_row;
	uint64_t detail;
	uint32_t n_bad;      /* images replaced */
	int32_t bad_status;  /* first bad image: its -errno and sample */
	uint64_t bad_index;
	uint64_t epoch;
	bool gpu_decode;  /* WORK_CMD_GPU_DECODE: leave the GPU's rows undecoded */
	uint32_t gpu_share; /* of those, the share it takes (work_cmd.gpu_share) */
	struct reader_read reads[WORK_CHUNK_MAX];
};

/* A sign of progress on rd's item, naming the sample it touched. */
static inline void reader_beat(const struct reader_read *rd)
{
	struct worker_beat *b = rd->item->beat;
	atomic_store_explicit(&b->sample, rd->sample, memory_order_relaxed);
	atomic_store_explicit(&b->pipeline, rd->item->pipeline, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->beats, 1, memory_order_release);
}

/* Keeps the failure of the lowest row (reader.c). */
void reader_item_fail(struct reader_item *it, uint32_t row, int status, uint64_t detail);

/* The file offset rd's next read starts at: in its current piece. */
static inline uint64_t reader_read_offset(const struct reader_read *rd)
{
	return rd->offset + (rd->done_bytes - rd->piece_start);
}

/* Shard i's descriptor (a tar or llm.c pipeline), opened on first use and
 * kept. When the process is out of descriptors, the kept ones are closed
 * and the open tried again. A shard that is no longer a regular file is
 * REGFILE_NOT_REGULAR, never a blocked open. -errno on failure
 * (image_rows.c). */
int reader_shard_fd(struct reader_pipeline *p, uint32_t i);

/* ---- raw and token rows (token_rows.c) ---- */

/* A raw or token pipeline's table entry: its layout within a slot of
 * slot_bytes, its document-aware outputs, its documents' spans of the
 * .idx. 0 or -EINVAL. */
int token_pipeline_check(struct arena *arena, uint64_t slot_bytes, const struct arena_pipeline *p,
			 struct reader_pipeline *out);

/* A document-shuffled pipeline's .idx (data_path with ".idx" for its
 * ".bin"), mapped into p once: a regular file inside p->roots, the very
 * file the master checked (size, device, inode, modification time). 0,
 * REGFILE_NOT_REGULAR, -ESTALE for another file, or the open's -errno;
 * a failure is not remembered (the next item tries again). */
int token_index_map(struct reader_pipeline *p, const char *data_path);

/* Unmaps what token_index_map mapped. */
void token_index_unmap(struct reader_pipeline *p);

/* Row k of cmd: its rows inside the slot and its first piece in the file.
 * 0 or -EINVAL. */
int token_plan(struct arena *arena, uint64_t slot_bytes, struct reader_item *it,
	       const struct work_cmd *cmd, uint32_t k, struct reader_read *rd);

/* rd's piece is done and its row needs more: the next document of the
 * epoch's order with tokens in it becomes its piece (true), or the item
 * fails on the row (false: the order has no document left). */
bool token_next_piece(struct reader_read *rd);

/* The whole row is in: widened in place, its document-aware outputs. */
void token_finish(struct reader_read *rd);

/* ---- image rows (image_rows.c) ---- */

/* An image pipeline: its sample list (and tar shards) inside the arena, its
 * two tensors inside a slot of slot_bytes, a transform the worker can run.
 * 0 or -EINVAL / -ENOMEM. */
int image_pipeline_check(struct arena *arena, uint64_t slot_bytes, const struct arena_pipeline *p,
			 struct reader_pipeline *out);
void image_pipeline_free(struct reader_pipeline *p);

/* Row k of cmd: its image and label rows inside the slot. 0 or -EINVAL. */
int image_plan(struct arena *arena, uint64_t slot_bytes, struct reader_item *it,
	       const struct work_cmd *cmd, uint32_t k, struct reader_read *rd);

/* Starts an image row: its file (or shard) open and buffer ready (true), or
 * given up on (false: the item has failed on it). */
bool image_start(struct reader_read *rd);

/* The whole JPEG is in: decoded into the row. True when a replacement must
 * be read (on_error = substitute). */
bool image_finish(struct reader_read *rd);

/* rd's sample is bad (status, -errno): true when a replacement is armed and
 * must be read, false when the item has failed on this row. */
bool image_retry(struct reader_read *rd, int status);

/* Frees rd's buffer and closes its file (not a shard's). */
void image_release(struct reader_read *rd);

#endif
