/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout: every structure that lives in the shared-memory arena and is read
 * by more than one process (the master and its workers). The master writes
 * the header once, before any worker starts. The pipeline table always has
 * ARENA_PIPELINES_MAX entries: the master fills those of the configured
 * pipelines before any worker starts, and an entry of a pipeline a reload
 * adds while loaderd runs (daemon/pipetable.h) before any work item names
 * it (a ring's release/acquire orders the entry before the item). An entry
 * is rewritten only once no item names it any more; its generation changes
 * each time, and a worker drops whatever it kept of an entry (open files,
 * the checked description) when it sees a new generation. The rings are
 * single-producer single-consumer.
 *
 * Arena layout (offsets in the header, each 4096-aligned):
 *
 *   [arena_header][arena_pipeline x n_pipelines (ARENA_PIPELINES_MAX)]
 *   [worker 0: cmd ring][done ring][beat][stats] ... [worker W-1 ...]
 *   [indexes: each tar pipeline's arena_image entries, arena_shard table
 *    and paths; each imagefolder pipeline's arena_folder_file entries,
 *    arena_folder_dir table and paths; each document-shuffled megatron
 *    pipeline's block sums (8 bytes a block of documents); each llm.c
 *    pipeline's arena_shard table and paths;
 *    then runtime_index_bytes for the lists of pipelines added later]
 *   [staging slot 0] ... [staging slot S-1]
 *
 * All multi-byte fields are native-endian: the arena never leaves the host.
 * Field sizes and offsets are pinned with _Static_assert so a layout change
 * is a deliberate change of ARENA_VERSION.
 */
#ifndef LDR_SHM_LAYOUT_H
#define LDR_SHM_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hist.h"

#define ARENA_MAGIC 0x414e455241445244ull /* "DRDARENA" */
#define ARENA_VERSION 14
#define ARENA_ALIGN 4096u
#define ARENA_PATH_MAX 4096
#define ARENA_PIPELINES_MAX 64
#define ARENA_TENSORS_MAX 8
#define ARENA_WORKERS_MAX 256
#define WORK_CHUNK_MAX 64 /* samples per work item */
#define RING_ENTRIES 64   /* per ring; a power of two */

enum arena_source_kind {
	ARENA_SOURCE_RAW = 1,    /* fixed-size records */
	ARENA_SOURCE_TOKENS = 2, /* windows of seq_len+1 tokens (of a file, or of llm.c shards) */
	ARENA_SOURCE_IMAGES = 3, /* one JPEG per sample: a file (imagefolder) or a tar member */
};

#define ARENA_TRANSFORM_MAX 512
#define ARENA_ROOTS_MAX 1024 /* arena_pipeline.roots, with NUL */
#define ARENA_IMAGE_FILE_MAX (64ull << 20) /* a bigger image file is a bad sample */

/* One sample of a tar pipeline, in the pipeline's index. */
struct arena_image {
	uint64_t path_offset; /* of the member's NUL-terminated name in the paths */
	uint64_t file_bytes;  /* bytes of the JPEG (the member's) */
	int64_t label;
	uint64_t data_offset; /* the member's data offset in its shard */
	uint32_t shard;       /* index into the shard table */
	uint32_t reserved;
};

/* One sample of an imagefolder pipeline, in the pipeline's index: 8 bytes
 * and its name, its path and label its directory's (arena_folder_dir). */
struct arena_folder_file {
	uint32_t name_offset; /* of its NUL-terminated name, from its directory's names_offset */
	uint32_t file_bytes;  /* the file's size at start; UINT32_MAX: 4 GiB or more (a bad
			       * sample: over ARENA_IMAGE_FILE_MAX) */
};

/* A directory of an imagefolder pipeline holding samples [first_sample,
 * first_sample + n_samples), all of class `label`; the table is in sample
 * order (first_sample rising, the ranges back to back from 0). */
struct arena_folder_dir {
	uint64_t path_offset;  /* of its NUL-terminated path relative to the root, in the paths */
	uint64_t names_offset; /* where its samples' names are, in the paths */
	uint64_t first_sample;
	uint32_t n_samples;
	uint32_t label;
};

/* The directory of sample `index` in a table of n (n >= 1) checked as
 * above: the last whose first_sample <= index. */
static inline const struct arena_folder_dir *arena_folder_dir_of(const struct arena_folder_dir *d,
								 uint32_t n, uint64_t index)
{
	uint32_t lo = 0, hi = n; /* d[lo].first_sample <= index < d[hi].first_sample */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (d[mid].first_sample <= index)
			lo = mid;
		else
			hi = mid;
	}
	return &d[lo];
}

