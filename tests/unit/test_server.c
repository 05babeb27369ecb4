/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/server/server: server_check_peer, the decision whether a
 * connecting process is identified well enough to be served. A failed
 * SO_PEERCRED (whose zeroed answer would read as root), a short answer,
 * and pid 0 (a process in a pid namespace the daemon cannot see) are
 * refused with EPERM and a reason; a real peer over a socketpair passes,
 * and getsockopt on a descriptor that is no socket is refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/server/server.h"

static char why[512];

static int check_fd(int fd, struct ucred *cred)
{
	socklen_t len = sizeof(*cred);
	memset(cred, 0, sizeof(*cred));
	int rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) < 0 ? -errno : 0;
	return server_check_peer(rc, len, cred, why, sizeof(why));
}

static void test_refusals(void **state)
{
	struct ucred zero = {0};
	why[0] = '\0';
	assert_int_equal(server_check_peer(-ENOTSOCK, sizeof(zero), &zero, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "cannot identify"));
	assert_non_null(strstr(why, strerror(ENOTSOCK)));

	struct ucred cred = {.pid = 1234, .uid = 1000, .gid = 1000};
	assert_int_equal(server_check_peer(0, 4, &cred, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "gave 4 bytes"));

	cred.pid = 0;
	assert_int_equal(server_check_peer(0, sizeof(cred), &cred, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "(uid 1000) is not visible in loaderd's pid namespace"));

	cred.pid = 1234;
	why[0] = '\0';
	assert_int_equal(server_check_peer(0, sizeof(cred), &cred, why, sizeof(why)), 0);
	assert_string_equal(why, "");
}

static void test_real_descriptors(void **state)
{
	int sv[2];
	struct ucred cred;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(check_fd(sv[0], &cred), 0);
	assert_int_equal(cred.pid, getpid());
	assert_int_equal(cred.uid, getuid());
	close(sv[0]);
	close(sv[1]);

	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(check_fd(p[0], &cred), -EPERM);
	assert_non_null(strstr(why, "SO_PEERCRED"));
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_real_descriptors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
