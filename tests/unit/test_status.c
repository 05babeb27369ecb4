/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_status: the status's two renderings (daemon/core/status.h). The
 * same describe calls give the text and a JSON document that a strict
 * reader accepts: strings escaped (quotes, backslashes, controls), valid
 * UTF-8 kept and any other byte written as \xNN, numbers typed by their C
 * type, booleans, nesting; a list is whole in JSON where the text cuts it;
 * a document left open or over the limit fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/core/status.h"

/* One worker-like item, written once for both renderings. */
static void describe(struct status_text *t, unsigned n_items, const char *name)
{
	status_object(t, "daemon");
	status_field(t, "name", "daemon %s", name);
	status_field(t, "ratio", " ratio %.1f", 0.25);
	status_field(t, "ok", " ok %d", (bool)true);
	status_field(t, "big", " big %" PRIu64 "\n", (uint64_t)UINT64_MAX);
	status_close(t);
	status_printf(t, "items: %u\n", n_items);
	struct status_list l;
	status_list_begin(t, &l, "items");
	for (unsigned i = 0; i < n_items; i++) {
		if (!status_item_begin(t, &l))
			continue;
		status_field(t, "index", "  item %u", i);
		status_field(t, "delta", " delta %d\n", -(int)i);
		status_item_end(t, &l);
	}
	status_list_end(t, &l);
}

static char *render_json(unsigned n_items, const char *name, int *rc)
{
	struct status_text *t = malloc(sizeof(*t));
	struct status_json j;
	assert_non_null(t);
	status_init_json(t, &j);
	describe(t, n_items, name);
	*rc = status_json_finish(t);
	free(t);
	return j.buf; /* the caller frees it */
}

static void test_text_and_json(void **state)
{
	(void)state;
	struct status_text *t = malloc(sizeof(*t));
	assert_non_null(t);
	status_init(t);
	describe(t, 2, "x");
	assert_string_equal(t->buf, "daemon x ratio 0.2 ok 1 big 18446744073709551615\n"
			    "items: 2\n  item 0 delta 0\n  item 1 delta -1\n");
	free(t);
	int rc;
	char *json = render_json(2, "x", &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(json, "{\"schema\":\"loaderd.status/1\",\"daemon\":{\"name\":\"x\","
			    "\"ratio\":0.25,\"ok\":true,\"big\":18446744073709551615},"
			    "\"items\":[{\"index\":0,\"delta\":0},{\"index\":1,\"delta\":-1}]}\n");
	free(json);
}

static void test_json_strings(void **state)
{
	(void)state;
	int rc;
	/* quote, backslash, newline, tab, DEL; the euro sign as it is; a
	 * lone continuation byte and a truncated sequence as \xNN */
	char *json = render_json(0, "a\"b\\c\nd\te\x7f \xe2\x82\xac \x80 \xe2\x82", &rc);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(json, "\"name\":\"a\\\"b\\\\c\\nd\\u0009e\\u007f \xe2\x82\xac "
				     "\\\\x80 \\\\xe2\\\\x82\""));
	free(json);
	/* overlong and surrogate encodings are not UTF-8 */
	json = render_json(0, "\xc0\xaf\xed\xa0\x80", &rc);
	assert_non_null(strstr(json, "\"name\":\"\\\\xc0\\\\xaf\\\\xed\\\\xa0\\\\x80\""));
	free(json);
}

/* A list whose text is cut: the JSON has every item. */
static void test_json_never_cut(void **state)
{
	(void)state;
	const unsigned n = 20000; /* about 20 bytes of text each: over a frame */
	struct status_text *t = malloc(sizeof(*t));
	assert_non_null(t);
	status_init(t);
	describe(t, n, "x");
	assert_non_null(strstr(t->buf, " more items (the status text holds at most"));
	free(t);
	int rc;
	char *json = render_json(n, "x", &rc);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(json, "{\"index\":19999,\"delta\":-19999}]}"));
	free(json);
}

static void test_json_failures(void **state)
{
	(void)state;
	struct status_text *t = malloc(sizeof(*t));
	struct status_json j;
	assert_non_null(t);
	status_init_json(t, &j);
	status_object(t, "open"); /* never closed */
	assert_int_equal(status_json_finish(t), -EINVAL);
	status_json_free(&j);
	status_init_json(t, &j);
	status_close(t); /* nothing open */
	assert_int_equal(status_json_finish(t), -EINVAL);
	status_json_free(&j);
	/* over PROTO_STATUS_JSON_MAX */
	status_init_json(t, &j);
	static char big[4096];
	memset(big, 'a', sizeof(big) - 1);
	status_array(t, "big");
	for (size_t i = 0; i <= PROTO_STATUS_JSON_MAX / sizeof(big); i++)
		status_field(t, NULL, "%s", (const char *)big);
	status_close(t);
	assert_int_equal(status_json_finish(t), -E2BIG);
	status_json_free(&j);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text_and_json),
		cmocka_unit_test(test_json_strings),
		cmocka_unit_test(test_json_never_cut),
		cmocka_unit_test(test_json_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
