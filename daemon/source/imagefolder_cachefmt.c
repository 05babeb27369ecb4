/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imagefolder_cachefmt: the decoder of an imagefolder listing cache file
 * (the format: imagefolder_impl.h). The file is read from disk, so it is
 * untrusted: every length is checked against what is left and against its
 * maximum before anything is allocated, every count against the bytes that
 * could hold it, every string for NUL and '/' where they cannot be, and
 * the list against what a scan makes (classes in order, each with a file,
 * labels below n_classes). Pure: no I/O, no logging; fuzzed by
 * fuzz/fuzz_listcache.c.
 */
#include "daemon/source/imagefolder_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define RELEASE_BYTES (64u << 20)
#define DIR_RECORD_MIN 44u  /* dev, ino, mtime, ctime, label, n_files, path length */
#define FILE_RECORD_MIN 11u /* bytes, name length, one byte of name */

struct reader {
	const uint8_t *p;
	size_t left;
	const uint8_t *base;           /* the file's first byte */
	imagefolder_release_fn release;
	void *ctx;
	size_t released;               /* told up to here */
};

/* The bytes read so far, told in steps of RELEASE_BYTES. */
static void reader_release(struct reader *r)
{
	size_t at = (size_t)(r->p - r->base);
	if (r->release && at - r->released >= RELEASE_BYTES) {
		r->release(r->ctx, at);
		r->released = at;
	}
}

static bool take(struct reader *r, void *dst, size_t n)
{
	return cachefile_take(&r->p, &r->left, dst, n);
}

/* A string of at most cap - 1 bytes, none of them NUL, into dst. */
static bool take_str(struct reader *r, char *dst, size_t cap)
{
	uint32_t len;
	if (!take(r, &len, sizeof(len)) || len >= cap || len > r->left ||
	    memchr(r->p, '\0', len) != NULL)
		return false;
	memcpy(dst, r->p, len);
	dst[len] = '\0';
	r->p += len;
	r->left -= len;
	return true;
}

/* A path under the root as a scan makes it: relative, every component
 * a name (not empty, ".", ".."). */
static bool good_rel_path(const char *p)
{
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!slash)
			return true;
		p = slash + 1;
	}
}

void imagefolder_listing_free(struct imagefolder_listing *l)
{
	image_index_free(&l->ix);
	imagefolder_dirs_free(&l->dirs);
}

/* The capacities of the list being decoded, and one directory's names
 * and sizes as they are read. */
struct decoding {
	uint64_t cap_files, cap_paths;
	uint32_t cap_dirs;
	char *names;
	size_t names_bytes, names_cap;
	uint64_t *sizes;
	uint32_t sizes_cap;
};

/* Directory dir's n_files files, into the index. */
static int decode_files(struct reader *r, struct imagefolder_listing *out, struct decoding *dc,
			const char *dir, uint32_t n_files, uint32_t label, char *why, size_t cap)
{
	size_t dir_len = strlen(dir);
	dc->names_bytes = 0;
	if (n_files > dc->sizes_cap) {
		uint64_t *v = realloc(dc->sizes, (size_t)n_files * sizeof(*v));
		if (!v)
			return -ENOMEM;
		dc->sizes = v;
		dc->sizes_cap = n_files;
	}
	for (uint32_t i = 0; i < n_files; i++) {
		uint16_t len;
		if (!take(r, &dc->sizes[i], 8) || !take(r, &len, sizeof(len)) || len > r->left)
			return cachefile_bad(why, cap, "truncated in the files of directory %s", dir);
		char name[UINT16_MAX + 1];
		memcpy(name, r->p, len);
		name[len] = '\0';
		if (len == 0 || dir_len + 1 + len >= PATH_MAX || memchr(name, '\0', len) ||
		    strchr(name, '/') || !good_rel_path(name))
			return cachefile_bad(why, cap, "a bad file name in directory %s", dir);
		r->p += len;
		r->left -= len;
		int rc = imagefolder_names_add(&dc->names, &dc->names_bytes, &dc->names_cap, name, len);
		if (rc < 0)
			return rc;
	}
	int rc = image_index_folder_dir(&out->ix, &dc->cap_files, &dc->cap_dirs, &dc->cap_paths, dir,
					label, dc->names, dc->names_bytes, dc->sizes, n_files);
	return rc == -E2BIG ? cachefile_bad(why, cap, "directory %s: too many names", dir) : rc;
}

/* The directories and their files, checked as a scan makes them: the
 * root first, then each class's directories, labels 0, 1, ... in turn,
 * each class with a file. */
