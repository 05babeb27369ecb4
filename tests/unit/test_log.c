/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/log: the per-site rate limit. A site logging 10,000
 * lines writes LOG_BURST of them and, once its window has ended, one
 * "N similar messages suppressed" line; sites are independent (also two
 * sites with the same format); the summary comes from any later call, from
 * log_flush_suppressed() or at exit; lines filtered by level do not count;
 * four threads logging at once write whole lines only; the limit can be
 * turned off. stderr is redirected to a file; the clock is the test's.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"

static _Atomic uint64_t fake_now_ms = 1000000;

static uint64_t fake_clock(void)
{
	return atomic_load(&fake_now_ms);
}

static void advance_ms(uint64_t ms)
{
	atomic_fetch_add(&fake_now_ms, ms);
}

static int saved_stderr = -1;
static char capture_path[64];

/* Ends every open window (their summaries go to the previous capture),
 * then sends stderr to a new empty file. */
static void capture_begin(void)
{
	advance_ms(10 * LOG_WINDOW_MS);
	log_flush_suppressed();
	snprintf(capture_path, sizeof(capture_path), "/tmp/ldr-test-log-XXXXXX");
	int fd = mkstemp(capture_path);
	assert_true(fd >= 0);
	if (saved_stderr < 0)
		saved_stderr = dup(STDERR_FILENO);
	assert_true(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
	close(fd);
}

/* Everything written to stderr since capture_begin (malloc'd). */
static char *capture_read(void)
{
	FILE *f = fopen(capture_path, "r");
	assert_non_null(f);
	char *buf = calloc(1, 1 << 20);
	assert_non_null(buf);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void capture_end(void)
{
	dup2(saved_stderr, STDERR_FILENO);
	unlink(capture_path);
}

static size_t count_lines(const char *text, const char *containing)
{
	size_t n = 0;
	for (const char *p = text; *p;) {
		const char *end = strchr(p, '\n');
		assert_non_null(end); /* every line is whole */
		if (!containing || memmem(p, (size_t)(end - p), containing, strlen(containing)))
			n++;
		p = end + 1;
	}
	return n;
}

static int setup(void **state)
{
	log_init("test", LOG_LEVEL_INFO);
	log_set_clock(fake_clock);
	return 0;
}

static void log_flood_line(int i)
{
	log_warning("flood line %d from one site", i);
}

static void test_burst_then_summary(void **state)
{
	capture_begin();
	for (int i = 0; i < 10000; i++)
		log_flood_line(i);
	char *text = capture_read();
	assert_int_equal(count_lines(text, NULL), LOG_BURST);
	assert_int_equal(count_lines(text, "test: warning: flood line "), LOG_BURST);
	char want[200];
	snprintf(want, sizeof(want), "flood line %d from one site\n", LOG_BURST - 1);
	assert_non_null(strstr(text, want));
	snprintf(want, sizeof(want), "flood line %d ", LOG_BURST);
	assert_null(strstr(text, want));
	free(text);

	/* The window has not ended: nothing yet, and the flush says when. */
	int64_t left = log_flush_suppressed();
	assert_true(left > 0 && left <= LOG_WINDOW_MS);
	advance_ms((uint64_t)left);
	assert_int_equal(log_flush_suppressed(), -1);
	text = capture_read();
	assert_int_equal(count_lines(text, NULL), LOG_BURST + 1);
	snprintf(want, sizeof(want), "test: warning: %d similar messages suppressed: flood line %d "
		 "from one site\n", 10000 - LOG_BURST, LOG_BURST);
	assert_non_null(strstr(text, want));
	free(text);

	/* A new window: the site writes again. */
	log_flood_line(20000);
	text = capture_read();
	assert_non_null(strstr(text, "flood line 20000 from one site\n"));
	assert_int_equal(count_lines(text, NULL), LOG_BURST + 2);
	free(text);
	capture_end();
}

/* noipa: identical functions would otherwise be folded into one. */
__attribute__((noipa)) static void site_a(const char *what)
{
	log_notice("%s", what);
}

__attribute__((noipa)) static void site_b(const char *what)
{
	log_notice("%s", what);
}

static void log_error_site(void)
{
	log_error("an error that repeats, with a long text that goes on and on past the "
		  "eighty bytes of the summary's excerpt");
}

/* Two sites with the same format each have their burst; the summary of one
 * is written by the next call of the other, before that call's line; an
 * error repeats under the same rule, its summary at error level. */
static void test_sites_independent(void **state)
{
	capture_begin();
	for (int i = 0; i < LOG_BURST + 40; i++) {
		site_a("from a");
		site_b("from b");
		log_error_site();
	}
	char *text = capture_read();
	assert_int_equal(count_lines(text, "from a"), LOG_BURST);
	assert_int_equal(count_lines(text, "from b"), LOG_BURST);
	assert_int_equal(count_lines(text, "test: error: an error that repeats"), LOG_BURST);
	free(text);
	advance_ms(LOG_WINDOW_MS);
	site_b("b again");
	text = capture_read();
	char *sa = strstr(text, "test: 40 similar messages suppressed: from a\n");
	char *sb = strstr(text, "test: 40 similar messages suppressed: from b\n");
	char *se = strstr(text, "test: error: 40 similar messages suppressed: an error that "
				"repeats, with a long text that goes on and on past the eighty...\n");
	char *again = strstr(text, "test: b again\n");
	assert_non_null(sa);
	assert_non_null(sb);
	assert_non_null(se);
	assert_non_null(again);
	assert_true(sa < again && sb < again && se < again);
	free(text);
	capture_end();
}

static void log_debug_site(int i)
{
	log_debug("debug %d", i);
}

/* Lines above the level are not written and not counted. */
static void test_filtered_lines_do_not_count(void **state)
{
	capture_begin();
	for (int i = 0; i < 100; i++)
		log_debug_site(i);
	log_set_level(LOG_LEVEL_DEBUG);
	for (int i = 0; i < 5; i++)
		log_debug_site(i);
	log_set_level(LOG_LEVEL_INFO);
	char *text = capture_read();
	assert_int_equal(count_lines(text, "test: debug: debug "), 5);
	free(text);
	assert_int_equal(log_flush_suppressed(), -1);
	capture_end();
}

static void log_off_site(int i)
{
	log_info("unlimited %d", i);
}

static void test_ratelimit_off(void **state)
{
	capture_begin();
	log_set_ratelimit(false);
	for (int i = 0; i < 100; i++)
		log_off_site(i);
	log_set_ratelimit(true);
	errno = EBADF;
	log_off_site(100);
	assert_int_equal(errno, EBADF); /* logging never changes errno */
	char *text = capture_read();
	assert_int_equal(count_lines(text, "test: unlimited "), 101);
	free(text);
	capture_end();
}

static void *thread_flood(void *arg)
{
	for (int i = 0; i < 2500; i++)
		log_flood_line(i);
	return arg;
}

/* Four threads on one site: LOG_BURST whole lines in all, and the sum of
 * the rest in the summary. */
static void test_threads(void **state)
{
	capture_begin();
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, thread_flood, NULL), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	advance_ms(LOG_WINDOW_MS);
	log_flush_suppressed();
	char *text = capture_read();
	assert_int_equal(count_lines(text, NULL), LOG_BURST + 1);
	assert_int_equal(count_lines(text, "test: warning: flood line "), LOG_BURST);
	char want[100];
	snprintf(want, sizeof(want), "test: warning: %d similar messages suppressed: flood line ",
		 10000 - LOG_BURST);
	assert_int_equal(count_lines(text, want), 1);
	free(text);
	capture_end();
}

/* A process that exits with drops pending writes their count. */
static void test_summary_at_exit(void **state)
{
	capture_begin();
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < LOG_BURST + 15; i++)
			log_flood_line(i);
		exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char *text = capture_read();
	assert_int_equal(count_lines(text, NULL), LOG_BURST + 1);
	char want[100];
	snprintf(want, sizeof(want), "test: warning: 15 similar messages suppressed: flood line %d "
		 "from one site\n", LOG_BURST);
	assert_non_null(strstr(text, want));
	free(text);
	capture_end();
}

