/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_impl.h: the worker pool's state, shared by its files; nothing else
 * includes it. Each file calls only those below it:
 *   pool.c            the interface (pool.h): start, feed, resize, stop,
 *                     status
 *   pool_supervise.c  what happens when a worker ends, back-off, the
 *                     watchdog; starting a worker, which may fail
 *   pool_worker.c     one worker's process and rings: fork, signal,
 *                     completions, exit; closing the handles at the end
 */
#ifndef LDR_DAEMON_POOL_IMPL_H
#define LDR_DAEMON_POOL_IMPL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/pool/pool.h"
#include "shm/ring.h"

#define POOL_BACKOFF_FIRST_MS 100ull
#define POOL_BACKOFF_MAX_MS 30000ull
/* The watchdog looks this often (or four times per worker_timeout_ms). */
#define POOL_WATCH_MS 1000ull

enum worker_state {
	WORKER_STARTING, /* spawned, not yet reported ready */
	WORKER_RUNNING,
	WORKER_BACKOFF,  /* waiting to be respawned */
	WORKER_FAILED,   /* exited with a fatal code; never respawned */
	WORKER_STOPPING, /* told to exit */
	WORKER_STOPPED,
	WORKER_RETIRING, /* beyond the worker count after pool_resize: finishes its items, exits */
	WORKER_RETIRED,  /* exited after retiring; spawned again if the count grows back */
};

static const char *const pool_state_names[] = {
	[WORKER_STARTING] = "starting", [WORKER_RUNNING] = "running",
	[WORKER_BACKOFF] = "backoff",   [WORKER_FAILED] = "failed",
	[WORKER_STOPPING] = "stopping", [WORKER_STOPPED] = "stopped",
	[WORKER_RETIRING] = "retiring", [WORKER_RETIRED] = "retired",
};

struct worker {
	struct pool *pool;
	uint32_t index;
	enum worker_state state;
	bool proc_open;       /* a process of this worker is alive, or ending */
	int pid;              /* 0: none, or its start failed */
	int pidfd;            /* -1: none (or no pidfd_open: signal by pid) */
	int cmd_efd;          /* master -> worker doorbell */
	int done_efd;         /* worker -> master doorbell */
	uv_poll_t done_poll;
	uv_timer_t retry_timer;
	struct ring cmd, done;
	const struct worker_beat *beat;
	const struct worker_stats *stats; /* its time accounting (shm/layout.h) */
	/* the watchdog's last look at it, and its shares of the interval
	 * before: busy, and blocked waiting for reads */
	uint64_t seen_busy_ns, seen_io_ns;
	unsigned long long seen_time_ms;
	double busy_ratio, io_ratio;
	uint64_t outstanding[POOL_WORKER_INFLIGHT];
	uint32_t n_outstanding;
	uint64_t items_done;
	uint64_t items_this_run;
	uint32_t restarts;
	uint32_t quick_failures; /* start failures in a row */
	bool ready_this_run;
	bool exit_sent;       /* WORK_EXIT is on its command ring (retiring, stopping) */
	bool killed_stuck;    /* the watchdog killed this run */
	uint64_t seen_beats;  /* the beat count last read... */
	unsigned long long beat_ms; /* ...and when it last moved (or items were given) */
	unsigned long long started_ms;
	unsigned long long retry_at_ms;
	char last_exit[96];
};

struct pool {
	uv_loop_t *loop;
	const struct config *cfg;
	struct arena *arena;
	struct zygote *zygote;
	struct pool_sink sink;
	struct pool_life life;
	char program[PATH_MAX];
	bool ready_sent;
	bool pread_noted;
	bool stopping;
	bool unable;     /* no worker can run: unable_text says why */
	char unable_text[PATH_MAX + 256];
	uv_timer_t kill_timer;
	uv_timer_t watch_timer;
	unsigned handles_open;
	uint32_t n;      /* the worker count: workers [0, n) run, the rest retire */
	uint32_t n_init; /* workers whose fds and handles exist: [0, n_init) */
	uint32_t cap;    /* ring pairs in the arena: n never exceeds it */
	struct pool_auto autow;   /* workers = auto, for status (pool_set_auto) */
	struct worker workers[];
};

/* ---- pool_supervise.c ---- */

/* Starts worker w's process; a failure to fork counts as a start failure
 * (back-off, as for a worker that exits before it is ready). */
void pool_worker_start(struct worker *w);
/* Takes each worker's busy and waiting-for-reads shares of the time since
 * the last call (the watchdog's period), from its own accounting. */
void pool_sample_busy(struct pool *p, unsigned long long now_ms);
/* Starts the watchdog's timer. */
void pool_watch_start(struct pool *p);

/* ---- pool_worker.c ---- */

/* Forks worker w's process from the zygote: 0 or -errno (the caller
 * counts a failure: pool_worker_start). */
int pool_worker_spawn(struct worker *w);
/* Sends sig to worker w's process, if it has one. */
void pool_worker_kill(struct worker *w, int sig);
/* Hands every completion in w's ring to the sink. */
void pool_worker_drain(struct worker *w);
/* Puts WORK_EXIT on w's command ring, behind the items it holds: it
 * finishes those, then exits 0. */
void pool_worker_send_exit(struct worker *w);
void pool_drain_eventfd(int fd);
/* Once no worker process is left while stopping, closes every handle;
 * life.stopped follows. */
void pool_check_stopped(struct pool *p);

#endif
