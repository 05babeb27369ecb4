/* SPDX-License-Identifier: Apache-2.0 */
/* tarshard: the sample list of a tar source (tarshard.h). */
#include "daemon/source/tarshard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/regfile.h"
#include "daemon/core/progress.h"

#define BLOCK 512u
#define NAME_MAX_BYTES 4096u /* a GNU long name or pax path longer than this is refused */
#define LABEL_MAX_BYTES 64u  /* a .cls member's text */
#define EXT_MAX 32u          /* a longer extension is never one this source uses */

/* ---- one shard's headers ---- */

struct tar_shard_scan {
	struct image_index *ix;
	uint64_t cap_entries, cap_paths;
	uint32_t shard;
	const char *path;
	bool one_file;         /* the pattern is this shard's path: messages need not repeat it */
	int fd;
	uint64_t file_bytes;
	char *err;
	size_t err_cap;
	/* the sample being grouped: its key and what it has so far */
	char key[NAME_MAX_BYTES + 1];
	uint64_t key_offset;   /* header offset of its first member */
	bool open;
	bool has_image, has_label, has_other_image;
	char image_name[NAME_MAX_BYTES + 1];
	uint64_t image_offset, image_bytes;
	int64_t label;
	char seen[8][EXT_MAX + 1]; /* extensions met in this sample, to refuse repeats */
	unsigned n_seen;
};

/* A damaged member or header at offset: -EINVAL, the reason prefixed with
 * the shard (when the pattern names several) and the offset. */
static int tar_scan_fail(struct tar_shard_scan *s, uint64_t offset, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int tar_scan_fail(struct tar_shard_scan *s, uint64_t offset, const char *fmt, ...)
{
	char why[NAME_MAX_BYTES + 256];
	va_list ap;
	va_start(ap, fmt);
	verrtext(why, sizeof(why), 0, fmt, ap);
	va_end(ap);
	if (s->one_file)
		return errtext(s->err, s->err_cap, -EINVAL, "offset %" PRIu64 ": %s", offset, why);
	return errtext(s->err, s->err_cap, -EINVAL, "%s: offset %" PRIu64 ": %s", s->path, offset,
		       why);
}

/* A numeric header field: octal digits (spaces and NULs around them), or
 * GNU base-256 (first byte 0x80) for sizes of 8 GiB and more. */
static bool tar_header_number(const unsigned char *f, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	if (f[0] == 0x80) {
		for (size_t i = 1; i < len; i++) {
			if (v >> 56)
				return false;
			v = v << 8 | f[i];
		}
		*out = v;
		return true;
	}
	size_t i = 0;
	while (i < len && f[i] == ' ')
		i++;
	bool digits = false;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return false;
		v = v << 3 | (uint64_t)(f[i] - '0');
		digits = true;
	}
	for (; i < len; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return false;
	*out = v;
	return digits;
}

static bool tar_checksum_ok(const unsigned char *h)
{
	uint64_t stored;
	if (!tar_header_number(h + 148, 8, &stored))
		return false;
	uint64_t sum = 0;
	for (unsigned i = 0; i < BLOCK; i++)
		sum += (i >= 148 && i < 156) ? ' ' : h[i];
	return sum == stored;
}

/* One pax record list: sets *path (when given) and *size. */
static int tar_pax_parse(struct tar_shard_scan *s, uint64_t offset, const char *data, size_t len,
			 char *path, bool *has_path, uint64_t *size, bool *has_size)
{
	for (size_t at = 0; at < len;) {
		char *end;
		unsigned long n = strtoul(data + at, &end, 10);
		if (end == data + at || *end != ' ' || n == 0 || n > len - at || data[at + n - 1] != '\n')
			return tar_scan_fail(s, offset,
					     "a pax extended header with a malformed record");
		const char *kv = end + 1, *stop = data + at + n - 1;
		const char *eq = memchr(kv, '=', (size_t)(stop - kv));
		if (!eq)
			return tar_scan_fail(s, offset,
					     "a pax extended header with a malformed record");
		size_t klen = (size_t)(eq - kv), vlen = (size_t)(stop - eq - 1);
		if (klen == 4 && memcmp(kv, "path", 4) == 0) {
			if (vlen == 0 || vlen > NAME_MAX_BYTES)
				return tar_scan_fail(s, offset, "a pax path of %zu bytes", vlen);
			memcpy(path, eq + 1, vlen);
			path[vlen] = '\0';
			*has_path = true;
		} else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
			char num[32];
			if (vlen == 0 || vlen >= sizeof(num))
				return tar_scan_fail(s, offset, "a pax size that is not a number");
			memcpy(num, eq + 1, vlen);
			num[vlen] = '\0';
			char *nend;
			errno = 0;
			unsigned long long v = strtoull(num, &nend, 10);
			if (*nend || errno || num[0] == '-')
				return tar_scan_fail(s, offset, "a pax size that is not a number");
			*size = v;
			*has_size = true;
		}
		at += n;
	}
	return 0;
}

