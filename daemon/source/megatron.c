/* SPDX-License-Identifier: Apache-2.0 */
/*
 * megatron: a Megatron-LM dataset index, read and checked (megatron.h).
 *
 * The header's fields are taken in file order, each checked as soon as its
 * bytes are there, so every prefix of a good index runs out of data
 * (-ENODATA) before any other complaint. The counts are then held against
 * the file's length by division, never by multiplying an untrusted count.
 * One pass over each array checks it, one element at a time, through
 * little-endian byte loads; nothing is copied, and mg_index_open hands the
 * pages of each stretch it has checked back to the kernel (madvise) before
 * the next, so checking an index of any size takes bounded memory.
 */
#include "daemon/source/megatron.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/regfile.h"
#include "daemon/core/progress.h"

static const uint8_t mg_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

enum {
	MG_VERSION_AT = 9,
	MG_DTYPE_AT = 17,
	MG_SEQUENCES_AT = 18,
	MG_DOCUMENTS_AT = 26,
};

struct mg_parser {
	const uint8_t *p;
	size_t len;
	uint64_t bin_bytes;
	const char *idx_path;
	char *err;
	size_t cap;
	/* mg_index_open: the bytes [from, to) are checked and not needed again */
	void (*done)(void *ctx, const uint8_t *p, size_t from, size_t to);
	void *done_ctx;
};

/* Elements checked between two calls of done. */
#define MG_STRETCH ((uint64_t)1 << 20)

/* done's call for the bytes [from, to) of ps, if it has one. */
static void mg_done(const struct mg_parser *ps, size_t from, size_t to)
{
	if (ps->done && to > from)
		ps->done(ps->done_ctx, ps->p, from, to);
}

const char *mg_dtype_name(uint8_t code)
{
	static const char *const names[] = {
		[MG_UINT8] = "uint8",     [MG_INT8] = "int8",       [MG_INT16] = "int16",
		[MG_INT32] = "int32",     [MG_INT64] = "int64",     [MG_FLOAT64] = "float64",
		[MG_FLOAT32] = "float32", [MG_UINT16] = "uint16",
	};
	if (code < sizeof(names) / sizeof(names[0]) && names[code])
		return names[code];
	return "unknown";
}

/* Bytes per token of an integer code, 0 for a float or unknown one. */
static uint32_t mg_token_bytes(uint8_t code)
{
	switch (code) {
	case MG_UINT8:
	case MG_INT8:
		return 1;
	case MG_INT16:
	case MG_UINT16:
		return 2;
	case MG_INT32:
		return 4;
	case MG_INT64:
		return 8;
	default:
		return 0;
	}
}