/* One tar shard of an image pipeline: its samples are the contiguous range
 * [first_sample, first_sample + n_samples) of the index. */
struct arena_shard {
	uint64_t path_offset; /* of its NUL-terminated absolute path in the paths */
	uint64_t first_sample;
	uint64_t n_samples;
};

/* What a worker needs for an image pipeline (ARENA_SOURCE_IMAGES). */
struct arena_image_params {
	uint64_t index_offset;  /* arena offset of n_samples struct arena_image (tar) or
				 * struct arena_folder_file (imagefolder) */
	uint64_t shards_offset; /* tar: arena offset of n_shards struct arena_shard;
				 * imagefolder: of n_dirs struct arena_folder_dir */
	uint64_t paths_offset;  /* arena offset of the paths */
	uint64_t paths_bytes;
	uint64_t seed;          /* per-sample randomness: (seed, epoch, sample index) */
	uint64_t max_pixels;
	uint32_t out_h, out_w;
	uint32_t layout;        /* 0 NCHW, 1 NHWC */
	uint32_t dtype;         /* enum proto_dtype: UINT8, FLOAT16 or FLOAT32 */
	uint32_t on_error;      /* 0 substitute, 1 fail */
	uint32_t n_shards;      /* tar: shards (>= 1); imagefolder: 0 (files under the root) */
	float mean[3], std[3];  /* float output: (x / 255 - mean) / std */
	uint32_t max_decode_ms; /* CPU time one image's decode may take; then it is bad */
	/* GPU decoding (decode = gpu | auto): a slot of this pipeline has, after
	 * its tensors, one struct arena_gpu_image per row at gpu_desc_offset; row
	 * r's JPEG, when the GPU takes it, goes at gpu_data_offset + r *
	 * gpu_data_stride (a JPEG over gpu_data_stride bytes is decoded by the
	 * worker). By default that is the row's own place in the image tensor,
	 * which the GPU overwrites with the decoded image. A work item with
	 * WORK_CMD_GPU_DECODE leaves the rows the GPU takes undecoded, up to its
	 * gpu_share (0 gpu_desc_offset: the pipeline decodes on the CPU only). */
	uint32_t n_dirs;        /* imagefolder: directories with samples (>= 1); tar: 0 */
	uint32_t gpu_check;     /* enum arena_gpu_check: what a worker checks first */
	uint32_t decode_scale;  /* enum jd_scale (image/jpeg.h): the workers' DCT scale rule */
	uint64_t gpu_desc_offset, gpu_data_offset, gpu_data_stride;
	char transform[ARENA_TRANSFORM_MAX]; /* image/transform.h text, checked at start */
};

/* What a worker checks of a JPEG before it leaves it to the GPU (config
 * gpu_decode_check). */
enum arena_gpu_check {
	ARENA_GPU_CHECK_STRUCTURE = 0, /* its header and its scan's markers */
	ARENA_GPU_CHECK_ENTROPY = 1,   /* and all of its entropy-coded data */
};

/* How a row of a GPU-decoding batch was made. */
enum arena_route {
	ARENA_ROUTE_CPU = 1, /* decoded by the worker: the row holds the image */
	ARENA_ROUTE_GPU = 2, /* left for the GPU: its JPEG is in the row's data area */
};

/* One row of a GPU-decoding batch, written by the worker (for every row,
 * whichever way it went), read by the daemon's GPU thread. */
