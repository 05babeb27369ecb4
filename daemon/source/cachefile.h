/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cachefile: what the caches loaderd keeps on disk under `[daemon]
 * cache_dir` share, so that each kind of cache (an imagefolder's listing,
 * imagefolder_cache.c; a megatron index's check and block sums,
 * megatron_cache.c) holds only its own payload:
 *   - the file's name: the kind, then a hash of the real path of what it
 *     caches ("imagefolder-0123456789abcdef.list");
 *   - the stamp of a file or directory as it was when its cache was made
 *     (device, inode, mtime, ctime: ctime cannot be set back by a user, so
 *     anything rewritten since is seen), and the rule that a stamp too
 *     close to the clock is not cached;
 *   - the header every cache file starts with (magic, version, the
 *     payload's bytes and CRC-32C), checked by a pure function;
 *   - the file read back (mapped, refused when it is not a regular file,
 *     or is owned by a user other than this one or root);
 *   - the file written atomically: a temporary file beside it, renamed
 *     over, readable by its owner only (the cache_dir's owner when root
 *     writes it, so that `sudo loaderd --check-config` leaves a cache the
 *     service can read).
 * Native byte order: a cache never leaves the host.
 *
 * Threads: calls touch only their arguments.
 */
#ifndef LDR_DAEMON_CACHEFILE_H
#define LDR_DAEMON_CACHEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct stat;

/* What a file or directory was when its cache was made: anything
 * written into it changes mtime and ctime; one replaced by another
 * changes dev or ino. */
struct cachefile_stamp {
	uint64_t dev, ino;
	int64_t mtime_ns, ctime_ns;
};

void cachefile_stamp_of(const struct stat *st, struct cachefile_stamp *out);

/* Whether something stamped st, looked at when the clock read now_ns
 * (CLOCK_REALTIME), changed so recently that a change in the same clock
 * tick after it could leave its mtime as it was: such a thing is not
 * cached (0.1 s). */
bool cachefile_stamp_racy(const struct cachefile_stamp *st, int64_t now_ns);

/* The clock (CLOCK_REALTIME) in ns. */
int64_t cachefile_now_ns(void);

/* The cache file of kind (a word, "imagefolder") for real_path under dir,
 * with extension ext ("list"), into path: DIR/KIND-HASH.EXT. */
void cachefile_path(const char *dir, const char *kind, const char *real_path, const char *ext,
		    char *path, size_t cap);

#define CACHEFILE_HEADER_BYTES 40u

/* A cache file's header; then payload_bytes of payload whose CRC-32C is
 * payload_crc. count is the kind's (the listing's files, the index's
 * blocks). */
struct cachefile_header {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;
	uint64_t payload_bytes;
	uint32_t payload_crc;
	uint32_t reserved;
	uint64_t count;
};
_Static_assert(sizeof(struct cachefile_header) == CACHEFILE_HEADER_BYTES, "cachefile_header layout");

/* Told now and then (every 64 MiB read) that the bytes of the file before
 * `upto` have been read by the pass going on: the caller may drop them from
 * memory (a mapping's pages), to be read again only by a later pass. */
typedef void (*cachefile_release_fn)(void *ctx, size_t upto);

/*
 * Checks the header of a whole cache file (len bytes) and its payload's
 * CRC: magic (what names the kind in the message: "listing cache"), this
 * version, the header's own size, the payload's length and checksum. 0
 * with *h, or -EINVAL with why ("truncated (12 bytes, less than a
 * header)", "version 2, this loaderd reads version 1", "checksum mismatch
 * (corrupt)", "not a loaderd index cache"). Pure: no I/O.
 */
int cachefile_check(const uint8_t *buf, size_t len, const char magic[8], uint32_t version,
		    const char *what, struct cachefile_header *h, cachefile_release_fn release,
		    void *ctx, char *why, size_t why_cap);

/* A release function (cachefile_release_fn) for a mapping of the file
 * (ctx): the pages before upto dropped from this process's memory (they
 * stay in the page cache), so that a file read once is never held whole. */
void cachefile_drop_pages(void *ctx, size_t upto);

/* A decoder's reads: n bytes from *p (*left of them there) into dst,
 * both moved past them; false, nothing moved, when fewer are left. */
bool cachefile_take(const uint8_t **p, size_t *left, void *dst, size_t n);

/* A decoder's refusal: why formatted, -EINVAL returned. */
int cachefile_bad(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Maps the cache file path read-only: 0 with *map and *len (munmap them),
 * or -errno with why ("PATH: No such file or directory" is -ENOENT;
 * "PATH: not a regular file", "PATH: empty", "PATH: owned by uid 1001, not
 * by this user (uid 999) or root"). */
int cachefile_map(const char *path, void **map, size_t *len, char *why, size_t why_cap);

/* A cache file being written: its payload through a buffer, its CRC kept. */
struct cachefile_writer {
	int fd;
	uint8_t *buf;
	size_t used;
	uint32_t crc;
	uint64_t bytes;
	int err;
	char path[4096];
	char tmp[4112];
};

/* Starts writing the cache file path (in dir, made 0700 when missing): a
 * temporary file beside it. 0, or -errno with why. */
int cachefile_begin(struct cachefile_writer *w, const char *dir, const char *path, char *why,
		    size_t why_cap);
/* Appends to the payload (an error is kept for cachefile_commit). */
void cachefile_put(struct cachefile_writer *w, const void *p, size_t n);
/* Appends a string: its u32 length, then its bytes. */
void cachefile_put_str(struct cachefile_writer *w, const char *s);
/* Writes the header (rc 0) and renames the file over path; or, rc < 0 or
 * a write failed, removes it. Returns 0, or -errno with why "PATH: reason". */
int cachefile_commit(struct cachefile_writer *w, int rc, const char magic[8], uint32_t version,
		     uint64_t count, char *why, size_t why_cap);

#endif