static int mg_fail(const struct mg_parser *ps, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int mg_fail(const struct mg_parser *ps, int rc, const char *fmt, ...)
{
	char what[4608]; /* room for a path (in bin names) and the rest */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (ps->idx_path)
		return errtext(ps->err, ps->cap, rc, "%s: %s", ps->idx_path, what);
	return errtext(ps->err, ps->cap, rc, "%s", what);
}

/* The .bin's name for messages: idx_path with ".bin" for its ".idx". */
static void mg_bin_name(const struct mg_parser *ps, char *name, size_t cap)
{
	const char *idx = ps->idx_path;
	size_t n = idx ? strlen(idx) : 0;
	if (n >= 4 && strcmp(idx + n - 4, ".idx") == 0)
		snprintf(name, cap, "%.*s.bin", (int)(n - 4), idx);
	else
		snprintf(name, cap, "the .bin file");
}

/* Little-endian loads from any address (memcpy: one unaligned load where
 * the machine has them, never a misaligned typed access). */
static uint64_t mg_le64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static uint32_t mg_le32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

/* Two's complement without implementation-defined conversions. */
static int64_t mg_i64(uint64_t v)
{
	return v <= INT64_MAX ? (int64_t)v : -(int64_t)(UINT64_MAX - v) - 1;
}

static int32_t mg_i32(uint32_t v)
{
	return v <= INT32_MAX ? (int32_t)v : -(int32_t)(UINT32_MAX - v) - 1;
}

/* 0 when the header field [at, at + bytes) is in the file. */
static int mg_need(const struct mg_parser *ps, const char *field, size_t at, size_t bytes)
{
	if (ps->len >= at + bytes)
		return 0;
	return mg_fail(ps, -ENODATA, "truncated: %s at offset %zu needs %zu bytes, the file has %zu",
		       field, at, bytes, ps->len);
}

/* 0 when an array of count entries of size bytes fits in *room, which it
 * then leaves smaller by the array. */
static int mg_fit(const struct mg_parser *ps, const char *field, size_t at, uint64_t count,
		  unsigned size, size_t *room)
{
	if (count <= *room / size) {
		*room -= (size_t)count * size;
		return 0;
	}
	return mg_fail(ps, -ENODATA,
		       "truncated: %s at offset %zu (%" PRIu64 " entries of %u bytes) runs past "
		       "the end of the file (%zu bytes)",
		       field, at, count, size, ps->len);
}

static int mg_check_header(const struct mg_parser *ps, struct mg_index *ix, uint64_t *doc_count)
{
	int rc;
	if ((rc = mg_need(ps, "magic", 0, sizeof(mg_magic))) < 0)
		return rc;
	if (memcmp(ps->p, mg_magic, sizeof(mg_magic)) != 0)
		return mg_fail(ps, -EINVAL,
			       "magic at offset 0: not \"MMIDIDX\\0\\0\" (not a Megatron-LM index)");
	if ((rc = mg_need(ps, "version", MG_VERSION_AT, 8)) < 0)
		return rc;
	uint64_t version = mg_le64(ps->p + MG_VERSION_AT);
	if (version != 1)
		return mg_fail(ps, -EINVAL, "version at offset %d: %" PRIu64 ", only 1 is known",
			       MG_VERSION_AT, version);
	if ((rc = mg_need(ps, "dtype code", MG_DTYPE_AT, 1)) < 0)
		return rc;
	uint8_t code = ps->p[MG_DTYPE_AT];
	if (code < MG_UINT8 || code > MG_UINT16)
		return mg_fail(ps, -EINVAL, "dtype code at offset %d: %u is not a Megatron dtype",
			       MG_DTYPE_AT, code);
	ix->token_bytes = mg_token_bytes(code);
	if (ix->token_bytes == 0)
		return mg_fail(ps, -EINVAL,
			       "dtype code at offset %d: %u (%s) is not a token type (only integer "
			       "types are)",
			       MG_DTYPE_AT, code, mg_dtype_name(code));
	ix->dtype_code = code;
	ix->token_signed = code == MG_INT8 || code == MG_INT16 || code == MG_INT32 ||
			   code == MG_INT64;
	if ((rc = mg_need(ps, "sequence_count", MG_SEQUENCES_AT, 8)) < 0)
		return rc;
	ix->n_sequences = mg_le64(ps->p + MG_SEQUENCES_AT);
	if ((rc = mg_need(ps, "document_count", MG_DOCUMENTS_AT, 8)) < 0)
		return rc;
	*doc_count = mg_le64(ps->p + MG_DOCUMENTS_AT);
	if (*doc_count == 0)
		return mg_fail(ps, -EINVAL,
			       "document_count at offset %d: 0, but document_indices holds at least "
			       "its leading 0",
			       MG_DOCUMENTS_AT);
	ix->n_documents = *doc_count - 1;
	return 0;
}

/* sequence_lengths and sequence_pointers, checked against each other and
 * the .bin. */
static int mg_check_sequences(const struct mg_parser *ps, struct mg_index *ix)
{
	const size_t lengths_at = MG_HEADER_BYTES;
	const size_t pointers_at = lengths_at + (size_t)ix->n_sequences * 4;
	uint64_t end = 0; /* where the sequences so far end in .bin, <= bin_bytes */
	char bin[4200];
	for (uint64_t i = 0; i < ix->n_sequences; i++) {
		size_t length_at = lengths_at + (size_t)i * 4, pointer_at = pointers_at + (size_t)i * 8;
		int32_t length = mg_i32(mg_le32(ps->p + length_at));
		int64_t pointer = mg_i64(mg_le64(ps->p + pointer_at));
		if (length < 0)
			return mg_fail(ps, -EINVAL, "sequence_lengths[%" PRIu64 "] at offset %zu: %" PRId32
				       " is negative", i, length_at, length);
		if (pointer < 0)
			return mg_fail(ps, -EINVAL, "sequence_pointers[%" PRIu64 "] at offset %zu: %" PRId64
				       " is negative", i, pointer_at, pointer);
		uint64_t bytes = (uint64_t)length * ix->token_bytes;
		if ((uint64_t)pointer > ps->bin_bytes) {
			mg_bin_name(ps, bin, sizeof(bin));
			return mg_fail(ps, -EINVAL,
				       "sequence_pointers[%" PRIu64 "] at offset %zu: %" PRId64
				       " is past the end of %s (%" PRIu64 " bytes)",
				       i, pointer_at, pointer, bin, ps->bin_bytes);
		}
		if (bytes > ps->bin_bytes - (uint64_t)pointer) {
			mg_bin_name(ps, bin, sizeof(bin));
			return mg_fail(ps, -EINVAL,
				       "sequence_pointers[%" PRIu64 "] at offset %zu: %" PRId64
				       " + %" PRId32 " tokens of %" PRIu32 " bytes runs past the end "
				       "of %s (%" PRIu64 " bytes)",
				       i, pointer_at, pointer, length, ix->token_bytes, bin,
				       ps->bin_bytes);
		}
		if ((uint64_t)pointer != end)
			return mg_fail(ps, -EINVAL,
				       "sequence_pointers[%" PRIu64 "] at offset %zu: %" PRId64
				       ", but the sequences before it end at %" PRIu64
				       " (they are stored back to back)",
				       i, pointer_at, pointer, end);
		end += bytes;
		ix->n_tokens += (uint64_t)length;
		if ((i + 1) % MG_STRETCH == 0) {
			mg_done(ps, lengths_at + (size_t)(i + 1 - MG_STRETCH) * 4, length_at + 4);
			mg_done(ps, pointers_at + (size_t)(i + 1 - MG_STRETCH) * 8, pointer_at + 8);
		}
	}
	if (end != ps->bin_bytes) {
		mg_bin_name(ps, bin, sizeof(bin));
		return mg_fail(ps, -EINVAL,
			       "%s is %" PRIu64 " bytes, but the sequences of this index end at %" PRIu64,
			       bin, ps->bin_bytes, end);
	}
	return 0;
}

static int mg_check_documents(const struct mg_parser *ps, const struct mg_index *ix)
{
	const size_t at = MG_HEADER_BYTES + (size_t)ix->n_sequences * 12;
	const int64_t last = (int64_t)ix->n_sequences; /* < 2^61: the file holds 12 bytes each */
	int64_t before = 0;
	for (uint64_t d = 0; d <= ix->n_documents; d++) {
		size_t entry_at = at + (size_t)d * 8;
		int64_t v = mg_i64(mg_le64(ps->p + entry_at));
		if (d == 0 && v != 0)
			return mg_fail(ps, -EINVAL,
				       "document_indices[0] at offset %zu: %" PRId64 ", not 0",
				       entry_at, v);
		if (d > 0 && v < before)
			return mg_fail(ps, -EINVAL,
				       "document_indices[%" PRIu64 "] at offset %zu: %" PRId64
				       " is less than the entry before it (%" PRId64 ")",
				       d, entry_at, v, before);
		if (v > last)
			return mg_fail(ps, -EINVAL,
				       "document_indices[%" PRIu64 "] at offset %zu: %" PRId64
				       " is past sequence_count (%" PRIu64 ")",
				       d, entry_at, v, ix->n_sequences);
		if (d == ix->n_documents && v != last)
			return mg_fail(ps, -EINVAL,
				       "document_indices[%" PRIu64 "] at offset %zu: %" PRId64
				       ", but the last entry must be sequence_count (%" PRIu64 ")",
				       d, entry_at, v, ix->n_sequences);
		before = v;
		if ((d + 1) % MG_STRETCH == 0)
			mg_done(ps, at + (size_t)(d + 1 - MG_STRETCH) * 8, entry_at + 8);
	}
	return 0;
}

int32_t mg_length(const struct mg_index *ix, uint64_t i)
{
	return mg_i32(mg_le32(ix->data + MG_HEADER_BYTES + (size_t)i * 4));
}

int64_t mg_pointer(const struct mg_index *ix, uint64_t i)
{
	return mg_i64(mg_le64(ix->data + MG_HEADER_BYTES + (size_t)ix->n_sequences * 4 +
			      (size_t)i * 8));
}

int64_t mg_doc_index(const struct mg_index *ix, uint64_t d)
{
	return mg_i64(mg_le64(ix->data + MG_HEADER_BYTES + (size_t)ix->n_sequences * 12 +
			      (size_t)d * 8));
}

uint64_t mg_pointers_at(const struct mg_index *ix)
{
	return MG_HEADER_BYTES + ix->n_sequences * 4;
}

uint64_t mg_doc_indices_at(const struct mg_index *ix)
{
	return MG_HEADER_BYTES + ix->n_sequences * 12;
}

/* The header's checks and the arrays' sizes against the file's: O(1). */
static int mg_check_layout(const struct mg_parser *ps, struct mg_index *ix)
{
	uint64_t doc_count;
	int rc = mg_check_header(ps, ix, &doc_count);
	if (rc < 0)
		return rc;
	size_t room = ps->len - MG_HEADER_BYTES;
	if ((rc = mg_fit(ps, "sequence_lengths", MG_HEADER_BYTES, ix->n_sequences, 4, &room)) < 0)
		return rc;
	const size_t pointers_at = MG_HEADER_BYTES + (size_t)ix->n_sequences * 4;
	if ((rc = mg_fit(ps, "sequence_pointers", pointers_at, ix->n_sequences, 8, &room)) < 0)
		return rc;
	const size_t documents_at = pointers_at + (size_t)ix->n_sequences * 8;
	if ((rc = mg_fit(ps, "document_indices", documents_at, doc_count, 8, &room)) < 0)
		return rc;
	if (room == 0)
		return 0;
	size_t trailing_at = ps->len - room;
	if (room == ix->n_sequences)
		return mg_fail(ps, -EINVAL,
			       "%zu bytes at offset %zu after document_indices: a sequence_modes "
			       "array (a multimodal dataset), which is not supported",
			       room, trailing_at);
	return mg_fail(ps, -EINVAL,
		       "%zu trailing bytes at offset %zu after document_indices "
		       "(the counts in the header describe a %zu-byte file)",
		       room, trailing_at, trailing_at);
}

/* mg_index_parse, with done called for each stretch checked; layout_only:
 * the header and the arrays' sizes, not the arrays (n_tokens left 0). */
static int mg_parse(const uint8_t *data, size_t len, uint64_t bin_bytes, const char *idx_path,
		    struct mg_index *out, char *err, size_t cap,
		    void (*done)(void *ctx, const uint8_t *p, size_t from, size_t to), void *done_ctx,
		    bool layout_only)
{
	if (err && cap > 0)
		err[0] = '\0';
	const struct mg_parser ps = {
		.p = data, .len = len, .bin_bytes = bin_bytes, .idx_path = idx_path,
		.err = err, .cap = cap, .done = done, .done_ctx = done_ctx,
	};
	if (out)
		memset(out, 0, sizeof(*out));
	if (!out || (!data && len > 0))
		return mg_fail(&ps, -EINVAL, "no index to parse");
	struct mg_index ix = {0};
	int rc = mg_check_layout(&ps, &ix);
	if (rc == 0 && !layout_only)
		rc = mg_check_sequences(&ps, &ix);
	if (rc == 0 && !layout_only)
		rc = mg_check_documents(&ps, &ix);
	if (rc < 0) {
		memset(out, 0, sizeof(*out));
		return rc;
	}
	ix.bin_bytes = bin_bytes;
	ix.data = data;
	*out = ix;
	return 0;
}

int mg_index_parse(const uint8_t *data, size_t len, uint64_t bin_bytes, const char *idx_path,
		   struct mg_index *out, char *err, size_t cap)
{
	return mg_parse(data, len, bin_bytes, idx_path, out, err, cap, NULL, NULL, false);
}

/* A path's stat, for the .bin: its size, or -errno / REGFILE_NOT_REGULAR
 * with the message written. */
static int mg_stat_bin(const char *path, struct mg_file *bin, char *err, size_t cap)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		int rc = -errno;
		return errtext(err, cap, rc, "%s: %s", path, strerror(-rc));
	}
	if (!S_ISREG(st.st_mode))
		return errtext(err, cap, REGFILE_NOT_REGULAR, "%s: not a regular file (%s)", path,
			       regfile_kind(st.st_mode));
	cachefile_stamp_of(&st, &bin->stamp);
	bin->bytes = (uint64_t)st.st_size;
	return 0;
}

