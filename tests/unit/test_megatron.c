/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/megatron: indexes written here byte by byte the
 * way Megatron-LM's writer lays them out (uint16 and int32 tokens, several
 * documents, an empty sequence and an empty document), parsed back field
 * by field, from memory at an odd address and through mg_index_open; every
 * integer dtype; then each malformed case, refused with the field and
 * offset named: magic, version, unknown and float dtype codes, counts past
 * the end of the file, trailing bytes and a multimodal sequence_modes
 * array, negative lengths and pointers, pointers past the .bin or not back
 * to back, a .bin shorter or longer than the index says, document indices
 * that do not start at 0, go back, pass or stop short of sequence_count;
 * every prefix of a good index; and files mg_index_open cannot use.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/regfile.h"
#include "daemon/source/megatron.h"

#define IDX_PATH "/data/web_text_document.idx"
#define BIN_PATH "/data/web_text_document.bin"

/* ---- indexes written here ---- */

struct idx {
	uint8_t p[4096];
	size_t len;
	uint64_t bin_bytes; /* what the pointers written cover */
};

static void put(struct idx *b, const void *v, size_t n)
{
	assert_true(b->len + n <= sizeof(b->p));
	memcpy(b->p + b->len, v, n);
	b->len += n;
}

static void set_le(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le(struct idx *b, uint64_t v, unsigned bytes)
{
	uint8_t tmp[8];
	set_le(tmp, v, bytes);
	put(b, tmp, bytes);
}

static unsigned token_bytes_of(uint8_t code)
{
	static const unsigned sizes[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
	return code < 9 ? sizes[code] : 1;
}

/* What Megatron's _IndexWriter writes: the header, then the lengths, the
 * pointers (back to back from 0) and the document indices as given. */
static void write_idx(struct idx *b, uint8_t code, const int32_t *lengths, size_t n,
		      const int64_t *docs, size_t n_docs)
{
	memset(b, 0, sizeof(*b));
	put(b, "MMIDIDX\0\0", 9);
	put_le(b, 1, 8);
	put_le(b, code, 1);
	put_le(b, n, 8);
	put_le(b, n_docs, 8);
	for (size_t i = 0; i < n; i++)
		put_le(b, (uint32_t)lengths[i], 4);
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		put_le(b, at, 8);
		at += (uint64_t)lengths[i] * token_bytes_of(code);
	}
	for (size_t i = 0; i < n_docs; i++)
		put_le(b, (uint64_t)docs[i], 8);
	b->bin_bytes = at;
}

/* Dataset A: uint16 tokens, 6 sequences (one empty) in 4 documents (one
 * empty): 20 tokens, 40 bytes. Offsets: lengths at 34, pointers at 58,
 * document_indices at 106, end at 146. */
static const int32_t a_lengths[] = {5, 3, 0, 7, 1, 4};
static const int64_t a_docs[] = {0, 2, 2, 5, 6};
#define A_N 6
#define A_DOCS 5
#define A_POINTERS_AT (34 + 4 * A_N)
#define A_DOCS_AT (34 + 12 * A_N)

static void write_a(struct idx *b)
{
	write_idx(b, MG_UINT16, a_lengths, A_N, a_docs, A_DOCS);
}

static void expect_a(const struct mg_index *ix)
{
	assert_int_equal(ix->dtype_code, MG_UINT16);
	assert_int_equal(ix->token_bytes, 2);
	assert_false(ix->token_signed);
	assert_int_equal(ix->n_sequences, A_N);
	assert_int_equal(ix->n_documents, A_DOCS - 1);
	assert_int_equal(ix->n_tokens, 20);
	assert_int_equal(ix->bin_bytes, 40);
	static const int64_t pointers[] = {0, 10, 16, 16, 30, 32};
	for (size_t i = 0; i < A_N; i++) {
		assert_int_equal(mg_length(ix, i), a_lengths[i]);
		assert_int_equal(mg_pointer(ix, i), pointers[i]);
	}
	for (size_t d = 0; d < A_DOCS; d++)
		assert_int_equal(mg_doc_index(ix, d), a_docs[d]);
}

/* Parses b against bin_bytes from a copy at an odd address, so that no
 * array is aligned even by chance. The copy lives until the next call:
 * the index refers to it. */
static int parse_odd(const struct idx *b, size_t len, uint64_t bin_bytes, struct mg_index *ix,
		     char *err, size_t cap)
{
	static uint8_t copy[sizeof(b->p) + 1];
	assert_true(len <= sizeof(b->p));
	if (len)
		memcpy(copy + 1, b->p, len);
	return mg_index_parse(copy + 1, len, bin_bytes, IDX_PATH, ix, err, cap);
}

static void test_parse_uint16(void **state)
{
	(void)state;
	struct idx b;
	write_a(&b);
	assert_int_equal(b.len, A_DOCS_AT + 8 * A_DOCS);
	struct mg_index ix;
	char err[512] = "x";
	int rc = parse_odd(&b, b.len, b.bin_bytes, &ix, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s", err);
	assert_string_equal(err, "");
	expect_a(&ix);
	mg_index_free(&ix);
	assert_null(ix.data);
	mg_index_free(&ix);
	mg_index_free(NULL);
}

static void test_parse_int32(void **state)
{
	(void)state;
	static const int32_t lengths[] = {10, 1, 2};
	static const int64_t docs[] = {0, 1, 3};
	struct idx b;
	write_idx(&b, MG_INT32, lengths, 3, docs, 3);
	struct mg_index ix;
	char err[512];
	int rc = parse_odd(&b, b.len, 52, &ix, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s", err);
	assert_int_equal(ix.dtype_code, MG_INT32);
	assert_int_equal(ix.token_bytes, 4);
	assert_true(ix.token_signed);
	assert_int_equal(ix.n_sequences, 3);
	assert_int_equal(ix.n_documents, 2);
	assert_int_equal(ix.n_tokens, 13);
	assert_int_equal(mg_pointer(&ix, 0), 0);
	assert_int_equal(mg_pointer(&ix, 1), 40);
	assert_int_equal(mg_pointer(&ix, 2), 44);
	assert_int_equal(mg_doc_index(&ix, 1), 1);
	assert_int_equal(mg_doc_index(&ix, 2), 3);
	mg_index_free(&ix);
}

/* No sequences, no documents: document_indices is [0], the .bin empty. */
static void test_parse_empty_dataset(void **state)
{
	(void)state;
	static const int64_t docs[] = {0};
	struct idx b;
	write_idx(&b, MG_UINT16, NULL, 0, docs, 1);
	struct mg_index ix;
	char err[512];
	int rc = parse_odd(&b, b.len, 0, &ix, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s", err);
	assert_int_equal(ix.n_sequences, 0);
	assert_int_equal(ix.n_documents, 0);
	assert_int_equal(mg_doc_index(&ix, 0), 0);
	mg_index_free(&ix);
}

static void test_integer_dtypes(void **state)
{
	(void)state;
	static const struct {
		uint8_t code;
		uint32_t bytes;
		bool is_signed;
		const char *name;
	} types[] = {
		{MG_UINT8, 1, false, "uint8"}, {MG_INT8, 1, true, "int8"},
		{MG_INT16, 2, true, "int16"},  {MG_INT32, 4, true, "int32"},
		{MG_INT64, 8, true, "int64"},  {MG_UINT16, 2, false, "uint16"},
	};
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct idx b;
		write_idx(&b, types[t].code, a_lengths, A_N, a_docs, A_DOCS);
		struct mg_index ix;
		char err[512];
		int rc = mg_index_parse(b.p, b.len, 20 * types[t].bytes, IDX_PATH, &ix, err,
					sizeof(err));
		if (rc != 0)
			fail_msg("%s: %s", types[t].name, err);
		assert_int_equal(ix.token_bytes, types[t].bytes);
		assert_int_equal(ix.token_signed, types[t].is_signed);
		assert_int_equal(mg_pointer(&ix, 5), 16 * types[t].bytes);
		assert_string_equal(mg_dtype_name(types[t].code), types[t].name);
		mg_index_free(&ix);
	}
	assert_string_equal(mg_dtype_name(6), "float64");
	assert_string_equal(mg_dtype_name(7), "float32");
	assert_string_equal(mg_dtype_name(0), "unknown");
	assert_string_equal(mg_dtype_name(9), "unknown");
}

/* ---- malformed indexes ---- */

static void expect_refusal_len(const struct idx *b, size_t len, uint64_t bin_bytes, int want,
			       const char *message)
{
	struct mg_index ix;
	memset(&ix, 0xa5, sizeof(ix));
	char err[512] = "";
	int rc = parse_odd(b, len, bin_bytes, &ix, err, sizeof(err));
	if (rc != want)
		fail_msg("rc %d, want %d (%s); expected \"%s\"", rc, want, err, message);
	if (!strstr(err, message))
		fail_msg("\"%s\" does not contain \"%s\"", err, message);
	if (strncmp(err, IDX_PATH ": ", strlen(IDX_PATH) + 2) != 0)
		fail_msg("\"%s\" does not name the file", err);
	assert_null(ix.data);
	assert_int_equal(ix.n_sequences, 0);
}

static void expect_refusal(const struct idx *b, int want, const char *message)
{
	expect_refusal_len(b, b->len, b->bin_bytes, want, message);
}

static void test_header_refused(void **state)
{
	(void)state;
	struct idx b;
	write_a(&b);
	b.p[3] = 'X';
	expect_refusal(&b, -EINVAL, "magic at offset 0: not \"MMIDIDX\\0\\0\"");
	write_a(&b);
	b.p[8] = 1;
	expect_refusal(&b, -EINVAL, "magic at offset 0");

	write_a(&b);
	set_le(b.p + 9, 2, 8);
	expect_refusal(&b, -EINVAL, "version at offset 9: 2, only 1 is known");
	set_le(b.p + 9, 1ull << 40 | 1, 8);
	expect_refusal(&b, -EINVAL, "version at offset 9: 1099511627777");

	static const struct {
		uint8_t code;
		const char *message;
	} codes[] = {
		{0, "dtype code at offset 17: 0 is not a Megatron dtype"},
		{9, "dtype code at offset 17: 9 is not a Megatron dtype"},
		{255, "dtype code at offset 17: 255 is not a Megatron dtype"},
		{6, "dtype code at offset 17: 6 (float64) is not a token type"},
		{7, "dtype code at offset 17: 7 (float32) is not a token type"},
	};
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		write_a(&b);
		b.p[17] = codes[i].code;
		expect_refusal(&b, -EINVAL, codes[i].message);
	}

	write_a(&b);
	set_le(b.p + 26, 0, 8);
	expect_refusal(&b, -EINVAL, "document_count at offset 26: 0, but document_indices");
}

static void test_counts_refused(void **state)
{
	(void)state;
	struct idx b;
	/* Counts the file cannot hold: the first array that runs past its end. */
	static const struct {
		int at;
		uint64_t value;
		const char *message;
	} counts[] = {
		{18, 7, "truncated: document_indices at offset 118 (5 entries of 8 bytes)"},
		{18, 12, "truncated: sequence_pointers at offset 82 (12 entries of 8 bytes)"},
		{18, 1000, "truncated: sequence_lengths at offset 34 (1000 entries of 4 bytes) "
			   "runs past the end of the file (146 bytes)"},
		{18, 1ull << 62, "truncated: sequence_lengths at offset 34"},
		{18, UINT64_MAX, "truncated: sequence_lengths at offset 34"},
		{26, 6, "truncated: document_indices at offset 106 (6 entries of 8 bytes)"},
		{26, UINT64_MAX, "truncated: document_indices at offset 106"},
	};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		write_a(&b);
		set_le(b.p + counts[i].at, counts[i].value, 8);
		expect_refusal(&b, -ENODATA, counts[i].message);
	}

	/* Counts smaller than the arrays: trailing bytes. */
	write_a(&b);
	set_le(b.p + 26, 4, 8);
	expect_refusal(&b, -EINVAL, "8 trailing bytes at offset 138 after document_indices");
	write_a(&b);
	put(&b, "abc", 3);
	expect_refusal(&b, -EINVAL, "3 trailing bytes at offset 146 after document_indices "
				    "(the counts in the header describe a 146-byte file)");
	/* A multimodal dataset: one int8 mode per sequence after the documents. */
	write_a(&b);
	put(&b, "\0\1\0\1\0\0", A_N);
	expect_refusal(&b, -EINVAL, "6 bytes at offset 146 after document_indices: a "
				    "sequence_modes array (a multimodal dataset), which is not "
				    "supported");
}

static void test_sequences_refused(void **state)
{
	(void)state;
	struct idx b;
	char want[256];

	write_a(&b);
	set_le(b.p + 34 + 4, (uint32_t)-3, 4);
	expect_refusal(&b, -EINVAL, "sequence_lengths[1] at offset 38: -3 is negative");
	write_a(&b);
	set_le(b.p + 34 + 20, 0x80000000u, 4);
	expect_refusal(&b, -EINVAL, "sequence_lengths[5] at offset 54: -2147483648 is negative");

	write_a(&b);
	set_le(b.p + A_POINTERS_AT + 2 * 8, 99999999, 8);
	snprintf(want, sizeof(want),
		 "sequence_pointers[2] at offset %d: 99999999 is past the end of " BIN_PATH
		 " (40 bytes)", A_POINTERS_AT + 16);
	expect_refusal(&b, -EINVAL, want);

	write_a(&b);
	set_le(b.p + A_POINTERS_AT + 8, (uint64_t)-8, 8);
	expect_refusal(&b, -EINVAL, "sequence_pointers[1] at offset 66: -8 is negative");
	write_a(&b);
	set_le(b.p + A_POINTERS_AT + 8, 1ull << 63, 8);
	expect_refusal(&b, -EINVAL, "sequence_pointers[1] at offset 66: -9223372036854775808");

	/* In range, but not where the sequence before ends. */
	write_a(&b);
	set_le(b.p + A_POINTERS_AT + 8, 12, 8);
	expect_refusal(&b, -EINVAL, "sequence_pointers[1] at offset 66: 12, but the sequences "
				    "before it end at 10");
	write_a(&b);
	set_le(b.p + A_POINTERS_AT, 2, 8);
	expect_refusal(&b, -EINVAL, "sequence_pointers[0] at offset 58: 2, but the sequences "
				    "before it end at 0");
	/* Starts inside the .bin, ends past it. */
	write_a(&b);
	set_le(b.p + A_POINTERS_AT + 3 * 8, 30, 8);
	expect_refusal(&b, -EINVAL, "sequence_pointers[3] at offset 82: 30 + 7 tokens of 2 bytes "
				    "runs past the end of " BIN_PATH " (40 bytes)");

	/* The .bin shorter or longer than the index says. */
	write_a(&b);
	expect_refusal_len(&b, b.len, 39, -EINVAL,
			   "sequence_pointers[5] at offset 98: 32 + 4 tokens of 2 bytes runs past "
			   "the end of " BIN_PATH " (39 bytes)");
	expect_refusal_len(&b, b.len, 0, -EINVAL,
			   "sequence_pointers[0] at offset 58: 0 + 5 tokens of 2 bytes runs past "
			   "the end of " BIN_PATH " (0 bytes)");
	expect_refusal_len(&b, b.len, 41, -EINVAL,
			   BIN_PATH " is 41 bytes, but the sequences of this index end at 40");
}

static void test_documents_refused(void **state)
{
	(void)state;
	struct idx b;
	static const struct {
		int entry;
		int64_t value;
		const char *message;
	} cases[] = {
		{0, 1, "document_indices[0] at offset 106: 1, not 0"},
		{0, -1, "document_indices[0] at offset 106: -1, not 0"},
		{2, 1, "document_indices[2] at offset 122: 1 is less than the entry before it (2)"},
		{3, -5, "document_indices[3] at offset 130: -5 is less than the entry before it"},
		{3, 7, "document_indices[3] at offset 130: 7 is past sequence_count (6)"},
		{4, 5, "document_indices[4] at offset 138: 5, but the last entry must be "
		       "sequence_count (6)"},
		{4, 7, "document_indices[4] at offset 138: 7 is past sequence_count (6)"},
		{4, INT64_MAX, "document_indices[4] at offset 138: 9223372036854775807 is past"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_a(&b);
		set_le(b.p + A_DOCS_AT + 8 * cases[i].entry, (uint64_t)cases[i].value, 8);
		expect_refusal(&b, -EINVAL, cases[i].message);
	}
	/* Sequences but no documents: [0] alone must then be sequence_count. */
	static const int64_t zero[] = {0};
	write_idx(&b, MG_UINT16, a_lengths, A_N, zero, 1);
	expect_refusal(&b, -EINVAL, "document_indices[0] at offset 106: 0, but the last entry "
				    "must be sequence_count (6)");
}

/* Every prefix of a good index runs out of data, named, before anything
 * else is said of it. */
static void test_every_prefix_truncated(void **state)
{
	(void)state;
	struct idx b;
	write_a(&b);
	for (size_t len = 0; len < b.len; len++) {
		struct mg_index ix;
		char err[512] = "";
		int rc = parse_odd(&b, len, b.bin_bytes, &ix, err, sizeof(err));
		if (rc != -ENODATA)
			fail_msg("prefix of %zu bytes: rc %d (%s)", len, rc, err);
		if (!strstr(err, IDX_PATH ": truncated: "))
			fail_msg("prefix of %zu bytes: \"%s\"", len, err);
		assert_null(ix.data);
	}
	struct mg_index ix;
	assert_int_equal(mg_index_parse(b.p, 4, 40, IDX_PATH, &ix, NULL, 0), -ENODATA);
	char err[512];
	assert_int_equal(mg_index_parse(b.p, 20, 40, IDX_PATH, &ix, err, sizeof(err)), -ENODATA);
	assert_string_equal(err, IDX_PATH ": truncated: sequence_count at offset 18 needs 8 bytes, "
				 "the file has 20");
	assert_int_equal(mg_index_parse(NULL, 0, 0, NULL, &ix, err, sizeof(err)), -ENODATA);
	assert_string_equal(err, "truncated: magic at offset 0 needs 9 bytes, the file has 0");
	assert_int_equal(mg_index_parse(NULL, 5, 0, NULL, &ix, err, sizeof(err)), -EINVAL);
	assert_int_equal(mg_index_parse(b.p, b.len, 40, NULL, NULL, err, sizeof(err)), -EINVAL);
}

/* ---- files ---- */

struct files {
	char dir[64];
	char prefix[96], idx[100], bin[100];
};

static void files_make(struct files *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_megatron.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->prefix, sizeof(f->prefix), "%s/web_text_document", f->dir);
	snprintf(f->idx, sizeof(f->idx), "%s.idx", f->prefix);
	snprintf(f->bin, sizeof(f->bin), "%s.bin", f->prefix);
}

static void files_remove(struct files *f)
{
	unlink(f->idx);
	rmdir(f->idx);
	unlink(f->bin);
	rmdir(f->bin);
	assert_int_equal(rmdir(f->dir), 0);
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(data, 1, len, fp), len);
	assert_int_equal(fclose(fp), 0);
}

