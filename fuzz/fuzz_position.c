/*
 * fuzz_position: libFuzzer harness for the two parsers of text a client
 * sends that the daemon reads or shows: position tokens (common/position.c,
 * HELLO's resume field) and the escaping of client text for status and
 * logs (common/escape.c). A token is refused with a reason, or accepted
 * only when it is exactly what position_format writes for the values it
 * gave, within their bounds (a SPLIT field only "valid" or "test"); an
 * escaped rendering is NUL-terminated inside
 * its buffer and holds only bytes 0x20..0x7e. Any breach aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "common/position.h"
#include "common/split.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_escape(const uint8_t *data, size_t size)
{
	char out[ESCAPE_SIZE(256)];
	size_t n = size < 256 ? size : 256;
	size_t cap = 1 + (n ? data[0] % sizeof(out) : 0); /* small buffers too */
	escape_bytes(data, n, out, cap);
	size_t len = strnlen(out, cap);
	if (len >= cap)
		abort();
	for (size_t i = 0; i < len; i++)
		if (out[i] < 0x20 || out[i] > 0x7e)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_escape(data, size);
	char text[POSITION_TEXT_MAX * 2];
	if (size >= sizeof(text))
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct position p, q;
	char why[200] = "";
	if (position_parse(text, &p, why, sizeof(why)) < 0) {
		if (why[0] == '\0')
			abort(); /* a refusal names its reason */
		return 0;
	}
	char again[POSITION_TEXT_MAX];
	if (p.epoch >= POSITION_EPOCHS || p.offset > p.n_samples || p.split >= SPLIT_COUNT ||
	    position_format(&p, again, sizeof(again)) < 0 || strcmp(again, text) != 0 ||
	    position_parse(again, &q, why, sizeof(why)) < 0 || p.seed != q.seed ||
	    p.n_samples != q.n_samples || p.epoch != q.epoch || p.offset != q.offset ||
	    p.split != q.split) /* fields, not bytes: the struct has padding */
		abort();
	return 0;
}
