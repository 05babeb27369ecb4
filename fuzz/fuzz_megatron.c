/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_megatron: libFuzzer harness for the Megatron-LM index reader
 * (daemon/source/megatron.c), which reads .idx files nobody vetted. The input is
 * the size of the .bin (8 bytes, little-endian; 0 when the input is
 * shorter) followed by the .idx bytes. Any input may be refused, but a
 * refusal must carry a message and a documented code and leave the index
 * zeroed; an accepted index must obey every rule of megatron.h, checked
 * here again from the raw bytes, and its arrays must be the file's. Any
 * breach aborts (ASan/UBSan catch the rest).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/source/megatron.h"
#include "fuzz/fuzz_bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_index(const struct mg_index *ix, const uint8_t *idx, size_t len,
			uint64_t bin_bytes)
{
	static const uint32_t token_bytes[] = {0, 1, 1, 2, 4, 8, 0, 0, 2};
	if (len < MG_HEADER_BYTES || memcmp(idx, "MMIDIDX\0\0", 9) != 0 || le(idx + 9, 8) != 1)
		abort();
	uint8_t code = idx[17];
	if (code != ix->dtype_code || code > 8 || token_bytes[code] == 0 ||
	    ix->token_bytes != token_bytes[code] ||
	    ix->token_signed != (code >= 2 && code <= 5))
		abort();
	uint64_t n = le(idx + 18, 8), docs = le(idx + 26, 8);
	if (ix->n_sequences != n || docs == 0 || ix->n_documents != docs - 1 ||
	    n > len / 12 || docs > len / 8 || len != MG_HEADER_BYTES + 12 * n + 8 * docs ||
	    ix->bin_bytes != bin_bytes)
		abort();
	uint64_t end = 0, tokens = 0;
	for (uint64_t i = 0; i < n; i++) {
		int32_t length;
		int64_t pointer;
		uint32_t l = (uint32_t)le(idx + MG_HEADER_BYTES + 4 * i, 4);
		uint64_t p = le(idx + MG_HEADER_BYTES + 4 * n + 8 * i, 8);
		memcpy(&length, &l, 4);
		memcpy(&pointer, &p, 8);
		if (length < 0 || mg_length(ix, i) != length || pointer < 0 ||
		    mg_pointer(ix, i) != pointer || (uint64_t)pointer != end)
			abort();
		end += (uint64_t)length * ix->token_bytes;
		tokens += (uint64_t)length;
		if (end > bin_bytes)
			abort();
	}
	if (end != bin_bytes || tokens != ix->n_tokens)
		abort();
	for (uint64_t d = 0; d < docs; d++) {
		uint64_t raw = le(idx + MG_HEADER_BYTES + 12 * n + 8 * d, 8);
		int64_t v;
		memcpy(&v, &raw, 8);
		if (mg_doc_index(ix, d) != v || v < 0 || (uint64_t)v > n ||
		    (d == 0 && v != 0) || (d > 0 && v < mg_doc_index(ix, d - 1)) ||
		    (d == docs - 1 && (uint64_t)v != n))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t bin_bytes = size >= 8 ? le(data, 8) : 0;
	const uint8_t *idx = size >= 8 ? data + 8 : data;
	size_t len = size >= 8 ? size - 8 : size;
	struct mg_index ix;
	char err[1024] = "";
	int rc = mg_index_parse(idx, len, bin_bytes, "fuzz.idx", &ix, err, sizeof(err));
	if (rc < 0) {
		static const struct mg_index zero;
		if (err[0] == '\0' || strncmp(err, "fuzz.idx: ", 10) != 0 ||
		    (rc != -EINVAL && rc != -ENODATA && rc != -ENOMEM) ||
		    memcmp(&ix, &zero, sizeof(ix)) != 0)
			abort();
		return 0;
	}
	if (rc != 0 || err[0] != '\0')
		abort();
	check_index(&ix, idx, len, bin_bytes);
	mg_index_free(&ix);
	return 0;
}
