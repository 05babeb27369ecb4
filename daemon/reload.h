/*
 * reload: re-reading the configuration while loaderd runs, on SIGHUP (what
 * systemd's ExecReload sends) and on `loaderctl reload`.
 *
 * A reload is all or nothing. The file named at start is read and checked
 * again as at start, then compared with the running configuration key by
 * key (config_diff). Two keys apply live: `workers` (the pool spawns
 * workers, or retires the highest-numbered ones once they have finished
 * the items they hold, so no batch is lost; at most max_workers) and
 * `log_level`. Any other difference (a pipeline added, removed or changed,
 * another [daemon] key) takes a restart: the reload is refused, naming
 * every such key, and nothing changes. A file that no longer parses is
 * refused with its FILE:LINE message. Either way loaderd goes on serving.
 *
 * Runs on the loop thread.
 */
#ifndef LDR_DAEMON_RELOAD_H
#define LDR_DAEMON_RELOAD_H

#include <stddef.h>

#include "daemon/config/config.h"
#include "proto/proto.h"

struct pool;
struct status_text;

/* What the reloads so far came to, for the status text. */
struct reload_log {
	unsigned applied, refused;
	unsigned long long last_ms;      /* status_now_ms() of the last one, 0 = none yet */
	char last[PROTO_ERROR_TEXT_MAX]; /* its outcome, as returned */
};

/*
 * Reloads running->file and applies it to running and pool. Returns 0 with
 * what changed in text ("workers 4 -> 8", or "no change"), or -errno with
 * why nothing was applied: -ENOENT no file was given at start, -EINVAL
 * (or the error reading it) the file is not valid, -EOPNOTSUPP it changes
 * keys that take a restart, or what pool_resize returned. The outcome is
 * recorded in log.
 */
int reload_run(struct config *running, struct pool *pool, struct reload_log *log, char *text,
	       size_t cap);

/* The status line: "config: FILE workers N max_workers M reloads A refused R",
 * then "  last_reload: ..." once there was one. */
void reload_describe(const struct config *running, const struct reload_log *log,
		     struct status_text *t);

#endif
