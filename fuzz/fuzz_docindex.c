/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_docindex: libFuzzer harness for docorder_index_start
 * (common/docorder.c), which a worker calls on the bytes of a .idx it
 * mapped: the file was checked at start, but it is read again here, so
 * every read must stay inside the arrays the header's counts give,
 * whatever the entries hold. The input is a token shift (1 byte, 0..3),
 * a split's span (first_doc, cut_seq, n_docs, end_token: 8 bytes each),
 * the .bin's token count (8 bytes), then the .idx's bytes; the index is
 * used only when its length is the one its counts give (as the worker's
 * check requires). Any document may be refused; an answer must be the
 * end of the split, the token count, or a pointer's token. Any breach
 * aborts (ASan/UBSan catch a read outside the index).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/docorder.h"
#include "fuzz/fuzz_bytes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PREFIX_BYTES (1 + 4 * 8 + 8)
#define IDX_HEADER 34u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < PREFIX_BYTES + IDX_HEADER)
		return 0;
	const uint32_t shift = data[0] & 3;
	const struct docorder_span span = {.first_doc = le(data + 1, 8), .cut_seq = le(data + 9, 8),
					   .n_docs = le(data + 17, 8), .end_token = le(data + 25, 8)};
	const uint64_t n_tokens = le(data + 33, 8);
	const uint8_t *idx = data + PREFIX_BYTES;
	const size_t len = size - PREFIX_BYTES;
	const uint64_t s = le(idx + 18, 8), e = le(idx + 26, 8);
	if (s > (len - IDX_HEADER) / 12 || e > (len - IDX_HEADER - 12 * s) / 8 ||
	    len != IDX_HEADER + 12 * s + 8 * e)
		return 0;
	/* a copy of exactly the index, so that ASan sees any read past it */
	uint8_t *map = malloc(len);
	if (!map)
		return 0;
	memcpy(map, idx, len);
	const struct docorder_index ix = {
		.map = map, .n_sequences = s, .n_entries = e, .pointers_at = IDX_HEADER + 4 * s,
		.doc_indices_at = IDX_HEADER + 12 * s, .n_tokens = n_tokens, .token_shift = shift,
	};
	uint64_t last = span.n_docs < 64 ? span.n_docs : 64;
	const uint64_t far[] = {span.n_docs - 1, span.n_docs, span.n_docs + 1, UINT64_MAX, e, e + 1};
	for (uint64_t k = 0; k <= last + sizeof(far) / sizeof(far[0]); k++) {
		uint64_t j = k <= last ? k : far[k - last - 1];
		uint64_t t = 0;
		if (!docorder_index_start(&ix, &span, j, &t))
			continue;
		if (j > span.n_docs)
			abort(); /* past the end: always refused */
		if (j == span.n_docs ? t != span.end_token : t != n_tokens && t > (uint64_t)INT64_MAX >> shift)
			abort();
	}
	free(map);
	return 0;
}
