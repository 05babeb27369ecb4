/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire: one proto frame per SOCK_SEQPACKET packet, with an optional fd
 * passed by SCM_RIGHTS. Shared by the daemon and the client library.
 *
 * Both calls work on blocking and non-blocking sockets; on a non-blocking
 * socket that cannot take or give a packet now they return -EAGAIN and have
 * done nothing. Thread-safety: reentrant; concurrent calls on one socket
 * must be serialised by the caller.
 */
#ifndef LDR_PROTO_WIRE_H
#define LDR_PROTO_WIRE_H

#include "proto/proto.h"

/* Encodes msg and sends it; when fd >= 0 it is attached and PROTO_FLAG_FD
 * set. Never raises SIGPIPE. Returns 0 or -errno (-EPIPE: peer gone). */
int wire_send(int sock, struct proto_msg *msg, int fd);

/*
 * Receives and decodes one frame. *fd_out is the attached fd (opened
 * O_CLOEXEC) or -1. Returns 0, or:
 *   -ECONNRESET  the peer closed the connection (orderly or not)
 *   -EAGAIN      nothing to read on a non-blocking socket
 *   -EMSGSIZE    the packet was larger than PROTO_MAX_FRAME
 *   -EBADMSG     the fd flag and the attachment disagree, or more than one fd
 *   anything proto_decode returns, with `why` filled in
 * On every failure no fd is left open.
 */
int wire_recv(int sock, struct proto_msg *msg, int *fd_out, char *why, size_t why_cap);

#endif
