/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/crc32c: published check values, chaining, and
 * agreement with a bit-at-a-time reference for every length and alignment,
 * for both the SSE4.2 path and the table path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/crc32c.h"

/*
 * The implementation once more, in this file, with the CPU probe answering
 * "no": the table path is what runs on CPUs without SSE4.2 and on aarch64
 * hosts, and would otherwise never run on the machines that test it.
 */
uint32_t crc32c_table_path(uint32_t crc, const void *data, size_t len);
#define crc32c crc32c_table_path
#define __builtin_cpu_supports(feature) 0
#include "common/crc32c.c"
#undef __builtin_cpu_supports
#undef crc32c

typedef uint32_t crc_fn(uint32_t crc, const void *data, size_t len);

static crc_fn *const implementations[] = {crc32c, crc32c_table_path};

/* The Castagnoli polynomial as published, bit-reversed here for the
 * reflected (LSB-first) form, rather than copied from the implementation. */
static uint32_t reflected_polynomial(void)
{
	const uint32_t poly = 0x1EDC6F41u;
	uint32_t r = 0;
	for (int bit = 0; bit < 32; bit++)
		if (poly & (1u << bit))
			r |= 1u << (31 - bit);
	return r;
}

/* One bit at a time, init and xorout 0xFFFFFFFF. */
static uint32_t crc_reference(uint32_t crc, const uint8_t *p, size_t len)
{
	const uint32_t poly = reflected_polynomial();
	uint32_t c = ~crc;
	for (size_t i = 0; i < len; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
	}
	return ~c;
}

static void test_check_values(void **state)
{
	uint8_t buf[48];
	assert_int_equal(reflected_polynomial(), 0x82F63B78u);
	for (size_t i = 0; i < sizeof(implementations) / sizeof(implementations[0]); i++) {
		crc_fn *crc = implementations[i];
		assert_int_equal(crc(0, "123456789", 9), 0xE3069283u);
		assert_int_equal(crc(0, "", 0), 0);
		assert_int_equal(crc(0, NULL, 0), 0);
		assert_int_equal(crc(0xE3069283u, NULL, 0), 0xE3069283u);
		assert_int_equal(crc(0, "a", 1), 0xC1D04330u);

		/* RFC 3720, B.4 (iSCSI) */
		memset(buf, 0, 32);
		assert_int_equal(crc(0, buf, 32), 0x8A9136AAu);
		memset(buf, 0xff, 32);
		assert_int_equal(crc(0, buf, 32), 0x62A8AB43u);
		for (int k = 0; k < 32; k++)
			buf[k] = (uint8_t)k;
		assert_int_equal(crc(0, buf, 32), 0x46DD794Eu);
		for (int k = 0; k < 32; k++)
			buf[k] = (uint8_t)(31 - k);
		assert_int_equal(crc(0, buf, 32), 0x113FDB5Cu);
		static const uint8_t read_pdu[48] = {
			0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
			0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		};
		assert_int_equal(crc(0, read_pdu, sizeof(read_pdu)), 0xD9963A56u);
	}
}

/* A fixed pseudo-random buffer: xorshift32 from a constant seed. */
static void fill(uint8_t *buf, size_t len)
{
	uint32_t x = 2463534242u;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (uint8_t)x;
	}
}

static void test_every_length_and_alignment(void **state)
{
	enum { max_len = 300, max_shift = 16 };
	static uint8_t buf[max_len + max_shift];
	fill(buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(implementations) / sizeof(implementations[0]); i++)
		for (size_t shift = 0; shift < max_shift; shift++)
			for (size_t len = 0; len <= max_len; len++) {
				const uint8_t *p = buf + shift;
				uint32_t want = crc_reference(0, p, len);
				if (implementations[i](0, p, len) != want)
					fail_msg("implementation %zu, shift %zu, length %zu", i,
						 shift, len);
				/* a non-zero starting value as well */
				assert_int_equal(implementations[i](0x12345678u, p, len),
						 crc_reference(0x12345678u, p, len));
			}
}

static void test_chaining(void **state)
{
	enum { len = 300 };
	static uint8_t buf[len];
	fill(buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(implementations) / sizeof(implementations[0]); i++) {
		crc_fn *crc = implementations[i];
		uint32_t whole = crc(0, buf, len);
		for (size_t split = 0; split <= len; split++)
			assert_int_equal(crc(crc(0, buf, split), buf + split, len - split), whole);
		/* three pieces, as `--dump` chains a sample's tensors */
		for (size_t a = 0; a <= len; a += 7)
			for (size_t b = a; b <= len; b += 13)
				assert_int_equal(crc(crc(crc(0, buf, a), buf + a, b - a), buf + b,
						     len - b),
						 whole);
		/* one byte at a time */
		uint32_t c = 0;
		for (size_t k = 0; k < len; k++)
			c = crc(c, buf + k, 1);
		assert_int_equal(c, whole);
	}
}

/* A buffer bigger than any small-size special case, both paths agree. */
static void test_large_buffer(void **state)
{
	enum { len = 1 << 20 };
	static uint8_t buf[len + 3];
	fill(buf, sizeof(buf));
	for (size_t shift = 0; shift < 4; shift++) {
		uint32_t want = crc_reference(0, buf + shift, len - shift);
		assert_int_equal(crc32c(0, buf + shift, len - shift), want);
		assert_int_equal(crc32c_table_path(0, buf + shift, len - shift), want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_values),
		cmocka_unit_test(test_every_length_and_alignment),
		cmocka_unit_test(test_chaining),
		cmocka_unit_test(test_large_buffer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
