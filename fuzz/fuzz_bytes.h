/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_bytes: what the harnesses of binary formats share: reading a
 * little-endian integer of the input, to steer a harness by its bytes.
 */
#ifndef LDR_FUZZ_BYTES_H
#define LDR_FUZZ_BYTES_H

#include <stdint.h>

/* The `bytes`-byte little-endian integer at p (bytes <= 8). */
static inline uint64_t le(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;
	for (unsigned i = bytes; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

#endif