/* Gives the whole pages of [p + from, p + to) back: they are the page
 * cache's, and a later read faults them in again. */
static void mg_drop(const uint8_t *p, size_t from, size_t to)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)(p + from) + page - 1) & ~(page - 1);
	uintptr_t b = (uintptr_t)(p + to) & ~(page - 1);
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

/* mg_index_open's parse: the checked stretches' pages given back, and how
 * far the check is counted in MiB (daemon/core/progress.h), so that a
 * large index on a slow disk says where it is. */
struct mg_open_check {
	struct progress progress;
	size_t bytes; /* checked, not yet counted */
	bool stopped; /* progress_add said loaderd is stopping */
};

static void mg_open_done(void *ctx, const uint8_t *p, size_t from, size_t to)
{
	struct mg_open_check *oc = ctx;
	mg_drop(p, from, to);
	oc->bytes += to - from;
	if (oc->bytes >= ((size_t)1 << 20)) {
		if (progress_add(&oc->progress, oc->bytes >> 20) < 0)
			oc->stopped = true;
		oc->bytes &= ((size_t)1 << 20) - 1;
	}
}

void mg_index_drop_documents(const struct mg_index *ix, uint64_t from, uint64_t to)
{
	if (!ix || !ix->map || from > to || to > ix->n_documents)
		return;
	size_t docs_at = MG_HEADER_BYTES + (size_t)ix->n_sequences * 12;
	size_t pointers_at = MG_HEADER_BYTES + (size_t)ix->n_sequences * 4;
	uint64_t q0 = (uint64_t)mg_doc_index(ix, from), q1 = (uint64_t)mg_doc_index(ix, to);
	mg_drop(ix->map, docs_at + (size_t)from * 8, docs_at + (size_t)to * 8);
	mg_drop(ix->map, pointers_at + (size_t)q0 * 8, pointers_at + (size_t)q1 * 8);
}

