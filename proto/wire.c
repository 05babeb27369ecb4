/*
 * wire: moves one proto frame per SOCK_SEQPACKET packet, with at most one
 * fd riding along by SCM_RIGHTS (wire.h has the contract).
 *
 * The receiving side treats the packet as untrusted: a packet too large for
 * a frame, control data cut short, more than one fd, or an fd that disagrees
 * with the header's PROTO_FLAG_FD is refused, and whatever fds the kernel
 * installed are closed before returning, so a hostile peer cannot make us
 * leak descriptors.
 */
#include "proto/wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/errtext.h"

/* Room for a few fds more than allowed, so that a peer sending several gets
 * them all installed (and closed by us) rather than cut off with MSG_CTRUNC;
 * the kernel drops whatever does not fit even then. */
#define WIRE_FDS_ROOM 8

int wire_send(int sock, struct proto_msg *msg, int fd)
{
	uint8_t buf[PROTO_MAX_FRAME];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct iovec iov;
	struct msghdr mh;
	struct cmsghdr *cmsg;
	ssize_t sent;
	int n;

	if (fd >= 0)
		msg->hdr.flags |= PROTO_FLAG_FD;
	else
		msg->hdr.flags &= ~PROTO_FLAG_FD;
	n = proto_encode(msg, buf, sizeof(buf));
	if (n < 0)
		return n;

	iov = (struct iovec){.iov_base = buf, .iov_len = (size_t)n};
	mh = (struct msghdr){.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = sizeof(control.buf);
		cmsg = CMSG_FIRSTHDR(&mh);
		cmsg->cmsg_level = SOL_SOCKET;
		cmsg->cmsg_type = SCM_RIGHTS;
		cmsg->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
	}
	do
		sent = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (sent < 0) {
		if (errno == EWOULDBLOCK)
			return -EAGAIN;
		if (errno == ECONNRESET)
			return -EPIPE;
		return -errno;
	}
	/* A SEQPACKET packet goes whole or not at all; anything else is not the
	 * socket this module was written for. */
	return sent == n ? 0 : -EIO;
}

/* Copies every fd of every SCM_RIGHTS message into fds (at most room);
 * returns how many. Other control messages (credentials) are ignored. */
static size_t wire_collect_fds(struct msghdr *mh, int *fds, size_t room)
{
	size_t n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t count;
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < count && n < room; i++)
			memcpy(&fds[n++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	return n;
}

int wire_recv(int sock, struct proto_msg *msg, int *fd_out, char *why, size_t why_cap)
{
	uint8_t buf[PROTO_MAX_FRAME];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_FDS_ROOM)];
	} control;
	int fds[WIRE_FDS_ROOM];
	size_t n_fds;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh;
	ssize_t got;
	int rc, has_flag;

	*fd_out = -1;
	errtext(why, why_cap, 0, "%s", "");
	memset(&control, 0, sizeof(control));
	mh = (struct msghdr){.msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = control.buf, .msg_controllen = sizeof(control.buf)};
	do
		got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		if (errno == EWOULDBLOCK)
			return -EAGAIN;
		if (errno == ECONNRESET || errno == EPIPE)
			return errtext(why, why_cap, -ECONNRESET, "peer closed the connection");
		return -errno;
	}
	n_fds = wire_collect_fds(&mh, fds, WIRE_FDS_ROOM);

	if (got == 0) {
		rc = errtext(why, why_cap, -ECONNRESET, "peer closed the connection");
		goto close_fds;
	}
	if (mh.msg_flags & MSG_TRUNC) {
		rc = errtext(why, why_cap, -EMSGSIZE,
			     "packet larger than the %d-byte maximum frame", PROTO_MAX_FRAME);
		goto close_fds;
	}
	if ((mh.msg_flags & MSG_CTRUNC) || n_fds > 1) {
		rc = errtext(why, why_cap, -EBADMSG, "more than one fd attached to a frame");
		goto close_fds;
	}
	rc = proto_decode(buf, (size_t)got, msg, why, why_cap);
	if (rc < 0)
		goto close_fds;
	has_flag = (msg->hdr.flags & PROTO_FLAG_FD) != 0;
	if (has_flag != (n_fds == 1)) {
		rc = errtext(why, why_cap, -EBADMSG,
			     has_flag ? "%s: fd flag set but no fd attached"
				      : "%s: fd attached without the fd flag",
			     proto_type_name(msg->hdr.type));
		goto close_fds;
	}
	*fd_out = n_fds == 1 ? fds[0] : -1;
	return 0;

close_fds:
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	return rc;
}
