/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imagefolder_cache: an imagefolder's listing cached on disk (`[daemon]
 * cache_dir`), so that a restart reads the list back instead of stat'ing
 * millions of files. A file per root, named for a hash of its real path;
 * the format is imagefolder_impl.h's, decoded by imagefolder_cachefmt.c.
 *
 * A cache is trusted only when it is whole (its size and CRC-32C), of
 * this version, made for the same real root and job_roots, and every
 * directory of the tree is as it was when it was listed: same device,
 * inode, mtime and ctime, each stat'ed afresh. Any file added, removed or
 * renamed anywhere in the tree changes its directory's mtime, so tens of
 * thousands of directory stats stand in for millions of file stats. A
 * file rewritten in place with another size is not seen (its directory
 * does not change): the workers then read a size other than the listed
 * one, and name the file (worker/image_rows.c).
 *
 * Written after a scan to a temporary file beside it, renamed over: a
 * reader sees the old file or the new one, never half of one (and a
 * crash that leaves a torn file leaves one its checks refuse). The file's
 * name, header, stamps, reading and writing are cachefile.h's, which the
 * megatron index cache shares.
 */
#include "daemon/source/imagefolder_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "daemon/source/cachefile.h"

void imagefolder_cache_path(const char *dir, const char *real_root, char *path, size_t cap)
{
	cachefile_path(dir, "imagefolder", real_root, "list", path, cap);
}

/* Every directory of the listing as it is now against its stamp. */
static int check_dirs(const struct imagefolder_listing *l, int root_fd, char *why, size_t cap)
{
	for (uint32_t i = 0; i < l->dirs.n; i++) {
		const struct imagefolder_dir *d = &l->dirs.v[i];
		const char *path = l->dirs.paths + d->path_offset;
		const char *sep = path[0] ? "/" : "";
		struct stat st;
		if (fstatat(root_fd, path[0] ? path : ".", &st, 0) < 0) {
			snprintf(why, cap, "directory %.2000s%s%.1000s: %s", l->root, sep, path, strerror(errno));
			return -ESTALE;
		}
		struct cachefile_stamp now;
		cachefile_stamp_of(&st, &now);
		if (!S_ISDIR(st.st_mode) || now.dev != d->stamp.dev || now.ino != d->stamp.ino) {
			snprintf(why, cap, "%.2000s%s%.1000s is another directory than the one listed", l->root,
				 sep, path);
			return -ESTALE;
		}
		if (now.mtime_ns != d->stamp.mtime_ns || now.ctime_ns != d->stamp.ctime_ns) {
			snprintf(why, cap, "directory %.2000s%s%.1000s changed since it was listed (a file "
				 "added, removed or renamed)", l->root, sep, path);
			return -ESTALE;
		}
	}
	return 0;
}

int imagefolder_cache_load(const char *cache_dir, const char *real_root, const char *roots,
			   int root_fd, struct image_index *out, char *why, size_t why_cap)
{
	char path[PATH_MAX];
	imagefolder_cache_path(cache_dir, real_root, path, sizeof(path));
	void *map;
	size_t len;
	int rc = cachefile_map(path, &map, &len, why, why_cap);
	if (rc < 0)
		return rc;
	struct imagefolder_listing *l = malloc(sizeof(*l));
	char reason[PATH_MAX + 256];
	if (!l) {
		munmap(map, len);
		snprintf(why, why_cap, "%s: out of memory", path);
		return -ENOMEM;
	}
	rc = imagefolder_cache_decode(map, len, l, cachefile_drop_pages, map, reason, sizeof(reason));
	munmap(map, len);
	if (rc == 0 && strcmp(l->root, real_root) != 0) {
		snprintf(reason, sizeof(reason), "made for another root, %.2000s", l->root);
		rc = -EINVAL;
	}
	if (rc == 0 && strcmp(l->roots, roots) != 0) {
		snprintf(reason, sizeof(reason), "made with other job_roots (%.1000s)", l->roots);
		rc = -EINVAL;
	}
	if (rc == 0)
		rc = check_dirs(l, root_fd, reason, sizeof(reason));
	if (rc < 0) {
		snprintf(why, why_cap, "%s: %s", path, reason);
		imagefolder_listing_free(l);
		free(l);
		return rc == -ENOENT ? -EINVAL : rc;
	}
	*out = l->ix;
	snprintf(why, why_cap, "%s; %" PRIu32 " directories unchanged", path, l->dirs.n);
	imagefolder_dirs_free(&l->dirs);
	free(l);
	return 0;
}

static int write_payload(struct cachefile_writer *w, const char *real_root, const char *roots,
			 const struct image_index *ix, const struct imagefolder_dirs *dirs)
{
	cachefile_put_str(w, real_root);
	cachefile_put_str(w, roots);
	cachefile_put(w, &ix->n_classes, 4);
	cachefile_put(w, &ix->other_images, 8);
	cachefile_put(w, &dirs->n, 4);
	uint32_t next = 0; /* ix->dirs holds those of dirs with files, in the same order */
	for (uint32_t i = 0; i < dirs->n && w->err == 0; i++) {
		const struct imagefolder_dir *d = &dirs->v[i];
		const char *path = dirs->paths + d->path_offset;
		cachefile_put(w, &d->stamp.dev, 8);
		cachefile_put(w, &d->stamp.ino, 8);
		cachefile_put(w, &d->stamp.mtime_ns, 8);
		cachefile_put(w, &d->stamp.ctime_ns, 8);
		cachefile_put(w, &d->label, 4);
		cachefile_put(w, &d->n_files, 4);
		cachefile_put_str(w, path);
		if (d->n_files == 0)
			continue;
		if (next >= ix->n_dirs || ix->dirs[next].n_samples != d->n_files)
			return -EINVAL;
		const struct arena_folder_dir *fd = &ix->dirs[next++];
		for (uint32_t k = 0; k < fd->n_samples; k++) {
			const struct arena_folder_file *f = &ix->files[fd->first_sample + k];
			const char *name = ix->paths + fd->names_offset + f->name_offset;
			size_t len = strlen(name);
			if (len > UINT16_MAX)
				return -ENAMETOOLONG;
			uint16_t len16 = (uint16_t)len;
			uint64_t bytes = f->file_bytes;
			cachefile_put(w, &bytes, 8);
			cachefile_put(w, &len16, 2);
			cachefile_put(w, name, len);
		}
	}
	return next == ix->n_dirs ? 0 : -EINVAL;
}

int imagefolder_cache_store(const char *cache_dir, const char *real_root, const char *roots,
			    const struct image_index *ix, const struct imagefolder_dirs *dirs,
			    char *why, size_t why_cap)
{
	char path[PATH_MAX];
	imagefolder_cache_path(cache_dir, real_root, path, sizeof(path));
	struct cachefile_writer *w = malloc(sizeof(*w));
	if (!w) {
		snprintf(why, why_cap, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	int rc = cachefile_begin(w, cache_dir, path, why, why_cap);
	if (rc == 0) {
		rc = write_payload(w, real_root, roots, ix, dirs);
		rc = cachefile_commit(w, rc, IMAGEFOLDER_CACHE_MAGIC, IMAGEFOLDER_CACHE_VERSION, ix->n,
				      why, why_cap);
	}
	free(w);
	return rc;
}