int mg_index_map(const char *prefix, struct mg_index *out, char *err, size_t cap)
{
	if (err && cap > 0)
		err[0] = '\0';
	if (!out)
		return errtext(err, cap, -EINVAL, "no index to fill");
	memset(out, 0, sizeof(*out));
	if (!prefix)
		return errtext(err, cap, -EINVAL, "no dataset prefix");
	size_t n = strlen(prefix);
	char *idx = malloc(2 * (n + 5));
	if (!idx)
		return errtext(err, cap, -ENOMEM, "%s: %s", prefix, strerror(ENOMEM));
	char *bin = idx + n + 5;
	snprintf(idx, n + 5, "%s.idx", prefix);
	snprintf(bin, n + 5, "%s.bin", prefix);

	struct stat st;
	int rc;
	int fd = regfile_open(AT_FDCWD, idx, &st);
	if (fd == REGFILE_NOT_REGULAR) {
		rc = errtext(err, cap, fd, "%s: not a regular file (%s)", idx,
			     regfile_kind(st.st_mode));
		goto free_paths;
	}
	if (fd < 0) {
		rc = errtext(err, cap, fd, "%s: %s", idx, strerror(-fd));
		goto free_paths;
	}
	if ((rc = mg_stat_bin(bin, &out->bin_file, err, cap)) < 0)
		goto close_fd;
	if ((uint64_t)st.st_size > SIZE_MAX) {
		rc = errtext(err, cap, -EFBIG, "%s: %jd bytes, too large to map", idx,
			     (intmax_t)st.st_size);
		goto close_fd;
	}
	size_t len = (size_t)st.st_size;
	if (len > 0) {
		void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			rc = -errno;
			errtext(err, cap, rc, "%s: mmap: %s", idx, strerror(-rc));
			goto close_fd;
		}
		out->map = m;
		out->data = m;
	}
	/* A file that shrinks under the mapping would fault (SIGBUS) when
	 * read; dataset files are written once, before training starts. */
	out->map_bytes = len;
	out->bin_bytes = out->bin_file.bytes;
	cachefile_stamp_of(&st, &out->idx_file.stamp);
	out->idx_file.bytes = len;
	out->idx_dev = (uint64_t)st.st_dev;
	out->idx_ino = (uint64_t)st.st_ino;
	out->idx_mtime_sec = (int64_t)st.st_mtim.tv_sec;
	out->idx_mtime_nsec = (int64_t)st.st_mtim.tv_nsec;
	rc = 0;
