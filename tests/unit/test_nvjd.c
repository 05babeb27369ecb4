/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for gpudecode/nvjd, the parts that need no GPU:
 *
 *   - jh_check_scan, the structural check that catches a file cut short
 *     inside its scan (nvJPEG decodes such a file as far as it goes and
 *     reports success) and a marker inside the entropy-coded data: complete
 *     files, with restart markers, fill bytes, bytes after the end-of-image
 *     marker and an APP segment that holds a whole JPEG, pass; every cut
 *     inside the scan, a stray marker and a restart marker out of turn are
 *     -EBADMSG with their message; cuts inside the header are left to
 *     nvJPEG's parser;
 *   - nvjd_load: a path that does not exist is -ENOENT naming it; a library
 *     that is not nvJPEG (libm) is -ENOSYS naming the missing function; the
 *     nvJPEG the build found (LOADERD_NVJPEG_LIBRARY, set by CMake) loads
 *     and says which version, and a later call keeps it; in a build without
 *     nvjpeg.h, -ENOSYS saying so;
 *   - nvjd_open: -ENOSYS before a load, -EINVAL for a batch of 0 or over
 *     NVJD_MAX_BATCH; after the load, on a machine without a GPU (CI),
 *     -ENODEV naming GPU 0; with a GPU, a decoder or -ENOTSUP saying the GPU
 *     has no hardware JPEG decoder.
 *
 * The decoding itself needs a GPU with JPEG engines: tests/gpu/nvjd_check.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#if LOADERD_HAVE_CUDA
#include "gpudecode/nvjd.h"
#include "image/jpeghdr.h"

/* A baseline file's skeleton: SOI, DQT, SOF0, SOS, entropy-coded data with
 * stuffing and restart markers, EOI. */
static const uint8_t head[] = {0xff, 0xd8, 0xff, 0xdb, 0x00, 0x04, 0x00, 0x01, 0xff, 0xc0, 0x00,
			       0x05, 0x08, 0x00, 0x10, 0xff, 0xda, 0x00, 0x04, 0x01, 0x00};
static const uint8_t scan[] = {0x12, 0xff, 0x00, 0x34, 0xff, 0xd0, 0x56, 0xff,
			       0x00, 0xff, 0xd1, 0x78, 0xff, 0xff, 0xd2, 0x9a};
static const uint8_t eoi[] = {0xff, 0xd9};

static size_t build(uint8_t *buf, bool with_eoi, const uint8_t *tail, size_t tail_len)
{
	size_t n = 0;
	memcpy(buf + n, head, sizeof head);
	n += sizeof head;
	memcpy(buf + n, scan, sizeof scan);
	n += sizeof scan;
	if (with_eoi) {
		memcpy(buf + n, eoi, sizeof eoi);
		n += sizeof eoi;
	}
	if (tail_len) {
		memcpy(buf + n, tail, tail_len);
		n += tail_len;
	}
	return n;
}

static int check(const uint8_t *buf, size_t len, char *err)
{
	err[0] = '\0';
	return jh_check_scan(buf, len, err, 160);
}

static void test_check_scan(void **state)
{
	uint8_t buf[256];
	char err[160];
	size_t n = build(buf, true, NULL, 0);
	assert_int_equal(check(buf, n, err), 0);
	/* Fill bytes before the end-of-image marker, and bytes after it. */
	const uint8_t fill[] = {0xff, 0xff, 0xff, 0xd9};
	assert_int_equal(check(buf, build(buf, false, fill, sizeof fill), err), 0);
	const uint8_t after[] = {0, 0, 0xff, 0x12, 0xff, 0xda};
	assert_int_equal(check(buf, build(buf, true, after, sizeof after), err), 0);

	/* Every cut inside the scan, however it falls on stuffing, restart
	 * markers or fill, and a cut between the 0xff and 0xd9 of the end. */
	n = build(buf, true, NULL, 0);
	for (size_t len = sizeof head; len < n; len++) {
		assert_int_equal(check(buf, len, err), -EBADMSG);
		assert_non_null(strstr(err, "truncated: the data ends inside the scan"));
	}
	/* Cuts inside the header: no scan started, nvJPEG's parser judges. */
	for (size_t len = 2; len < sizeof head; len++)
		assert_int_equal(check(buf, len, err), 0);

	/* A marker inside the scan; one that may start another scan. */
	n = build(buf, true, NULL, 0);
	buf[sizeof head + 2] = 0x05;
	assert_int_equal(check(buf, n, err), -EBADMSG);
	assert_string_equal(err, "corrupt JPEG data: marker 0x05 inside the scan at byte 22");
	buf[sizeof head + 2] = 0xc4;
	assert_int_equal(check(buf, n, err), 0);
	/* A restart marker out of turn. */
	n = build(buf, true, NULL, 0);
	buf[sizeof head + 10] = 0xd3;
	assert_int_equal(check(buf, n, err), -EBADMSG);
	assert_string_equal(err, "corrupt JPEG data: restart marker 3 at byte 30 where 1 was due");

	/* An APP1 segment holding a whole JPEG (a thumbnail) before the scan:
	 * its markers are data, skipped by the segment's length. */
	uint8_t thumb[sizeof buf];
	n = build(buf, true, NULL, 0);
	size_t t = 0;
	thumb[t++] = 0xff, thumb[t++] = 0xd8, thumb[t++] = 0xff, thumb[t++] = 0xe1;
	thumb[t++] = 0x00, thumb[t++] = (uint8_t)(2 + n);
	memcpy(thumb + t, buf, n);
	t += n;
	memcpy(thumb + t, buf + 2, n - 2);
	t += n - 2;
	assert_int_equal(check(thumb, t, err), 0);
	assert_int_equal(check(thumb, t - 2, err), -EBADMSG);

	/* Not a JPEG at all. */
	assert_int_equal(check(buf + 1, n - 1, err), -EBADMSG);
	assert_string_equal(err, "not a JPEG (no start-of-image marker)");
	assert_int_equal(jh_check_scan(NULL, 10, NULL, 0), -EBADMSG);
}

