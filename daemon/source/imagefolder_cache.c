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
 * crash that leaves a torn file leaves one its checks refuse).
 */
#include "daemon/source/imagefolder_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"

#define WRITE_BUF_BYTES (1u << 20)

void imagefolder_cache_path(const char *dir, const char *real_root, char *path, size_t cap)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)real_root; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	snprintf(path, cap, "%s/imagefolder-%016" PRIx64 ".list", dir, h);
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
		struct imagefolder_stamp now;
		imagefolder_stamp_of(&st, &now);
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

/* The mapping's pages before upto dropped from this process's memory (they
 * stay in the page cache): the file's bytes and the list decoded from them
 * are never both held whole. */
static void drop_pages(void *map, size_t upto)
{
	madvise(map, upto & ~(size_t)4095, MADV_DONTNEED);
}

int imagefolder_cache_load(const char *cache_dir, const char *real_root, const char *roots,
			   int root_fd, struct image_index *out, char *why, size_t why_cap)
{
	char path[PATH_MAX];
	imagefolder_cache_path(cache_dir, real_root, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		int code = errno;
		snprintf(why, why_cap, "%s: %s", path, strerror(code));
		return -code;
	}
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, why_cap, "%s: not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if (st.st_size == 0) {
		snprintf(why, why_cap, "%s: empty", path);
		close(fd);
		return -EINVAL;
	}
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(why, why_cap, "%s: %s", path, strerror(errno));
		return -EIO;
	}
	madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
	struct imagefolder_listing *l = malloc(sizeof(*l));
	char reason[PATH_MAX + 256];
	if (!l) {
		munmap(map, (size_t)st.st_size);
		snprintf(why, why_cap, "%s: out of memory", path);
		return -ENOMEM;
	}
	rc = imagefolder_cache_decode(map, (size_t)st.st_size, l, drop_pages, map, reason,
				      sizeof(reason));
	munmap(map, (size_t)st.st_size);
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

/* The payload, written through a buffer, its CRC kept. */
struct writer {
	int fd;
	uint8_t *buf;
	size_t used;
	uint32_t crc;
	uint64_t bytes;
	int err;
};

static void w_flush(struct writer *w)
{
	size_t at = 0;
	while (w->err == 0 && at < w->used) {
		ssize_t n = write(w->fd, w->buf + at, w->used - at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			w->err = n < 0 ? -errno : -EIO;
		else
			at += (size_t)n;
	}
	w->used = 0;
}

static void w_put(struct writer *w, const void *p, size_t n)
{
	w->crc = crc32c(w->crc, p, n);
	w->bytes += n;
	while (n > 0 && w->err == 0) {
		if (w->used == WRITE_BUF_BYTES)
			w_flush(w);
		size_t k = WRITE_BUF_BYTES - w->used < n ? WRITE_BUF_BYTES - w->used : n;
		memcpy(w->buf + w->used, p, k);
		w->used += k;
		p = (const uint8_t *)p + k;
		n -= k;
	}
}

static void w_str(struct writer *w, const char *s)
{
	uint32_t len = (uint32_t)strlen(s);
	w_put(w, &len, sizeof(len));
	w_put(w, s, len);
}

static int write_payload(struct writer *w, const char *real_root, const char *roots,
			 const struct image_index *ix, const struct imagefolder_dirs *dirs)
{
	w_str(w, real_root);
	w_str(w, roots);
	w_put(w, &ix->n_classes, 4);
	w_put(w, &ix->other_images, 8);
	w_put(w, &dirs->n, 4);
	uint32_t next = 0; /* ix->dirs holds those of dirs with files, in the same order */
	for (uint32_t i = 0; i < dirs->n && w->err == 0; i++) {
		const struct imagefolder_dir *d = &dirs->v[i];
		const char *path = dirs->paths + d->path_offset;
		w_put(w, &d->stamp.dev, 8);
		w_put(w, &d->stamp.ino, 8);
		w_put(w, &d->stamp.mtime_ns, 8);
		w_put(w, &d->stamp.ctime_ns, 8);
		w_put(w, &d->label, 4);
		w_put(w, &d->n_files, 4);
		w_str(w, path);
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
			w_put(w, &bytes, 8);
			w_put(w, &len16, 2);
			w_put(w, name, len);
		}
	}
	if (next != ix->n_dirs)
		return -EINVAL;
	w_flush(w);
	return w->err;
}

int imagefolder_cache_store(const char *cache_dir, const char *real_root, const char *roots,
			    const struct image_index *ix, const struct imagefolder_dirs *dirs,
			    char *why, size_t why_cap)
{
	char path[PATH_MAX], tmp[PATH_MAX + 16];
	imagefolder_cache_path(cache_dir, real_root, path, sizeof(path));
	if (mkdir(cache_dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, why_cap, "cache_dir %s: %s", cache_dir, strerror(errno));
		return -errno;
	}
	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
	struct writer w = {.fd = mkostemp(tmp, O_CLOEXEC)};
	if (w.fd < 0) {
		int code = errno;
		snprintf(why, why_cap, "%s: %s", tmp, strerror(code));
		return -code;
	}
	struct imagefolder_cache_header h = {.version = IMAGEFOLDER_CACHE_VERSION,
					     .header_bytes = sizeof(h), .n_files = ix->n};
	memcpy(h.magic, IMAGEFOLDER_CACHE_MAGIC, sizeof(h.magic));
	int rc = -ENOMEM;
	if ((w.buf = malloc(WRITE_BUF_BYTES))) {
		memset(w.buf, 0, sizeof(h)); /* the header's place, written last */
		w.used = sizeof(h);
		rc = write_payload(&w, real_root, roots, ix, dirs);
	}
	free(w.buf);
	if (rc == 0) {
		h.payload_bytes = w.bytes;
		h.payload_crc = w.crc;
		if (pwrite(w.fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
			rc = errno ? -errno : -EIO;
	}
	if (close(w.fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		snprintf(why, why_cap, "%s: %s", path, strerror(-rc));
		unlink(tmp);
	}
	return rc;
}
