/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zygote: the master's side of the worker zygote (worker/zygote.h), the
 * process every worker is forked from, so that the workers can write the
 * arena after it is sealed against new writable mappings (shm/arena.h).
 *
 * At start, before the seal: zygote_start runs `PROGRAM --zygote --parent
 * PID` with fork+exec, the arena's read-write fd on its descriptor 3,
 * lowers its priority to the workers' nice value before it can fork
 * (every worker inherits it, so each gets it exactly once, and the
 * daemon's own threads keep theirs), and waits (blocking, at most
 * timeout_ms) until it says it has mapped the arena. Then the master
 * seals the arena. From then on:
 *  - zygote_fork asks it for worker `index` and waits for the answer (it
 *    forks at once): the pid, and a pidfd to signal it by (no pid reuse
 *    can redirect a kill: the master is not the worker's parent).
 *  - ops.exited reports each worker the zygote reaped, with its waitpid
 *    status: the master's supervision (daemon/pool/pool.h) reads it as it read
 *    its own children's.
 *  - ops.lost reports the zygote's own end. It cannot be replaced: no
 *    process started after the seal can map the arena writable, so no
 *    worker could ever be started again. The daemon exits non-zero
 *    (systemd's Restart=on-failure starts a fresh one, with a fresh arena).
 *    Its workers die with it (PR_SET_PDEATHSIG), without exit reports.
 *
 * Runs on the loop thread. The blocking waits are bounded and short: the
 * zygote does nothing but fork.
 */
#ifndef LDR_DAEMON_ZYGOTE_H
#define LDR_DAEMON_ZYGOTE_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct zygote;

struct zygote_ops {
	void *ctx;
	/* Worker `index`, process `pid`, ended; wait_status as waitpid(2) gives it. */
	void (*exited)(void *ctx, uint32_t index, pid_t pid, int wait_status);
	/* The zygote ended unasked (why: how, and what it means). */
	void (*lost)(void *ctx, const char *why);
};

/* Starts the zygote from program (its argv[0] in logs) with arena_fd at
 * nice value `nice` (config worker_nice; one already lower in priority is
 * left as it is, and one that cannot be lowered is logged once and goes
 * on), and waits for it to hold its mapping; then watches it on loop. 0,
 * or -errno with err (-ETIMEDOUT: not ready in timeout_ms; -ECHILD: it
 * exited first, err says how). */
int zygote_start(uv_loop_t *loop, const char *program, int arena_fd, uint32_t timeout_ms,
		 int nice, const struct zygote_ops *ops, struct zygote **out, char *err,
		 size_t err_cap);

/* Forks worker `index` with its two eventfds (command, completion). 0 with
 * *pid and *pidfd (-1 without pidfd_open: signal by pid then), or -errno
 * (the zygote's refusal or fork's error; -EPIPE: the zygote is gone;
 * -ETIMEDOUT: it did not answer in timeout_ms, and is killed, which ends
 * in ops.lost). */
int zygote_fork(struct zygote *z, uint32_t index, int cmd_efd, int done_efd, pid_t *pid,
		int *pidfd);

/* The zygote's pid, 0 once it is gone. */
pid_t zygote_pid(const struct zygote *z);

/* Ends the zygote (after the workers: pool_stop finished) and frees it
 * once its loop handle is closed. Accepts NULL. */
void zygote_close(struct zygote *z);

#endif