static const char *library_path(void)
{
	const char *p = getenv("LOADERD_NVJPEG_LIBRARY");
	return p && p[0] == '/' ? p : NULL;
}

static void test_open_before_load(void **state)
{
	char why[256] = "";
	struct nvjd *d = (struct nvjd *)&why;
	assert_int_equal(nvjd_open(0, 8, 0, &d, why, sizeof why), -ENOSYS);
	assert_null(d);
	assert_non_null(strstr(why, "nvJPEG"));
}

static void test_load(void **state)
{
	char text[256] = "";
#if LOADERD_HAVE_NVJPEG
	assert_int_equal(nvjd_load("/nonexistent/libnvjpeg.so.13", text, sizeof text), -ENOENT);
	assert_non_null(strstr(text, "/nonexistent/libnvjpeg.so.13"));
	assert_int_equal(nvjd_load("libm.so.6", text, sizeof text), -ENOSYS);
	assert_non_null(strstr(text, "libm.so.6 lacks nvjpegGetProperty"));
	const char *path = library_path();
	if (!path)
		skip(); /* no library beside the header the build found */
	int rc = nvjd_load(path, text, sizeof text);
	assert_int_equal(rc, 0);
	assert_true(strncmp(text, "nvJPEG 13.", 10) == 0 || strncmp(text, "nvJPEG ", 7) == 0);
	assert_non_null(strstr(text, path));
	char again[256] = "";
	assert_int_equal(nvjd_load("/nonexistent/libnvjpeg.so.13", again, sizeof again), 0);
	assert_string_equal(again, text);
	printf("nvjd_load: %s\n", text);
#else
	assert_int_equal(nvjd_load(NULL, text, sizeof text), -ENOSYS);
	assert_non_null(strstr(text, "built without nvJPEG"));
	skip();
#endif
}

static void test_open(void **state)
{
	char why[256] = "";
	struct nvjd *d = NULL;
	if (!LOADERD_HAVE_NVJPEG || !library_path())
		skip();
	assert_int_equal(nvjd_open(0, 0, 0, &d, why, sizeof why), -EINVAL);
	assert_int_equal(nvjd_open(0, NVJD_MAX_BATCH + 1, 0, &d, why, sizeof why), -EINVAL);
	assert_int_equal(nvjd_open(0, 8, 1u << 7, &d, why, sizeof why), -EINVAL);
	assert_int_equal(nvjd_open(0, 8, 0, NULL, why, sizeof why), -EINVAL);
	int rc = nvjd_open(0, 8, NVJD_SMOOTH_UPSAMPLING, &d, why, sizeof why);
	printf("nvjd_open(0): %d %s\n", rc, rc ? why : "opened");
	if (rc == 0) {
		struct nvjd_info info;
		nvjd_info(d, &info);
		assert_true(info.engines > 0);
		assert_int_equal(info.max_batch, 8);
		nvjd_close(d);
		return;
	}
	assert_null(d);
	assert_true(rc == -ENODEV || rc == -ENOTSUP);
	assert_true(strncmp(why, "GPU 0", 5) == 0 || strncmp(why, "no GPU 0", 8) == 0);
	nvjd_close(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_scan),
		cmocka_unit_test(test_open_before_load),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_open),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void)
{
	puts("test_nvjd: built without CUDA: skipped");
	return 77;
}
#endif