/* The data of a small member (long name, pax header, label): len bytes at
 * data_offset, from the piece already read when it lies there. */
static int tar_small_data(struct tar_shard_scan *s, uint64_t header_offset,
			  const unsigned char *piece, size_t piece_len, uint64_t len, char *out)
{
	if (len <= piece_len - BLOCK) {
		memcpy(out, piece + BLOCK, len);
		return 0;
	}
	ssize_t got = pread(s->fd, out, len, (off_t)(header_offset + BLOCK));
	if (got < 0)
		return tar_scan_fail(s, header_offset, "%s", strerror(errno));
	if ((uint64_t)got != len)
		return tar_scan_fail(s, header_offset, "the file ends inside this member");
	return 0;
}

static int tar_add_sample(struct tar_shard_scan *s)
{
	return image_index_append(s->ix, &s->cap_entries, &s->cap_paths, s->image_name,
				  (struct arena_image){.file_bytes = s->image_bytes, .label = s->label,
						       .data_offset = s->image_offset,
						       .shard = s->shard});
}

/* The sample being grouped is complete: checked and added (or counted as
 * another image format). */
static int tar_sample_end(struct tar_shard_scan *s)
{
	if (!s->open)
		return 0;
	s->open = false;
	if (!s->has_image && s->has_other_image) {
		s->ix->other_images++;
		return 0;
	}
	if (!s->has_image)
		return tar_scan_fail(s, s->key_offset, "sample \"%s\" has no .jpg or .jpeg member",
				     s->key);
	if (!s->has_label)
		return tar_scan_fail(s, s->key_offset,
				     "sample \"%s\" has no .cls member (its label)", s->key);
	return tar_add_sample(s);
}

static bool tar_is_other_image_ext(const char *ext)
{
	static const char *const other[] = {"png", "ppm", "pgm", "pbm", "pnm", "bmp", "tif", "tiff",
					    "webp", "gif"};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		if (strcmp(ext, other[i]) == 0)
			return true;
	return false;
}

static int tar_parse_label(struct tar_shard_scan *s, uint64_t offset, const char *name,
			   const char *text, size_t len)
{
	char buf[LABEL_MAX_BYTES + 1];
	memcpy(buf, text, len);
	buf[len] = '\0';
	char *p = buf, *end;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	errno = 0;
	long long v = strtoll(p, &end, 10);
	while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
		end++;
	if (end == p || *end != '\0' || errno != 0)
		return tar_scan_fail(s, offset, "%s: the label \"%.*s\" is not a decimal integer",
				     name, (int)len, text);
	s->label = v;
	return 0;
}

