/* SPDX-License-Identifier: Apache-2.0 */
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
#include <sys/socket.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/fdpass.h"

int wire_send(int sock, struct proto_msg *msg, int fd)
{
	uint8_t buf[PROTO_MAX_FRAME];
	if (fd >= 0)
		msg->hdr.flags |= PROTO_FLAG_FD;
	else
		msg->hdr.flags &= ~PROTO_FLAG_FD;
	int n = proto_encode(msg, buf, sizeof(buf));
	if (n < 0)
		return n;
	ssize_t sent = fdpass_send(sock, buf, (size_t)n, &fd, fd >= 0 ? 1 : 0);
	if (sent == -EWOULDBLOCK)
		return -EAGAIN;
	if (sent == -ECONNRESET)
		return -EPIPE;
	if (sent < 0)
		return (int)sent;
	/* A SEQPACKET packet goes whole or not at all; anything else is not the
	 * socket this module was written for. */
	return sent == n ? 0 : -EIO;
}

int wire_recv(int sock, struct proto_msg *msg, int *fd_out, char *why, size_t why_cap)
{
	uint8_t buf[PROTO_MAX_FRAME];
	int fds[FDPASS_MAX];
	size_t n_fds;
	int rc, has_flag, flags;

	*fd_out = -1;
	errtext(why, why_cap, 0, "%s", "");
	/* Room for several fds, more than a frame may carry, so that a peer
	 * sending several gets them all installed (and closed by us) rather
	 * than cut off with MSG_CTRUNC. */
	ssize_t got = fdpass_recv(sock, buf, sizeof(buf), fds, &n_fds, &flags);
	if (got < 0) {
		if (got == -EWOULDBLOCK)
			return -EAGAIN;
		if (got == -ECONNRESET || got == -EPIPE)
			return errtext(why, why_cap, -ECONNRESET, "peer closed the connection");
		return (int)got;
	}

	if (got == 0) {
		rc = errtext(why, why_cap, -ECONNRESET, "peer closed the connection");
		goto close_fds;
	}
	if (flags & MSG_TRUNC) {
		rc = errtext(why, why_cap, -EMSGSIZE,
			     "packet larger than the %d-byte maximum frame", PROTO_MAX_FRAME);
		goto close_fds;
	}
	if ((flags & MSG_CTRUNC) || n_fds > 1) {
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
