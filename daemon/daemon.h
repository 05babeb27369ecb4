/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.h: the master process's state, shared by main.c (options, the
 * configuration, status, signals, reload, stop) and startup.c (the start
 * itself, daemon/startup.h); no other file includes it. Everything here
 * is the loop thread's, but for what start-up's scan owns while it runs
 * (startup.h says which).
 */
#ifndef LDR_DAEMON_DAEMON_H
#define LDR_DAEMON_DAEMON_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config/config.h"
#include "daemon/pool/exitwatch.h"
#include "daemon/preflight.h"
#include "daemon/reload.h"
#include "daemon/source/source.h"
#include "proto/proto.h"
#include "shm/arena.h"

struct status_text;

struct daemon {
	uv_loop_t loop;
	struct config cfg;
	struct source sources[ARENA_PIPELINES_MAX];
	struct arena arena;
	struct sched *sched;
	struct server *server;
	struct pool *pool;
	struct autoworkers *autoworkers; /* workers = auto's timer */
	struct zygote *zygote;
	struct pinner *pinner;
	struct exitwatch_set exits;
	struct pipetable *pt;
	struct jobs *jobs;
	struct reload reload;
	bool pool_ready, gpu_ready, ready_logged;
	char gpu_text[600]; /* the status "delivery:" line without a pinner */
	char socket_path[PATH_MAX];
	int systemd_fd; /* the listening socket systemd passed, or -1 */
	unsigned long long start_ms;
	bool stopping;
	int exit_code;
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t watchdog;
	uint64_t watchdog_usec;

	/* start-up (startup.c) */
	const char *config_file;
	char worker_program[PATH_MAX];
	bool scanning;             /* the scan's work is queued or running */
	atomic_bool scan_cancel;   /* set to stop the scan (SIGTERM, SIGINT) */
	uv_work_t scan;            /* preflight_scan on libuv's thread pool... */
	unsigned scan_found;       /* ...its problems, and the arena's size: */
	struct arena_sizing sizing; /* the scan's until it has ended */
	char start_why[PROTO_ERROR_TEXT_MAX]; /* the error lines of a start that failed */
};

/* main.c's, for startup.c. */
void render_status(void *ctx, struct status_text *t);
void render_summary(void *ctx, struct status_text *t);
int daemon_reload(void *ctx, char *text, size_t cap);
int daemon_declare(void *ctx, const struct proto_hello *hello, int pid, uint64_t conn_id,
		   int *entry, char *text, size_t cap);
void daemon_stop(struct daemon *d, const char *why);
void on_declared(void *ctx, uint64_t conn_id, int rc, int entry, const char *text);
void on_reloaded(void *ctx, int rc, const char *text);
void on_signal(uv_signal_t *h, int signum);
void on_watchdog(uv_timer_t *t);
void on_handle_closed(uv_handle_t *h);
void notify_ready(struct daemon *d);
void on_pool_ready(void *ctx);
void on_pool_fatal(void *ctx, const char *why);
void on_pool_stopped(void *ctx);
void report_problems(const char *config_file, unsigned n, bool check_only);

#endif
