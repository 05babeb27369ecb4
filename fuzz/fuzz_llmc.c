/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_llmc: libFuzzer harness for the llm.c token shard header reader
 * (daemon/source/llmc.c), which reads shard headers nobody vetted. The input is
 * the shard file's size (8 bytes, little-endian; 0 when the input is
 * shorter) followed by the file's first bytes. Any input may be refused,
 * but a refusal must carry a message naming the file and a documented
 * code, and leave the count 0; an accepted header must obey every rule of
 * llmc.h, checked here again from the raw bytes. Any breach aborts
 * (ASan/UBSan catch the rest).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/source/llmc.h"
#include "fuzz/fuzz_bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t file_bytes = size >= 8 ? le(data, 8) : 0;
	const uint8_t *head = size >= 8 ? data + 8 : data;
	size_t len = size >= 8 ? size - 8 : size;
	uint64_t n = 12345;
	char err[512] = "";
	int rc = llmc_header_parse(head, len, file_bytes, "fuzz.bin", &n, err, sizeof(err));
	if (rc < 0) {
		if (err[0] == '\0' || strncmp(err, "fuzz.bin: ", 10) != 0 ||
		    (rc != -EINVAL && rc != -ENODATA) || n != 0)
			abort();
		return 0;
	}
	if (rc != 0 || err[0] != '\0' || len < LLMC_HEADER_BYTES ||
	    le(head, 4) != LLMC_MAGIC || le(head + 4, 4) != LLMC_VERSION ||
	    le(head + 8, 4) >= 0x80000000u || n != le(head + 8, 4) ||
	    file_bytes != LLMC_HEADER_BYTES + 2 * n)
		abort();
	return 0;
}
