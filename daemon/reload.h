/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reload: re-reading the configuration while loaderd runs, on SIGHUP (what
 * systemd's ExecReload sends) and on `loaderctl reload`.
 *
 * A reload is all or nothing. The file named at start is read and checked
 * again as at start, then compared with the running configuration key by
 * key (config_diff). What applies live:
 *  - `workers` (the pool spawns workers, or retires the highest-numbered
 *    ones once they have finished the items they hold, so no batch is
 *    lost; at most max_workers) and `log_level`;
 *  - a pipeline added: its data is opened and listed on a thread
 *    (daemon/pipetable.h), and the reload answers once that is done;
 *  - a pipeline removed: it stops at once and its clients get ERROR
 *    (ENOENT) naming it and the reload;
 *  - a pipeline changed while no client is attached to it: it is replaced
 *    (removed, then added with its new keys).
 * Any other difference (a changed pipeline with clients, another [daemon]
 * key) takes a restart: the reload is refused, naming every such key, and
 * nothing changes. So is a file that no longer parses (its FILE:LINE
 * message), an added pipeline whose data cannot be opened (its message),
 * or one that does not fit what was reserved at start (the table's
 * entries, runtime_index_bytes, staging_slot_bytes: the message names the
 * figure and the key). Either way loaderd goes on serving, and the
 * clients of every pipeline the reload leaves alone notice nothing.
 *
 * One reload at a time: another, while one lists its pipelines' data, is
 * refused (EBUSY). Runs on the loop thread.
 */
#ifndef LDR_DAEMON_RELOAD_H
#define LDR_DAEMON_RELOAD_H

#include <stddef.h>

#include "daemon/config/config.h"
#include "proto/proto.h"

struct pipe_open;
struct pipetable;
struct pool;
struct status_text;

/* What the reloads so far came to, for the status text. */
struct reload_log {
	unsigned applied, refused;
	unsigned long long last_ms;      /* status_now_ms() of the last one, 0 = none yet */
	char last[PROTO_ERROR_TEXT_MAX]; /* its outcome, as returned */
};

/* The daemon's reloads: what they change, and the one under way. */
struct reload {
	struct config *running;
	struct pool *pool;
	struct pipetable *pt;
	struct reload_log log;
	/* The outcome of a reload that reload_run left pending (rc as
	 * reload_run's, text), called on the loop. */
	void (*done)(void *ctx, int rc, const char *text);
	void *ctx;
	struct config *next;   /* the file being applied while its pipelines are opened */
	char replaced[ARENA_PIPELINES_MAX][PROTO_NAME_MAX]; /* changed pipelines to replace */
	unsigned n_replaced;
	struct pipe_open *opens; /* the added pipelines, in the file's order */
	unsigned opening;        /* of those, still being opened */
	bool abandoned; /* refused while opens it started run: drop them when they end */
	bool stopping;  /* loaderd stops: a reload under way is not applied */
};

#define RELOAD_PENDING 1

/*
 * Reloads r->running->file and applies it to running, the pool and the
 * pipelines. Returns 0 with what changed in text ("workers 4 -> 8,
 * pipeline q added", or "no change"), RELOAD_PENDING when pipelines are
 * added (r->done tells the outcome once their data is listed), or -errno
 * with why nothing was applied: -ENOENT no file was given at start,
 * -EINVAL (or the error reading it) the file is not valid, -EOPNOTSUPP it
 * changes keys that take a restart, -EBUSY a reload is under way, or what
 * pool_resize returned. The outcome is recorded in r->log.
 */
int reload_run(struct reload *r, char *text, size_t cap);

/* The status line: "config: FILE workers N max_workers M reloads A refused R",
 * then "  last_reload: ..." once there was one. */
void reload_describe(const struct reload *r, struct status_text *t);

#endif
