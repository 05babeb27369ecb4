/* SPDX-License-Identifier: Apache-2.0 */
/*
 * imagefolder: the sample list of an imagefolder source (imagefolder.h):
 * the listing cached on disk when it is still true of the tree
 * (imagefolder_cache.c), else the root's classes listed by a few scan
 * threads (imagefolder_class.c) and merged here, in class order, into
 * the index.
 *
 * Threads: this thread lists the root, starts the scan threads, and
 * merges. The scan threads take classes in order from `next` (under the
 * lock), each no further than window classes past the last one merged,
 * so that the classes listed but not yet merged stay few; a class done is
 * marked under the lock and the merging thread woken. Only this thread
 * counts the progress (progress.h is one thread's) and touches the index.
 */
#include "daemon/source/imagefolder_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/errtext.h"
#include "common/fsname.h"
#include "common/log.h"
#include "common/regfile.h"
#include "daemon/core/progress.h"

#define SCAN_THREADS_DEFAULT 8
#define WINDOW_PER_THREAD 4 /* classes listed ahead of the merge, per thread */
#define PROGRESS_TICK_NS 200000000ll

/* The root's class names, as a growable array of owned copies. */
struct names {
	char **v;
	size_t n, cap;
};

static int names_add(struct names *a, const char *s)
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