struct arena_gpu_image {
	uint32_t route;        /* enum arena_route */
	uint32_t flip;         /* the plan's mirror */
	uint64_t sample;       /* the sample in the row (after any substitution) */
	uint64_t epoch;
	uint64_t len;          /* ROUTE_GPU: its JPEG's bytes, at gpu_data_offset +
				* row * gpu_data_stride */
	uint32_t width, height; /* ROUTE_GPU: the image's, from its header */
	double x, y, w, h;     /* ROUTE_GPU: the transform plan's box, source pixels */
	uint8_t luma_h, luma_v; /* ROUTE_GPU: the first component's sampling factors from
				 * its header (1 or 2; 1, 1 for gray), the others being 1x1:
				 * the workers' DCT scale and chroma that the GPU path copies */
	uint8_t pad[6];        /* 0 */
};

/* A token pipeline's document-aware outputs, computed by the worker from
 * each sample's tokens (tensor 0) into the tensors at these indexes (0:
 * not delivered). Of a sample of L + 1 tokens, the first L are the
 * model's inputs; a document ends at an input equal to eod_token:
 *   positions      int64 [L]: 0, 1, ... restarting after each such input
 *   loss_mask      float32 [L]: 1, or 0 at such an input when eod_mask_loss
 *   cu_seqlens     int32 [max_documents + 1]: 0, the end of each document
 *                  in the row, L, then L repeated (a row with more documents
 *                  ends its last one at L)
 *   num_documents  int32 []: the documents cu_seqlens holds */
struct arena_token_params {
	uint64_t eod_token;
	uint32_t eod_mask_loss;
	uint32_t max_documents;
	uint8_t positions, loss_mask, cu_seqlens, num_documents; /* tensor indexes */
	uint32_t reserved;
};

/* One split of a document-shuffled megatron pipeline: its documents as
 * they lie in the .idx (common/docorder.h, struct docorder_span). Where a
 * split's sequences start inside a document (`split` cuts it), its
 * document 0 is that document's part from cut_seq on, and document j the
 * index's document first_doc + j - 1; otherwise document j is the
 * index's document first_doc + j. */
struct arena_doc_split {
	uint64_t key;       /* docorder_key(seed, split) */
	uint64_t n_docs;    /* documents the split's order orders */
	uint64_t first_doc; /* document_indices entry of its first whole document */
	uint64_t cut_seq;   /* DOCORDER_NO_CUT (UINT64_MAX), or the sequence its document 0 starts at */
	uint64_t end_token; /* the end of its last document, a token of the data file */
};

/* A megatron pipeline whose documents are shuffled per epoch
 * (common/docorder.h). The arena holds nothing per document: each worker
 * maps the dataset's .idx (PATH with its ".bin" replaced by ".idx") and
 * reads a document's first token from it in place
 * (sequence_pointers[document_indices[d]] / in_elem_bytes), after
 * checking that the file it opened is the one the master checked at start
 * (size, device, inode, modification time; an item of a swapped index
 * fails, naming it). A work item names where each of its windows starts:
 * work_cmd.doc_pos[k], the position in the epoch's order (docorder_doc)
 * of the first document of the block (docorder_block_start) holding its
 * first token, and doc_skip[k], the tokens of the epoch's stream from that
 * document on before it (the worker walks the block's documents to it);
 * the window then runs on through the documents at the following
 * positions. 0 n_documents: not shuffled (the splits are contiguous
 * ranges, arena_pipeline.split_base). The tokens of each split's blocks
 * (docorder_block_docs documents each), split after split, are uint64 at
 * sums_offset: the master's, which workers do not read (8 bytes a block,
 * never a document). */
struct arena_doc_params {
	uint64_t n_documents;      /* the splits' documents together; 0: not shuffled */
	uint64_t block;            /* documents a block of the order (docorder_shape.block) */
	uint64_t sums_offset;      /* each split's blocks' tokens, split after split (the master's) */
	/* the .idx as the master checked it */
	uint64_t idx_bytes;
	uint64_t idx_dev, idx_ino;
	int64_t idx_mtime_sec, idx_mtime_nsec;
	uint64_t n_sequences;      /* its sequence_count */
	uint64_t n_entries;        /* its document_indices' entries (document_count) */
	uint64_t pointers_offset;  /* of sequence_pointers in it */
	uint64_t doc_indices_offset; /* of document_indices in it */
	uint64_t reserved;         /* 0 */
	struct arena_doc_split split[3];
};

