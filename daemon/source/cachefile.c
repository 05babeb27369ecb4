/* SPDX-License-Identifier: Apache-2.0 */
/* cachefile: the machinery loaderd's caches on disk share (cachefile.h). */
#include "daemon/source/cachefile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"

#define RACY_NS 100000000ll
#define CRC_STEP_BYTES (64u << 20)
#define WRITE_BUF_BYTES (1u << 20)

void cachefile_stamp_of(const struct stat *st, struct cachefile_stamp *out)
{
	out->dev = st->st_dev;
	out->ino = st->st_ino;
	out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec;
	out->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000ll + st->st_ctim.tv_nsec;
}

bool cachefile_stamp_racy(const struct cachefile_stamp *st, int64_t now_ns)
{
	/* mtime only: a later change sets mtime to its own time, past now_ns,
	 * so only a stamp near now_ns can meet it again; ctime is checked
	 * on load all the same */
	return st->mtime_ns > now_ns - RACY_NS;
}

int64_t cachefile_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void cachefile_path(const char *dir, const char *kind, const char *real_path, const char *ext,
		    char *path, size_t cap)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)real_path; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	snprintf(path, cap, "%s/%s-%016" PRIx64 ".%s", dir, kind, h, ext);
}

int cachefile_check(const uint8_t *buf, size_t len, const char magic[8], uint32_t version,
		    const char *what, struct cachefile_header *h, cachefile_release_fn release,
		    void *ctx, char *why, size_t why_cap)
{
	if (len < sizeof(*h)) {
		snprintf(why, why_cap, "truncated (%zu bytes, less than a header)", len);
		return -EINVAL;
	}
	memcpy(h, buf, sizeof(*h));
	if (memcmp(h->magic, magic, sizeof(h->magic)) != 0) {
		snprintf(why, why_cap, "not a loaderd %s", what);
		return -EINVAL;
	}
	if (h->version != version) {
		snprintf(why, why_cap, "version %" PRIu32 ", this loaderd reads version %" PRIu32,
			 h->version, version);
		return -EINVAL;
	}
	if (h->header_bytes != sizeof(*h) || h->reserved != 0) {
		snprintf(why, why_cap, "a bad header");
		return -EINVAL;
	}
	if (h->payload_bytes != len - sizeof(*h)) {
		snprintf(why, why_cap, "%zu bytes after the header, which says %" PRIu64
			 " (truncated, or written over)", len - sizeof(*h), h->payload_bytes);
		return -EINVAL;
	}
	uint32_t crc = 0;
	for (size_t at = sizeof(*h); at < len;) {
		size_t n = len - at < CRC_STEP_BYTES ? len - at : CRC_STEP_BYTES;
		crc = crc32c(crc, buf + at, n);
		at += n;
		if (release)
			release(ctx, at);
	}
	if (crc != h->payload_crc) {
		snprintf(why, why_cap, "checksum mismatch (corrupt)");
		return -EINVAL;
	}
	return 0;
}

void cachefile_drop_pages(void *ctx, size_t upto)
{
	madvise(ctx, upto & ~(size_t)4095, MADV_DONTNEED);
}

bool cachefile_take(const uint8_t **p, size_t *left, void *dst, size_t n)
{
	if (*left < n)
		return false;
	memcpy(dst, *p, n);
	*p += n;
	*left -= n;
	return true;
}

int cachefile_bad(char *why, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, cap, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int cachefile_map(const char *path, void **map, size_t *len, char *why, size_t why_cap)
{
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
		rc = -EINVAL;
	} else if (st.st_uid != geteuid() && st.st_uid != 0) {
		/* only this user and root can write into a cache_dir of mode
		 * 0700: a file of anyone else's was put there some other way */
		snprintf(why, why_cap, "%s: owned by uid %u, not by this user (uid %u) or root", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		rc = -EPERM;
	} else if (st.st_size == 0) {
		snprintf(why, why_cap, "%s: empty", path);
		rc = -EINVAL;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		snprintf(why, why_cap, "%s: %s", path, strerror(errno));
		return -EIO;
	}
	madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
	*map = m;
	*len = (size_t)st.st_size;
	return 0;
}

static void w_flush(struct cachefile_writer *w)
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

void cachefile_put(struct cachefile_writer *w, const void *p, size_t n)
{
	if (!w->buf)
		return;
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

void cachefile_put_str(struct cachefile_writer *w, const char *s)
{
	uint32_t len = (uint32_t)strlen(s);
	cachefile_put(w, &len, sizeof(len));
	cachefile_put(w, s, len);
}

/* Root writing into another user's cache_dir (a check run with sudo):
 * the file becomes the directory owner's, so that the service, which
 * refuses a cache it cannot read, can use it. */
static void give_to_dir_owner(int fd, const char *dir)
{
	struct stat st;
	if (geteuid() == 0 && stat(dir, &st) == 0 && st.st_uid != 0)
		(void)!fchown(fd, st.st_uid, st.st_gid);
}

int cachefile_begin(struct cachefile_writer *w, const char *dir, const char *path, char *why,
		    size_t why_cap)
{
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int code = errno;
		snprintf(why, why_cap, "cache_dir %s: %s", dir, strerror(code));
		return -code;
	}
	snprintf(w->path, sizeof(w->path), "%s", path);
	snprintf(w->tmp, sizeof(w->tmp), "%s.XXXXXX", path);
	w->fd = mkostemp(w->tmp, O_CLOEXEC); /* mode 0600 */
	if (w->fd < 0) {
		int code = errno;
		snprintf(why, why_cap, "%s: %s", w->tmp, strerror(code));
		return -code;
	}
	give_to_dir_owner(w->fd, dir);
	if (!(w->buf = malloc(WRITE_BUF_BYTES))) {
		close(w->fd);
		unlink(w->tmp);
		w->fd = -1;
		snprintf(why, why_cap, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	memset(w->buf, 0, CACHEFILE_HEADER_BYTES); /* the header's place, written last */
	w->used = CACHEFILE_HEADER_BYTES;
	return 0;
}

int cachefile_commit(struct cachefile_writer *w, int rc, const char magic[8], uint32_t version,
		     uint64_t count, char *why, size_t why_cap)
{
	if (w->fd < 0)
		return rc < 0 ? rc : -EBADF;
	if (rc == 0) {
		w_flush(w);
		rc = w->err;
	}
	free(w->buf);
	w->buf = NULL;
	if (rc == 0) {
		struct cachefile_header h = {.version = version, .header_bytes = sizeof(h),
					     .payload_bytes = w->bytes, .payload_crc = w->crc,
					     .count = count};
		memcpy(h.magic, magic, sizeof(h.magic));
		if (pwrite(w->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
			rc = errno ? -errno : -EIO;
	}
	if (close(w->fd) < 0 && rc == 0)
		rc = -errno;
	w->fd = -1;
	if (rc == 0 && rename(w->tmp, w->path) < 0)
		rc = -errno;
	if (rc < 0) {
		snprintf(why, why_cap, "%s: %s", w->path, strerror(-rc));
		unlink(w->tmp);
	}
	return rc;
}
