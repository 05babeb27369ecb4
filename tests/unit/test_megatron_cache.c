/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/megatron_cache (and cachefile): an index of
 * 40 documents written to a temporary directory is opened with a cache_dir:
 * the first open checks it in full and writes the cache (mode 0600) with
 * its figures and a shape's sums; the second trusts it (no full check), has
 * the same figures, and reads the same sums back; a shape it does not hold
 * is computed. The file's bytes are then decoded with each fault a disk or a
 * writer could leave: every prefix (truncated), a byte flipped (checksum),
 * another version, another magic, and, with the checksum put right, a
 * count of shapes past the maximum and past the bytes, a shape whose
 * blocks hold more tokens than the index, a path that is not absolute, a
 * float dtype: each refused with a reason, never accepted. A .idx touched
 * since the check makes the next open check it in full.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/crc32c.h"
#include "daemon/source/megatron_cache.h"

#define DOCS 40u

struct fixture {
	char dir[64], prefix[96], cache[96], idx[112];
};

static void put_le(FILE *f, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		fputc((int)((v >> (8 * i)) & 0xff), f);
}

/* DOCS documents of one sequence each, of 1 + d % 7 uint16 tokens; both
 * files' mtimes 10 s back (a file changed within 0.1 s is not cached). */
static void make_index(struct fixture *fx)
{
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ldr-mgcache-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->prefix, sizeof(fx->prefix), "%s/corpus", fx->dir);
	snprintf(fx->cache, sizeof(fx->cache), "%s/cache", fx->dir);
	snprintf(fx->idx, sizeof(fx->idx), "%s.idx", fx->prefix);
	FILE *f = fopen(fx->idx, "wb");
	assert_non_null(f);
	fwrite("MMIDIDX\0\0", 1, 9, f);
	put_le(f, 1, 8);
	put_le(f, MG_UINT16, 1);
	put_le(f, DOCS, 8);
	put_le(f, DOCS + 1, 8);
	uint64_t tokens = 0;
	for (uint32_t d = 0; d < DOCS; d++)
		put_le(f, 1 + d % 7, 4);
	for (uint32_t d = 0; d < DOCS; d++) {
		put_le(f, tokens * 2, 8);
		tokens += 1 + d % 7;
	}
	for (uint32_t d = 0; d <= DOCS; d++)
		put_le(f, d, 8);
	fclose(f);
	char bin[112];
	snprintf(bin, sizeof(bin), "%s.bin", fx->prefix);
	f = fopen(bin, "wb");
	assert_non_null(f);
	for (uint64_t t = 0; t < tokens; t++)
		put_le(f, t, 2);
	fclose(f);
	const char *files[] = {fx->idx, bin};
	for (int i = 0; i < 2; i++) {
		struct timeval tv[2];
		gettimeofday(&tv[0], NULL);
		tv[0].tv_sec -= 10;
		tv[1] = tv[0];
		assert_int_equal(utimes(files[i], tv), 0);
	}
}

static void remove_all(struct fixture *fx)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	assert_int_equal(system(cmd), 0);
}

/* The shape of all documents in blocks of 8, and its sums. */
static const struct mgcache_shape shape8 = {.first_doc = 0, .n_docs = DOCS,
					    .cut_seq = UINT64_MAX, .block = 8, .n_blocks = 5};

static void sums_of(uint64_t *sums, uint64_t *end_token)
{
	uint64_t t = 0;
	for (uint32_t b = 0; b < 5; b++) {
		sums[b] = 0;
		for (uint32_t d = b * 8; d < b * 8 + 8; d++)
			sums[b] += 1 + d % 7;
		t += sums[b];
	}
	*end_token = t;
}

/* One open with the cache: its use (checked or trusted) and index. */
static void open_once(struct fixture *fx, struct mgcache_use *u, struct mg_index *ix)
{
	char err[512];
	assert_int_equal(mgcache_open_index(u, fx->cache, "p", fx->prefix, ix, err, sizeof(err)),
			 0);
}

static void read_file(const char *path, uint8_t **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	*buf = malloc(*len);
	assert_non_null(*buf);
	assert_int_equal(fread(*buf, 1, *len, f), *len);
	fclose(f);
}

/* The decoder's refusal of buf: -EINVAL with a reason. */
static void refused(const uint8_t *buf, size_t len, const char *want)
{
	struct mgcache *c = malloc(sizeof(*c));
	char why[512] = "";
	assert_int_equal(mgcache_decode(buf, len, c, NULL, NULL, why, sizeof(why)), -EINVAL);
	assert_true(why[0] != '\0');
	if (want && !strstr(why, want))
		fail_msg("refused with \"%s\", not \"%s\"", why, want);
	free(c);
}

/* buf's payload CRC put right after a change. */
static void fix_crc(uint8_t *buf, size_t len)
{
	struct cachefile_header h;
	memcpy(&h, buf, sizeof(h));
	h.payload_crc = crc32c(0, buf + sizeof(h), len - sizeof(h));
	memcpy(buf, &h, sizeof(h));
}

