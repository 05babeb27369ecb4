/* SPDX-License-Identifier: Apache-2.0 */
/* crc32c: table and SSE4.2 implementations of CRC-32C (crc32c.h). */
#include "common/crc32c.h"

#include <stdbool.h>
#include <string.h>

static uint32_t crc_table[256];
static bool have_hw;

/* Runs before main(), so no thread ever sees a half-built table. */
__attribute__((constructor)) static void crc_table_init(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_hw = __builtin_cpu_supports("sse4.2");
#endif
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t len)
{
	while (len--)
		c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t len)
{
	uint64_t c64 = c;
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
		p += 8;
		len -= 8;
	}
	c = (uint32_t)c64;
	while (len--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}
#endif

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
	uint32_t c = ~crc;
#if defined(__x86_64__)
	if (have_hw)
		return ~crc_hw(c, data, len);
#endif
	return ~crc32c_sw(c, data, len);
}
