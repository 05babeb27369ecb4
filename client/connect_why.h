/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connect_why: what a failed connect to the daemon's socket means, and
 * what to do about it, for the client library's error text (client.c):
 *  - ENOENT, ENOTDIR: nothing at the path. Whether a loaderd runs on this
 *    machine at all (a process named loaderd in /proc), and where it
 *    listens when that can be seen (its listening sockets, from
 *    /proc/PID/fd and /proc/net/unix, readable for one's own processes;
 *    else the `socket =` of the --config file on its command line);
 *  - ECONNREFUSED: a socket nobody listens on (a daemon that died or
 *    stopped and left it), or a path that is no socket at all;
 *  - EACCES: the socket's owner, group and mode against the caller's
 *    (socket_group, socket_mode), or a directory on the way that may not
 *    be searched;
 * and where clients look when no path is given (common/paths.h), and how
 * to name another (LOADERD_SOCKET, loaderctl --socket, Python's socket=).
 *
 * Reads /proc and stats the path; allocates nothing that outlives a call.
 * proc_root is "/proc" but for tests.
 */
#ifndef LDR_CLIENT_CONNECT_WHY_H
#define LDR_CLIENT_CONNECT_WHY_H

#include <stdbool.h>
#include <stddef.h>

/* Writes the explanation of connect(path) failing with -code into buf
 * (one line, no trailing newline; "" when there is nothing to add).
 * path_given: the caller named the path (else it is the default). */
void connect_why(const char *proc_root, const char *path, bool path_given, int code, char *buf,
		 size_t cap);

#endif
