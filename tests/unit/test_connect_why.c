/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for client/connect_why: what a failed connect is told, over
 * a /proc made up in a temporary directory (loaderd processes, their fds,
 * their command lines, /proc/net/unix), and over real paths: nothing
 * there, a stale socket, a file that is not a socket, a socket the caller
 * may not write.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/connect_why.h"

static char dir[PATH_MAX];
static char proc[PATH_MAX + 16];
static char why[8192];

static void put(const char *rel, const char *text)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", proc, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
	assert_int_equal(fclose(f), 0);
}

static void mkdir_in(const char *rel)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", proc, rel);
	assert_int_equal(mkdir(path, 0755), 0);
}

static void link_in(const char *rel, const char *target)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", proc, rel);
	assert_int_equal(symlink(target, path), 0);
}

/* A process pid named comm with an fd dir (fds: "socket:[N]" links). */
static void process(const char *pid, const char *comm, const char *cmdline, size_t cmd_len)
{
	char rel[64];
	mkdir_in(pid);
	snprintf(rel, sizeof(rel), "%s/comm", pid);
	put(rel, comm);
	snprintf(rel, sizeof(rel), "%s/fd", pid);
	mkdir_in(rel);
	snprintf(rel, sizeof(rel), "%s/cmdline", pid);
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", proc, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(cmdline, 1, cmd_len, f), cmd_len);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/test_connect_why.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(proc, sizeof(proc), "%s/proc", dir);
	return mkdir(proc, 0755);
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st, (void)type, (void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	(void)state;
	return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void expect(const char *want)
{
	if (!strstr(why, want))
		fail_msg("the explanation lacks \"%s\":\n%s", want, why);
}

static void test_nothing_there(void **state)
{
	(void)state;
	char missing[PATH_MAX + 32];
	snprintf(missing, sizeof(missing), "%s/absent.sock", dir);
	/* no loaderd at all (another process, named otherwise) */
	process("7", "bash\n", "bash", 5);
	connect_why(proc, missing, true, -ENOENT, why, sizeof(why));
	expect("nothing at ");
	expect("absent.sock");
	expect("no loaderd process is running on this machine: start it (systemctl start loaderd, "
	       "or loaderd --config FILE)");
	expect("This path was given; without one, clients connect to $LOADERD_SOCKET, else (not as "
	       "root) $XDG_RUNTIME_DIR/loaderd.sock if a socket is there, else "
	       "/run/loaderd/loaderd.sock");
	expect("LOADERD_SOCKET=PATH, loaderctl --socket PATH or Loader(..., socket=PATH)");

	/* the default path, LOADERD_SOCKET unset */
	unsetenv("LOADERD_SOCKET");
	connect_why(proc, missing, false, -ENOENT, why, sizeof(why));
	expect("This path is the default ($LOADERD_SOCKET is not set)");
	setenv("LOADERD_SOCKET", missing, 1);
	connect_why(proc, missing, false, -ENOENT, why, sizeof(why));
	expect("This path is $LOADERD_SOCKET's");
	unsetenv("LOADERD_SOCKET");

	/* one loaderd, whose listening socket its fds show */
	process("42", "loaderd\n", "loaderd\0--config\0/etc/x.conf\0", 29);
	link_in("42/fd/3", "socket:[555]");
	link_in("42/fd/4", "socket:[556]");
	link_in("42/fd/0", "/dev/null");
	mkdir_in("net");
	put("net/unix", "Num       RefCount Protocol Flags    Type St Inode Path\n"
		       "0000000000000000: 00000003 00000000 00000000 0005 03   556 /run/other.sock\n"
		       "0000000000000000: 00000002 00000000 00010000 0005 01   555 /srv/ldr/loaderd.sock\n"
		       "0000000000000000: 00000002 00000000 00010000 0001 01   777 /run/x.sock\n");
	connect_why(proc, missing, true, -ENOENT, why, sizeof(why));
	expect("loaderd is running here: pid 42 listening on /srv/ldr/loaderd.sock; to use it: "
	       "--socket /srv/ldr/loaderd.sock or LOADERD_SOCKET=/srv/ldr/loaderd.sock");
	assert_null(strstr(why, "no loaderd process"));
	assert_null(strstr(why, "other.sock")); /* not listening */

	/* and another user's, whose fds are hidden: its --config's socket */
	char conf[PATH_MAX + 32], cmd[PATH_MAX + 64];
	snprintf(conf, sizeof(conf), "%s/loaderd.conf", dir);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs("[pipeline.p]\nsocket = /not/this\n[daemon]\nworkers = 2\n"
	      "  socket = /run/sys/l.sock ; the system's\n", f);
	fclose(f);
	int n = snprintf(cmd, sizeof(cmd), "/usr/bin/loaderd%c--config%c%s", 0, 0, conf);
	process("9", "loaderd\n", cmd, (size_t)n + 1);
	connect_why(proc, missing, true, -ENOENT, why, sizeof(why));
	expect("pid 9 listening on /run/sys/l.sock (the socket of its --config ");
	expect("pid 42 listening on /srv/ldr/loaderd.sock");
	expect("connect to yours with --socket PATH or LOADERD_SOCKET=PATH");
	/* its file unreadable: what the command line says */
	unlink(conf);
	connect_why(proc, missing, true, -ENOENT, why, sizeof(why));
	expect("pid 9 with --config ");
	expect("on the socket set there (or by its $LOADERD_SOCKET, or its default)");
	/* a /proc that cannot be read */
	connect_why("/nonexistent/proc", missing, true, -ENOENT, why, sizeof(why));
	expect("cannot be read to see whether a loaderd runs");
}

static void test_refused(void **state)
{
	(void)state;
	/* a socket bound, then closed: nobody listens */
	char stale[PATH_MAX + 32];
	snprintf(stale, sizeof(stale), "%s/stale.sock", dir);
	int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_true(s >= 0);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	assert_true(strlen(stale) < sizeof(addr.sun_path));
	memcpy(addr.sun_path, stale, strlen(stale) + 1);
	assert_int_equal(bind(s, (struct sockaddr *)&addr, sizeof(addr)), 0);
	close(s);
	connect_why(proc, stale, true, -ECONNREFUSED, why, sizeof(why));
	expect("a socket is at ");
	expect("but nothing listens on it: the loaderd that made it stopped or died (a start "
	       "replaces this stale socket)");
	/* a regular file */
	char file[PATH_MAX + 32];
	snprintf(file, sizeof(file), "%s/file.sock", dir);
	FILE *f = fopen(file, "w");
	assert_non_null(f);
	fclose(f);
	connect_why(proc, file, true, -ECONNREFUSED, why, sizeof(why));
	expect("is a regular file, not a socket");
	/* permission: a socket the caller may not write */
	if (geteuid() == 0) {
		assert_int_equal(chown(stale, 65534, 65534), 0);
		assert_int_equal(chmod(stale, 0660), 0);
		connect_why(proc, stale, true, -EACCES, why, sizeof(why));
		expect("its mode 0660; this process runs as uid 0, not in group ");
		expect("usermod -aG ");
		expect("or set socket_group in the daemon's [daemon] section to a group the user is in");
	} else {
		assert_int_equal(chmod(stale, 0400), 0);
		connect_why(proc, stale, true, -EACCES, why, sizeof(why));
		expect("its mode 0400; this process runs as uid ");
		expect("its owner, but the mode does not let the owner write: set socket_mode = 0660");
	}
	/* nothing to add for other errors, and a small buffer is fine */
	connect_why(proc, stale, true, -EAGAIN, why, sizeof(why));
	assert_string_equal(why, "");
	char tiny[8];
	connect_why(proc, file, true, -ECONNREFUSED, tiny, sizeof(tiny));
	assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_there),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
