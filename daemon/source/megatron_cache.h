/* SPDX-License-Identifier: Apache-2.0 */
/*
 * megatron_cache: what the start of a megatron pipeline computes in
 * proportion to its documents, cached on disk (`[daemon] cache_dir`), so
 * that a later start over the same files skips it: the full check of
 * PREFIX.idx (mg_index_check: every array, one pass over the file) and,
 * with document_shuffle, the tokens of each split's blocks of documents
 * (8 bytes a block). One file a .idx, named for a hash of its real path
 * (cachefile.h), shared by every pipeline, job and restart on the host
 * that reads the index; it holds the sums of each shape of blocks used
 * (a split's first document, its documents, where a cut document starts,
 * where the split's tokens end, the block), at most MGCACHE_SHAPES_MAX.
 *
 * A cache is trusted only when it is whole (its size and CRC-32C), of
 * this version, made for the same real path, owned by this user or root,
 * and both files are as they were when they were checked: same device,
 * inode, size, mtime and ctime (ctime cannot be set back, so a file
 * rewritten since is always seen). The start then checks the header (its
 * figures against the cached ones and the .bin's size: O(1)) and reads the
 * cached sums of its shapes. Anything else is logged with its reason, the
 * index checked in full, and the cache rewritten (only a good index is
 * cached; a file changed within 0.1 s of its check is not).
 *
 * The format, after cachefile.h's header (magic MGCACHE_MAGIC, count: the
 * blocks of all shapes), native byte order:
 *   the .idx's real path (u32 length, bytes);
 *   .idx then .bin: u64 dev, u64 ino, u64 size, i64 mtime_ns, i64 ctime_ns;
 *   u32 dtype code, u32 0, u64 sequence_count, u64 documents (the
 *   header's document_count - 1), u64 tokens, i64 when it was checked
 *   (CLOCK_REALTIME, ns);
 *   u32 shapes, u32 0, then each shape: u64 first_doc, u64 n_docs,
 *   u64 cut_seq, u64 end_token, u64 block, then its ceil(n_docs / block)
 *   sums (u64).
 */
#ifndef LDR_DAEMON_MEGATRON_CACHE_H
#define LDR_DAEMON_MEGATRON_CACHE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/source/cachefile.h"
#include "daemon/source/megatron.h"

#define MGCACHE_MAGIC "LDRMGIX\n"
#define MGCACHE_VERSION 1u
#define MGCACHE_SHAPES_MAX 16u

/* A split's blocks of documents (common/docorder.h's span and shape). */
struct mgcache_shape {
	uint64_t first_doc, n_docs, cut_seq, end_token, block;
	uint64_t n_blocks;    /* ceil(n_docs / block) */
	const uint8_t *sums;  /* n_blocks u64, in the decoded buffer (any alignment) */
};

/* A cache file decoded. */
struct mgcache {
	char idx_path[PATH_MAX];
	struct mg_file idx, bin;
	/* the check's figures: dtype_code, n_sequences, n_documents, n_tokens */
	struct mg_index figures;
	int64_t checked_ns;
	uint32_t n_shapes;
	struct mgcache_shape shapes[MGCACHE_SHAPES_MAX];
};

/*
 * Decodes a whole cache file (len bytes) into *out, whose shapes then
 * point into buf. 0, or -EINVAL with why ("truncated", "checksum mismatch
 * (corrupt)", "version 2, this loaderd reads version 1", "counts that do
 * not fit its bytes", ...). Pure: no I/O, no log, no allocation; every
 * count is held against the bytes that could hold it first; release
 * (NULL: none) as cachefile.h says.
 */
int mgcache_decode(const uint8_t *buf, size_t len, struct mgcache *out,
		   cachefile_release_fn release, void *ctx, char *why, size_t why_cap);

/* One source's use of the cache while it opens (source_megatron.c). */
struct mgcache_use {
	const char *pipeline;  /* for the log lines */
	char idx_path[PATH_MAX + 8]; /* PREFIX.idx */
	char bin_path[PATH_MAX + 8]; /* PREFIX.bin */
	char path[PATH_MAX];   /* the cache file, "" for none */
	char real_idx[PATH_MAX];
	void *map;             /* the cache file mapped, while c is valid */
	size_t len;
	struct mgcache c;
	bool valid;            /* c is true of the files: the index need not be checked */
	bool checked;          /* the index was checked in full by this open */
	uint32_t n_new;        /* shapes whose sums this open computed */
	struct {
		struct mgcache_shape shape;
		const uint64_t *sums;
	} added[MGCACHE_SHAPES_MAX];
};

/*
 * Opens the index of megatron:PREFIX into *ix (megatron.h): mapped, then
 * checked in full (mg_index_check), or, when the cache under cache_dir
 * ("" or NULL: none) says it was checked as its files are now, its header
 * only (mg_index_trust). Logs which, and why a cache is not used ("no
 * index cache yet", "the index cache FILE is out of date: PREFIX.idx
 * changed since it was checked (mtime)", "... is not used: checksum
 * mismatch (corrupt)"). 0, or what mg_index_map and mg_index_check return
 * with err. mgcache_use_free frees *u either way.
 */
int mgcache_open_index(struct mgcache_use *u, const char *cache_dir, const char *pipeline,
		       const char *prefix, struct mg_index *ix, char *err, size_t cap);

/* The trusted sums of shape sh, copied into sums[sh->n_blocks]: true when
 * the cache has them, false when they must be computed (then told with
 * mgcache_add). */
bool mgcache_sums(const struct mgcache_use *u, const struct mgcache_shape *sh, uint64_t *sums);

/* Sums computed for shape sh, to be written (sums must live until
 * mgcache_store). */
void mgcache_add(struct mgcache_use *u, const struct mgcache_shape *sh, const uint64_t *sums);

/* Writes the cache when this open checked the index or computed sums:
 * its figures and stamps (*ix, checked), the shapes added, and those the
 * cache already held (up to MGCACHE_SHAPES_MAX). Logs what it did; a file
 * that cannot be written is a warning. */
void mgcache_store(struct mgcache_use *u, const struct mg_index *ix);

void mgcache_use_free(struct mgcache_use *u);

#endif
