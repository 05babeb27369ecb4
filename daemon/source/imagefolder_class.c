/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imagefolder_class: one class directory of an imagefolder listed by one
 * scan thread (imagefolder_impl.h): first every directory under it
 * (directory symlinks followed, loops refused), each read once with
 * getdents64 in large buffers, keeping its JPEG names; then, in sorted
 * path order, each directory's names sorted and their files stat'ed
 * relative to the directory (sizes, never contents). The order and every
 * error are those of imagefolder.h.
 */
#include "daemon/source/imagefolder_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/errtext.h"
#include "common/fsname.h"
#include "common/regfile.h"

#define DENTS_BYTES (256u << 10) /* one getdents64 call's buffer */
struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

struct class_walk {
	struct imagefolder_scan_ctx *c;
	struct imagefolder_class *out;
	char *dents; /* DENTS_BYTES */
	char err[IMAGEFOLDER_ERR_MAX];
};

static int walk_fail(struct class_walk *w, int code, const char *path, const char *why)
{
	return errtext(w->err, sizeof(w->err), code, "%s: %s", path, why);
}

static bool walk_stopped(struct class_walk *w)
{
	return atomic_load_explicit(&w->c->stop, memory_order_relaxed) ||
	       (w->c->cancel && atomic_load_explicit(w->c->cancel, memory_order_relaxed));
}

static bool has_suffix(const char *name, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);
	return n >= k && strcasecmp(name + n - k, suffix) == 0;
}

static bool is_jpeg_name(const char *name, size_t n)
{
	return has_suffix(name, n, ".jpg") || has_suffix(name, n, ".jpeg");
}