close_fd:
	close(fd);
free_paths:
	free(idx);
	if (rc < 0)
		memset(out, 0, sizeof(*out));
	return rc;
}

/* A mapped index's figures from a parse of its bytes (parsed), its
 * mapping and files kept. */
static void mg_keep_figures(struct mg_index *ix, const struct mg_index *parsed)
{
	struct mg_index mapped = *ix;
	*ix = *parsed;
	ix->map = mapped.map;
	ix->map_bytes = mapped.map_bytes;
	ix->idx_file = mapped.idx_file;
	ix->bin_file = mapped.bin_file;
	ix->idx_dev = mapped.idx_dev;
	ix->idx_ino = mapped.idx_ino;
	ix->idx_mtime_sec = mapped.idx_mtime_sec;
	ix->idx_mtime_nsec = mapped.idx_mtime_nsec;
}

int mg_index_check(struct mg_index *ix, const char *idx_path, char *err, size_t cap)
{
	const uint8_t *map = ix->map;
	size_t len = ix->map_bytes;
	if (map)
		madvise((void *)map, len, MADV_SEQUENTIAL);
	struct mg_open_check oc = {0};
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "checking %s", idx_path);
	progress_begin(&oc.progress, "MiB", what);
	struct mg_index parsed;
	int rc = mg_parse(map, len, ix->bin_bytes, idx_path, &parsed, err, cap, mg_open_done, &oc,
			  false);
	progress_end(&oc.progress);
	if (rc == 0 && oc.stopped)
		rc = errtext(err, cap, -ECANCELED, "%s: checking stopped (loaderd is stopping)",
			     idx_path);
	if (rc < 0) {
		mg_index_free(ix);
		return rc;
	}
	mg_keep_figures(ix, &parsed);
	if (map) {
		madvise((void *)map, len, MADV_NORMAL);
		mg_drop(map, 0, len);
	}
	return 0;
}