static void names_free(struct names *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

static int cmp_names(const void *a, const void *b)
{
	return fsname_cmp(*(char *const *)a, *(char *const *)b);
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

void image_index_free(struct image_index *ix)
{
	free(ix->entries);
	free(ix->files);
	free(ix->dirs);
	free(ix->shards);
	free(ix->paths);
	memset(ix, 0, sizeof(*ix));
}

void image_index_folder_sample(const struct image_index *ix, uint64_t i, char *path, size_t cap,
			       uint64_t *file_bytes, int64_t *label)
{
	const struct arena_folder_dir *d = arena_folder_dir_of(ix->dirs, ix->n_dirs, i);
	const struct arena_folder_file *f = &ix->files[i];
	snprintf(path, cap, "%s/%s", ix->paths + d->path_offset,
		 ix->paths + d->names_offset + f->name_offset);
	*file_bytes = f->file_bytes;
	*label = d->label;
}

/* n bytes appended to ix->paths (capacity *cap): their offset, or -1. */
static int64_t paths_put(struct image_index *ix, uint64_t *cap, const void *bytes, uint64_t n)
{
	if (ix->paths_bytes + n > *cap) {
		uint64_t grown = *cap ? *cap * 2 : 65536;
		while (grown < ix->paths_bytes + n)
			grown *= 2;
		char *p = realloc(ix->paths, grown);
		if (!p)
			return -1;
		ix->paths = p;
		*cap = grown;
	}
	memcpy(ix->paths + ix->paths_bytes, bytes, n);
	ix->paths_bytes += n;
	return (int64_t)(ix->paths_bytes - n);
}

int image_index_folder_dir(struct image_index *ix, uint64_t *cap_files, uint32_t *cap_dirs,
			   uint64_t *cap_paths, const char *path, uint32_t label, const char *names,
			   uint64_t names_bytes, const uint64_t *sizes, uint32_t n)
{
	if (names_bytes > UINT32_MAX)
		return -E2BIG;
	if (ix->n_dirs == *cap_dirs) {
		uint32_t cap = *cap_dirs ? *cap_dirs * 2 : 256;
		struct arena_folder_dir *v = realloc(ix->dirs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ix->dirs = v;
		*cap_dirs = cap;
	}
	if (ix->n + n > *cap_files) {
		uint64_t cap = *cap_files ? *cap_files * 2 : 4096;
		while (cap < ix->n + n)
			cap *= 2;
		struct arena_folder_file *v = realloc(ix->files, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ix->files = v;
		*cap_files = cap;
	}
	int64_t path_at = paths_put(ix, cap_paths, path, strlen(path) + 1);
	int64_t names_at = path_at < 0 ? -1 : paths_put(ix, cap_paths, names, names_bytes);
	if (names_at < 0)
		return -ENOMEM;
	ix->dirs[ix->n_dirs++] = (struct arena_folder_dir){
		.path_offset = (uint64_t)path_at, .names_offset = (uint64_t)names_at,
		.first_sample = ix->n, .n_samples = n, .label = label};
	uint32_t at = 0;
	for (uint32_t i = 0; i < n; i++) {
		ix->files[ix->n + i] = (struct arena_folder_file){
			.name_offset = at,
			.file_bytes = sizes[i] >= UINT32_MAX ? UINT32_MAX : (uint32_t)sizes[i]};
		at += (uint32_t)strlen(names + at) + 1;
	}
	ix->n += n;
	return 0;
}

int imagefolder_dirs_add(struct imagefolder_dirs *d, const char *path,
			 const struct cachefile_stamp *stamp, uint32_t label, uint32_t n_files)
{
	if (d->n == d->cap) {
		uint32_t cap = d->cap ? d->cap * 2 : 256;
		struct imagefolder_dir *v = realloc(d->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		d->v = v;
		d->cap = cap;
	}
	size_t len = strlen(path) + 1;
	if (d->paths_bytes + len > d->paths_cap) {
		uint64_t cap = d->paths_cap ? d->paths_cap * 2 : 65536;
		while (cap < d->paths_bytes + len)
			cap *= 2;
		char *p = realloc(d->paths, cap);
		if (!p)
			return -ENOMEM;
		d->paths = p;
		d->paths_cap = cap;
	}
	memcpy(d->paths + d->paths_bytes, path, len);
	d->v[d->n++] = (struct imagefolder_dir){.stamp = *stamp, .path_offset = d->paths_bytes,
						.label = label, .n_files = n_files};
	d->paths_bytes += len;
	return 0;
}

void imagefolder_dirs_free(struct imagefolder_dirs *d)
{
	free(d->v);
	free(d->paths);
	memset(d, 0, sizeof(*d));
}

/* ---- the scan: classes listed by the threads, merged in order ---- */

struct scan {
	struct imagefolder_scan_ctx ctx;
	const struct names *classes;
	struct imagefolder_class *lists; /* one per class */
	bool *done;
	size_t next, merged, window;
	pthread_mutex_t lock;
	pthread_cond_t class_done, room; /* merging thread waits on class_done, scan threads on room */
	/* the merge's (this thread's) */
	struct image_index *ix;
	struct imagefolder_dirs *dirs;
	uint64_t cap_files, cap_paths;
	uint32_t cap_dirs;
};

static void *scan_thread(void *arg)
{
	struct scan *s = arg;
	progress_set_cancel(s->ctx.cancel);
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!atomic_load(&s->ctx.stop) && s->next < s->classes->n &&
		       s->next >= s->merged + s->window)
			pthread_cond_wait(&s->room, &s->lock);
		if (atomic_load(&s->ctx.stop) || s->next >= s->classes->n)
			break;
		size_t i = s->next++;
		pthread_mutex_unlock(&s->lock);
		imagefolder_class_list(&s->ctx, s->classes->v[i], &s->lists[i]);
		pthread_mutex_lock(&s->lock);
		s->done[i] = true;
		pthread_cond_broadcast(&s->class_done);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Class `label`'s listing appended to the index and the directories. */
static int scan_merge(struct scan *s, struct imagefolder_class *cl, uint32_t label)
{
	int err = 0;
	for (uint32_t d = 0; err == 0 && d < cl->n_dirs; d++) {
		const struct imagefolder_class_dir *cd = &cl->dirs[d];
		err = imagefolder_dirs_add(s->dirs, cd->path, &cd->stamp, label, cd->n);
		if (err == 0 && cd->n > 0)
			err = image_index_folder_dir(s->ix, &s->cap_files, &s->cap_dirs, &s->cap_paths,
						     cd->path, label, cd->names, cd->names_bytes,
						     cd->sizes, cd->n);
	}
	s->ix->other_images += cl->other_images;
	return err;
}

static int64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Every class listed by n_threads threads and merged in order. *racy
 * names a directory that keeps the listing from being cached ("" when
 * none). 0, or -errno with err. */
static int scan_classes(struct scan *s, uint32_t n_threads, struct progress *progress, char *err,
			size_t err_cap, char *racy, size_t racy_cap)
{
	size_t n = s->classes->n;
	int rc = 0;
	racy[0] = '\0';
	s->lists = calloc(n, sizeof(*s->lists));
	s->done = calloc(n, sizeof(*s->done));
	pthread_t *threads = calloc(n_threads, sizeof(*threads));
	if (!s->lists || !s->done || !threads) {
		rc = errtext(err, err_cap, -ENOMEM, "out of memory for the file list");
		goto free_lists;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->class_done, &ca);
	pthread_cond_init(&s->room, NULL);
	pthread_condattr_destroy(&ca);
	s->window = (size_t)n_threads * WINDOW_PER_THREAD;
	uint32_t started = 0;
	for (; started < n_threads; started++) {
		int e = pthread_create(&threads[started], NULL, scan_thread, s);
		if (e != 0) {
			if (started == 0)
				rc = errtext(err, err_cap, -e, "cannot start a scan thread: %s", strerror(e));
			break;
		}
		pthread_setname_np(threads[started], "loaderd-scan");
	}
	uint64_t counted = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		pthread_mutex_lock(&s->lock);
		while (!s->done[i]) {
			struct timespec until;
			int64_t t = monotonic_ns() + PROGRESS_TICK_NS;
			until.tv_sec = t / 1000000000ll;
			until.tv_nsec = t % 1000000000ll;
			pthread_cond_timedwait(&s->class_done, &s->lock, &until);
			uint64_t listed = atomic_load(&s->ctx.listed);
			pthread_mutex_unlock(&s->lock);
			/* nothing new: no line saying so, but a stop still heard */
			rc = listed > counted ? progress_add(progress, listed - counted) :
			     progress_cancelled() ? -ECANCELED : 0;
			counted = listed;
			pthread_mutex_lock(&s->lock);
			if (rc < 0)
				break;
		}
		pthread_mutex_unlock(&s->lock);
		if (rc < 0) {
			rc = errtext(err, err_cap, -ECANCELED, "%s: listing stopped (loaderd is "
				     "stopping)", s->classes->v[i]);
			break;
		}
		struct imagefolder_class *cl = &s->lists[i];
		if (cl->rc < 0) {
			rc = errtext(err, err_cap, cl->rc, "%s", cl->err ? cl->err : strerror(-cl->rc));
			break;
		}
		if (cl->racy && !racy[0])
			snprintf(racy, racy_cap, "%s", cl->racy_path);
		int merged = scan_merge(s, cl, (uint32_t)i);
		if (merged == -E2BIG)
			rc = errtext(err, err_cap, -E2BIG, "%s: too many files in one directory (their "
				     "names pass 4 GiB)", s->classes->v[i]);
		else if (merged < 0)
			rc = errtext(err, err_cap, -ENOMEM, "out of memory for the file list");
		imagefolder_class_free(cl);
		pthread_mutex_lock(&s->lock);
		s->merged = i + 1;
		pthread_cond_broadcast(&s->room);
		pthread_mutex_unlock(&s->lock);
	}
	uint64_t listed = atomic_load(&s->ctx.listed);
	if (rc == 0 && listed > counted && progress_add(progress, listed - counted) < 0)
		rc = errtext(err, err_cap, -ECANCELED, "listing stopped (loaderd is stopping)");
	pthread_mutex_lock(&s->lock);
	atomic_store(&s->ctx.stop, true);
	pthread_cond_broadcast(&s->room);
	pthread_mutex_unlock(&s->lock);
	for (uint32_t t = 0; t < started; t++)
		pthread_join(threads[t], NULL);
	for (size_t i = 0; i < n; i++)
		imagefolder_class_free(&s->lists[i]);
	pthread_cond_destroy(&s->class_done);
	pthread_cond_destroy(&s->room);
	pthread_mutex_destroy(&s->lock);
free_lists:
	free(threads);
	free(s->lists);
	free(s->done);
	return rc;
}

/* The root's subdirectories (symlinks to directories count), sorted. */
static int list_classes(int root_fd, const char *root, const char *roots, struct names *classes,
			char *err, size_t err_cap)
{
	DIR *d = fdopendir(fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
	if (!d)
		return errtext(err, err_cap, -errno, "%s", strerror(errno));
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (errno = 0, e = readdir(d))) {
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (progress_cancelled()) {
			rc = errtext(err, err_cap, -ECANCELED, "listing stopped (loaderd is stopping)");
			break;
		}
		if (roots[0] && fstatat(root_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
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
		if (fstatat(root_fd, e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode) &&
		    names_add(classes, e->d_name) < 0)
			rc = errtext(err, err_cap, -ENOMEM, "out of memory for the file list");
	}
	if (rc == 0 && errno != 0)
		rc = errtext(err, err_cap, -errno, "%s", strerror(errno));
	closedir(d);
	if (rc == 0 && classes->n == 0)
		rc = errtext(err, err_cap, -ENOENT,
			     "no class directory in it (expected ROOT/CLASS/IMAGE.jpg)");
	if (rc == 0 && classes->n > INT32_MAX)
		rc = errtext(err, err_cap, -E2BIG, "%zu class directories, too many", classes->n);
	if (rc == 0 && classes->n > 1)
		qsort(classes->v, classes->n, sizeof(*classes->v), cmp_names);
	return rc;
}

/* The tree listed: root's classes, then each class by the threads. */
static int scan_tree(int root_fd, const char *root, const struct imagefolder_opts *o,
		     struct image_index *out, struct imagefolder_dirs *dirs, char *racy,
		     size_t racy_cap, char *err, size_t err_cap)
{
	const char *roots = o->roots ? o->roots : "";
	struct scan s = {.ctx = {.root_fd = root_fd, .root = root, .roots = roots,
				 .now_ns = cachefile_now_ns()},
			 .ix = out, .dirs = dirs};
	struct stat st;
	struct cachefile_stamp stamp;
	if (fstat(root_fd, &st) < 0)
		return errtext(err, err_cap, -errno, "%s", strerror(errno));
	cachefile_stamp_of(&st, &stamp);
	int rc = imagefolder_dirs_add(dirs, "", &stamp, IMAGEFOLDER_ROOT_LABEL, 0);
	if (rc < 0)
		return errtext(err, err_cap, rc, "out of memory for the file list");
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "listing %s", root);
	struct progress progress;
	progress_begin(&progress, "files", what); /* progress_end below, on every path */
	s.ctx.cancel = progress.cancel;
	struct names classes = {0};
	rc = list_classes(root_fd, root, roots, &classes, err, err_cap);
	if (rc == 0) {
		uint32_t threads = o->threads ? o->threads : SCAN_THREADS_DEFAULT;
		if (threads > classes.n)
			threads = (uint32_t)classes.n;
		s.classes = &classes;
		rc = scan_classes(&s, threads, &progress, err, err_cap, racy, racy_cap);
		if (rc == 0 && cachefile_stamp_racy(&stamp, s.ctx.now_ns) && !racy[0])
			snprintf(racy, racy_cap, ".");
	}
	progress_end(&progress);
	out->n_classes = (uint32_t)classes.n;
	names_free(&classes);
	return rc;
}

/* The pipeline's name for a log line. */
static const char *who(const struct imagefolder_opts *o)
{
	return o->pipeline && o->pipeline[0] ? o->pipeline : "?";
}

int imagefolder_scan(const char *root, const struct imagefolder_opts *o,
		     struct image_index *out, char *err, size_t err_cap)
{
	memset(out, 0, sizeof(*out));
	const char *roots = o->roots ? o->roots : "";
	bool caching = o->cache_dir && o->cache_dir[0];
	/* O_DIRECTORY: a FIFO is refused (ENOTDIR) before open could block. */
	int root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0) {
		int code = errno;
		struct stat st;
		if (code == ENOTDIR && stat(root, &st) == 0)
			return errtext(err, err_cap, -code, "not a directory (%s)",
				       regfile_kind(st.st_mode));
		return errtext(err, err_cap, -code, "%s", strerror(code));
	}
	char real[PATH_MAX], why[PATH_MAX + 256];
	if (caching && !realpath(root, real)) {
		log_warning("pipeline \"%s\": %s: no listing cache (the root's real path: %s)", who(o),
			    root, strerror(errno));
		caching = false;
	}
	if (caching) {
		int rc = imagefolder_cache_load(o->cache_dir, real, roots, root_fd, out, why,
						sizeof(why));
		if (rc == 0) {
			log_info("pipeline \"%s\": %s: %" PRIu64 " files listed from the cache (%s)", who(o),
				 root, out->n, why);
			close(root_fd);
			return 0;
		}
		if (rc == -ENOENT)
			log_info("pipeline \"%s\": %s: no listing cached yet; listing the tree", who(o),
				 root);
		else if (rc == -ESTALE)
			log_info("pipeline \"%s\": %s: the cached listing is out of date: %s; listing the "
				 "tree", who(o), root, why);
		else
			log_warning("pipeline \"%s\": %s: the cached listing is not used: %s; listing the "
				    "tree", who(o), root, why);
	}
	struct imagefolder_dirs dirs = {0};
	char racy[256];
	int rc = scan_tree(root_fd, root, o, out, &dirs, racy, sizeof(racy), err, err_cap);
	if (rc < 0)
		image_index_free(out);
	if (rc == 0 && caching && racy[0])
		log_info("pipeline \"%s\": %s: the listing is not cached: directory %s changed while "
			 "it was listed (or just before)", who(o), root, racy);
	else if (rc == 0 && caching &&
		 imagefolder_cache_store(o->cache_dir, real, roots, out, &dirs, why, sizeof(why)) < 0)
		log_warning("pipeline \"%s\": %s: the listing is not cached: %s", who(o), root, why);
	imagefolder_dirs_free(&dirs);
	close(root_fd);
	return rc;
}
