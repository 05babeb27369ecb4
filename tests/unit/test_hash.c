/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/hash.h: the values are pinned, because every
 * delivered batch (permutations, crops, flips, substitutes) is drawn from
 * them; a change here must be a deliberate change of every dump.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/hash.h"

static void test_mix64_pinned(void **state)
{
	/* splitmix64's outputs 1..3 from state 0, as published */
	assert_int_equal(hash_mix64(0), 0xe220a8397b1dcdafull);
	assert_int_equal(hash_mix64(HASH_GOLDEN), 0x6e789e6aa1b965f4ull);
	assert_int_equal(hash_mix64(2 * HASH_GOLDEN), 0x06c45d188009454full);
	assert_int_equal(hash_mix64(UINT64_MAX), 0xe4d971771b652c20ull);
}

static void test_sample_pinned(void **state)
{
	assert_int_equal(hash_sample(0, 0, 0, 0), hash_mix64(hash_mix64(hash_mix64(0))));
	assert_int_equal(hash_sample(7, 0x5eedull, 3, 12345), 0x11011c811758ab30ull);
	/* the salt, epoch and index each change the key */
	uint64_t k = hash_sample(7, 1, 3, 12345);
	assert_int_not_equal(k, hash_sample(7, 2, 3, 12345));
	assert_int_not_equal(k, hash_sample(7, 1, 4, 12345));
	assert_int_not_equal(k, hash_sample(7, 1, 3, 12346));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mix64_pinned),
		cmocka_unit_test(test_sample_pinned),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