/* A token pipeline read from several files, llm.c token shards
 * (daemon/source/llmc.h): n_shards struct arena_shard at shards_offset, their
 * NUL-terminated paths at paths_offset. Sample i is window j = i -
 * first_sample of the shard whose range holds it: bytes header_bytes + j *
 * sample_stride .. + sample_read_bytes of that file. 0 n_shards: the
 * pipeline reads its one file, arena_pipeline.path. */
struct arena_shard_params {
	uint64_t shards_offset;
	uint64_t paths_offset;
	uint64_t paths_bytes;
	uint64_t header_bytes;
	uint32_t n_shards;
	uint32_t reserved;
};

/* What a worker needs to produce sample i of a pipeline. */
struct arena_pipeline {
	uint32_t kind;             /* enum arena_source_kind */
	uint32_t n_tensors;        /* tensors in a batch */
	uint64_t n_samples;
	uint64_t file_bytes;       /* size checked at start; a shorter file is an error */
	uint64_t sample_read_bytes; /* bytes read from the file per sample */
	uint64_t sample_stride;    /* file offset of sample i = i * sample_stride */
	uint32_t in_elem_bytes;    /* tokens: stored token size (2|4); raw: 1 */
	uint32_t out_elem_bytes;   /* tokens: delivered size (2|4|8); raw: 1 */
	uint64_t tensor_offset[ARENA_TENSORS_MAX]; /* within a staging slot */
	uint64_t tensor_row_bytes[ARENA_TENSORS_MAX]; /* bytes per sample per tensor */
	/* tokens: the splits of the dataset (common/split.h): work_cmd.split
	 * names one, and sample i of split s starts at file offset
	 * split_base[s] + i * sample_stride, i < split_samples[s]. A pipeline
	 * without splits has only split 0, from offset 0. */
	uint64_t split_base[3];
	uint64_t split_samples[3];
	struct arena_doc_params docs;
	struct arena_shard_params shards;
	struct arena_image_params image;
	struct arena_token_params tokens;
	uint32_t generation;       /* changes each time the entry is filled (layout.h's top) */
	uint32_t reserved;         /* 0 */
	/* a pipeline a client declared: the directories (real paths, separated
	 * by spaces) every file a worker opens for it must lie in, checked on
	 * the descriptor it opened (common/confine.h); "" for the file's */
	char roots[ARENA_ROOTS_MAX];
	char name[64];
	char path[ARENA_PATH_MAX]; /* data file; imagefolder: the root; tar: the shard pattern */
};

struct arena_header {
	uint64_t magic;
	uint32_t version;
	uint32_t n_pipelines;
	uint64_t total_bytes;
	uint64_t pipelines_offset;
	uint64_t rings_offset;
	uint64_t ring_pair_bytes; /* one worker's cmd + done ring */
	uint64_t indexes_offset;
	uint64_t indexes_bytes;
	uint64_t slots_offset;
	uint64_t slot_bytes;
	uint32_t n_slots;
	uint32_t n_workers_max;
};

/* work_cmd.flags: the batch is for a client whose GPU decodes images: rows
 * the GPU takes are left as compressed bytes (struct arena_gpu_image), as
 * many as work_cmd.gpu_share allows. */
#define WORK_CMD_GPU_DECODE 0x1u

/* work_cmd.flags: stage timing is off ([daemon] stage_timing = off): the
 * worker times no stage of the item (struct worker_stats). */
#define WORK_CMD_NO_TIMING 0x2u

/* work_cmd.gpu_share: 1 is all of them. */
#define WORK_GPU_SHARE_ONE 65536u

enum work_op {
	WORK_READ = 1, /* produce `count` samples into a staging slot */
	WORK_EXIT = 2, /* finish and exit 0 */
};

