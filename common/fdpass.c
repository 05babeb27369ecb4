/* SPDX-License-Identifier: Apache-2.0 */
/* fdpass: messages with descriptors over a Unix socket (fdpass.h). */
#include "common/fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

union fdpass_control {
	struct cmsghdr align;
	char buf[CMSG_SPACE(sizeof(int) * FDPASS_MAX)];
};

ssize_t fdpass_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds)
{
	if (n_fds > FDPASS_MAX)
		return -EINVAL;
	union fdpass_control control;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (n_fds > 0) {
		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	ssize_t sent;
	while ((sent = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return sent < 0 ? -errno : sent;
}

ssize_t fdpass_recv(int sock, void *buf, size_t cap, int fds[FDPASS_MAX], size_t *n_fds,
		    int *flags)
{
	union fdpass_control control;
	memset(&control, 0, sizeof(control));
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = control.buf, .msg_controllen = sizeof(control.buf)};
	*n_fds = 0;
	*flags = 0;
	ssize_t got;
	while ((got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (got < 0)
		return -errno;
	*flags = mh.msg_flags;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue; /* credentials and the like */
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < count && *n_fds < FDPASS_MAX; i++)
			memcpy(&fds[(*n_fds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	return got;
}
