/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_listcache: libFuzzer harness for the decoder of an imagefolder's
 * listing cache (daemon/source/imagefolder_cachefmt.c), which reads a
 * file from disk at every start with cache_dir set. Any input may be
 * refused, but a refusal must say why and carry -EINVAL or -ENOMEM, and
 * an accepted listing must be one a scan could make: the root first, each
 * directory's path and every sample's name strings inside the paths, the
 * directories' sample ranges back to back (arena_folder_dir_of's promise),
 * relative, without "." or ".." components, labels in order and below
 * n_classes, every class with a sample. Any breach aborts (ASan/UBSan
 * catch the rest).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/source/imagefolder_impl.h"
#include "fuzz/fuzz_cachefile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rel(const char *p)
{
	if (p[0] == '/' || strstr(p, "//") || strcmp(p, "..") == 0 || strncmp(p, "../", 3) == 0 ||
	    strstr(p, "/../") || strstr(p, "/./") || strncmp(p, "./", 2) == 0)
		abort();
	size_t n = strlen(p);
	if (n >= 3 && strcmp(p + n - 3, "/..") == 0)
		abort();
}

static void check_listing(const struct imagefolder_listing *l)
{
	const struct image_index *ix = &l->ix;
	if (ix->n == 0 || ix->n_classes == 0 || ix->paths[ix->paths_bytes - 1] != '\0' ||
	    l->dirs.n < 2 || l->dirs.v[0].label != IMAGEFOLDER_ROOT_LABEL)
		abort();
	int64_t last = 0;
	uint64_t files = 0;
	for (uint32_t d = 1; d < l->dirs.n; d++) {
		const struct imagefolder_dir *dir = &l->dirs.v[d];
		if (dir->path_offset >= l->dirs.paths_bytes || dir->label >= ix->n_classes)
			abort();
		check_rel(l->dirs.paths + dir->path_offset);
		files += dir->n_files;
	}
	if (files != ix->n)
		abort();
	uint64_t next = 0;
	last = 0;
	for (uint32_t d = 0; d < ix->n_dirs; d++) {
		const struct arena_folder_dir *dir = &ix->dirs[d];
		if (dir->path_offset >= ix->paths_bytes || dir->names_offset >= ix->paths_bytes ||
		    dir->first_sample != next || dir->n_samples == 0 || dir->label < last ||
		    dir->label > last + 1 || dir->label >= ix->n_classes)
			abort();
		check_rel(ix->paths + dir->path_offset);
		for (uint32_t k = 0; k < dir->n_samples; k++) {
			const struct arena_folder_file *f = &ix->files[next + k];
			if (f->name_offset >= ix->paths_bytes - dir->names_offset)
				abort();
			const char *name = ix->paths + dir->names_offset + f->name_offset;
			if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
			    name[0] == '\0')
				abort();
			char path[8192];
			uint64_t bytes;
			int64_t label;
			image_index_folder_sample(ix, next + k, path, sizeof(path), &bytes, &label);
			if (label != dir->label)
				abort();
		}
		next += dir->n_samples;
		last = dir->label;
	}
	if (next != ix->n || ix->entries != NULL)
		abort();
	if (last + 1 != (int64_t)ix->n_classes)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = fuzz_cachefile_copy(data, size, IMAGEFOLDER_CACHE_MAGIC);
	if (!buf)
		return 0;
	struct imagefolder_listing *l = malloc(sizeof(*l));
	char why[512] = "";
	int rc = l ? imagefolder_cache_decode(buf, size, l, NULL, NULL, why, sizeof(why)) : 0;
	if (l && rc < 0 && (why[0] == '\0' || (rc != -EINVAL && rc != -ENOMEM)))
		abort();
	if (l && rc == 0)
		check_listing(l);
	if (l)
		imagefolder_listing_free(l);
	free(l);
	free(buf);
	return 0;
}
