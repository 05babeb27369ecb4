/* SPDX-License-Identifier: Apache-2.0 */
/*
 * autoworkers: `workers = auto` on the loop: a timer that measures, once a
 * second, the clients' data wait (sched_waits), the node's idle cores
 * (/proc/stat) and the workers' own CPU use (/proc/PID/stat of each
 * worker), hands them to the controller (daemon/pool/wtune.h), and applies
 * the count it asks for through pool_resize, the path a reload takes. Each
 * change is logged with its reason; the status line "workers: N" carries
 * "auto", the bounds and the last change (pool_set_auto).
 *
 * The timer runs whatever `workers` says, and does nothing while it is a
 * number: a reload may turn auto on or off (daemon/reload.c sets
 * cfg->workers_auto; this file keeps cfg->workers the pool's count).
 *
 * Runs on the loop thread.
 */
#ifndef LDR_DAEMON_AUTOWORKERS_H
#define LDR_DAEMON_AUTOWORKERS_H

#include <uv.h>

#include "daemon/config/config.h"

struct autoworkers;
struct pool;
struct sched;

/* Starts the timer. 0 or -ENOMEM. */
int autoworkers_start(uv_loop_t *loop, struct config *cfg, struct pool *pool, struct sched *sched,
		      struct autoworkers **out);

/* Stops the timer and closes its handle; freed once closed. Accepts NULL. */
void autoworkers_stop(struct autoworkers *a);

#endif
