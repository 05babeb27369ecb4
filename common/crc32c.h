/* SPDX-License-Identifier: Apache-2.0 */
/*
 * crc32c: CRC-32C (Castagnoli), the checksum `loaderctl consume --dump`
 * prints per sample. Uses the SSE4.2 instruction when the CPU has it.
 *
 * Chaining: crc32c(crc32c(0, a, la), b, lb) == crc32c(0, a||b, la+lb).
 */
#ifndef LDR_COMMON_CRC32C_H
#define LDR_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *data, size_t len);

#endif