int mg_index_trust(struct mg_index *ix, const char *idx_path, const struct mg_index *figures,
		   char *err, size_t cap)
{
	struct mg_index parsed;
	int rc = mg_parse(ix->map, ix->map_bytes, ix->bin_bytes, idx_path, &parsed, err, cap, NULL,
			  NULL, true);
	if (rc == 0 && (parsed.dtype_code != figures->dtype_code ||
			parsed.n_sequences != figures->n_sequences ||
			parsed.n_documents != figures->n_documents ||
			figures->n_tokens > ix->bin_bytes / parsed.token_bytes ||
			figures->n_tokens * parsed.token_bytes != ix->bin_bytes))
		rc = errtext(err, cap, -ESTALE, "%s: its header (%s, %" PRIu64 " sequences, %" PRIu64
			     " documents, %" PRIu64 " bytes of tokens) is not the one checked",
			     idx_path, mg_dtype_name(parsed.dtype_code), parsed.n_sequences,
			     parsed.n_documents, ix->bin_bytes);
	if (rc < 0)
		return rc;
	parsed.n_tokens = figures->n_tokens;
	mg_keep_figures(ix, &parsed);
	return 0;
}

int mg_index_open(const char *prefix, struct mg_index *out, char *err, size_t cap)
{
	int rc = mg_index_map(prefix, out, err, cap);
	if (rc < 0)
		return rc;
	size_t n = strlen(prefix);
	char *idx = malloc(n + 5);
	if (!idx) {
		mg_index_free(out);
		return errtext(err, cap, -ENOMEM, "%s: %s", prefix, strerror(ENOMEM));
	}
	snprintf(idx, n + 5, "%s.idx", prefix);
	rc = mg_index_check(out, idx, err, cap);
	free(idx);
	return rc;
}

void mg_index_free(struct mg_index *ix)
{
	if (!ix)
		return;
	if (ix->map)
		munmap(ix->map, ix->map_bytes);
	memset(ix, 0, sizeof(*ix));
}
