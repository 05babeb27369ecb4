/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imagefolder: the sample list of `source = imagefolder:ROOT`, built once
 * at start from directory entries and file sizes, never file contents.
 *
 * The list is the one torchvision.datasets.ImageFolder builds on the same
 * tree, restricted to JPEG files, so labels and sample indexes agree:
 *  - classes are ROOT's subdirectories (symlinks to directories count),
 *    sorted by name; a class's label is its index in that order;
 *  - a class's files are every file under it at any depth (directory
 *    symlinks followed), directories in sorted path order and files in
 *    sorted name order within each, keeping names that end (any case) in
 *    .jpg or .jpeg;
 *  - a class with no such file is an error (ImageFolder refuses it too);
 *  - such a name that is not a regular file (a FIFO, a device, a socket,
 *    or a symlink to one) is an error: no image can be read from it, and
 *    leaving it out would shift the sample numbers. A dangling symlink
 *    stays in the list (as in ImageFolder): reading it fails later, and
 *    the pipeline's on_error applies.
 * Files with another extension ImageFolder accepts (.png, .bmp, ...) are
 * not JPEGs this pipeline can decode: they are counted in other_images and
 * left out, so sample numbers then differ from ImageFolder's (the daemon
 * warns). Names sort as Python sorts them (common/fsname.h): as code
 * points of the names decoded from UTF-8, each byte that is not part of a
 * well-formed sequence standing for U+DC80..U+DCFF; classes by name,
 * directories by their whole path under ROOT, files by name.
 */
#ifndef LDR_DAEMON_IMAGEFOLDER_H
#define LDR_DAEMON_IMAGEFOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

/* The sample list of an image source (imagefolder here, tar in
 * daemon/source/tarshard.h), as it is copied into the arena. */
struct image_index {
	struct arena_image *entries; /* tar: n of them, in sample order; imagefolder: NULL */
	uint64_t n;
	struct arena_shard *shards;  /* tar: n_shards of them; imagefolder: none */
	uint32_t n_shards;
	/* imagefolder: the list as the arena holds it (shm/layout.h), n files
	 * and the n_dirs directories that hold them */
	struct arena_folder_file *files;
	struct arena_folder_dir *dirs;
	uint32_t n_dirs;
	char *paths;                 /* NUL-terminated names the entries, shards, files and
				      * directories point to */
	uint64_t paths_bytes;
	uint32_t n_classes;          /* imagefolder: class directories; tar: distinct labels */
	uint64_t other_images;       /* images that are not JPEGs, left out */
};

/* How a tree is listed. */
struct imagefolder_opts {
	const char *pipeline;  /* the pipeline's name, for the cache's log lines */
	const char *roots;     /* a declared pipeline's job_roots, else "" (or NULL) */
	const char *cache_dir; /* where listings are cached; NULL or "": not cached */
	uint32_t threads;      /* scan threads; 0: the default (8), never more than classes */
};

/* Lists root: the listing cached under o->cache_dir when it is still true
 * of the tree (imagefolder_cache.c: every directory's dev, inode, mtime
 * and ctime as they were), else the tree scanned by o->threads threads,
 * in the order and with the errors above either way (the cache is then
 * rewritten; why a cache is not used or not written is logged, as a line
 * naming the pipeline). Reads directory entries and stats files, never
 * opens one. 0, or -errno with err naming the directory (or file) and the
 * reason (missing root, a root that is not a directory, no class
 * directory, an empty class, a directory loop, an image name that is not
 * a regular file, too many files, loaderd stopping: -ECANCELED). o->roots,
 * when not "" (a pipeline a client declared: job_roots), are the
 * directories every symlink met must lead into (common/confine.h): one
 * that leads out is -EACCES, naming the symlink and where it leads. */
int imagefolder_scan(const char *root, const struct imagefolder_opts *o,
		     struct image_index *out, char *err, size_t err_cap);
void image_index_free(struct image_index *ix);

/* An imagefolder list's sample i (< n): its path relative to the root
 * into path (cap bytes), its size and its label. */
void image_index_folder_sample(const struct image_index *ix, uint64_t i, char *path, size_t cap,
			       uint64_t *file_bytes, int64_t *label);

/* Appends an imagefolder directory (relative path `path`, class label)
 * whose n files follow: their names (NUL-terminated, back to back,
 * names_bytes in all) and sizes. *cap_files, *cap_dirs and *cap_paths
 * are the capacities, grown as needed. 0, -ENOMEM, or -E2BIG when one
 * directory's names pass 4 GiB. */
int image_index_folder_dir(struct image_index *ix, uint64_t *cap_files, uint32_t *cap_dirs,
			   uint64_t *cap_paths, const char *path, uint32_t label, const char *names,
			   uint64_t names_bytes, const uint64_t *sizes, uint32_t n);

/* Appends a name to ix->paths (capacity *cap, grown as needed); its offset
 * goes to *offset. 0 or -ENOMEM. */
int image_index_add_path(struct image_index *ix, uint64_t *cap, const char *name,
			 uint64_t *offset);

/* Appends entry, its path_offset set to that of name, added to the paths;
 * *cap_entries and *cap_paths are the capacities, grown as needed. 0 or
 * -ENOMEM. */
int image_index_append(struct image_index *ix, uint64_t *cap_entries, uint64_t *cap_paths,
		       const char *name, struct arena_image entry);

#endif
