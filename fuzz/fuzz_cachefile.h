/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_cachefile: what the harnesses of cache files (fuzz_listcache,
 * fuzz_idxcache) share. An input that starts with the kind's magic gets
 * its header's payload size and checksum put right (its version and
 * count kept), so that mutations reach the payload's decoder rather than
 * stop at the checksum; any other input is decoded as it is.
 */
#ifndef LDR_FUZZ_CACHEFILE_H
#define LDR_FUZZ_CACHEFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "daemon/source/cachefile.h"

/* A copy of the input (NULL when out of memory), its header sealed. */
static inline uint8_t *fuzz_cachefile_copy(const uint8_t *data, size_t size, const char magic[8])
{
	uint8_t *buf = malloc(size + 1);
	if (!buf)
		return NULL;
	memcpy(buf, data, size);
	if (size <= CACHEFILE_HEADER_BYTES || memcmp(buf, magic, 8) != 0)
		return buf;
	struct cachefile_header h;
	memcpy(&h, buf, sizeof(h));
	h.payload_bytes = size - sizeof(h);
	h.payload_crc = crc32c(0, buf + sizeof(h), size - sizeof(h));
	memcpy(buf, &h, sizeof(h));
	return buf;
}

#endif
