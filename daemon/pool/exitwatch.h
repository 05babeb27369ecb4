/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exitwatch: calls a function on the loop once a process has exited.
 *
 * The daemon frees a device client's GPU ring only after that client can
 * no longer touch it; without an orderly BYE, that is when its process has
 * exited (a closed socket says nothing about the process: a crashing
 * client's fds may close before its CUDA context is torn down).
 *
 * Linux pidfds (pidfd_open, readable once the process exits) are watched
 * with uv_poll; where pidfd_open is missing, the process is probed with
 * kill(pid, 0) every EXITWATCH_PROBE_MS. Runs on the loop thread.
 */
#ifndef LDR_DAEMON_EXITWATCH_H
#define LDR_DAEMON_EXITWATCH_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#define EXITWATCH_PROBE_MS 500

struct exitwatch_set {
	uv_loop_t *loop;
	struct exitwatch *head;
	bool closed; /* after exitwatch_close_all: adds are ignored */
};

/* fn(arg) runs on the loop once pid has exited; at once (before this
 * returns) when pid is 0 (unknown) or already gone. */
void exitwatch_add(struct exitwatch_set *set, pid_t pid, void (*fn)(void *arg), void *arg);

/* Stops every watch without calling its function, and ignores later adds
 * (daemon shutdown: what they would free goes with the process). */
void exitwatch_close_all(struct exitwatch_set *set);

#endif