/* A regular member name of size bytes whose data starts at data_offset. */
static int tar_add_member(struct tar_shard_scan *s, uint64_t offset, const char *name,
			  uint64_t size, const unsigned char *piece, size_t piece_len)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const char *dot = strchr(base, '.');
	if (!dot || dot == base || strncmp(base, "__", 2) == 0)
		return 0;
	size_t key_len = (size_t)(dot - name);
	char ext[EXT_MAX + 1];
	size_t ext_len = strlen(dot + 1);
	if (ext_len > EXT_MAX)
		return 0;
	for (size_t i = 0; i <= ext_len; i++)
		ext[i] = (char)(dot[1 + i] >= 'A' && dot[1 + i] <= 'Z' ? dot[1 + i] + 32 : dot[1 + i]);
	if (!s->open || strlen(s->key) != key_len || memcmp(s->key, name, key_len) != 0) {
		int err = tar_sample_end(s);
		if (err < 0)
			return err;
		memcpy(s->key, name, key_len);
		s->key[key_len] = '\0';
		s->key_offset = offset;
		s->open = true;
		s->has_image = s->has_label = s->has_other_image = false;
		s->n_seen = 0;
	}
	bool image = strcmp(ext, "jpg") == 0 || strcmp(ext, "jpeg") == 0;
	bool again = image && s->has_image;
	for (unsigned i = 0; i < s->n_seen; i++)
		again = again || strcmp(s->seen[i], ext) == 0;
	if (again)
		return tar_scan_fail(s, offset, "%s: sample \"%s\" has a second %s member", name,
				     s->key, image ? "image" : ext);
	if (s->n_seen < sizeof(s->seen) / sizeof(s->seen[0]))
		memcpy(s->seen[s->n_seen++], ext, ext_len + 1);
	if (image) {
		s->has_image = true;
		snprintf(s->image_name, sizeof(s->image_name), "%s", name);
		s->image_offset = offset + BLOCK;
		s->image_bytes = size;
	} else if (strcmp(ext, "cls") == 0) {
		if (size > LABEL_MAX_BYTES)
			return tar_scan_fail(s, offset, "%s: a label member of %" PRIu64 " bytes",
					     name, size);
		char text[LABEL_MAX_BYTES];
		int err = tar_small_data(s, offset, piece, piece_len, size, text);
		if (err == 0)
			err = tar_parse_label(s, offset, name, text, (size_t)size);
		if (err < 0)
			return err;
		s->has_label = true;
	} else if (tar_is_other_image_ext(ext)) {
		s->has_other_image = true;
	}
	return 0;
}

/* The member's name: a pending long name, else ustar's prefix/name. */
static void tar_header_name(const unsigned char *h, char *out)
{
	char name[101], prefix[156];
	memcpy(name, h, 100);
	name[100] = '\0';
	memcpy(prefix, h + 345, 155);
	prefix[155] = '\0';
	if (memcmp(h + 257, "ustar\0", 6) == 0 && prefix[0])
		snprintf(out, NAME_MAX_BYTES + 1, "%s/%s", prefix, name);
	else
		snprintf(out, NAME_MAX_BYTES + 1, "%s", name);
}