/* A .bin of bytes tokens: token t of the dataset is t, little-endian. */
static void write_bin(const char *path, uint64_t bytes, unsigned token_bytes)
{
	uint8_t data[256] = {0};
	assert_true(bytes <= sizeof(data));
	for (uint64_t i = 0; i < bytes / token_bytes; i++)
		set_le(data + i * token_bytes, i, token_bytes);
	write_file(path, data, (size_t)bytes);
}

static void expect_open_refusal(const struct files *f, int want, const char *path,
				const char *message)
{
	struct mg_index ix;
	char err[512] = "";
	int rc = mg_index_open(f->prefix, &ix, err, sizeof(err));
	if (rc != want)
		fail_msg("rc %d, want %d (%s)", rc, want, err);
	char full[256];
	snprintf(full, sizeof(full), "%s: %s", path, message);
	if (!strstr(err, full))
		fail_msg("\"%s\" does not contain \"%s\"", err, full);
	assert_null(ix.data);
}

static void test_open(void **state)
{
	(void)state;
	struct files f;
	files_make(&f);
	struct idx b;
	write_a(&b);
	expect_open_refusal(&f, -ENOENT, f.idx, strerror(ENOENT));
	write_file(f.idx, b.p, b.len);
	expect_open_refusal(&f, -ENOENT, f.bin, strerror(ENOENT));
	write_bin(f.bin, b.bin_bytes, 2);

	struct mg_index ix;
	char err[512] = "x";
	int rc = mg_index_open(f.prefix, &ix, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s", err);
	assert_string_equal(err, "");
	expect_a(&ix);
	mg_index_free(&ix);

	/* The parser's messages name the files opened. */
	write_bin(f.bin, b.bin_bytes - 2, 2);
	char want[256];
	snprintf(want, sizeof(want), "sequence_pointers[5] at offset 98: 32 + 4 tokens of 2 bytes "
		 "runs past the end of %s (38 bytes)", f.bin);
	expect_open_refusal(&f, -EINVAL, f.idx, want);
	write_file(f.idx, b.p, 10);
	expect_open_refusal(&f, -ENODATA, f.idx, "truncated: version at offset 9");
	write_file(f.idx, "", 0);
	expect_open_refusal(&f, -ENODATA, f.idx, "truncated: magic at offset 0");

	/* Not regular files: refused, never opened (a FIFO would block). */
	assert_int_equal(unlink(f.idx), 0);
	assert_int_equal(mkdir(f.idx, 0700), 0);
	expect_open_refusal(&f, REGFILE_NOT_REGULAR, f.idx, "not a regular file (a directory)");
	assert_int_equal(rmdir(f.idx), 0);
	assert_int_equal(mkfifo(f.idx, 0600), 0);
	expect_open_refusal(&f, REGFILE_NOT_REGULAR, f.idx, "not a regular file (a FIFO)");
	assert_int_equal(unlink(f.idx), 0);
	write_file(f.idx, b.p, b.len);
	assert_int_equal(unlink(f.bin), 0);
	assert_int_equal(mkfifo(f.bin, 0600), 0);
	expect_open_refusal(&f, REGFILE_NOT_REGULAR, f.bin, "not a regular file (a FIFO)");
	assert_int_equal(unlink(f.bin), 0);
	assert_int_equal(mkdir(f.bin, 0700), 0);
	expect_open_refusal(&f, REGFILE_NOT_REGULAR, f.bin, "not a regular file (a directory)");

	assert_int_equal(mg_index_open(NULL, &ix, err, sizeof(err)), -EINVAL);
	assert_int_equal(mg_index_open(f.prefix, NULL, err, sizeof(err)), -EINVAL);
	files_remove(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_uint16),
		cmocka_unit_test(test_parse_int32),
		cmocka_unit_test(test_parse_empty_dataset),
		cmocka_unit_test(test_integer_dtypes),
		cmocka_unit_test(test_header_refused),
		cmocka_unit_test(test_counts_refused),
		cmocka_unit_test(test_sequences_refused),
		cmocka_unit_test(test_documents_refused),
		cmocka_unit_test(test_every_prefix_truncated),
		cmocka_unit_test(test_open),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
