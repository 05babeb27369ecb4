/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/paths: the default socket path's order of
 * precedence ($LOADERD_SOCKET, root's /run path, $XDG_RUNTIME_DIR, none)
 * and its length limit. The unprivileged cases run in a child that drops
 * to an unprivileged uid when the tests run as root. And where the daemon
 * finds the programs it starts, from its own executable: beside it (a
 * build tree), else in the libexec directory relative to it (an install
 * under any prefix), checked on a tree of real files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <fcntl.h>
#include <limits.h>

#include "common/paths.h"

static const char *const root_path = "/run/loaderd/loaderd.sock";

/* Returns 0, or the line of the first failed check: the checks also run in
 * a forked child, where a cmocka failure could not reach the runner. */
#define RETURN_LINE_UNLESS(cond)          \
	do {                              \
		if (!(cond))              \
			return __LINE__;  \
	} while (0)

/* paths_default_socket with a generous buffer equals `want`. */
static int resolves_to(const char *want)
{
	char buf[4096];
	memset(buf, 'x', sizeof(buf));
	return paths_default_socket(buf, sizeof(buf)) == 0 && strcmp(buf, want) == 0;
}

/* The exact boundary: needs strlen(want) + 1 bytes, refuses one less. */
static int needs_exactly(const char *want)
{
	size_t len = strlen(want);
	char buf[4096];
	if (len + 1 > sizeof(buf))
		return 0;
	return paths_default_socket(buf, len) == -ENAMETOOLONG &&
	       paths_default_socket(buf, len + 1) == 0 && strcmp(buf, want) == 0;
}

/* The cases that do not depend on the effective uid. */
static int check_explicit_socket(void)
{
	RETURN_LINE_UNLESS(setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1) == 0);
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", "/tmp/custom/ld.sock", 1) == 0);
	RETURN_LINE_UNLESS(resolves_to("/tmp/custom/ld.sock"));
	RETURN_LINE_UNLESS(needs_exactly("/tmp/custom/ld.sock"));
	/* taken as given, relative or not */
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", "ld.sock", 1) == 0);
	RETURN_LINE_UNLESS(resolves_to("ld.sock"));
	/* a path longer than the buffer */
	static char long_path[5000];
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[0] = '/';
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", long_path, 1) == 0);
	char buf[4096];
	RETURN_LINE_UNLESS(paths_default_socket(buf, sizeof(buf)) == -ENAMETOOLONG);
	RETURN_LINE_UNLESS(paths_default_socket(buf, 0) == -ENAMETOOLONG);
	return 0;
}

/* The cases of a process that is not root; LOADERD_SOCKET empty counts as
 * unset. */
static int check_client_unprivileged(void);

static int check_unprivileged(void)
{
	if (geteuid() == 0)
		return __LINE__;
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", "", 1) == 0);
	RETURN_LINE_UNLESS(setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1) == 0);
	RETURN_LINE_UNLESS(resolves_to("/run/user/1000/loaderd.sock"));
	RETURN_LINE_UNLESS(needs_exactly("/run/user/1000/loaderd.sock"));
	RETURN_LINE_UNLESS(unsetenv("LOADERD_SOCKET") == 0);
	RETURN_LINE_UNLESS(resolves_to("/run/user/1000/loaderd.sock"));
	/* LOADERD_SOCKET still comes first */
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", "/tmp/a.sock", 1) == 0);
	RETURN_LINE_UNLESS(resolves_to("/tmp/a.sock"));
	RETURN_LINE_UNLESS(unsetenv("LOADERD_SOCKET") == 0);

	char buf[4096];
	RETURN_LINE_UNLESS(setenv("XDG_RUNTIME_DIR", "", 1) == 0);
	RETURN_LINE_UNLESS(paths_default_socket(buf, sizeof(buf)) == -ENOENT);
	RETURN_LINE_UNLESS(unsetenv("XDG_RUNTIME_DIR") == 0);
	RETURN_LINE_UNLESS(paths_default_socket(buf, sizeof(buf)) == -ENOENT);
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", "", 1) == 0);
	RETURN_LINE_UNLESS(paths_default_socket(buf, sizeof(buf)) == -ENOENT);
	RETURN_LINE_UNLESS(unsetenv("LOADERD_SOCKET") == 0);

	RETURN_LINE_UNLESS(check_client_unprivileged() == 0);

	static char long_dir[4100];
	memset(long_dir, 'd', sizeof(long_dir) - 1);
	long_dir[0] = '/';
	RETURN_LINE_UNLESS(setenv("XDG_RUNTIME_DIR", long_dir, 1) == 0);
	RETURN_LINE_UNLESS(paths_default_socket(buf, sizeof(buf)) == -ENAMETOOLONG);
	return check_explicit_socket();
}

/* paths_client_socket with a generous buffer equals `want`. */
static int client_resolves_to(const char *want)
{
	char buf[4096];
	return paths_client_socket(buf, sizeof(buf)) == 0 && strcmp(buf, want) == 0;
}

/* A client prefers its user's own daemon when that one's socket exists,
 * else the system daemon's; LOADERD_SOCKET still comes first. */
static int check_client_unprivileged(void)
{
	char dir[64], sock_path[96];
	snprintf(dir, sizeof(dir), "/tmp/ldr-paths-%d", (int)getpid());
	snprintf(sock_path, sizeof(sock_path), "%s/loaderd.sock", dir);
	RETURN_LINE_UNLESS(mkdir(dir, 0700) == 0);
	RETURN_LINE_UNLESS(unsetenv("LOADERD_SOCKET") == 0);
	RETURN_LINE_UNLESS(setenv("XDG_RUNTIME_DIR", dir, 1) == 0);
	RETURN_LINE_UNLESS(client_resolves_to(root_path)); /* no socket there yet */
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path);
	RETURN_LINE_UNLESS(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0);
	int line = client_resolves_to(sock_path) ? 0 : __LINE__;
	if (line == 0 && setenv("LOADERD_SOCKET", "/tmp/b.sock", 1) == 0 && !client_resolves_to("/tmp/b.sock"))
		line = __LINE__;
	close(fd);
	unlink(sock_path);
	rmdir(dir);
	unsetenv("LOADERD_SOCKET");
	return line;
}