static bool tar_all_zero(const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static int tar_scan_members(struct tar_shard_scan *s)
{
	unsigned char piece[2 * BLOCK];
	char long_name[NAME_MAX_BYTES + 1], name[NAME_MAX_BYTES + 1];
	bool has_long_name = false, has_pax_size = false;
	uint64_t pax_size = 0;
	for (uint64_t offset = 0;;) {
		ssize_t got = pread(s->fd, piece, sizeof(piece), (off_t)offset);
		if (got < 0)
			return tar_scan_fail(s, offset, "%s", strerror(errno));
		if (got == 0)
			return tar_sample_end(s); /* no end-of-archive blocks: taken as the end, as tar does */
		if ((size_t)got < BLOCK)
			return tar_scan_fail(s, offset,
					     "the file ends inside a header (%zd of 512 bytes)",
					     got);
		if (tar_all_zero(piece, BLOCK))
			return tar_sample_end(s);
		if (!tar_checksum_ok(piece))
			return tar_scan_fail(s, offset,
					     "bad header checksum (not a tar file, or a damaged one)");
		uint64_t size;
		if (!tar_header_number(piece + 124, 12, &size))
			return tar_scan_fail(s, offset,
					     "a header whose size field is not a number");
		char type = (char)piece[156];
		if (has_pax_size && type != 'x' && type != 'g')
			size = pax_size;
		uint64_t data = offset + BLOCK;
		if (size > s->file_bytes || data > s->file_bytes - size)
			return tar_scan_fail(s, offset,
					     "member of %" PRIu64 " bytes runs past the end of the "
					     "file (%" PRIu64 " bytes)", size, s->file_bytes);
		size_t piece_len = (size_t)got;
		int err = 0;
		if (type == 'L' || type == 'x') {
			char text[NAME_MAX_BYTES + 64];
			if (size > (type == 'L' ? NAME_MAX_BYTES : sizeof(text) - 1))
				return tar_scan_fail(s, offset, "a %s of %" PRIu64 " bytes",
						     type == 'L' ? "long name" : "pax extended header",
						     size);
			err = tar_small_data(s, offset, piece, piece_len, size, text);
			text[err == 0 ? size : 0] = '\0';
			if (err == 0 && type == 'L') {
				memcpy(long_name, text, (size_t)size + 1);
				has_long_name = long_name[0] != '\0';
			} else if (err == 0) {
				err = tar_pax_parse(s, offset, text, (size_t)size, long_name,
						    &has_long_name, &pax_size, &has_pax_size);
			}
		} else if (type == '0' || type == '\0' || type == '7') {
			if (has_long_name)
				snprintf(name, sizeof(name), "%s", long_name);
			else
				tar_header_name(piece, name);
			has_long_name = has_pax_size = false;
			err = tar_add_member(s, offset, name, size, piece, piece_len);
		} else if (type != 'g') {
			has_long_name = has_pax_size = false; /* a directory, link, device...: skipped */
		}
		if (err < 0)
			return err;
		offset = data + (size + BLOCK - 1) / BLOCK * BLOCK;
	}
}

/* A failure of the shard as a whole (open, stat): -code. */
static int tar_shard_fail(struct tar_shard_scan *s, int code, const char *why)
{
	return errtext(s->err, s->err_cap, -code, "%s%s%s", s->one_file ? "" : s->path,
		       s->one_file ? "" : ": ", why);
}

static int tar_scan_shard(struct tar_shard_scan *s)
{
	struct stat st;
	s->fd = regfile_open(AT_FDCWD, s->path, &st);
	if (s->fd == REGFILE_NOT_REGULAR) {
		char why[64];
		snprintf(why, sizeof(why), "not a regular file (%s)", regfile_kind(st.st_mode));
		s->fd = -1;
		return tar_shard_fail(s, EINVAL, why);
	}
	if (s->fd < 0) {
		int code = -s->fd;
		s->fd = -1;
		return tar_shard_fail(s, code, strerror(code));
	}
	s->file_bytes = (uint64_t)st.st_size;
	s->open = false;
	int err = tar_scan_members(s);
	close(s->fd);
	s->fd = -1;
	return err;
}

/* Distinct labels, for the start-up line: sorted copy, counted. */
static int tar_cmp_label(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static uint32_t tar_count_labels(const struct image_index *ix)
{
	if (ix->n == 0)
		return 0;
	int64_t *v = malloc(ix->n * sizeof(*v));
	if (!v)
		return 0;
	for (uint64_t i = 0; i < ix->n; i++)
		v[i] = ix->entries[i].label;
	qsort(v, ix->n, sizeof(*v), tar_cmp_label);
	uint32_t distinct = 1;
	for (uint64_t i = 1; i < ix->n; i++)
		distinct += v[i] != v[i - 1];
	free(v);
	return distinct;
}

int tar_scan(const char *pattern, struct image_index *out, char *err, size_t err_cap)
{
	memset(out, 0, sizeof(*out));
	char **paths;
	size_t n_paths;
	int rc = tar_pattern_expand(pattern, &paths, &n_paths, err, err_cap);
	if (rc < 0)
		return rc;
	struct tar_shard_scan *s = calloc(1, sizeof(*s));
	out->shards = calloc(n_paths, sizeof(*out->shards));
	if (!s || !out->shards) {
		rc = -ENOMEM;
		goto done;
	}
	s->ix = out;
	s->err = err;
	s->err_cap = err_cap;
	s->fd = -1;
	s->one_file = n_paths == 1 && strcmp(paths[0], pattern) == 0;
	struct progress progress;
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "reading the shards %s", pattern);
	progress_begin(&progress, "shards", what);
	for (size_t i = 0; rc == 0 && i < n_paths; i++) {
		struct arena_shard *sh = &out->shards[i];
		rc = image_index_add_path(out, &s->cap_paths, paths[i], &sh->path_offset);
		if (rc < 0)
			break;
		sh->first_sample = out->n;
		s->shard = (uint32_t)i;
		s->path = paths[i];
		rc = tar_scan_shard(s);
		sh->n_samples = out->n - sh->first_sample;
		out->n_shards = (uint32_t)(i + 1);
		if (rc == 0 && progress_add(&progress, 1) < 0)
			rc = errtext(err, err_cap, -ECANCELED, "reading stopped (loaderd is "
				     "stopping)");
	}
	progress_end(&progress);
	if (rc == 0 && out->n == 0)
		rc = errtext(err, err_cap, -ENOENT,
			     "no sample with a .jpg or .jpeg member in the %zu shard%s", n_paths,
			     n_paths == 1 ? "" : "s");
	if (rc == 0)
		out->n_classes = tar_count_labels(out);
done:
	if (rc == -ENOMEM)
		errtext(err, err_cap, rc, "out of memory for the sample list");
	if (rc < 0)
		image_index_free(out);
	free(s);
	tar_pattern_free(paths, n_paths);
	return rc;
}
