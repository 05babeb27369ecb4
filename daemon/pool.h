/*
 * pool: the master's side of the worker processes: spawning them with
 * fork+exec (uv_spawn), feeding their command rings, reading their
 * completion rings, and supervising them (nginx-style): a worker that dies
 * is respawned and its outstanding items are handed back to the scheduler;
 * a worker that keeps dying right after start is retried with exponential
 * back-off; a worker that exits with a fatal code is not respawned. The
 * count can change while running (pool_resize, on a configuration reload).
 *
 * Runs entirely on the loop thread. Callbacks are invoked from the loop.
 */
#ifndef LDR_DAEMON_POOL_H
#define LDR_DAEMON_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config.h"
#include "shm/arena.h"

/* Items a worker may have outstanding; enough to keep its reads deep,
 * few enough that every worker shares the batch needed next. Must not
 * exceed RING_ENTRIES (the completion ring can then never overflow). */
#define POOL_WORKER_INFLIGHT 8

struct pool_callbacks {
	void *ctx;
	/* A worker finished an item (successfully or not). */
	void (*item_done)(void *ctx, const struct work_done *done);
	/* A worker died with this item outstanding: it must be issued again. */
	void (*item_lost)(void *ctx, uint64_t item_id);
	/* Workers have room for more items. */
	void (*capacity)(void *ctx);
	/* Every worker started at least once and reported ready. */
	void (*ready)(void *ctx);
	/* Every worker failed fatally: the daemon cannot serve. */
	void (*fatal)(void *ctx);
	/* pool_stop finished: every worker has exited and handles are closed. */
	void (*stopped)(void *ctx);
};

struct pool;
struct status_text;

/* Spawns cfg->workers workers. The program is cfg->worker_program, or
 * worker_program_default when that is empty. 0 or -errno (with err). */
int pool_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
	       const char *worker_program_default, const struct pool_callbacks *cb,
	       struct pool **out, char *err, size_t err_cap);

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

#endif
