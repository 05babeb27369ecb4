/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imagefolder_impl.h: what the files of an imagefolder listing share
 * (imagefolder.h is the interface): one class listed by a scan thread
 * (imagefolder_class.c), the directories a listing was made from, and the
 * listing cache's reader and writer (imagefolder_cache.c, its pure decoder
 * imagefolder_cachefmt.c). Nothing outside daemon/source and the fuzzer of
 * the cache includes it.
 */
#ifndef LDR_DAEMON_IMAGEFOLDER_IMPL_H
#define LDR_DAEMON_IMAGEFOLDER_IMPL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/source/cachefile.h"
#include "daemon/source/imagefolder.h"

#define IMAGEFOLDER_DEPTH_MAX 64 /* directory levels under a class */
#define IMAGEFOLDER_ERR_MAX 2048

/* What a directory was when it was listed (cachefile.h): any entry
 * added, removed or renamed in it changes its mtime (and ctime); a
 * directory replaced by another changes dev or ino. */
/* One directory of a listing, in listing order: the root (label
 * IMAGEFOLDER_ROOT_LABEL, no files), then each class's directories in
 * sorted path order. Its files are the n_files entries of the index after
 * those of the directories before it. */
#define IMAGEFOLDER_ROOT_LABEL UINT32_MAX
struct imagefolder_dir {
	struct cachefile_stamp stamp;
	uint64_t path_offset; /* in the listing's dir_paths: relative to the root, "" for it */
	uint32_t label;
	uint32_t n_files;
};

/* The directories a listing was made from. */
struct imagefolder_dirs {
	struct imagefolder_dir *v;
	uint32_t n, cap;
	char *paths;
	uint64_t paths_bytes, paths_cap;
};

int imagefolder_dirs_add(struct imagefolder_dirs *d, const char *path,
			 const struct cachefile_stamp *stamp, uint32_t label, uint32_t n_files);
void imagefolder_dirs_free(struct imagefolder_dirs *d);

/* ---- one class, listed by a scan thread (imagefolder_class.c) ---- */

/* A directory of a class: its JPEG files, sorted, each with its size. */
/* name (len bytes, then its NUL) appended to the names back to back in
 * *names (*bytes used of *cap, grown by doubling from 4 KiB): 0 or
 * -ENOMEM, *names as it was. */
static inline int imagefolder_names_add(char **names, size_t *bytes, size_t *cap, const char *name,
					size_t len)
{
	if (*bytes + len + 1 > *cap) {
		size_t grown = *cap ? *cap * 2 : 4096;
		while (grown < *bytes + len + 1)
			grown *= 2;
		char *p = realloc(*names, grown);
		if (!p)
			return -ENOMEM;
		*names = p;
		*cap = grown;
	}
	memcpy(*names + *bytes, name, len + 1);
	*bytes += len + 1;
	return 0;
}

struct imagefolder_class_dir {
	char *path;  /* relative to the root */
	struct cachefile_stamp stamp;
	char *names; /* n NUL-terminated names, back to back, in sample order */
	size_t names_bytes, names_cap;
	uint64_t *sizes;
	uint32_t n;
};

/* A class as its thread left it, for the merge to append in class order. */
struct imagefolder_class {
	struct imagefolder_class_dir *dirs; /* in sorted path order */
	uint32_t n_dirs, cap_dirs;
	uint64_t n_files, other_images;
	bool racy;       /* a directory changed just before it was listed: not cacheable */
	char racy_path[256];
	int rc;          /* 0, or -errno with err */
	char *err;       /* malloc'ed, when rc < 0 */
};

/* What every scan thread shares. */
struct imagefolder_scan_ctx {
	int root_fd;
	const char *root;  /* as given */
	const char *roots; /* job_roots: symlinks must stay within; "" for none */
	const atomic_bool *cancel; /* loaderd stopping (progress.h); may be NULL */
	atomic_bool stop;          /* the scan gave up (an error, or the cancel) */
	_Atomic uint64_t listed;   /* files seen, for the progress */
	int64_t now_ns;            /* the clock when the scan began (CLOCK_REALTIME) */
};

/* Lists class `name` (label) into out. 0, or -errno with out->err. */
int imagefolder_class_list(struct imagefolder_scan_ctx *c, const char *name,
			   struct imagefolder_class *out);
void imagefolder_class_free(struct imagefolder_class *cl);

/* ---- the listing cache (imagefolder_cache.c, imagefolder_cachefmt.c) ---- */

#define IMAGEFOLDER_CACHE_MAGIC "LDRLIST\n"
#define IMAGEFOLDER_CACHE_VERSION 1u
#define IMAGEFOLDER_CACHE_HEADER_BYTES CACHEFILE_HEADER_BYTES

/* The cache file: cachefile.h's header (count: the files), then its
 * payload:
 *   root (u32 length, bytes: its real path), roots (the same: job_roots),
 *   u32 n_classes, u64 other_images, u32 n_dirs, then each directory:
 *   u64 dev, u64 ino, i64 mtime_ns, i64 ctime_ns, u32 label, u32 n_files,
 *   its path (u32 length, bytes), then each of its files: u64 bytes,
 *   u16 name length, the name.
 * Native byte order: the cache never leaves the host. */

/* A listing read back: the sample list and the directories to check. */
struct imagefolder_listing {
	struct image_index ix;
	struct imagefolder_dirs dirs;
	char root[4096];
	char roots[1024];
};

/* cachefile.h's: the bytes before upto read, which may be dropped. */
typedef cachefile_release_fn imagefolder_release_fn;

/* Decodes a whole cache file (len bytes): 0, or -EINVAL (-ENOMEM) with
 * why ("truncated", "checksum mismatch", "version 7, not 1", ...). Pure:
 * no I/O, no log; release (NULL: none) as above. out is freed with
 * imagefolder_listing_free, also on failure. */
int imagefolder_cache_decode(const uint8_t *buf, size_t len, struct imagefolder_listing *out,
			     imagefolder_release_fn release, void *ctx, char *why, size_t why_cap);
void imagefolder_listing_free(struct imagefolder_listing *l);

/* The cache file of real root path real_root under dir, into path. */
void imagefolder_cache_path(const char *dir, const char *real_root, char *path, size_t cap);

/* The listing cached for root (real path real_root, opened as root_fd)
 * under cache_dir, when it is there, whole, of this version, made for
 * the same roots, and no directory of the tree has changed since: 0 with
 * out filled; else -errno (-ENOENT: none cached) with why saying what was
 * wrong. */
int imagefolder_cache_load(const char *cache_dir, const char *real_root, const char *roots,
			   int root_fd, struct image_index *out, char *why, size_t why_cap);

/* Writes the listing (ix, made from dirs) for real_root under cache_dir,
 * atomically (a temporary file renamed over). 0, or -errno with why. */
int imagefolder_cache_store(const char *cache_dir, const char *real_root, const char *roots,
			    const struct image_index *ix, const struct imagefolder_dirs *dirs,
			    char *why, size_t why_cap);

#endif
