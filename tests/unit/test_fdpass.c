/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for common/fdpass: a message and its descriptors arrive
 * together and stay usable and close-on-exec; a message without any;
 * more descriptors than a message may carry are refused on the sending
 * side, and a peer that sends more anyway (with its own sendmsg) leaves
 * the receiver FDPASS_MAX of them and MSG_CTRUNC, never a leak it cannot
 * see; a packet larger than the buffer says MSG_TRUNC; end of stream.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fdpass.h"

static void socket_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* A pipe whose read end is given; the test reads back what it writes. */
static void check_pipe_pair(int read_fd, int write_fd)
{
	assert_int_equal(write(write_fd, "x", 1), 1);
	char c = 0;
	assert_int_equal(read(read_fd, &c, 1), 1);
	assert_int_equal(c, 'x');
}

static void test_descriptors_arrive(void **state)
{
	(void)state;
	int sv[2], p[2];
	socket_pair(sv);
	assert_int_equal(pipe(p), 0);
	const char msg[] = "hello";
	assert_int_equal(fdpass_send(sv[0], msg, sizeof(msg), p, 2), (ssize_t)sizeof(msg));
	char buf[16];
	int fds[FDPASS_MAX], flags = -1;
	size_t n = 99;
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), fds, &n, &flags), (ssize_t)sizeof(msg));
	assert_string_equal(buf, msg);
	assert_int_equal(n, 2);
	assert_int_equal(flags & (MSG_TRUNC | MSG_CTRUNC), 0);
	assert_true(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	check_pipe_pair(fds[0], fds[1]);
	for (int i = 0; i < 2; i++) {
		close(fds[i]);
		close(p[i]);
		close(sv[i]);
	}
}

static void test_no_descriptor(void **state)
{
	(void)state;
	int sv[2];
	socket_pair(sv);
	assert_int_equal(fdpass_send(sv[0], "ab", 2, NULL, 0), 2);
	char buf[1];
	int fds[FDPASS_MAX], flags;
	size_t n = 99;
	/* and a buffer too small: the rest of the packet is gone, and said */
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), fds, &n, &flags), 1);
	assert_int_equal(n, 0);
	assert_true(flags & MSG_TRUNC);
	close(sv[0]);
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), fds, &n, &flags), 0);
	close(sv[1]);
}

static void test_too_many(void **state)
{
	(void)state;
	int sv[2], many[FDPASS_MAX + 2];
	socket_pair(sv);
	for (int i = 0; i < FDPASS_MAX + 2; i++)
		many[i] = dup(0);
	assert_int_equal(fdpass_send(sv[0], "x", 1, many, FDPASS_MAX + 1), -EINVAL);
	/* A peer with its own sendmsg sends them all. */
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(many))];
	} control;
	memset(&control, 0, sizeof(control));
	struct iovec iov = {.iov_base = "x", .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			    .msg_controllen = sizeof(control.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(many));
	memcpy(CMSG_DATA(c), many, sizeof(many));
	assert_int_equal(sendmsg(sv[0], &mh, 0), 1);
	char buf[4];
	int fds[FDPASS_MAX], flags;
	size_t n;
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), fds, &n, &flags), 1);
	assert_int_equal(n, FDPASS_MAX);
	assert_true(flags & MSG_CTRUNC);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(close(fds[i]), 0);
	for (int i = 0; i < FDPASS_MAX + 2; i++)
		close(many[i]);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_descriptors_arrive),
		cmocka_unit_test(test_no_descriptor),
		cmocka_unit_test(test_too_many),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
