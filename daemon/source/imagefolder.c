/* SPDX-License-Identifier: Apache-2.0 */
/* imagefolder: the sample list of an imagefolder source (imagefolder.h). */
#include "daemon/source/imagefolder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/errtext.h"
#include "common/fsname.h"
#include "common/regfile.h"
#include "daemon/core/progress.h"

#define DEPTH_MAX 64 /* directory levels under a class */

/* A growable array of strings (owned copies). */
struct imagefolder_names {
	char **v;
	size_t n, cap;
};

static int imagefolder_names_add(struct imagefolder_names *a, const char *s)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		char **v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	if (!(a->v[a->n] = strdup(s)))
		return -ENOMEM;
	a->n++;
	return 0;
}

static void imagefolder_names_free(struct imagefolder_names *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

static int imagefolder_cmp_names(const void *a, const void *b)
{
	return fsname_cmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted as Python sorts the names decoded from the file system
 * (common/fsname.h), ImageFolder's order; an empty list has no array:
 * qsort must not see its NULL. */
static void imagefolder_names_sort(struct imagefolder_names *a)
{
	if (a->n > 1)
		qsort(a->v, a->n, sizeof(*a->v), imagefolder_cmp_names);
}

static bool imagefolder_has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	return n >= k && strcasecmp(name + n - k, suffix) == 0;
}

static bool imagefolder_is_jpeg_name(const char *name)
{
	return imagefolder_has_suffix(name, ".jpg") || imagefolder_has_suffix(name, ".jpeg");
}

/* The other extensions torchvision's ImageFolder accepts. */
static bool imagefolder_is_other_image_name(const char *name)
{
	static const char *const other[] = {".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		if (imagefolder_has_suffix(name, other[i]))
			return true;
	return false;
}

struct imagefolder_walk {
	int root_fd;
	const char *root;  /* as given */
	const char *roots; /* a declared pipeline's job_roots: symlinks must stay within */
	struct image_index *ix;
	uint64_t cap_entries, cap_paths;
	char *err;
	size_t err_cap;
	struct progress progress; /* files listed, for a long scan (progress.h) */
};

/* code, with "PATH: WHY" in the caller's buffer. */
static int imagefolder_fail(struct imagefolder_walk *s, int code, const char *path, const char *why)
{
	return errtext(s->err, s->err_cap, code, "%s: %s", path, why);
}

/* The entries of directory rel (not "." and ".."): into dirs (when given)
 * those that are directories, symlinks followed; into others (when given)
 * the rest, also those that cannot be stat'ed (a dangling symlink). */
static int imagefolder_list_dir(struct imagefolder_walk *s, const char *rel,
				struct imagefolder_names *dirs, struct imagefolder_names *others)
{
	int fd = openat(s->root_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return imagefolder_fail(s, -errno, rel, strerror(errno));
	DIR *d = fdopendir(fd);
	if (!d) {
		int err = -errno;
		close(fd);
		return imagefolder_fail(s, err, rel, strerror(-err));
	}
	struct dirent *e;
	int err = 0;
	while (err == 0 && (errno = 0, e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (progress_cancelled()) { /* also the pass that looks for directories */
			err = imagefolder_fail(s, -ECANCELED, rel, "listing stopped (loaderd is "
					       "stopping)");
			break;
		}
		struct stat st;
		if (s->roots[0] && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode)) {
			char path[PATH_MAX], real[PATH_MAX];
			snprintf(path, sizeof(path), "%s/%s/%s", s->root, rel, e->d_name);
			int rc = confine_check(path, s->roots, real);
			if (rc == -EACCES) {
				char why[PATH_MAX + 128];
				snprintf(why, sizeof(why), "a symlink to %.2000s, outside the directories "
					 "jobs may read (job_roots = %.1000s)", real, s->roots);
				err = imagefolder_fail(s, -EACCES, path, why);
				break;
			}
		}
		bool is_dir = fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
		struct imagefolder_names *into = is_dir ? dirs : others;
		if (into)
			err = imagefolder_names_add(into, e->d_name);
		if (err == 0 && into && !is_dir && progress_add(&s->progress, 1) < 0)
			err = imagefolder_fail(s, -ECANCELED, rel, "listing stopped (loaderd is "
					       "stopping)");
	}
	if (err == 0 && errno != 0)
		err = imagefolder_fail(s, -errno, rel, strerror(errno));
	closedir(d);
	return err;
}

/* rel/name into path (PATH_MAX bytes): 0, or -ENAMETOOLONG said of rel. */
static int imagefolder_join(struct imagefolder_walk *s, const char *rel, const char *name,
			    char *path)
{
	if (snprintf(path, PATH_MAX, "%s/%s", rel, name) >= PATH_MAX)
		return imagefolder_fail(s, -ENAMETOOLONG, rel, "a path under it is too long");
	return 0;
}

/* Every directory under (and including) rel, directory symlinks followed;
 * ancestors[] holds the inodes of the path down to rel, to refuse loops. */
static int imagefolder_collect_dirs(struct imagefolder_walk *s, const char *rel,
				    struct stat *ancestors, int depth,
				    struct imagefolder_names *dirs)
{
	struct imagefolder_names subdirs = {0};
	int err = imagefolder_names_add(dirs, rel);
	if (err == 0)
		err = imagefolder_list_dir(s, rel, &subdirs, NULL);
	for (size_t i = 0; err == 0 && i < subdirs.n; i++) {
		char path[PATH_MAX];
		struct stat st;
		err = imagefolder_join(s, rel, subdirs.v[i], path);
		if (err < 0)
			break;
		if (fstatat(s->root_fd, path, &st, 0) < 0)
			continue; /* gone since readdir */
		for (int k = 0; k <= depth && err == 0; k++)
			if (ancestors[k].st_dev == st.st_dev && ancestors[k].st_ino == st.st_ino)
				err = imagefolder_fail(s, -ELOOP, path,
						       "a directory loop (a symlink to a parent)");
		if (err == 0 && depth + 1 >= DEPTH_MAX)
			err = imagefolder_fail(s, -ELOOP, path,
					       "more than 64 directory levels under its class");
		if (err == 0) {
			ancestors[depth + 1] = st;
			err = imagefolder_collect_dirs(s, path, ancestors, depth + 1, dirs);
		}
	}
	imagefolder_names_free(&subdirs);
	return err;
}

int image_index_add_path(struct image_index *ix, uint64_t *cap, const char *name,
			 uint64_t *offset)
{
	size_t len = strlen(name) + 1;
	while (ix->paths_bytes + len > *cap) {
		uint64_t grown = *cap ? *cap * 2 : 65536;
		char *p = realloc(ix->paths, grown);
		if (!p)
			return -ENOMEM;
		ix->paths = p;
		*cap = grown;
	}
	*offset = ix->paths_bytes;
	memcpy(ix->paths + ix->paths_bytes, name, len);
	ix->paths_bytes += len;
	return 0;
}

int image_index_append(struct image_index *ix, uint64_t *cap_entries, uint64_t *cap_paths,
		       const char *name, struct arena_image entry)
{
	if (ix->n == *cap_entries) {
		uint64_t cap = *cap_entries ? *cap_entries * 2 : 1024;
		struct arena_image *v = realloc(ix->entries, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ix->entries = v;
		*cap_entries = cap;
	}
	int err = image_index_add_path(ix, cap_paths, name, &entry.path_offset);
	if (err == 0)
		ix->entries[ix->n++] = entry;
	return err;
}

static int imagefolder_add_entry(struct imagefolder_walk *s, const char *path, uint64_t file_bytes,
				 int64_t label)
{
	return image_index_append(s->ix, &s->cap_entries, &s->cap_paths, path,
				  (struct arena_image){.file_bytes = file_bytes, .label = label});
}

/* The JPEG files directly in directory rel, sorted by name. */
static int imagefolder_add_files(struct imagefolder_walk *s, const char *rel, int64_t label)
{
	struct imagefolder_names entries = {0}, files = {0};
	int err = imagefolder_list_dir(s, rel, NULL, &entries);
	for (size_t i = 0; err == 0 && i < entries.n; i++) {
		if (imagefolder_is_jpeg_name(entries.v[i]))
			err = imagefolder_names_add(&files, entries.v[i]);
		else if (imagefolder_is_other_image_name(entries.v[i]))
			s->ix->other_images++;
	}
	imagefolder_names_free(&entries);
	imagefolder_names_sort(&files);
	for (size_t i = 0; err == 0 && i < files.n; i++) {
		char path[PATH_MAX];
		if (progress_cancelled()) {
			err = imagefolder_fail(s, -ECANCELED, rel, "listing stopped (loaderd is "
					       "stopping)");
			break;
		}
		err = imagefolder_join(s, rel, files.v[i], path);
		if (err < 0)
			break;
		/* A file that cannot be stat'ed (a dangling symlink) stays in the
		 * list, as in ImageFolder; reading it fails and on_error applies.
		 * One that is not a regular file (a FIFO, a device, a socket)
		 * is refused: a worker could never read an image from it, and
		 * leaving it out would shift sample numbers from ImageFolder's. */
		struct stat st;
		uint64_t bytes = 0;
		if (fstatat(s->root_fd, path, &st, 0) == 0) {
			if (!S_ISREG(st.st_mode)) {
				char why[96];
				snprintf(why, sizeof(why), "not a regular file (%s); an image must be one",
					 regfile_kind(st.st_mode));
				err = imagefolder_fail(s, -EINVAL, path, why);
				break;
			}
			bytes = (uint64_t)st.st_size;
		}
		err = imagefolder_add_entry(s, path, bytes, label);
	}
	imagefolder_names_free(&files);
	return err;
}

static int imagefolder_scan_class(struct imagefolder_walk *s, const char *name, int64_t label)
{
	struct stat ancestors[DEPTH_MAX + 1];
	if (fstatat(s->root_fd, name, &ancestors[0], 0) < 0)
		return imagefolder_fail(s, -errno, name, strerror(errno));
	struct imagefolder_names dirs = {0};
	int err = imagefolder_collect_dirs(s, name, ancestors, 0, &dirs);
	if (err == 0)
		imagefolder_names_sort(&dirs);
	uint64_t before = s->ix->n;
	for (size_t i = 0; err == 0 && i < dirs.n; i++)
		err = imagefolder_add_files(s, dirs.v[i], label);
	imagefolder_names_free(&dirs);
	if (err == 0 && s->ix->n == before)
		err = imagefolder_fail(s, -ENOENT, name,
				       "class directory with no .jpg or .jpeg file");
	return err;
}

int imagefolder_scan(const char *root, const char *roots, struct image_index *out, char *err,
		     size_t err_cap)
{
	memset(out, 0, sizeof(*out));
	struct imagefolder_walk s = {.ix = out, .err = err, .err_cap = err_cap, .root = root,
				     .roots = roots};
	/* O_DIRECTORY: a FIFO is refused (ENOTDIR) before open could block. */
	s.root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s.root_fd < 0) {
		int code = errno;
		struct stat st;
		if (code == ENOTDIR && stat(root, &st) == 0)
			return errtext(err, err_cap, -code, "not a directory (%s)",
				       regfile_kind(st.st_mode));
		return errtext(err, err_cap, -code, "%s", strerror(code));
	}
	int rc = 0;
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "listing %s", root);
	struct imagefolder_names classes = {0};
	DIR *d = fdopendir(fcntl(s.root_fd, F_DUPFD_CLOEXEC, 0));
	if (!d) {
		rc = errtext(err, err_cap, -errno, "%s", strerror(errno));
		goto close_root;
	}
	progress_begin(&s.progress, "files", what); /* progress_end below, on every path */
	struct dirent *e;
	while (rc == 0 && (errno = 0, e = readdir(d))) {
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (roots[0] && fstatat(s.root_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode)) {
			char path[PATH_MAX], real[PATH_MAX];
			snprintf(path, sizeof(path), "%s/%s", root, e->d_name);
			if (confine_check(path, roots, real) == -EACCES) {
				rc = errtext(err, err_cap, -EACCES, "%.1500s: a symlink to %.1500s, outside "
					     "the directories jobs may read (job_roots = %.1000s)", path, real,
					     roots);
				break;
			}
		}
		if (fstatat(s.root_fd, e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode))
			rc = imagefolder_names_add(&classes, e->d_name);
	}
	closedir(d);
	if (rc == 0 && classes.n == 0)
		rc = errtext(err, err_cap, -ENOENT,
			     "no class directory in it (expected ROOT/CLASS/IMAGE.jpg)");
	if (rc == 0 && classes.n > INT32_MAX)
		rc = errtext(err, err_cap, -E2BIG, "%zu class directories, too many", classes.n);
	imagefolder_names_sort(&classes);
	for (size_t i = 0; rc == 0 && i < classes.n; i++)
		rc = imagefolder_scan_class(&s, classes.v[i], (int64_t)i);
	if (rc == -ENOMEM)
		errtext(err, err_cap, rc, "out of memory for the file list");
	progress_end(&s.progress);
	out->n_classes = (uint32_t)classes.n;
	imagefolder_names_free(&classes);
	if (rc < 0)
		image_index_free(out);
close_root:
	close(s.root_fd);
	return rc;
}

void image_index_free(struct image_index *ix)
{
	free(ix->entries);
	free(ix->shards);
	free(ix->paths);
	memset(ix, 0, sizeof(*ix));
}
