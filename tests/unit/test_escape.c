/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/escape: every byte value's rendering, the bytes a
 * forged status line or a terminal escape needs, UTF-8, and truncation
 * that never cuts an escape and always leaves a NUL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/escape.h"

/* Every byte on its own: its rendering, written out independently. */
static void test_every_byte(void **state)
{
	(void)state;
	for (unsigned b = 0; b < 256; b++) {
		uint8_t in = (uint8_t)b;
		char want[8], got[ESCAPE_SIZE(1)];
		if (b == '"' || b == '\\')
			snprintf(want, sizeof(want), "\\%c", b);
		else if (b == '\n')
			strcpy(want, "\\n");
		else if (b == '\r')
			strcpy(want, "\\r");
		else if (b == '\t')
			strcpy(want, "\\t");
		else if (b >= 0x20 && b < 0x7f)
			snprintf(want, sizeof(want), "%c", b);
		else
			snprintf(want, sizeof(want), "\\x%02x", b);
		assert_ptr_equal(escape_bytes(&in, 1, got, sizeof(got)), got);
		assert_string_equal(got, want);
	}
}

/* Whatever goes in, only 0x20..0x7e comes out. */
static void test_output_is_printable(void **state)
{
	(void)state;
	uint8_t all[256];
	char out[ESCAPE_SIZE(sizeof(all))];
	for (unsigned b = 0; b < 256; b++)
		all[b] = (uint8_t)b;
	escape_bytes(all, sizeof(all), out, sizeof(out));
	for (const char *p = out; *p; p++)
		assert_true(*p >= 0x20 && *p <= 0x7e);
	/* 93 printable bytes as they are, quote and backslash, \n \r \t in two
	 * characters each, the other 158 bytes in four */
	assert_int_equal(strlen(out), 93 + 2 * 2 + 3 * 2 + 158 * 4);
}

static void test_strings(void **state)
{
	(void)state;
	char out[ESCAPE_SIZE(128)];
	assert_string_equal(escape_str("consume", out, sizeof(out)), "consume");
	assert_string_equal(escape_str("", out, sizeof(out)), "");
	assert_string_equal(escape_str("x\n  client 99 pid 1 name \"x\"", out, sizeof(out)),
			    "x\\n  client 99 pid 1 name \\\"x\\\"");
	assert_string_equal(escape_str("\x1b[2Jcls", out, sizeof(out)), "\\x1b[2Jcls");
	assert_string_equal(escape_str("a\\b\tc\rd\x7f", out, sizeof(out)), "a\\\\b\\tc\\rd\\x7f");
	/* UTF-8 is shown byte by byte: "é" is c3 a9 */
	assert_string_equal(escape_str("caf\xc3\xa9", out, sizeof(out)), "caf\\xc3\\xa9");
	/* with a length, a NUL byte is escaped like any control */
	assert_string_equal(escape_bytes("a\0b", 3, out, sizeof(out)), "a\\x00b");
}

/* A buffer too small keeps whole escapes only, and the NUL. */
static void test_truncation(void **state)
{
	(void)state;
	const char *in = "ab\x1b" "cd";
	const char *full = "ab\\x1bcd";
	char out[16];
	for (size_t cap = 1; cap <= strlen(full) + 1; cap++) {
		memset(out, '#', sizeof(out));
		escape_str(in, out, cap);
		size_t n = strlen(out);
		assert_true(n < cap);
		assert_memory_equal(out, full, n); /* a prefix of the full rendering */
		/* it ends at an escape's boundary: 0..2 (ab), 6 (+\x1b), 7, 8 */
		assert_true(n <= 2 || n >= 6);
		assert_int_equal(n, cap - 1 <= 2 ? cap - 1 : cap - 1 < 6 ? 2 : cap - 1);
		assert_int_equal(out[cap], '#'); /* nothing written past cap */
	}
	/* a quote at the end does not leave a lone backslash */
	escape_str("ab\"", out, 4);
	assert_string_equal(out, "ab");
	/* cap 0 writes nothing */
	out[0] = '#';
	escape_str("x", out, 0);
	assert_int_equal(out[0], '#');
}

/* ESCAPE_SIZE(n) holds any n bytes whole. */
static void test_size_bound(void **state)
{
	(void)state;
	uint8_t worst[63];
	char out[ESCAPE_SIZE(sizeof(worst))];
	memset(worst, 0x01, sizeof(worst));
	escape_bytes(worst, sizeof(worst), out, sizeof(out));
	assert_int_equal(strlen(out), 4 * sizeof(worst));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_byte),
		cmocka_unit_test(test_output_is_printable),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_size_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