static void test_write_then_read(void **state)
{
	(void)state;
	struct fixture fx;
	make_index(&fx);
	uint64_t sums[5], got[5], end;
	sums_of(sums, &end);
	struct mgcache_shape sh = shape8;
	sh.end_token = end;

	struct mgcache_use *u = calloc(1, sizeof(*u));
	struct mg_index ix;
	open_once(&fx, u, &ix);
	assert_true(u->checked);
	assert_false(u->valid);
	assert_false(mgcache_sums(u, &sh, got));
	mgcache_add(u, &sh, sums);
	mgcache_store(u, &ix);
	const struct mg_index first = ix;
	mgcache_use_free(u);
	mg_index_free(&ix);
	struct stat st;
	assert_int_equal(stat(u->path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);

	open_once(&fx, u, &ix); /* trusted: the header only */
	assert_true(u->valid);
	assert_false(u->checked);
	assert_int_equal(ix.n_tokens, first.n_tokens);
	assert_int_equal(ix.n_documents, DOCS);
	assert_int_equal(ix.n_sequences, DOCS);
	assert_int_equal(ix.dtype_code, MG_UINT16);
	assert_true(mgcache_sums(u, &sh, got));
	assert_memory_equal(got, sums, sizeof(sums));
	struct mgcache_shape other = sh;
	other.block = 16;
	other.n_blocks = 3;
	assert_false(mgcache_sums(u, &other, got)); /* another block: computed */

	/* the file's bytes, then each fault */
	uint8_t *buf;
	size_t len;
	read_file(u->path, &buf, &len);
	struct mgcache *c = malloc(sizeof(*c));
	char why[512];
	assert_int_equal(mgcache_decode(buf, len, c, NULL, NULL, why, sizeof(why)), 0);
	assert_int_equal(c->n_shapes, 1);
	assert_string_equal(c->idx_path, u->real_idx);
	free(c);
	for (size_t n = 0; n < len; n++)
		refused(buf, n, NULL);
	uint8_t *bad = malloc(len);
	memcpy(bad, buf, len);
	bad[len / 2] ^= 1;
	refused(bad, len, "checksum mismatch (corrupt)");
	memcpy(bad, buf, len);
	bad[8] = 2;
	refused(bad, len, "version 2, this loaderd reads version 1");
	memcpy(bad, buf, len);
	bad[0] = 'X';
	refused(bad, len, "not a loaderd index cache");
	/* the path's first byte: not absolute */
	const size_t path_at = CACHEFILE_HEADER_BYTES + 4;
	memcpy(bad, buf, len);
	bad[path_at] = 'x';
	fix_crc(bad, len);
	refused(bad, len, "a bad path");
	/* after the path: the two files (80 bytes), then the dtype code */
	const size_t dtype_at = path_at + strlen(u->real_idx) + 80;
	memcpy(bad, buf, len);
	bad[dtype_at] = MG_FLOAT32;
	fix_crc(bad, len);
	refused(bad, len, "figures no index has");
	/* dtype, 0, sequences, documents, tokens, checked: then the shapes' count */
	const size_t shapes_at = dtype_at + 4 + 4 + 8 * 4;
	memcpy(bad, buf, len);
	bad[shapes_at] = MGCACHE_SHAPES_MAX + 1;
	fix_crc(bad, len);
	refused(bad, len, "counts that do not fit its bytes");
	memcpy(bad, buf, len);
	bad[shapes_at] = 2;
	fix_crc(bad, len);
	refused(bad, len, "truncated in shape 1");
	/* the first block's sum past the index's tokens */
	const size_t sums_at = shapes_at + 8 + 40;
	memcpy(bad, buf, len);
	uint64_t huge = first.n_tokens + 1;
	memcpy(bad + sums_at, &huge, 8);
	fix_crc(bad, len);
	refused(bad, len, "more tokens than the index");
	free(bad);
	free(buf);
	mgcache_use_free(u);
	mg_index_free(&ix);

	/* the .idx touched: checked in full again */
	struct timeval tv[2];
	gettimeofday(&tv[0], NULL);
	tv[0].tv_sec -= 5;
	tv[1] = tv[0];
	assert_int_equal(utimes(fx.idx, tv), 0);
	open_once(&fx, u, &ix);
	assert_false(u->valid);
	assert_true(u->checked);
	mgcache_use_free(u);
	mg_index_free(&ix);
	free(u);
	remove_all(&fx);
}

/* No cache_dir: nothing read or written, the index checked in full. */
static void test_no_cache_dir(void **state)
{
	(void)state;
	struct fixture fx;
	make_index(&fx);
	struct mgcache_use *u = calloc(1, sizeof(*u));
	struct mg_index ix;
	char err[512];
	assert_int_equal(mgcache_open_index(u, "", "p", fx.prefix, &ix, err, sizeof(err)), 0);
	assert_true(u->checked);
	assert_false(u->valid);
	assert_string_equal(u->path, "");
	mgcache_store(u, &ix);
	assert_int_equal(access(fx.cache, F_OK), -1);
	mgcache_use_free(u);
	mg_index_free(&ix);
	free(u);
	remove_all(&fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_then_read),
		cmocka_unit_test(test_no_cache_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
