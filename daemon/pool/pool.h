/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool: the master's side of the worker processes: starting them (each a
 * fork of the worker zygote, daemon/pool/zygote.h, which the arena's seal
 * requires: shm/arena.h), feeding their command rings, reading their
 * completion rings, and supervising them (nginx-style):
 *  - A worker that dies is respawned and its outstanding items are handed
 *    back to the scheduler.
 *  - Back-off is for workers that fail to start (an exit, a crash or a
 *    spawn failure before they report ready or before their first item,
 *    or no report of ready within worker_timeout_ms): they are retried
 *    with exponential back-off. A worker killed from outside (SIGKILL,
 *    SIGTERM), starting or working, is respawned at once.
 *  - A worker that exits with a fatal code is not respawned.
 *  - The watchdog: a worker that holds items and shows no sign of
 *    progress (its beat, shm/layout.h) for worker_timeout_ms, or that does
 *    not report ready within it, is killed and logged with its pid and the
 *    sample it was on; its items are re-issued, marked as suspect.
 *  - When no worker can run (every one failed fatally, or failed to start
 *    POOL_UNABLE_FAILURES times in a row), `workers_unable` says so, with
 *    the program and its last exit; before the pool was ever ready that is
 *    `fatal` instead. `workers_unable(NULL)` follows when a worker reports
 *    ready again.
 * The count can change while running (pool_resize, on a configuration
 * reload). The files: pool.c (starting, feeding, resizing, stopping,
 * status), pool_supervise.c (worker ends, back-off, the watchdog) and
 * pool_worker.c (one worker's process and rings); pool_impl.h says more.
 *
 * Runs entirely on the loop thread. Callbacks are invoked from the loop.
 */
#ifndef LDR_DAEMON_POOL_H
#define LDR_DAEMON_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config/config.h"
#include "daemon/pool/zygote.h"
#include "shm/arena.h"

/* Items a worker may have outstanding; enough to keep its reads deep,
 * few enough that every worker shares the batch needed next. Must not
 * exceed RING_ENTRIES (the completion ring can then never overflow). */
#define POOL_WORKER_INFLIGHT 8
/* Start failures in a row, for every worker, after which no worker can run. */
#define POOL_UNABLE_FAILURES 5

struct pool;
struct sched;
struct status_text;

/* Where the pool's results go: the scheduler (daemon/sched/sched.h), whose
 * functions main.c puts here; a test may stand in. */
struct pool_sink {
	struct sched *sched;
	/* A worker finished an item (successfully or not). */
	void (*item_done)(struct sched *s, const struct work_done *done);
	/* A worker died with this item outstanding: it must be issued again.
	 * suspect: the worker crashed or was killed as stuck, so the item may
	 * be what killed it (why says how the worker ended). */
	void (*item_lost)(struct sched *s, uint64_t item_id, bool suspect, const char *why);
	/* Workers have room for more items. */
	void (*capacity)(struct sched *s);
	/* No worker can run any more (why names the program and how it
	 * ends), or one can again (NULL). */
	void (*workers_unable)(struct sched *s, const char *why);
	/* Name an item it was given, or a sample of a pipeline, for a log
	 * line (its file, or file and bytes). */
	void (*describe_item)(struct sched *s, uint64_t item_id, char *buf, size_t cap);
	void (*describe_sample)(struct sched *s, uint32_t pipeline, uint64_t sample, char *buf,
				size_t cap);
};

/* The pool's own life, for the daemon (main.c). */
struct pool_life {
	void *ctx;
	/* Every worker started at least once and reported ready. */
	void (*ready)(void *ctx);
	/* No worker can run, and none ever did: the daemon cannot serve. */
	void (*fatal)(void *ctx, const char *why);
	/* pool_stop finished: every worker has exited and handles are closed. */
	void (*stopped)(void *ctx);
};

/* Starts cfg->workers workers, each forked by zygote (started from
 * `program`, the name logs give them). 0 or -errno (with err). */
int pool_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
	       struct zygote *zygote, const char *program, const struct pool_sink *sink,
	       const struct pool_life *life, struct pool **out, char *err, size_t err_cap);

/* zygote_ops.exited: worker `index`, process `pid`, ended with this
 * waitpid status. Accepts a NULL pool and a report of no current worker. */
void pool_worker_exited(struct pool *p, uint32_t index, pid_t pid, int wait_status);

/* zygote_ops.lost, once the daemon is stopping: the workers died with
 * the zygote and no report of their ends will come. */
void pool_workers_gone(struct pool *p);

/* Queues one item on the least-loaded running worker. false when no
 * worker has room (try again on the capacity callback). */
bool pool_submit(struct pool *p, const struct work_cmd *cmd);

/* Changes the worker count to n (1..the arena's ring pairs, max_workers).
 * Growing spawns workers; shrinking retires the highest-numbered ones:
 * they take no new item, finish the ones they hold, then exit (an item a
 * retiring worker does not finish is re-issued, as for a dead worker).
 * 0, or -errno with err (the count is then unchanged). */
int pool_resize(struct pool *p, uint32_t n, char *err, size_t err_cap);

/* Tells every worker to exit, SIGKILLs those still there after
 * timeout_ms, then calls cb->stopped. The pool is freed by pool_free. */
void pool_stop(struct pool *p, uint64_t timeout_ms);
void pool_free(struct pool *p);

/* Status lines ("workers: N" and one line per worker). */
void pool_describe(const struct pool *p, struct status_text *t);

/* The loop the pool runs on (pool_start's): where others queue work for
 * libuv's thread pool. */
uv_loop_t *pool_loop(const struct pool *p);

/* The count of workers [0, n) that run (pool_resize's n). */
uint32_t pool_count(const struct pool *p);

/* The pids of the workers' processes alive now (running, starting or
 * retiring), with their indexes; returns how many (at most cap). */
uint32_t pool_pids(const struct pool *p, int *pids, uint32_t *indexes, uint32_t cap);

/* What the status says of workers = auto after the count: its count,
 * bounds and CPU budget, the last change (how long ago, as of when it was
 * set, and why) and what holds a raise back; set by the daemon's
 * autoworkers, cleared (on false) when workers is a number again. */
#define POOL_AUTO_TEXT_MAX 256
struct pool_auto {
	bool on;
	uint32_t count, min, max;
	double cpu_budget;             /* cores */
	bool changed;                  /* a change was made since the start */
	uint64_t last_change_ago_ms;
	char last_change[POOL_AUTO_TEXT_MAX]; /* why */
	char held[POOL_AUTO_TEXT_MAX];        /* "" when nothing holds a raise back */
};
void pool_set_auto(struct pool *p, const struct pool_auto *a);

#endif