/* master -> worker */
struct work_cmd {
	uint64_t item_id;     /* opaque to the worker; echoed in work_done */
	uint32_t op;          /* enum work_op */
	uint32_t pipeline;    /* index into the pipeline table */
	uint64_t slot_offset; /* arena offset of the staging slot */
	uint32_t first_row;   /* batch row of sample_index[0] */
	uint32_t count;       /* 1..WORK_CHUNK_MAX */
	uint32_t flags;       /* WORK_CMD_* */
	uint32_t split;       /* tokens: the split sample_index counts in (arena_pipeline) */
	uint64_t epoch;       /* for per-sample randomness */
	/* WORK_CMD_GPU_DECODE: of the rows the GPU could take, the share it
	 * gets, in 1/WORK_GPU_SHARE_ONE (0..WORK_GPU_SHARE_ONE): a row is a
	 * candidate when its sample's hash (seed, "gpudecod", sample) is below
	 * gpu_share * 2^48, so a larger share takes every sample a smaller one
	 * took, and more. The scheduler sets it per item from the client's
	 * data wait (daemon/sched/gpushare.h); it never changes which sample
	 * is in a row, its label, crop or flip, only which decoder makes its
	 * bytes. */
	uint32_t gpu_share;
	uint32_t reserved;    /* 0 */
	uint64_t sample_index[WORK_CHUNK_MAX];
	/* document-shuffled megatron pipelines (struct arena_doc_params):
	 * where each window starts in the epoch's document order */
	uint64_t doc_pos[WORK_CHUNK_MAX];
	uint64_t doc_skip[WORK_CHUNK_MAX];
};

/* Statuses beyond 0 / -errno. */
#define WORK_STATUS_READY 1 /* first completion of a fresh worker: it is up */

#define WORK_FLAG_NO_URING 0x1u /* (READY) io_uring unavailable, using pread */

/* worker -> master */
struct work_done {
	uint64_t item_id;
	int32_t status;      /* 0, WORK_STATUS_READY, or -errno of the first failure */
	uint32_t bad_row;    /* on failure: the batch row that failed */
	uint32_t flags;      /* WORK_FLAG_* */
	uint32_t n_bad;      /* bad images replaced (on_error = substitute), each try counted */
	uint64_t detail;     /* on failure: bytes read before a short read, else 0 */
	uint64_t bad_index;  /* n_bad > 0, or an image failure: the first bad sample */
	int32_t bad_status;  /* its -errno: -EBADMSG corrupt, -ENODATA empty or
			      * truncated, -EFBIG too large, else the read's */
	uint32_t reserved;
};

/* A worker's sign of life, beside its rings. The worker bumps beats each
 * time it makes progress on an item (a read completes, an image is
 * decoded, an item is posted) and records the sample it touched last; the
 * master, which writes nothing here, reads it to tell a worker that is
 * slow from one that is stuck (stopped, or blocked in a read), and to name
 * the sample when it kills one. */
struct worker_beat {
	_Atomic uint64_t beats;
	_Atomic uint64_t sample;   /* the sample index touched last */
	_Atomic uint32_t pipeline; /* its pipeline */
	uint32_t reserved;
	uint8_t pad[40];
};

/* The stages of a pipeline whose latency is measured (per pipeline,
 * histograms of common/hist.h). The first PSTAGE_WORKER_COUNT are timed
 * by the workers, per sample, into their stats block; the others by the
 * daemon (daemon/core/stagestats.h), per batch. */
enum pstage {
	PSTAGE_READ = 0,       /* a sample's bytes from storage: its reads issued -> all in */
	PSTAGE_DECODE = 1,     /* an image's JPEG decode on the worker's CPU (header, region, DCT scale) */
	PSTAGE_TRANSFORM = 2,  /* an image's resize, crop, flip, layout and dtype on the worker */
	PSTAGE_GPU_DECODE = 3, /* a batch's decode on the GPU (host time of the GPU thread's call,
				* or of a decoding client's thread, as its DECODED says) */
	PSTAGE_STAGING = 4,    /* a batch complete in its staging slot -> handed on (READY, or the GPU thread) */
	PSTAGE_COPY = 5,       /* pin = copy: a batch's copy into pinned memory */
	PSTAGE_H2D = 6,        /* a batch's device copy: issued -> seen complete (host-observed) */
	PSTAGE_COUNT = 7,
	PSTAGE_WORKER_COUNT = 3,
};