static int decode_dirs(struct reader *r, struct imagefolder_listing *out, uint32_t n_dirs,
		       uint64_t n_files, char *why, size_t cap)
{
	struct decoding dc = {0};
	uint64_t class_files = 0;
	int64_t last = -1;
	char class_dir[PATH_MAX] = "";
	char *path = malloc(PATH_MAX);
	if (!path)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t d = 0; rc == 0 && d < n_dirs; d++) {
		struct cachefile_stamp st;
		uint32_t label, files;
		if (!take(r, &st.dev, 8) || !take(r, &st.ino, 8) || !take(r, &st.mtime_ns, 8) ||
		    !take(r, &st.ctime_ns, 8) || !take(r, &label, 4) || !take(r, &files, 4) ||
		    !take_str(r, path, PATH_MAX)) {
			rc = cachefile_bad(why, cap, "truncated in directory %" PRIu32, d);
			break;
		}
		bool root = d == 0;
		if (root != (label == IMAGEFOLDER_ROOT_LABEL) || root != (path[0] == '\0') ||
		    (root && files != 0)) {
			rc = cachefile_bad(why, cap, "directory %" PRIu32 " is not what a listing holds there", d);
			break;
		}
		if (!root && !good_rel_path(path)) {
			rc = cachefile_bad(why, cap, "directory %" PRIu32 ": a bad path", d);
			break;
		}
		if (!root) {
			/* a class's first directory is the class, the others under it */
			const char *slash = strchr(path, '/');
			if (label != last ? slash != NULL :
			    strncmp(path, class_dir, strlen(class_dir)) != 0 ||
			    path[strlen(class_dir)] != '/') {
				rc = cachefile_bad(why, cap, "directory %s is not where its class is", path);
				break;
			}
			if (label != last)
				snprintf(class_dir, sizeof(class_dir), "%s", path);
			if (label != last && (label != last + 1 || (last >= 0 && class_files == 0))) {
				rc = cachefile_bad(why, cap, "directory %s: label %" PRIu32 " out of order", path, label);
				break;
			}
			if (label >= out->ix.n_classes) {
				rc = cachefile_bad(why, cap, "directory %s: label %" PRIu32 " of %" PRIu32 " classes",
					 path, label, out->ix.n_classes);
				break;
			}
			class_files = label == last ? class_files + files : files;
			last = label;
		}
		if (files > n_files - out->ix.n) {
			rc = cachefile_bad(why, cap, "more files than the header's %" PRIu64, n_files);
			break;
		}
		if (dc.cap_files == 0 && n_files > 0) { /* n_files is checked against the payload */
			out->ix.files = malloc(n_files * sizeof(*out->ix.files));
			if (!out->ix.files) {
				rc = -ENOMEM;
				break;
			}
			dc.cap_files = n_files;
		}
		rc = imagefolder_dirs_add(&out->dirs, path, &st, label, files);
		if (rc == 0 && files > 0)
			rc = decode_files(r, out, &dc, path, files, label, why, cap);
		reader_release(r);
	}
	free(path);
	free(dc.names);
	free(dc.sizes);
	if (rc == 0 && (last + 1 != (int64_t)out->ix.n_classes || class_files == 0))
		rc = cachefile_bad(why, cap, "%" PRId64 " classes with files, the header says %" PRIu32, last + 1,
			 out->ix.n_classes);
	if (rc == 0 && out->ix.n != n_files)
		rc = cachefile_bad(why, cap, "%" PRIu64 " files, the header says %" PRIu64, out->ix.n, n_files);
	return rc;
}

int imagefolder_cache_decode(const uint8_t *buf, size_t len, struct imagefolder_listing *out,
			     imagefolder_release_fn release, void *ctx, char *why, size_t why_cap)
{
	memset(out, 0, sizeof(*out));
	struct cachefile_header h;
	if (cachefile_check(buf, len, IMAGEFOLDER_CACHE_MAGIC, IMAGEFOLDER_CACHE_VERSION,
			    "listing cache", &h, release, ctx, why, why_cap) < 0)
		return -EINVAL;
	const uint64_t n_files = h.count;
	struct reader r = {.p = buf + sizeof(h), .left = len - sizeof(h), .base = buf,
			   .release = release, .ctx = ctx};
	uint32_t n_classes, n_dirs;
	if (!take_str(&r, out->root, sizeof(out->root)) ||
	    !take_str(&r, out->roots, sizeof(out->roots)) || !take(&r, &n_classes, 4) ||
	    !take(&r, &out->ix.other_images, 8) || !take(&r, &n_dirs, 4))
		return cachefile_bad(why, why_cap, "truncated in the header of the payload");
	if (out->root[0] != '/' || n_classes == 0 || n_classes > INT32_MAX || n_dirs < 2 ||
	    n_dirs > r.left / DIR_RECORD_MIN || n_files > r.left / FILE_RECORD_MIN)
		return cachefile_bad(why, why_cap, "counts that do not fit its bytes");
	out->ix.n_classes = n_classes;
	int rc = decode_dirs(&r, out, n_dirs, n_files, why, why_cap);
	if (rc == 0 && r.left != 0)
		rc = cachefile_bad(why, why_cap, "%zu bytes after the last file", r.left);
	if (rc == -ENOMEM)
		snprintf(why, why_cap, "out of memory");
	return rc;
}
