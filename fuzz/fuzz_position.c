/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_position: libFuzzer harness for the two parsers of text a client
 * sends that the daemon reads or shows: position tokens (common/position.c,
 * HELLO's resume field) and the escaping of client text for status and
 * logs (common/escape.c). A token is refused with a reason, or accepted
 * only when it is exactly what position_format writes for the values it
 * gave, within their bounds (a valid PIPELINE name, a SPLIT field only
 * "valid" or "test"); a token of the older format is refused as such
 * (-EPROTONOSUPPORT), and position_parse_v1 accepts it only when
 * "ldr2:p:0000000000000000:" and its fields are a token position_parse
 * reads back to the same fields; an escaped rendering is NUL-terminated
 * inside its buffer and holds only bytes 0x20..0x7e. Any breach aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
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

/* Fields, not bytes: the struct has padding. */
static int same_fields(const struct position *p, const struct position *q)
{
	return p->seed == q->seed && p->n_samples == q->n_samples && p->epoch == q->epoch &&
	       p->offset == q->offset && p->split == q->split && p->data == q->data &&
	       strcmp(p->pipeline, q->pipeline) == 0;
}

/* The older format: its fields are a current token's tail. */
static void check_v1(const char *text)
{
	struct position p, q;
	char why[200] = "", v2[POSITION_TEXT_MAX * 2 + 32];
	if (position_parse_v1(text, &p, why, sizeof(why)) < 0) {
		if (why[0] == '\0')
			abort();
		return;
	}
	if (p.pipeline[0] || p.data || strncmp(text, "ldr1:", 5) != 0)
		abort();
	snprintf(v2, sizeof(v2), "ldr2:p:0000000000000000:%s", text + 5);
	if (position_parse(v2, &q, why, sizeof(why)) < 0 || strcmp(q.pipeline, "p") != 0)
		abort();
	strcpy(p.pipeline, "p");
	if (!same_fields(&p, &q))
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
	check_v1(text);
	int rc = position_parse(text, &p, why, sizeof(why));
	if (rc < 0) {
		if (why[0] == '\0')
			abort(); /* a refusal names its reason */
		if ((rc == -EPROTONOSUPPORT) != (strncmp(text, "ldr1:", 5) == 0) ||
		    (rc != -EINVAL && rc != -EPROTONOSUPPORT))
			abort();
		return 0;
	}
	char again[POSITION_TEXT_MAX];
	size_t name_len = strnlen(p.pipeline, sizeof(p.pipeline));
	if (p.epoch >= POSITION_EPOCHS || p.offset > p.n_samples || p.split >= SPLIT_COUNT ||
	    name_len == sizeof(p.pipeline) || !position_name_valid(p.pipeline, name_len) ||
	    position_format(&p, again, sizeof(again)) < 0 || strcmp(again, text) != 0 ||
	    position_parse(again, &q, why, sizeof(why)) < 0 || !same_fields(&p, &q))
		abort();
	return 0;
}
