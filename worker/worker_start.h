/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_start: what loaderd-worker's two ways of starting share: the
 * exec'd worker of worker_main.c (`--index N --parent PID`) and the
 * workers the zygote forks (zygote.c, worker/zygote.h). Nothing else
 * includes it.
 */
#ifndef LDR_WORKER_WORKER_START_H
#define LDR_WORKER_WORKER_START_H

#include <stdint.h>
#include <sys/types.h>

#include "shm/arena.h"

/* A worker's signal dispositions (worker/worker.h): SIGTERM ends it at
 * once, SIGINT, SIGHUP and SIGPIPE are ignored; every other signal is
 * unblocked. 0 or -errno. */
int worker_signals_setup(void);

/* Ties the calling process's life to `parent`'s (PR_SET_PDEATHSIG
 * SIGKILL). 0; 1 when parent is already gone (the caller exits 0);
 * -errno. */
int worker_tie_to_parent(pid_t parent);

/* Runs worker `index` on an arena mapped read-write until it is told to
 * exit; returns the process's exit code (worker/worker.h). */
int worker_serve(struct arena *a, uint32_t index, int cmd_fd, int done_fd);

/* `loaderd-worker --zygote --parent PID` (worker/zygote.h): returns the
 * zygote's exit code; in a forked worker, never returns. */
int zygote_run(pid_t parent);

#endif
