/* SPDX-License-Identifier: Apache-2.0 */
/*
 * startup: loaderd's start, from a loaded configuration to serving.
 *
 *   the socket path (and the one systemd passed, daemon/listenfd.h) ->
 *   what serving it needs (preflight_serve_checks: socket_group, the
 *   path) -> the loop, signals, the watchdog -> the socket, served from
 *   here on (daemon/server/server.h: status answers "starting", a HELLO
 *   is held) -> on libuv's thread pool, the scan (preflight_scan: each
 *   pipeline's data, listed with its progress, daemon/core/progress.h;
 *   the worker program's --probe answer; the arena's size) -> back on the
 *   loop: the pipeline table, the arena (sized by the scan, filled with
 *   the sample lists), the scheduler, the worker zygote, the arena
 *   sealed (shm/arena.h), the worker pool, the GPU threads (CUDA, after
 *   the zygote; one per GPU) -> the held HELLOs served (server_up) ->
 *   READY=1 once every worker is up and the GPU threads have started
 *   (main.c, notify_ready).
 *
 * A start whose scan finds problems logs each, answers the held HELLOs
 * with the same words (server_start_failed) and exits 1. SIGTERM or
 * SIGINT during the scan stops it (its cancel flag: the scan's
 * progress_add gives up) and the daemon exits 0 once it has. A problem
 * that keeps the socket from being served (socket_group, the socket path,
 * systemd's socket) is found before anything starts: the scan then runs
 * on the main thread, to list every problem at once, and loaderd exits 1,
 * as --check-config does (which never starts the loop).
 *
 * The scan's thread owns d->sources and d->sizing until its work has
 * ended; the loop reads d->scan_found and those only then.
 */
#ifndef LDR_DAEMON_STARTUP_H
#define LDR_DAEMON_STARTUP_H

#include <stdbool.h>

struct daemon;
struct status_text;

/* The start (or, check_only, the whole check and its verdict) of d, its
 * configuration loaded: runs the loop until the daemon has stopped.
 * The process's exit status. */
int startup_run(struct daemon *d, bool check_only);

/* SIGTERM/SIGINT, or a fatal error, before the daemon is up: the scan is
 * told to stop, and the loop ends once it has. */
void startup_stop(struct daemon *d);

/* The status while the daemon starts: "state": "starting" and the
 * "starting" object (seconds, clients waiting). */
void startup_describe(struct daemon *d, struct status_text *t);

#endif
