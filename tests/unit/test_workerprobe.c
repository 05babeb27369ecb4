/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/pool/workerprobe: the real loaderd-worker of this build
 * answers `--probe` and passes; every other kind of program is refused
 * with a reason that says what happened: missing, a directory, a FIFO,
 * not executable, not runnable (no #!), found or not in $PATH, an exit
 * code (with its stderr), a signal, nothing printed, something else
 * printed, another version, more than the answer, no answer in time (the
 * whole process group killed), endless output. A probe that leaves a
 * process behind holding its stdout is not waited for. stdin is /dev/null.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pool/workerprobe.h"
#include "shm/layout.h"

#define DEADLINE_MS 10000

static char dir[64];

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* dir/name with text and mode; returns the path (static storage per call
 * site is not needed: callers copy). */
static const char *put(const char *name, const char *text, mode_t mode)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static const char *expected_line(void)
{
	static char line[96];
	snprintf(line, sizeof(line), "loaderd-worker %s arena %d", LOADERD_VERSION, ARENA_VERSION);
	return line;
}

/* Probes program; checks the return code and that why contains each of
 * the NULL-terminated fragments. */
static void expect(const char *program, int timeout_ms, int rc, ...)
{
	char why[2048] = "(unset)";
	int got = worker_probe(program, timeout_ms, why, sizeof(why));
	if (got != rc)
		fail_msg("%s: rc %d, expected %d; why: %s", program, got, rc, why);
	va_list ap;
	va_start(ap, rc);
	for (const char *frag; (frag = va_arg(ap, const char *));)
		if (!strstr(why, frag))
			fail_msg("%s: why \"%s\" lacks \"%s\"", program, why, frag);
	va_end(ap);
}

static bool pid_gone(pid_t pid)
{
	char path[64], stat[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true;
	size_t n = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[n] = '\0';
	const char *close = strrchr(stat, ')');
	return close && close[1] == ' ' && close[2] == 'Z';
}

static pid_t read_pid(const char *path)
{
	int64_t deadline = now_ms() + DEADLINE_MS;
	for (;;) {
		FILE *f = fopen(path, "r");
		int pid = 0;
		if (f) {
			if (fscanf(f, "%d", &pid) != 1)
				pid = 0;
			fclose(f);
		}
		if (pid > 0)
			return pid;
		if (now_ms() > deadline)
			fail_msg("%s never got a pid", path);
		usleep(10000);
	}
}

static void wait_gone(pid_t pid)
{
	int64_t deadline = now_ms() + DEADLINE_MS;
	while (!pid_gone(pid)) {
		if (now_ms() > deadline) {
			kill(pid, SIGKILL);
			fail_msg("pid %d still runs after the probe", (int)pid);
		}
		usleep(10000);
	}
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_workerprobe.XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_real_worker(void **state)
{
	(void)state;
	const char *build = getenv("LOADERD_BUILD_DIR");
	if (!build)
		skip();
	char path[4096];
	snprintf(path, sizeof(path), "%s/bin/loaderd-worker", build);
	expect(path, DEADLINE_MS, 0, NULL);
	/* A wrapper that execs it passes too (what test setups do). */
	char text[4200];
	snprintf(text, sizeof(text), "#!/bin/sh\nexec \"%s\" \"$@\"\n", path);
	char wrapper[256];
	snprintf(wrapper, sizeof(wrapper), "%s", put("wrapper.sh", text, 0755));
	expect(wrapper, DEADLINE_MS, 0, NULL);
}

static void test_not_runnable(void **state)
{
	(void)state;
	char path[256];
	snprintf(path, sizeof(path), "%s/missing", dir);
	expect(path, DEADLINE_MS, -ENOENT, "No such file or directory", NULL);
	expect(dir, DEADLINE_MS, -EACCES, "not a regular file (a directory)", NULL);
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0755), 0);
	expect(path, DEADLINE_MS, -EACCES, "not a regular file (a FIFO)", NULL);
	expect("/dev/null", DEADLINE_MS, -EACCES, "not a regular file (a character device)", NULL);
	snprintf(path, sizeof(path), "%s", put("plain", "#!/bin/sh\necho hi\n", 0644));
	expect(path, DEADLINE_MS, -EACCES, "not executable (mode 0644)", NULL);
	snprintf(path, sizeof(path), "%s", put("noshebang", "echo hi\n", 0755));
	expect(path, DEADLINE_MS, -ENOEXEC, "cannot run it: Exec format error", NULL);
}

static void test_path_lookup(void **state)
{
	(void)state;
	const char *build = getenv("LOADERD_BUILD_DIR");
	if (!build)
		skip();
	char text[4200];
	snprintf(text, sizeof(text), "#!/bin/sh\nexec \"%s/bin/loaderd-worker\" \"$@\"\n", build);
	put("fakeworker", text, 0755);
	put("notexec", "#!/bin/sh\n", 0644);
	char *saved = strdup(getenv("PATH") ? getenv("PATH") : "");
	char path_var[256];
	snprintf(path_var, sizeof(path_var), "/nonexistent:%s:/bin:/usr/bin", dir);
	setenv("PATH", path_var, 1);
	expect("fakeworker", DEADLINE_MS, 0, NULL);
	expect("nosuchworker", DEADLINE_MS, -ENOENT, "not found in $PATH (/nonexistent:", NULL);
	expect("notexec", DEADLINE_MS, -EACCES, "no executable file of that name in $PATH",
	       "notexec: not executable (mode 0644)", NULL);
	setenv("PATH", saved, 1);
	free(saved);
}

static void test_wrong_answers(void **state)
{
	(void)state;
	char path[256], text[512];
	snprintf(path, sizeof(path), "%s", put("exit3", "#!/bin/sh\necho 'no arena here' >&2\nexit 3\n",
					       0755));
	expect(path, DEADLINE_MS, -ECHILD, "exited with code 3 when run with --probe",
	       "its stderr: \"no arena here\"", NULL);
	snprintf(text, sizeof(text), "#!/bin/sh\necho '%s'\nexit 1\n", expected_line());
	snprintf(path, sizeof(path), "%s", put("rightbutfails", text, 0755));
	expect(path, DEADLINE_MS, -ECHILD, "exited with code 1", NULL);
	snprintf(path, sizeof(path), "%s", put("segv", "#!/bin/sh\nkill -SEGV $$\n", 0755));
	expect(path, DEADLINE_MS, -ECHILD, "was killed by signal 11", NULL);
	snprintf(path, sizeof(path), "%s", put("silent", "#!/bin/sh\nexit 0\n", 0755));
	expect(path, DEADLINE_MS, -EPROTO, "printed nothing when run with --probe", NULL);
	/* stdin is /dev/null: a program reading it ends at once. */
	snprintf(path, sizeof(path), "%s", put("reader", "#!/bin/sh\ncat\n", 0755));
	expect(path, DEADLINE_MS, -EPROTO, "printed nothing", NULL);
	snprintf(path, sizeof(path), "%s", put("hello", "#!/bin/sh\nprintf 'hello\\tworld\\n'\n", 0755));
	snprintf(text, sizeof(text), "printed \"hello\\tworld\" when run with --probe, not a loaderd "
		 "worker's answer (\"%s\")", expected_line());
	expect(path, DEADLINE_MS, -EPROTO, text, NULL);
	snprintf(path, sizeof(path), "%s",
		 put("oldworker", "#!/bin/sh\necho 'loaderd-worker 0.0.9 arena 2'\n", 0755));
	snprintf(text, sizeof(text), "is loaderd-worker 0.0.9 (arena 2), but this loaderd is %s "
		 "(arena %d)", LOADERD_VERSION, ARENA_VERSION);
	expect(path, DEADLINE_MS, -EPROTO, text, NULL);
	snprintf(text, sizeof(text), "#!/bin/sh\necho '%s'\necho extra\n", expected_line());
	snprintf(path, sizeof(path), "%s", put("chatty", text, 0755));
	expect(path, DEADLINE_MS, -EPROTO, "and more when run with --probe", NULL);
	snprintf(text, sizeof(text), "#!/bin/sh\nprintf '%s'\n", expected_line()); /* no newline */
	snprintf(path, sizeof(path), "%s", put("nonewline", text, 0755));
	expect(path, DEADLINE_MS, -EPROTO, "not a loaderd worker's answer", NULL);
}

/* No answer in time: the probe and everything it started are killed,
 * and the verdict comes at the timeout, not when they would have ended. */
static void test_timeout(void **state)
{
	(void)state;
	char path[256], text[512], pidfile[256];
	snprintf(pidfile, sizeof(pidfile), "%s/child.pid", dir);
	snprintf(text, sizeof(text), "#!/bin/sh\nsleep 60 &\necho $! > '%s'\nexec sleep 60\n", pidfile);
	snprintf(path, sizeof(path), "%s", put("hang", text, 0755));
	int64_t t0 = now_ms();
	expect(path, 300, -ETIMEDOUT, "gave no answer to --probe within 0.3 s (killed)", NULL);
	assert_true(now_ms() - t0 < 5000);
	wait_gone(read_pid(pidfile));

	snprintf(path, sizeof(path), "%s", put("flood", "#!/bin/sh\nexec yes loaderd\n", 0755));
	t0 = now_ms();
	expect(path, 300, -ETIMEDOUT, "gave no answer", NULL);
	assert_true(now_ms() - t0 < 5000);
}

/* The right answer, then exit, with a process left behind that holds the
 * probe's stdout open: the verdict does not wait for it. */
static void test_leftover_process(void **state)
{
	(void)state;
	char path[256], text[512], pidfile[256];
	snprintf(pidfile, sizeof(pidfile), "%s/left.pid", dir);
	snprintf(text, sizeof(text), "#!/bin/sh\necho '%s'\nsleep 60 &\necho $! > '%s'\nexit 0\n",
		 expected_line(), pidfile);
	snprintf(path, sizeof(path), "%s", put("leftover", text, 0755));
	int64_t t0 = now_ms();
	expect(path, DEADLINE_MS, 0, NULL);
	assert_true(now_ms() - t0 < DEADLINE_MS / 2);
	pid_t left = read_pid(pidfile);
	kill(left, SIGKILL);
	wait_gone(left);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_worker),
		cmocka_unit_test(test_not_runnable),
		cmocka_unit_test(test_path_lookup),
		cmocka_unit_test(test_wrong_answers),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_leftover_process),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