/* A worker's time and stage figures, beside its beat. Written only by
 * the worker that runs at this index (a new process at the index goes on
 * from where the last one left: one writer at a time), read by the
 * master. busy_ns: time out of a blocking wait; idle_io_ns: time blocked
 * with items in hand (waiting for reads); the rest of the wall time it
 * was blocked with nothing to do. stage[p] counts for table entry p
 * while gen[p] equals that entry's generation: a worker that meets a new
 * generation stores 0 in gen[p], clears stage[p], then stores the new
 * generation (release); the master counts stage[p] only when gen[p]
 * matches the entry before and after it reads it. work_cmd.flags
 * WORK_CMD_NO_TIMING: the worker leaves the stage figures alone. */
struct worker_stats {
	_Atomic uint64_t busy_ns;
	_Atomic uint64_t idle_io_ns;
	_Atomic uint32_t gen[ARENA_PIPELINES_MAX];
	uint8_t pad[48];
	struct hist_atomic stage[ARENA_PIPELINES_MAX][PSTAGE_WORKER_COUNT];
};

/* A single-producer single-consumer ring header (shm/ring.h). head is
 * written only by the consumer, tail only by the producer; each sits on its
 * own cache line. */
struct ring_header {
	_Atomic uint32_t tail; /* next entry the producer writes */
	uint8_t pad0[60];
	_Atomic uint32_t head; /* next entry the consumer reads */
	uint8_t pad1[60];
};

_Static_assert(sizeof(struct arena_image) == 40, "arena_image layout");
_Static_assert(sizeof(struct arena_shard) == 24, "arena_shard layout");
_Static_assert(sizeof(struct arena_folder_file) == 8, "arena_folder_file layout");
_Static_assert(sizeof(struct arena_folder_dir) == 32, "arena_folder_dir layout");
_Static_assert(sizeof(struct arena_image_params) == 72 + 24 + 16 + 24 + ARENA_TRANSFORM_MAX,
	       "arena_image_params layout");
_Static_assert(sizeof(struct arena_token_params) == 24, "arena_token_params layout");
_Static_assert(sizeof(struct arena_doc_split) == 5 * 8, "arena_doc_split layout");
_Static_assert(sizeof(struct arena_doc_params) == 13 * 8 + 3 * sizeof(struct arena_doc_split),
	       "arena_doc_params layout");
_Static_assert(sizeof(struct arena_shard_params) == 40, "arena_shard_params layout");
_Static_assert(sizeof(struct arena_pipeline) == 48 + 16 * 8 + 6 * 8 + sizeof(struct arena_doc_params) +
	       sizeof(struct arena_shard_params) +
	       sizeof(struct arena_image_params) +
	       sizeof(struct arena_token_params) + 8 + ARENA_ROOTS_MAX + 64 + ARENA_PATH_MAX,
	       "arena_pipeline layout");
_Static_assert(sizeof(struct arena_header) == 88, "arena_header layout");
_Static_assert(sizeof(struct work_cmd) == 56 + 3 * 8 * WORK_CHUNK_MAX, "work_cmd layout");
_Static_assert(offsetof(struct work_cmd, sample_index) == 56, "work_cmd layout");
_Static_assert(sizeof(struct arena_gpu_image) == 80, "arena_gpu_image layout");
_Static_assert(sizeof(struct work_done) == 48, "work_done layout");
_Static_assert(sizeof(struct hist_atomic) == (HIST_BUCKETS + 1) * 8, "hist_atomic layout");
_Static_assert(offsetof(struct worker_stats, stage) % 64 == 0, "worker_stats: stages on cache lines");
_Static_assert(sizeof(struct worker_stats) == 64 * 5 +
	       ARENA_PIPELINES_MAX * PSTAGE_WORKER_COUNT * sizeof(struct hist_atomic),
	       "worker_stats layout");
_Static_assert(sizeof(struct ring_header) == 128, "ring_header layout");
_Static_assert(sizeof(struct worker_beat) == 64, "worker_beat layout");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "rings need lock-free 32-bit atomics across processes");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "beats need lock-free 64-bit atomics across processes");

#endif
