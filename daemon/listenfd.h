/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listenfd: the listening socket systemd passes to a socket-activated
 * service (sd_listen_fds(3)): $LISTEN_PID names this process, $LISTEN_FDS
 * counts the descriptors from 3 on. loaderd.socket passes one, the Unix
 * SOCK_SEQPACKET socket clients attach to, which systemd made, bound,
 * gave its owner and mode and listens on from boot: clients that connect
 * before loaderd is ready wait in its backlog and are served once the
 * daemon accepts.
 *
 * Written here rather than linked from libsystemd, as daemon/notify.h is:
 * the protocol is two environment variables and a descriptor number.
 */
#ifndef LDR_DAEMON_LISTENFD_H
#define LDR_DAEMON_LISTENFD_H

#include <stddef.h>

/* Takes the socket systemd passed, if any: 0 when there is none (not
 * socket-activated, or $LISTEN_PID names another process); 1 with *fd
 * (close-on-exec, non-blocking) and its bound path in path when it is
 * one listening AF_UNIX SOCK_SEQPACKET socket bound to a path; -errno
 * with err saying what was passed instead. $LISTEN_PID, $LISTEN_FDS and
 * $LISTEN_FDNAMES are removed either way, so the workers never see them.
 * Call once, at start, before other threads. */
int listenfd_take(int *fd, char *path, size_t path_cap, char *err, size_t err_cap);

#endif
