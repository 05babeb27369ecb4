/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/tarshard: brace patterns (ranges with and without
 * zero padding, descending, lists, products, every malformed form) and tar
 * indexing on archives this test writes byte by byte: ustar with a prefix
 * field, GNU long names and base-256 sizes, pax path and size records, a
 * global pax header, an archive without end-of-archive blocks, skipped
 * members (directories, links, "__" files, names without extension, other
 * extensions), WebDataset grouping with upper-case extensions, labels with
 * spaces and signs, samples whose image is a PNG; and each malformed case,
 * whose message must name the shard and the header's offset.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/source/tarshard.h"

/* ---- patterns ---- */

static void expect_expansion(const char *pattern, const char *const *want, size_t n_want)
{
	char **got, err[256] = "";
	size_t n;
	int rc = tar_pattern_expand(pattern, &got, &n, err, sizeof(err));
	if (rc != 0)
		fail_msg("%s: %s", pattern, err);
	assert_int_equal(n, n_want);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(got[i], want[i]);
	tar_pattern_free(got, n);
}

static void expect_pattern_error(const char *pattern, const char *message)
{
	char **got, err[256] = "";
	size_t n;
	assert_int_equal(tar_pattern_expand(pattern, &got, &n, err, sizeof(err)), -EINVAL);
	if (!strstr(err, message))
		fail_msg("%s: \"%s\" does not contain \"%s\"", pattern, err, message);
}

static void test_patterns(void **state)
{
	(void)state;
	expect_expansion("/d/a.tar", (const char *[]){"/d/a.tar"}, 1);
	expect_expansion("s-{0008..0011}.tar",
			 (const char *[]){"s-0008.tar", "s-0009.tar", "s-0010.tar", "s-0011.tar"}, 4);
	expect_expansion("{8..11}", (const char *[]){"8", "9", "10", "11"}, 4);
	expect_expansion("{3..1}", (const char *[]){"3", "2", "1"}, 3);
	expect_expansion("{0..2}", (const char *[]){"0", "1", "2"}, 3);
	expect_expansion("{1..010}", (const char *[]){"001", "002", "003", "004", "005", "006",
						       "007", "008", "009", "010"}, 10);
	expect_expansion("/{train,val}/p{0..1}.tar",
			 (const char *[]){"/train/p0.tar", "/train/p1.tar", "/val/p0.tar",
					  "/val/p1.tar"}, 4);
	expect_pattern_error("a{1..2", "a '{' without its '}'");
	expect_pattern_error("a}1", "a '}' without its '{'");
	expect_pattern_error("a{{1..2}}", "nested braces");
	expect_pattern_error("a{x..2}", "a range must be {A..B}");
	expect_pattern_error("a{1..}", "a range must be {A..B}");
	expect_pattern_error("a{1..2x}", "a range must be {A..B}");
	expect_pattern_error("a{1,,2}", "an empty item");
	expect_pattern_error("a{1,}", "an empty item");
	expect_pattern_error("a{abc}", "a range A..B or a list");
	expect_pattern_error("a{}", "a range A..B or a list");
	expect_pattern_error("{0..999}{0..999}{0..9}", "more than 1000000 shards");
	expect_pattern_error("{0..1000000}", "more than 1000000 shards");
}

/* ---- tar archives written here ---- */

struct tarbuf {
	unsigned char *b;
	size_t n, cap;
};

static unsigned char *tb_grow(struct tarbuf *t, size_t bytes)
{
	size_t padded = (bytes + 511) / 512 * 512;
	if (t->n + padded > t->cap) {
		t->cap = (t->n + padded) * 2;
		t->b = realloc(t->b, t->cap);
		assert_non_null(t->b);
	}
	unsigned char *at = t->b + t->n;
	memset(at, 0, padded);
	t->n += padded;
	return at;
}

/* A header; size in octal, or base-256 when base256. */
static void tb_header(struct tarbuf *t, const char *name, const char *prefix, char type,
		      uint64_t size, int base256)
{
	unsigned char *h = tb_grow(t, 512);
	memcpy(h, name, strnlen(name, 100));
	memcpy(h + 100, "0000644", 7);
	memcpy(h + 108, "0000000", 7);
	memcpy(h + 116, "0000000", 7);
	if (base256) {
		h[124] = 0x80;
		for (int i = 0; i < 8; i++)
			h[135 - i] = (unsigned char)(size >> (8 * i));
	} else {
		char octal[32];
		snprintf(octal, sizeof(octal), "%011llo", (unsigned long long)size);
		memcpy(h + 124, octal, 11);
	}
	memcpy(h + 136, "14000000000", 11);
	h[156] = (unsigned char)type;
	memcpy(h + 257, "ustar\0" "00", 8);
	if (prefix)
		memcpy(h + 345, prefix, strlen(prefix));
	unsigned sum = 0;
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

static void tb_data(struct tarbuf *t, const void *data, size_t n)
{
	if (n)
		memcpy(tb_grow(t, n), data, n);
}

static void tb_file(struct tarbuf *t, const char *name, const char *data)
{
	tb_header(t, name, NULL, '0', strlen(data), 0);
	tb_data(t, data, strlen(data));
}

static void tb_end(struct tarbuf *t)
{
	tb_grow(t, 1024);
}

static char shard_dir[] = "/tmp/ldr-test-tarshard-XXXXXX";

static const char *tb_write(struct tarbuf *t, const char *name)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/%s", shard_dir, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(t->b, 1, t->n, f), t->n);
	fclose(f);
	free(t->b);
	*t = (struct tarbuf){0};
	return path;
}

