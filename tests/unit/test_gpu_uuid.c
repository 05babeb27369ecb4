/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/gpu_uuid: the text form nvidia-smi prints, round
 * trips, and the malformed inputs a user can type for --device.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>

#include <cmocka.h>

#include "common/gpu_uuid.h"

static const uint8_t sample[GPU_UUID_BYTES] = {
	0x8d, 0x7f, 0x0c, 0x1e, 0x52, 0xa4, 0x3b, 0x19,
	0x9e, 0x0d, 0xc6, 0x2f, 0x04, 0xb1, 0x77, 0xea,
};
static const char sample_text[] = "GPU-8d7f0c1e-52a4-3b19-9e0d-c62f04b177ea";

static void test_format(void **state)
{
	char text[GPU_UUID_TEXT_MAX];
	(void)state;
	gpu_uuid_format(sample, text);
	assert_string_equal(text, sample_text);
	assert_int_equal(strlen(text), GPU_UUID_TEXT_MAX - 1);
}

static void test_parse(void **state)
{
	uint8_t u[GPU_UUID_BYTES];
	(void)state;
	assert_int_equal(gpu_uuid_parse(sample_text, u), 0);
	assert_memory_equal(u, sample, sizeof(u));
	memset(u, 0, sizeof(u));
	assert_int_equal(gpu_uuid_parse(sample_text + 4, u), 0); /* without "GPU-" */
	assert_memory_equal(u, sample, sizeof(u));
	assert_int_equal(gpu_uuid_parse("gpu-8D7F0C1E-52A4-3B19-9E0D-C62F04B177EA", u), 0);
	assert_memory_equal(u, sample, sizeof(u));
	assert_false(gpu_uuid_is_zero(u));
}

static void test_malformed(void **state)
{
	static const char *const bad[] = {
		"", "0", "GPU-", "GPU-8d7f0c1e", "GPU-8d7f0c1e52a43b199e0dc62f04b177ea",
		"GPU-8d7f0c1e-52a4-3b19-9e0d-c62f04b177e", "GPU-8d7f0c1e-52a4-3b19-9e0d-c62f04b177eax",
		"GPU-8d7f0c1e-52a4-3b19-9e0d-c62f04b177e-", "GPU-8d7f0c1g-52a4-3b19-9e0d-c62f04b177ea",
		"MIG-8d7f0c1e-52a4-3b19-9e0d-c62f04b177ea",
	};
	uint8_t u[GPU_UUID_BYTES];
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (gpu_uuid_parse(bad[i], u) != -EINVAL)
			fail_msg("\"%s\" was accepted", bad[i]);
	memset(u, 0, sizeof(u));
	assert_true(gpu_uuid_is_zero(u));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
