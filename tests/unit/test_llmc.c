/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/source/llmc: llm.c token shard headers written here as
 * llm.c's write_datafile lays them out (256 int32: magic 20240520,
 * version 1, the token count, zeros), parsed back, from memory and through
 * llmc_header_read; an empty shard; then each malformed header refused
 * with the file, the field and its offset named: magic (llm.c's later
 * uint32 shards included), version, a negative count, a file shorter or
 * longer than the count says, a file shorter than the header; every
 * prefix of a good header; and files llmc_header_read cannot use.
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
#include "daemon/source/llmc.h"

#define SHARD "/data/fineweb_train_000001.bin"

static uint8_t header[LLMC_HEADER_BYTES];

static void make_header(int32_t magic, int32_t version, int32_t count)
{
	memset(header, 0, sizeof(header));
	int32_t v[3] = {magic, version, count};
	for (int i = 0; i < 3; i++)
		for (int b = 0; b < 4; b++)
			header[4 * i + b] = (uint8_t)((uint32_t)v[i] >> (8 * b));
}

static void expect(uint64_t file_bytes, size_t len, int want_rc, const char *want)
{
	char err[512] = "";
	uint64_t n = 99;
	int rc = llmc_header_parse(header, len, file_bytes, SHARD, &n, err, sizeof(err));
	if (rc != want_rc || n != 0 || strncmp(err, SHARD ": ", strlen(SHARD) + 2) != 0 ||
	    !strstr(err, want))
		fail_msg("returned %d n %llu \"%s\"; expected %d and \"%s\"", rc,
			 (unsigned long long)n, err, want_rc, want);
}

static void test_good(void **state)
{
	(void)state;
	const int32_t counts[] = {0, 1, 1000, 100000000, INT32_MAX};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		make_header(LLMC_MAGIC, LLMC_VERSION, counts[i]);
		uint64_t n = 99;
		char err[256] = "x";
		assert_int_equal(llmc_header_parse(header, sizeof(header),
						   1024 + 2 * (uint64_t)counts[i], SHARD, &n, err,
						   sizeof(err)), 0);
		assert_int_equal(n, (uint64_t)counts[i]);
		/* only the header is read: a longer buffer changes nothing */
	}
	/* the rest of the header is not read */
	make_header(LLMC_MAGIC, LLMC_VERSION, 5);
	memset(header + 12, 0xff, sizeof(header) - 12);
	uint64_t n = 0;
	assert_int_equal(llmc_header_parse(header, sizeof(header), 1034, NULL, &n, NULL, 0), 0);
	assert_int_equal(n, 5);
}

static void test_bad(void **state)
{
	(void)state;
	make_header(12345, 1, 10);
	expect(1044, sizeof(header), -EINVAL, "magic at offset 0: 12345, not 20240520 (not an llm.c "
	       "token shard)");
	make_header(20240801, 7, 10); /* llm.c's uint32 (LLaMA 3) shards */
	expect(1044, sizeof(header), -EINVAL, "magic at offset 0: 20240801, not 20240520");
	make_header(LLMC_MAGIC, 2, 10);
	expect(1044, sizeof(header), -EINVAL, "version at offset 4: 2, only 1 (uint16 tokens) is known");
	make_header(LLMC_MAGIC, -1, 10);
	expect(1044, sizeof(header), -EINVAL, "version at offset 4: -1");
	make_header(LLMC_MAGIC, 1, -5);
	expect(1044, sizeof(header), -EINVAL, "token count at offset 8: -5 is negative");
	make_header(LLMC_MAGIC, 1, 1000);
	expect(2000, sizeof(header), -ENODATA, "token count at offset 8: 1000 tokens need 3024 bytes "
	       "(1024 + 2 x 1000), the file has 2000: truncated");
	expect(3025, sizeof(header), -EINVAL, "token count at offset 8: 1000 tokens need 3024 bytes "
	       "(1024 + 2 x 1000), the file has 3025: trailing bytes no token count accounts for");
	expect(3023, sizeof(header), -ENODATA, "the file has 3023: truncated");
	make_header(LLMC_MAGIC, 1, INT32_MAX);
	expect(1024 + 2 * (uint64_t)INT32_MAX - 2, sizeof(header), -ENODATA, "truncated");
	/* a file shorter than the header, whatever its first bytes */
	make_header(LLMC_MAGIC, 1, 0);
	expect(1000, 1000, -ENODATA, "truncated: the header needs 1024 bytes, the file has 1000");
	expect(0, 0, -ENODATA, "the file has 0");
	/* every prefix of a good header is truncated, never another error */
	for (size_t len = 0; len < sizeof(header); len++)
		expect(len, len, -ENODATA, "truncated: the header needs 1024 bytes");
	char err[64];
	assert_int_equal(llmc_header_parse(NULL, 5, 2000, SHARD, &(uint64_t){0}, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(llmc_header_parse(header, sizeof(header), 1024, SHARD, NULL, err,
					   sizeof(err)), -EINVAL);
}

static char dir[PATH_MAX];

static void write_shard(const char *path, int32_t count, uint64_t bytes)
{
	make_header(LLMC_MAGIC, LLMC_VERSION, count);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, header, bytes < sizeof(header) ? bytes : sizeof(header)),
			 (ssize_t)(bytes < sizeof(header) ? bytes : sizeof(header)));
	if (bytes > sizeof(header))
		assert_int_equal(ftruncate(fd, (off_t)bytes), 0);
	assert_int_equal(close(fd), 0);
}

static void test_read(void **state)
{
	(void)state;
	char path[PATH_MAX + 32], err[PATH_MAX + 256];
	uint64_t n = 0;
	snprintf(dir, sizeof(dir), "/tmp/test_llmc.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/good.bin", dir);
	write_shard(path, 300, 1024 + 600);
	assert_int_equal(llmc_header_read(path, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 300);
	write_shard(path, 300, 1024 + 599);
	assert_int_equal(llmc_header_read(path, &n, err, sizeof(err)), -ENODATA);
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "token count at offset 8"));
	write_shard(path, 0, 100);
	assert_int_equal(llmc_header_read(path, &n, err, sizeof(err)), -ENODATA);
	assert_non_null(strstr(err, "the header needs 1024 bytes, the file has 100"));
	unlink(path);
	assert_int_equal(llmc_header_read(path, &n, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, path));
	snprintf(path, sizeof(path), "%s/fifo.bin", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(llmc_header_read(path, &n, err, sizeof(err)), REGFILE_NOT_REGULAR);
	assert_non_null(strstr(err, "not a regular file (a FIFO)"));
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_bad),
		cmocka_unit_test(test_read),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