/* The other extensions torchvision's ImageFolder accepts. */
static bool is_other_image_name(const char *name, size_t n)
{
	static const char *const other[] = {".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		if (has_suffix(name, n, other[i]))
			return true;
	return false;
}

static int dir_add_name(struct imagefolder_class_dir *d, const char *name, size_t len)
{
	int rc = imagefolder_names_add(&d->names, &d->names_bytes, &d->names_cap, name, len);
	if (rc == 0)
		d->n++;
	return rc;
}

static struct imagefolder_class_dir *class_add_dir(struct imagefolder_class *cl, const char *path)
{
	if (cl->n_dirs == cl->cap_dirs) {
		uint32_t cap = cl->cap_dirs ? cl->cap_dirs * 2 : 4;
		struct imagefolder_class_dir *v = realloc(cl->dirs, cap * sizeof(*v));
		if (!v)
			return NULL;
		cl->dirs = v;
		cl->cap_dirs = cap;
	}
	struct imagefolder_class_dir *d = &cl->dirs[cl->n_dirs];
	memset(d, 0, sizeof(*d));
	if (!(d->path = strdup(path)))
		return NULL;
	cl->n_dirs++;
	return d;
}

/* A symlink met under a declared pipeline's root must lead into its
 * job_roots. */
static int walk_confine(struct class_walk *w, const char *rel, const char *name)
{
	char path[PATH_MAX], real[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s/%s", w->c->root, rel, name);
	if (confine_check(path, w->c->roots, real) != -EACCES)
		return 0;
	char why[PATH_MAX + 128];
	snprintf(why, sizeof(why), "a symlink to %.2000s, outside the directories jobs may read "
		 "(job_roots = %.1000s)", real, w->c->roots);
	return walk_fail(w, -EACCES, path, why);
}

/* A subdirectory met while listing: its name, for the walk to descend. */
struct subdirs {
	char *names;
	size_t bytes, cap;
	uint32_t n;
};

static int subdirs_add(struct subdirs *s, const char *name, size_t len)
{
	int rc = imagefolder_names_add(&s->names, &s->bytes, &s->cap, name, len);
	if (rc == 0)
		s->n++;
	return rc;
}

/* Reads directory fd (rel): its subdirectories (symlinks to directories
 * included) into subs, its JPEG names into d; other images counted. */
static int walk_read(struct class_walk *w, int fd, const char *rel, struct subdirs *subs,
		     struct imagefolder_class_dir *d)
{
	uint64_t seen = 0;
	for (;;) {
		long got = syscall(SYS_getdents64, fd, w->dents, DENTS_BYTES);
		if (got < 0)
			return walk_fail(w, -errno, rel, strerror(errno));
		if (got == 0)
			break;
		if (walk_stopped(w))
			return walk_fail(w, -ECANCELED, rel, "listing stopped (loaderd is stopping)");
		for (long at = 0; at < got;) {
			struct linux_dirent64 *e = (struct linux_dirent64 *)(w->dents + at);
			at += e->d_reclen;
			const char *name = e->d_name;
			if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
				continue;
			size_t len = strlen(name);
			unsigned char type = e->d_type;
			int rc = 0;
			if (w->c->roots[0] && (type == DT_LNK || type == DT_UNKNOWN)) {
				struct stat lst;
				if (fstatat(fd, name, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode) &&
				    (rc = walk_confine(w, rel, name)) < 0)
					return rc;
			}
			bool is_dir = type == DT_DIR;
			if (type == DT_LNK || type == DT_UNKNOWN) {
				struct stat st;
				is_dir = fstatat(fd, name, &st, 0) == 0 && S_ISDIR(st.st_mode);
			}
			if (is_dir)
				rc = subdirs_add(subs, name, len);
			else if (is_jpeg_name(name, len))
				rc = dir_add_name(d, name, len);
			else if (is_other_image_name(name, len))
				w->out->other_images++;
			if (rc < 0)
				return rc;
			seen += !is_dir && !is_jpeg_name(name, len); /* a JPEG counts once stat'ed */
		}
	}
	atomic_fetch_add_explicit(&w->c->listed, seen, memory_order_relaxed);
	return 0;
}

/* Directory rel (opened as fd, stamped st) and every directory under it;
 * ancestors[] holds the inodes of the path down to rel, to refuse loops. */
static int walk_dir(struct class_walk *w, int fd, const char *rel, const struct stat *st,
		    struct stat *ancestors, int depth)
{
	struct imagefolder_class_dir *d = class_add_dir(w->out, rel);
	if (!d)
		return -ENOMEM;
	cachefile_stamp_of(st, &d->stamp);
	if (!w->out->racy && cachefile_stamp_racy(&d->stamp, w->c->now_ns)) {
		w->out->racy = true;
		snprintf(w->out->racy_path, sizeof(w->out->racy_path), "%s", rel);
	}
	struct subdirs subs = {0};
	int err = walk_read(w, fd, rel, &subs, d); /* d is stale once a subdirectory is added */
	const char *name = subs.names;
	for (uint32_t i = 0; err == 0 && i < subs.n; i++, name += strlen(name) + 1) {
		char path[PATH_MAX];
		if (snprintf(path, sizeof(path), "%s/%s", rel, name) >= PATH_MAX) {
			err = walk_fail(w, -ENAMETOOLONG, rel, "a path under it is too long");
			break;
		}
		int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sub < 0) {
			if (errno == ENOENT)
				continue; /* gone since it was read */
			err = walk_fail(w, -errno, path, strerror(errno));
			break;
		}
		struct stat sst;
		if (fstat(sub, &sst) < 0) {
			err = walk_fail(w, -errno, path, strerror(errno));
			close(sub);
			break;
		}
		for (int k = 0; k <= depth && err == 0; k++)
			if (ancestors[k].st_dev == sst.st_dev && ancestors[k].st_ino == sst.st_ino)
				err = walk_fail(w, -ELOOP, path, "a directory loop (a symlink to a parent)");
		if (err == 0 && depth + 1 >= IMAGEFOLDER_DEPTH_MAX)
			err = walk_fail(w, -ELOOP, path, "more than 64 directory levels under its class");
		if (err == 0) {
			ancestors[depth + 1] = sst;
			err = walk_dir(w, sub, path, &sst, ancestors, depth + 1);
		}
		close(sub);
	}
	free(subs.names);
	return err;
}

static int cmp_dirs(const void *a, const void *b)
{
	return fsname_cmp(((const struct imagefolder_class_dir *)a)->path,
			  ((const struct imagefolder_class_dir *)b)->path);
}

/* qsort has no context argument: the names being sorted, this thread's. */
static _Thread_local const char *names_base;

static int cmp_offsets(const void *a, const void *b)
{
	return fsname_cmp(names_base + *(const uint32_t *)a, names_base + *(const uint32_t *)b);
}

/* Directory d's names sorted, then each file stat'ed relative to it: its
 * size, or an error for one that is not a regular file. */
static int dir_sort_and_stat(struct class_walk *w, struct imagefolder_class_dir *d)
{
	if (d->n == 0)
		return 0;
	uint32_t *off = malloc((size_t)d->n * sizeof(*off));
	char *names = malloc(d->names_bytes);
	d->sizes = malloc((size_t)d->n * sizeof(*d->sizes));
	int err = 0;
	if (!off || !names || !d->sizes) {
		err = -ENOMEM;
		goto free_off;
	}
	size_t at = 0;
	for (uint32_t i = 0; i < d->n; i++, at += strlen(d->names + at) + 1)
		off[i] = (uint32_t)at;
	names_base = d->names;
	qsort(off, d->n, sizeof(*off), cmp_offsets);
	at = 0;
	for (uint32_t i = 0; i < d->n; i++) {
		size_t len = strlen(d->names + off[i]) + 1;
		memcpy(names + at, d->names + off[i], len);
		at += len;
	}
	free(d->names);
	d->names = names;
	names = NULL;
	d->names_cap = d->names_bytes;
	int fd = openat(w->c->root_fd, d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		err = walk_fail(w, -errno, d->path, strerror(errno));
		goto free_off;
	}
	const char *name = d->names;
	for (uint32_t i = 0; i < d->n; i++, name += strlen(name) + 1) {
		if (walk_stopped(w)) {
			err = walk_fail(w, -ECANCELED, d->path, "listing stopped (loaderd is stopping)");
			break;
		}
		char path[PATH_MAX];
		if (snprintf(path, sizeof(path), "%s/%s", d->path, name) >= PATH_MAX) {
			err = walk_fail(w, -ENAMETOOLONG, d->path, "a path under it is too long");
			break;
		}
		/* A file that cannot be stat'ed (a dangling symlink) stays in the
		 * list, as in ImageFolder; reading it fails and on_error applies.
		 * One that is not a regular file (a FIFO, a device, a socket) is
		 * refused: a worker could never read an image from it, and leaving
		 * it out would shift sample numbers from ImageFolder's. */
		if ((i & 1023) == 1023) /* the progress, in steps */
			atomic_fetch_add_explicit(&w->c->listed, 1024, memory_order_relaxed);
		struct stat st;
		d->sizes[i] = 0;
		if (fstatat(fd, name, &st, 0) == 0) {
			if (!S_ISREG(st.st_mode)) {
				char why[96];
				snprintf(why, sizeof(why), "not a regular file (%s); an image must be one",
					 regfile_kind(st.st_mode));
				err = walk_fail(w, -EINVAL, path, why);
				break;
			}
			d->sizes[i] = (uint64_t)st.st_size;
		}
	}
	close(fd);
	atomic_fetch_add_explicit(&w->c->listed, d->n & 1023, memory_order_relaxed);
free_off:
	free(off);
	free(names);
	return err;
}

int imagefolder_class_list(struct imagefolder_scan_ctx *c, const char *name,
			   struct imagefolder_class *out)
{
	memset(out, 0, sizeof(*out));
	struct class_walk w = {.c = c, .out = out};
	struct stat ancestors[IMAGEFOLDER_DEPTH_MAX + 1];
	int err = 0;
	if (!(w.dents = malloc(DENTS_BYTES))) {
		err = -ENOMEM;
		goto done;
	}
	int fd = openat(c->root_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &ancestors[0]) < 0) {
		err = walk_fail(&w, -errno, name, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto done;
	}
	err = walk_dir(&w, fd, name, &ancestors[0], ancestors, 0);
	close(fd);
	if (err == 0 && out->n_dirs > 1)
		qsort(out->dirs, out->n_dirs, sizeof(*out->dirs), cmp_dirs);
	for (uint32_t i = 0; err == 0 && i < out->n_dirs; i++) {
		err = dir_sort_and_stat(&w, &out->dirs[i]);
		out->n_files += out->dirs[i].n;
	}
	if (err == 0 && out->n_files == 0)
		err = walk_fail(&w, -ENOENT, name, "class directory with no .jpg or .jpeg file");
done:
	free(w.dents);
	if (err == -ENOMEM && w.err[0] == '\0')
		snprintf(w.err, sizeof(w.err), "out of memory for the file list");
	out->rc = err;
	if (err < 0)
		out->err = strdup(w.err);
	return err;
}

void imagefolder_class_free(struct imagefolder_class *cl)
{
	for (uint32_t i = 0; i < cl->n_dirs; i++) {
		free(cl->dirs[i].path);
		free(cl->dirs[i].names);
		free(cl->dirs[i].sizes);
	}
	free(cl->dirs);
	free(cl->err);
	memset(cl, 0, sizeof(*cl));
}