static const char *entry_name(const struct image_index *ix, uint64_t i)
{
	return ix->paths + ix->entries[i].path_offset;
}

/* Every header form and every member the reader must skip. */
static void test_index(void **state)
{
	(void)state;
	struct tarbuf t = {0};
	tb_header(&t, "dir", NULL, '5', 0, 0);
	tb_file(&t, "__meta__.txt", "x");
	tb_file(&t, "README", "no extension");
	tb_file(&t, "a.JPG", "AAAA");           /* sample 0: upper-case extension */
	tb_file(&t, "a.cls", " 7\n");
	tb_file(&t, "a.json", "{}");
	tb_header(&t, "b.jpg", "some/dir", '0', 3, 0); /* sample 1: ustar prefix */
	tb_data(&t, "BBB", 3);
	tb_header(&t, "b.cls", "some/dir", '0', 2, 0);
	tb_data(&t, "-2", 2);
	tb_header(&t, "link.jpg", NULL, '2', 0, 0);
	char long_name[300];
	memset(long_name, 'n', sizeof(long_name));
	memcpy(long_name + 290, ".jpeg", 6);    /* sample 2: GNU long name, base-256 size */
	tb_header(&t, "././@LongLink", NULL, 'L', strlen(long_name) + 1, 0);
	tb_data(&t, long_name, strlen(long_name) + 1);
	tb_header(&t, "trunc.jpg", NULL, '0', 5, 1);
	tb_data(&t, "CCCCC", 5);
	memcpy(long_name + 290, ".cls\0", 5);
	tb_header(&t, "././@LongLink", NULL, 'L', strlen(long_name) + 1, 0);
	tb_data(&t, long_name, strlen(long_name) + 1);
	tb_file(&t, "named-by-the-long-name.cls", "3");
	const char *pax = "30 path=p/quite/long/name.jpg\n10 size=6\n";
	tb_header(&t, "PaxHeaders/x", NULL, 'g', strlen("13 comment=x\n"), 0);
	tb_data(&t, "13 comment=x\n", 13);
	tb_header(&t, "PaxHeaders/p", NULL, 'x', strlen(pax), 0); /* sample 3: pax path, size */
	tb_data(&t, pax, strlen(pax));
	tb_header(&t, "short.jpg", NULL, '0', 0, 0); /* pax size 6 wins over 0 */
	tb_data(&t, "DDDDDD", 6);
	tb_file(&t, "p/quite/long/name.cls", "4");
	tb_file(&t, "pic.png", "png"); /* a PNG sample: left out, counted */
	tb_file(&t, "pic.cls", "5");
	tb_end(&t);
	tb_write(&t, "s-0.tar");
	tb_file(&t, "e.jpg", "EE"); /* second shard, no end-of-archive blocks */
	tb_file(&t, "e.cls", "9");
	tb_write(&t, "s-1.tar");

	char pattern[256], err[1024] = "";
	snprintf(pattern, sizeof(pattern), "%s/s-{0..1}.tar", shard_dir);
	struct image_index ix;
	int rc = tar_scan(pattern, &ix, err, sizeof(err));
	if (rc != 0)
		fail_msg("tar_scan: %s", err);
	assert_int_equal(ix.n, 5);
	assert_int_equal(ix.n_shards, 2);
	assert_int_equal(ix.other_images, 1);
	assert_int_equal(ix.n_classes, 5);
	const char *names[] = {"a.JPG", "some/dir/b.jpg", NULL, "p/quite/long/name.jpg", "e.jpg"};
	const int64_t labels[] = {7, -2, 3, 4, 9};
	const uint64_t sizes[] = {4, 3, 5, 6, 2};
	const char *data[] = {"AAAA", "BBB", "CCCCC", "DDDDDD", "EE"};
	for (uint64_t i = 0; i < 5; i++) {
		if (names[i])
			assert_string_equal(entry_name(&ix, i), names[i]);
		assert_int_equal(ix.entries[i].label, labels[i]);
		assert_int_equal(ix.entries[i].file_bytes, sizes[i]);
		assert_int_equal(ix.entries[i].shard, i == 4 ? 1 : 0);
		/* the data offset points at the member's bytes */
		char path[256], buf[8] = "";
		snprintf(path, sizeof(path), "%s/s-%u.tar", shard_dir, ix.entries[i].shard);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		assert_int_equal(fseek(f, (long)ix.entries[i].data_offset, SEEK_SET), 0);
		assert_int_equal(fread(buf, 1, sizes[i], f), sizes[i]);
		fclose(f);
		assert_memory_equal(buf, data[i], sizes[i]);
	}
	assert_int_equal(strlen(entry_name(&ix, 2)), 295);
	assert_int_equal(ix.shards[0].first_sample, 0);
	assert_int_equal(ix.shards[0].n_samples, 4);
	assert_int_equal(ix.shards[1].first_sample, 4);
	assert_int_equal(ix.shards[1].n_samples, 1);
	assert_true(strstr(ix.paths + ix.shards[1].path_offset, "/s-1.tar") != NULL);
	image_index_free(&ix);
}

