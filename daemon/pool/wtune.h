/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wtune: the worker count of `workers = auto`, from the clients' data wait
 * and the node's CPU (docs/config.md, "workers = auto").
 *
 * The caller (daemon/autoworkers.c) measures once a tick (about a second)
 * and passes the measurements: every attached client's running sums of
 * RELEASEs and of the waits they carried (proto_release.wait_ns: the
 * client's wait in ldr_next for that batch), the node's idle cores and the
 * workers' own CPU use over the tick. The controller sums ticks into
 * windows of at least WTUNE_WINDOW_NS and decides once a window:
 *
 *  - Raise, when a client waited for data more than 3% of the window
 *    (the one that waited most is named), by about what would close its
 *    wait (n f / (1 - f) workers, at least 1, at most n / 2 rounded up),
 *    within the bounds: max_workers, the online cores, the CPU budget
 *    (the workers' measured use plus what the added ones would use, at
 *    the workers' mean per worker, within worker_cpu_budget), and never
 *    while the node has less than half a core idle: its other processes
 *    (the training) need their cores, and a worker that gets no core
 *    helps nobody. Half a core, not a core: on a machine of two cores
 *    where one worker is busy and the client waits, the idle core is
 *    rarely quite whole.
 *  - Judge each raise by the clients' rate (RELEASEs per second over the
 *    clients present throughout), not by their wait: after a window left
 *    to settle (the batches begun before it), the raise is kept when the
 *    rate rose by at least a third of what the added workers could give
 *    (their share of the count, or the wait they answered, whichever is
 *    smaller; at least 2%), else taken back: the workers are not what the
 *    clients wait for (the disk, the GPU path), and the count does not go
 *    above the one taken back to for a minute, then two, four, ... (at
 *    most 16), while such raises keep failing.
 *  - Lower by one, when no client waited for data (at most 0.5% of the
 *    window) two windows in a row, or no client released a batch, down to
 *    min_workers. A client that released nothing in a window may be
 *    waiting still (a wait is known once its batch comes): such a window
 *    is not one without a wait, unless the client has been silent five
 *    windows in a row (a client paused, or stopped but attached). A lower after which a client waits again (within the
 *    minute) is answered by a raise (judged as any), and the count is not
 *    lowered below the one it had for a minute, then 2, 4, ... (at most
 *    16) while that repeats: a count on the edge of what a client needs
 *    changes twice a minute at first, then ever more rarely.
 *  - A count set from outside (a reload) is taken as it is; a count
 *    outside the bounds (a reload that changed them) is brought inside.
 *
 * Pure: no clock, no I/O, no log; the caller passes the time and applies
 * the count (pool_resize), and logs the reason the controller writes.
 */
#ifndef LDR_DAEMON_WTUNE_H
#define LDR_DAEMON_WTUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WTUNE_WINDOW_NS 2000000000ull /* a window is at least this long */
#define WTUNE_CLIENTS_MAX 64          /* clients followed; the others are not measured */
#define WTUNE_REASON_MAX 256

/* One client's running sums, as the scheduler keeps them. */
struct wtune_client {
	uint64_t id;       /* its session */
	int pid;
	uint64_t releases; /* RELEASEs since it attached */
	uint64_t wait_ns;  /* the waits they carried, summed */
};

/* One tick's measurements. */
struct wtune_tick {
	uint64_t now_ns;
	uint32_t workers;       /* the pool's count now */
	double idle_cores;      /* the node's idle (and iowait) cores over the tick; < 0 unknown */
	double workers_cores;   /* the workers' CPU use over the tick, in cores; < 0 unknown */
	const struct wtune_client *clients;
	size_t n_clients;
};

/* The bounds (config: min_workers, max_workers, worker_cpu_budget, the
 * online cores). */
struct wtune_limits {
	uint32_t min, max;  /* 1 <= min <= max */
	uint32_t cores;     /* online cores, >= 1 */
	double budget_cores; /* the most CPU the workers may use, in cores */
};

enum wtune_event {
	WTUNE_SAME,
	WTUNE_RAISED,   /* a client waited and CPU was free */
	WTUNE_LOWERED,  /* no client waited */
	WTUNE_UNDONE,   /* a raise that did not make the clients faster, taken back */
	WTUNE_BOUNDED,  /* brought inside the bounds */
};

struct wtune_seen {
	uint64_t id;
	uint64_t releases, wait_ns;
	bool present;
};

struct wtune {
	struct wtune_limits lim;
	uint32_t n;              /* the count it last decided or was told */
	/* the window being summed */
	uint64_t win_start_ns, last_ns;
	double win_idle_core_ns, win_workers_core_ns; /* core x ns, over win_cpu_ns */
	uint64_t win_cpu_ns;
	bool win_cpu_known;
	bool clients_changed;    /* a client came or went in the window */
	struct wtune_seen seen[WTUNE_CLIENTS_MAX];     /* at the window's start */
	size_t n_seen;
	/* the controller */
	uint32_t settle;         /* windows not used after a change */
	uint32_t quiet;          /* windows in a row without a wait */
	uint32_t silent;         /* windows in a row in which a client released nothing */
	bool judging;            /* a raise from `from` waits for its judgment */
	uint32_t from;
	double rate_before, frac_before;
	uint32_t lowered_from;   /* the count before the last lower, 0 none */
	uint64_t lowered_ns;     /* when */
	uint32_t ceiling;        /* no raise above this ... */
	uint64_t ceiling_until_ns; /* ... until then */
	uint32_t undo_streak;    /* raises taken back in a row (the hold doubles) */
	uint32_t floor;          /* no lower below this ... */
	uint64_t floor_until_ns; /* ... until then */
	uint32_t floor_streak;   /* floors set in a row (the hold doubles) */
	/* the last window measured */
	double frac;             /* the most any client waited, of the window */
	uint64_t frac_id;
	int frac_pid;
	double rate;             /* RELEASEs per second */
	double idle_cores, workers_cores; /* < 0 unknown */
	uint64_t window_ns;
	/* the last change, and the last reason a raise was not made */
	enum wtune_event last_event;
	uint64_t last_change_ns;
	char reason[WTUNE_REASON_MAX];
	char held[WTUNE_REASON_MAX]; /* why the last window that wanted a raise got none, "" */
};

/* Starts at count `workers` (clamped into the bounds by the first tick). */
void wtune_init(struct wtune *w, const struct wtune_limits *lim, uint32_t workers,
		uint64_t now_ns);

/* New bounds (a reload); the next tick brings the count inside them. */
void wtune_set_limits(struct wtune *w, const struct wtune_limits *lim);

/* One tick. Returns the event and sets *to to the count wanted (the same
 * count for WTUNE_SAME); w->reason says why, for the log. When the caller
 * cannot apply it, wtune_refused puts the count back. */
enum wtune_event wtune_tick(struct wtune *w, const struct wtune_tick *t, uint32_t *to);

/* The count the last tick asked for could not be applied (pool_resize
 * failed): the controller keeps `workers`. */
void wtune_refused(struct wtune *w, uint32_t workers);

#endif