/* Root's path, whatever XDG_RUNTIME_DIR says. */
static int check_root(void)
{
	if (geteuid() != 0)
		return __LINE__;
	RETURN_LINE_UNLESS(unsetenv("LOADERD_SOCKET") == 0);
	RETURN_LINE_UNLESS(setenv("XDG_RUNTIME_DIR", "/run/user/0", 1) == 0);
	RETURN_LINE_UNLESS(resolves_to(root_path));
	RETURN_LINE_UNLESS(unsetenv("XDG_RUNTIME_DIR") == 0);
	RETURN_LINE_UNLESS(resolves_to(root_path));
	RETURN_LINE_UNLESS(setenv("LOADERD_SOCKET", "", 1) == 0);
	RETURN_LINE_UNLESS(resolves_to(root_path));
	RETURN_LINE_UNLESS(needs_exactly(root_path));
	RETURN_LINE_UNLESS(unsetenv("LOADERD_SOCKET") == 0);
	RETURN_LINE_UNLESS(client_resolves_to(root_path));
	return check_explicit_socket();
}

static void test_explicit_socket(void **state)
{
	assert_int_equal(check_explicit_socket(), 0);
}

/* Runs check_unprivileged here, or in a child dropped to nobody's uid. */
static void test_unprivileged(void **state)
{
	if (geteuid() != 0) {
		assert_int_equal(check_unprivileged(), 0);
		return;
	}
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(255);
		int line = check_unprivileged();
		if (line != 0)
			fprintf(stderr, "test_paths.c:%d: check failed as uid 65534\n", line);
		_exit(line != 0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 255)
		skip(); /* cannot change uid here (no CAP_SETUID in this namespace) */
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_root(void **state)
{
	if (geteuid() != 0)
		skip();
	assert_int_equal(check_root(), 0);
}

static void put_program(const char *path, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static void test_program(void **state)
{
	char root[] = "/tmp/ldr-paths-XXXXXX", p[PATH_MAX], want[PATH_MAX + 64], got[PATH_MAX + 64];
	assert_non_null(mkdtemp(root));
	snprintf(p, sizeof(p), "%s/bin", root);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/libexec", root);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/libexec/loaderd", root);
	assert_int_equal(mkdir(p, 0755), 0);
	char exe[PATH_MAX];
	snprintf(exe, sizeof(exe), "%s/bin/loaderd", root);
	put_program(exe, 0755);

	/* An install: the program is in ../libexec/loaderd, named without "..". */
	snprintf(p, sizeof(p), "%s/libexec/loaderd/loaderd-worker", root);
	put_program(p, 0755);
	paths_program_from(exe, "loaderd-worker", "../libexec/loaderd", got, sizeof(got));
	assert_string_equal(got, p);

	/* Neither there nor beside: the install's path all the same, for the
	 * caller's check to name. */
	snprintf(want, sizeof(want), "%s/libexec/loaderd/loaderd-decoder", root);
	paths_program_from(exe, "loaderd-decoder", "../libexec/loaderd", got, sizeof(got));
	assert_string_equal(got, want);

	/* A build tree: beside the executable wins; one that cannot be run
	 * there does not. */
	snprintf(want, sizeof(want), "%s/bin/loaderd-worker", root);
	put_program(want, 0755);
	paths_program_from(exe, "loaderd-worker", "../libexec/loaderd", got, sizeof(got));
	assert_string_equal(got, want);
	assert_int_equal(chmod(want, 0644), 0);
	paths_program_from(exe, "loaderd-worker", "../libexec/loaderd", got, sizeof(got));
	assert_string_equal(got, p); /* X_OK wants an x bit, root's access() too */
	assert_int_equal(unlink(want), 0);

	/* A deeper relative path (an absolute libexec directory elsewhere). */
	snprintf(want, sizeof(want), "%s/libexec/loaderd/loaderd-worker", root);
	snprintf(exe, sizeof(exe), "%s/libexec/loaderd/sub/loaderd", root);
	paths_program_from(exe, "loaderd-worker", "../../loaderd", got, sizeof(got));
	assert_string_equal(got, want);

	/* The running executable: this test, which has no loaderd-worker beside it. */
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(want, sizeof(want), "%s/libexec/loaderd/no-such-program", self);
	paths_program("no-such-program", "../libexec/loaderd", "/nonexistent", got, sizeof(got));
	assert_string_equal(got, want);

	snprintf(p, sizeof(p), "%s/libexec/loaderd/loaderd-worker", root);
	assert_int_equal(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/bin/loaderd", root);
	assert_int_equal(unlink(p), 0);
	snprintf(p, sizeof(p), "%s/libexec/loaderd", root);
	assert_int_equal(rmdir(p), 0);
	snprintf(p, sizeof(p), "%s/libexec", root);
	assert_int_equal(rmdir(p), 0);
	snprintf(p, sizeof(p), "%s/bin", root);
	assert_int_equal(rmdir(p), 0);
	assert_int_equal(rmdir(root), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_explicit_socket),
		cmocka_unit_test(test_unprivileged),
		cmocka_unit_test(test_root),
		cmocka_unit_test(test_program),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
