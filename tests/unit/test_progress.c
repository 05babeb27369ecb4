/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_progress: long scans' progress (daemon/core/progress.h). A scan is
 * listed from progress_begin to progress_end with its thread's pipeline,
 * what, unit and a count that grows, in the status's text (with commas)
 * and JSON, also while it counts on another thread; its cancel flag makes
 * progress_add fail with -ECANCELED; the sink hears the lines, the last
 * one "in all", or "when stopped" for a cancelled scan.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/core/progress.h"
#include "daemon/core/status.h"

static char said[8][PROGRESS_TEXT_MAX + 64];
static int n_said;

static void sink(const char *text, bool done)
{
	(void)done;
	if (n_said < 8)
		snprintf(said[n_said++], sizeof(said[0]), "%s", text);
}

static char *render_text(void)
{
	struct status_text *t = malloc(sizeof(*t));
	assert_non_null(t);
	status_init(t);
	progress_describe(t);
	char *out = strdup(t->buf);
	free(t);
	return out;
}

static char *render_json(void)
{
	struct status_text *t = malloc(sizeof(*t));
	struct status_json j;
	assert_non_null(t);
	status_init_json(t, &j);
	progress_describe(t);
	assert_int_equal(status_json_finish(t), 0);
	char *out = strndup(j.buf, j.len);
	status_json_free(&j);
	free(t);
	return out;
}

static void test_listed_while_running(void **state)
{
	(void)state;
	char *text = render_text();
	assert_string_equal(text, "");
	free(text);
	progress_scope("train");
	struct progress p;
	progress_begin(&p, "files", "listing /data/train");
	assert_int_equal(progress_add(&p, 1200000), 0);
	text = render_text();
	assert_non_null(strstr(text, "scan: pipeline train: listing /data/train: 1,200,000 files so far, "));
	free(text);
	char *json = render_json();
	assert_non_null(strstr(json, "\"scans\":[{\"pipeline\":\"train\",\"what\":\"listing /data/train\","
				     "\"count\":1200000,\"unit\":\"files\",\"seconds\":"));
	free(json);
	progress_scope(NULL);
	struct progress q; /* a second scan, of no pipeline */
	progress_begin(&q, "shards", "reading the shards /x-{0..9}.tar");
	assert_int_equal(progress_add(&q, 3), 0);
	text = render_text();
	assert_non_null(strstr(text, "scan: reading the shards /x-{0..9}.tar: 3 shards so far"));
	assert_non_null(strstr(text, "scan: pipeline train: listing"));
	free(text);
	progress_end(&q);
	progress_end(&p);
	text = render_text();
	assert_string_equal(text, "");
	free(text);
}

static void test_cancel_and_sink(void **state)
{
	(void)state;
	atomic_bool stop = false;
	n_said = 0;
	progress_set_interval(1); /* every add says a line */
	progress_set_sink(sink);
	progress_set_cancel(&stop);
	progress_scope("val");
	struct progress p;
	progress_begin(&p, "files", "listing /v");
	assert_int_equal(progress_add(&p, 5), 0);
	assert_false(progress_cancelled());
	atomic_store(&stop, true);
	assert_true(progress_cancelled());
	assert_int_equal(progress_add(&p, 1), -ECANCELED);
	progress_end(&p);
	assert_true(n_said >= 2);
	assert_non_null(strstr(said[0], "pipeline val: listing /v: 5 files so far, 0 s"));
	assert_non_null(strstr(said[n_said - 1], "pipeline val: listing /v: 6 files when stopped"));
	progress_set_cancel(NULL);
	progress_scope(NULL);
	n_said = 0;
	progress_begin(&p, "MiB", "reading /m.idx");
	assert_int_equal(progress_add(&p, 2), 0);
	progress_end(&p);
	assert_non_null(strstr(said[n_said - 1], "reading /m.idx: 2 MiB in all"));
	progress_set_sink(NULL);
	progress_set_interval(0);
}

/* A scan on another thread, described from this one while it counts. */
static atomic_bool worker_counting, worker_stop;

static void *count_on_a_thread(void *arg)
{
	(void)arg;
	progress_scope("other");
	progress_set_cancel(&worker_stop);
	struct progress p;
	progress_begin(&p, "files", "listing /o");
	atomic_store(&worker_counting, true);
	while (progress_add(&p, 1) == 0)
		;
	progress_end(&p);
	return NULL;
}

static void test_other_thread(void **state)
{
	(void)state;
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, count_on_a_thread, NULL), 0);
	while (!atomic_load(&worker_counting))
		;
	for (int i = 0; i < 100; i++) {
		char *text = render_text();
		assert_non_null(strstr(text, "scan: pipeline other: listing /o: "));
		free(text);
	}
	char *text = render_text(); /* this thread's scope is its own */
	assert_null(strstr(text, "pipeline train"));
	free(text);
	atomic_store(&worker_stop, true);
	pthread_join(th, NULL);
	text = render_text();
	assert_string_equal(text, "");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listed_while_running),
		cmocka_unit_test(test_cancel_and_sink),
		cmocka_unit_test(test_other_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