static void many_sites(const char *fmt, int i)
{
	log_info(fmt, i);
}

/* 200 sites at once, more than the table holds: sites give up their place
 * to others, yet every line is either written or counted in a summary. */
static void test_many_sites(void **state)
{
	static char fmts[200][16];
	for (int i = 0; i < 200; i++)
		snprintf(fmts[i], sizeof(fmts[i]), "site%03d %%d", i);
	capture_begin();
	for (int round = 0; round < LOG_BURST + 15; round++)
		for (int i = 0; i < 200; i++)
			many_sites(fmts[i], round);
	advance_ms(LOG_WINDOW_MS);
	log_flush_suppressed();
	char *text = capture_read();
	size_t written = 0, suppressed = 0;
	for (const char *p = text; *p; p = strchr(p, '\n') + 1) {
		unsigned n;
		if (sscanf(p, "test: %u similar messages suppressed:", &n) == 1)
			suppressed += n;
		else
			written++;
	}
	assert_true(written >= 200 * LOG_BURST);
	assert_int_equal(written + suppressed, 200 * (LOG_BURST + 15));
	free(text);
	capture_end();
}

/* log_capture: error lines' messages, "; " between them, cut to fit;
 * other levels, and lines after it stops, are not kept. */
static void test_capture(void **state)
{
	(void)state;
	capture_begin();
	char buf[64], after_two[64], after_three[64];
	log_capture(buf, sizeof(buf));
	log_error("first %d", 1);
	log_warning("a warning");
	log_error("second");
	snprintf(after_two, sizeof(after_two), "%s", buf);
	log_error("a line far too long to fit in what is left of the buffer");
	snprintf(after_three, sizeof(after_three), "%s", buf);
	log_capture(NULL, 0);
	log_error("after");
	char *out = capture_read();
	capture_end();
	assert_string_equal(after_two, "first 1; second");
	assert_string_equal(after_three, "first 1; second; a line far too long to fit in what is left of ");
	assert_string_equal(buf, after_three);
	assert_int_equal(count_lines(out, "error: "), 4); /* the log has every line still */
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_capture),
		cmocka_unit_test(test_burst_then_summary),
		cmocka_unit_test(test_sites_independent),
		cmocka_unit_test(test_filtered_lines_do_not_count),
		cmocka_unit_test(test_ratelimit_off),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_summary_at_exit),
		cmocka_unit_test(test_many_sites),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
