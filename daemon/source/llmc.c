/* SPDX-License-Identifier: Apache-2.0 */
/* llmc: an llm.c token shard's header, read and checked (llmc.h). */
#include "daemon/source/llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/regfile.h"
#include "daemon/core/progress.h"
#include "daemon/source/tarshard.h"

enum { LLMC_MAGIC_AT = 0, LLMC_VERSION_AT = 4, LLMC_TOKENS_AT = 8 };

static int32_t llmc_i32(const uint8_t *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
		     (uint32_t)p[3] << 24;
	int32_t s;
	memcpy(&s, &v, sizeof(s));
	return s;
}

int llmc_header_parse(const uint8_t *data, size_t len, uint64_t file_bytes, const char *path,
		      uint64_t *n_tokens, char *err, size_t cap)
{
	const char *name = path ? path : "llm.c shard";
	if ((!data && len > 0) || !n_tokens)
		return errtext(err, cap, -EINVAL, "%s: no header to read", name);
	*n_tokens = 0;
	if (file_bytes < LLMC_HEADER_BYTES || len < LLMC_HEADER_BYTES)
		return errtext(err, cap, -ENODATA, "%s: truncated: the header needs %u bytes, the "
			       "file has %" PRIu64, name, LLMC_HEADER_BYTES,
			       file_bytes < len ? file_bytes : (uint64_t)len);
	int32_t magic = llmc_i32(data + LLMC_MAGIC_AT);
	if (magic != LLMC_MAGIC)
		return errtext(err, cap, -EINVAL, "%s: magic at offset %d: %" PRId32 ", not %d (not an "
			       "llm.c token shard)", name, LLMC_MAGIC_AT, magic, LLMC_MAGIC);
	int32_t version = llmc_i32(data + LLMC_VERSION_AT);
	if (version != LLMC_VERSION)
		return errtext(err, cap, -EINVAL, "%s: version at offset %d: %" PRId32 ", only %d "
			       "(uint16 tokens) is known", name, LLMC_VERSION_AT, version, LLMC_VERSION);
	int32_t count = llmc_i32(data + LLMC_TOKENS_AT);
	if (count < 0)
		return errtext(err, cap, -EINVAL, "%s: token count at offset %d: %" PRId32 " is "
			       "negative", name, LLMC_TOKENS_AT, count);
	uint64_t need = LLMC_HEADER_BYTES + (uint64_t)count * LLMC_TOKEN_BYTES;
	if (file_bytes != need)
		return errtext(err, cap, file_bytes < need ? -ENODATA : -EINVAL,
			       "%s: token count at offset %d: %" PRId32 " tokens need %" PRIu64
			       " bytes (%u + 2 x %" PRId32 "), the file has %" PRIu64 ": %s", name,
			       LLMC_TOKENS_AT, count, need, LLMC_HEADER_BYTES, count, file_bytes,
			       file_bytes < need ? "truncated" : "trailing bytes no token count "
			       "accounts for");
	*n_tokens = (uint64_t)count;
	return 0;
}

int llmc_header_read(const char *path, uint64_t *n_tokens, char *err, size_t cap)
{
	struct stat st;
	int fd = regfile_open(AT_FDCWD, path, &st);
	if (fd == REGFILE_NOT_REGULAR)
		return errtext(err, cap, fd, "%s: not a regular file (%s)", path,
			       regfile_kind(st.st_mode));
	if (fd < 0)
		return errtext(err, cap, fd, "%s: %s", path, strerror(-fd));
	uint8_t header[LLMC_HEADER_BYTES];
	size_t got = 0;
	int rc = 0;
	while (got < sizeof(header)) {
		ssize_t n = pread(fd, header + got, sizeof(header) - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = errtext(err, cap, -errno, "%s: read: %s", path, strerror(errno));
			goto close_fd;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	rc = llmc_header_parse(header, got, (uint64_t)st.st_size, path, n_tokens, err, cap);
close_fd:
	close(fd);
	return rc;
}

int llmc_scan(const char *pattern, uint64_t seq_len, struct image_index *out,
	      uint64_t *n_samples, char *err, size_t cap)
{
	char **paths;
	size_t n;
	memset(out, 0, sizeof(*out));
	*n_samples = 0;
	int rc = tar_pattern_expand(pattern, &paths, &n, err, cap);
	if (rc < 0)
		return rc == -ENOMEM ? errtext(err, cap, rc, "%s", strerror(ENOMEM)) : rc;
	uint64_t bytes = 0;
	for (size_t i = 0; i < n; i++)
		bytes += strlen(paths[i]) + 1;
	out->shards = calloc(n, sizeof(*out->shards));
	out->paths = malloc(bytes);
	if (!out->shards || !out->paths) {
		rc = errtext(err, cap, -ENOMEM, "%s", strerror(ENOMEM));
		goto free_index;
	}
	struct progress progress;
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "reading the shards %s", pattern);
	progress_begin(&progress, "shards", what);
	for (size_t i = 0; i < n; i++) {
		uint64_t tokens;
		rc = llmc_header_read(paths[i], &tokens, err, cap);
		if (rc == 0 && progress_add(&progress, 1) < 0)
			rc = errtext(err, cap, -ECANCELED, "reading stopped (loaderd is stopping)");
		if (rc < 0) {
			progress_end(&progress);
			goto free_index;
		}
		struct arena_shard *sh = &out->shards[i];
		sh->path_offset = out->paths_bytes;
		sh->first_sample = *n_samples;
		sh->n_samples = tokens > seq_len ? (tokens - 1) / seq_len : 0;
		*n_samples += sh->n_samples;
		memcpy(out->paths + out->paths_bytes, paths[i], strlen(paths[i]) + 1);
		out->paths_bytes += strlen(paths[i]) + 1;
	}
	out->n_shards = (uint32_t)n;
	progress_end(&progress);
	if (*n_samples == 0) {
		rc = errtext(err, cap, -EINVAL, "%zu shards without one window of seq_len + 1 = %"
			     PRIu64 " tokens", n, seq_len + 1);
		goto free_index;
	}
	tar_pattern_free(paths, n);
	return 0;
free_index:
	image_index_free(out);
	*n_samples = 0;
	tar_pattern_free(paths, n);
	return rc;
}
