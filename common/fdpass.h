/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fdpass: one message over a Unix socket with descriptors riding along by
 * SCM_RIGHTS, for every channel of loaderd that passes them (the client
 * protocol's frames, proto/wire.c; the master and its worker zygote,
 * daemon/pool/zygote.c and worker/zygote.c).
 *
 * Received descriptors are close-on-exec. The receiver gets every
 * descriptor the kernel installed, up to FDPASS_MAX, and decides itself
 * whether the message is acceptable (a caller that refuses it closes
 * them); the kernel drops whatever does not fit the control buffer and
 * says so with MSG_CTRUNC. Both calls retry EINTR and never raise SIGPIPE.
 * No state; safe from any thread.
 */
#ifndef LDR_COMMON_FDPASS_H
#define LDR_COMMON_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

#define FDPASS_MAX 8 /* descriptors one message may carry */

/* sendmsg of buf[0..len) with the n_fds (<= FDPASS_MAX) descriptors fds.
 * The bytes sent, or -errno (-EINVAL for too many descriptors). */
ssize_t fdpass_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds);

/* recvmsg of one message into buf[0..cap), its descriptors into fds[0..
 * *n_fds) (room for FDPASS_MAX), its msg_flags into *flags (MSG_TRUNC,
 * MSG_CTRUNC). The bytes received (0 at end of stream), or -errno (no
 * descriptor is then left open). */
ssize_t fdpass_recv(int sock, void *buf, size_t cap, int fds[FDPASS_MAX], size_t *n_fds,
		    int *flags);

#endif