/* Scans a single shard written from t, expecting an error containing
 * "offset OFFSET: " and message (one file: the shard is not repeated). */
static void expect_scan_error(struct tarbuf *t, uint64_t offset, const char *message)
{
	const char *path = tb_write(t, "bad.tar");
	char err[1024] = "", want[64];
	struct image_index ix;
	assert_true(tar_scan(path, &ix, err, sizeof(err)) < 0);
	snprintf(want, sizeof(want), "offset %llu: ", (unsigned long long)offset);
	if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, message))
		fail_msg("\"%s\": expected \"%s...%s\"", err, want, message);
}

static void test_malformed(void **state)
{
	(void)state;
	struct tarbuf t = {0};
	tb_file(&t, "a.jpg", "A");
	tb_file(&t, "a.cls", "1");
	tb_file(&t, "b.jpg", "B");
	t.b[1024 + 20] ^= 1; /* b.jpg's name: the checksum no longer holds */
	expect_scan_error(&t, 1024, "bad header checksum");

	tb_file(&t, "a.jpg", "A");
	tb_header(&t, "a.cls", NULL, '0', 5000, 0);
	tb_data(&t, "1", 1);
	expect_scan_error(&t, 1024, "runs past the end of the file");

	tb_file(&t, "a.jpg", "A");
	tb_file(&t, "a.cls", "1");
	memset(tb_grow(&t, 512), 'x', 212);
	t.n -= 300; /* a header cut short */
	expect_scan_error(&t, 2048, "the file ends inside a header (212 of 512 bytes)");

	/* archives of plain members: (name, data) pairs, the offset named */
	static const struct {
		const char *members[3][2];
		uint64_t offset;
		const char *message;
	} plain[] = {
		{{{"a.jpg", "A"}, {"b.cls", "1"}}, 0, "sample \"a\" has no .cls member"},
		{{{"a.cls", "1"}, {"a.txt", "x"}}, 0, "sample \"a\" has no .jpg or .jpeg member"},
		{{{"a.jpg", "A"}, {"a.cls", "12x"}}, 1024,
		 "the label \"12x\" is not a decimal integer"},
		{{{"a.jpg", "A"}, {"a.cls", "99999999999999999999"}}, 1024, "is not a decimal integer"},
		{{{"a.jpg", "A"}, {"a.cls", "1"}, {"a.cls", "2"}}, 2048,
		 "sample \"a\" has a second cls member"},
		{{{"a.jpg", "A"}, {"a.JPEG", "A"}}, 1024, "has a second image member"},
	};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		for (size_t k = 0; k < 3 && plain[i].members[k][0]; k++)
			tb_file(&t, plain[i].members[k][0], plain[i].members[k][1]);
		expect_scan_error(&t, plain[i].offset, plain[i].message);
	}

	tb_header(&t, "a.jpg", NULL, '0', 1, 0);
	memcpy(t.b + 124, "12x45678901", 11);
	unsigned sum = 0;
	memset(t.b + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += t.b[i];
	snprintf((char *)t.b + 148, 8, "%06o", sum);
	expect_scan_error(&t, 0, "size field is not a number");

	tb_header(&t, "PaxHeaders/p", NULL, 'x', 9, 0);
	tb_data(&t, "9 path=x\n", 9);
	tb_header(&t, "PaxHeaders/p", NULL, 'x', 8, 0);
	tb_data(&t, "99 pat\n\n", 8);
	expect_scan_error(&t, 1024, "malformed record");

	tb_file(&t, "a.cls", "1");
	tb_file(&t, "a.png", "P");
	tb_end(&t);
	const char *path = tb_write(&t, "none.tar");
	char err[1024] = "";
	struct image_index ix;
	assert_int_equal(tar_scan(path, &ix, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "no sample with a .jpg or .jpeg member in the 1 shard"));

	char pattern[256];
	snprintf(pattern, sizeof(pattern), "%s/missing-{1..2}.tar", shard_dir);
	assert_int_equal(tar_scan(pattern, &ix, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/missing-1.tar: No such file or directory"));
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(shard_dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shard_dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_patterns),
		cmocka_unit_test(test_index),
		cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
