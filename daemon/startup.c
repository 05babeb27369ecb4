/* SPDX-License-Identifier: Apache-2.0 */
/*
 * startup: loaderd's start (startup.h): the socket served first, the scan
 * on libuv's thread pool, then, on the loop, everything the scan sized.
 */
#include "daemon/startup.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "common/log.h"
#include "common/paths.h"
#include "daemon/autoworkers.h"
#include "daemon/core/progress.h"
#include "daemon/core/status.h"
#include "daemon/daemon.h"
#include "daemon/jobs.h"
#include "daemon/listenfd.h"
#include "daemon/notify.h"
#include "daemon/pipetable.h"
#include "daemon/pool/pool.h"
#include "daemon/pool/zygote.h"
#include "daemon/preflight.h"
#if LOADERD_HAVE_CUDA
#include "daemon/gpu/pinner.h"
#endif
#include "daemon/sched/sched.h"
#include "daemon/server/server.h"

#if LOADERD_HAVE_CUDA
/* The pinner's start-up: on to READY=1, or exit when the GPU is required. */
static void on_gpu_started(void *ctx, int rc, const char *text)
{
	struct daemon *d = ctx;
	if (rc == 0) {
		log_info("GPU delivery: %s", text);
	} else if (d->cfg.gpu == GPU_REQUIRED) {
		log_error("gpu = required, but GPU delivery is unavailable: %s", text);
		d->exit_code = 1;
		daemon_stop(d, "fatal");
		return;
	} else {
		log_notice("GPU delivery is unavailable, serving host delivery only: %s", text);
	}
	d->gpu_ready = true;
	notify_ready(d);
}

/* CUDA starts here, after the zygote was started (CUDA is not fork-safe;
 * workers are forks of the zygote, which never touches CUDA). */
static int start_gpu(struct daemon *d)
{
	struct gpu_answers answers = sched_gpu_answers(d->sched);
	int rc = pinner_start(&d->loop, &d->cfg, &d->arena, d->sources, d->cfg.n_pipelines, &answers,
			      on_gpu_started, d, &d->pinner);
	if (rc < 0) {
		log_error("starting the GPU threads: %s", strerror(-rc));
		return rc;
	}
	struct gpu_requests requests = pinner_requests(d->pinner);
	sched_set_gpu(d->sched, &requests);
	return 0;
}
#endif

/* Creates the arena preflight sized, and fills in the pipeline table and
 * the image file lists (source_fill_arena). */
static int create_arena(struct daemon *d, const struct arena_sizing *sz)
{
	int rc = arena_create(&sz->plan, &d->arena);
	if (rc < 0) {
		log_error("shared memory: cannot reserve %" PRIu64 " bytes: %s", sz->bytes, strerror(-rc));
		return rc;
	}
	source_fill_arena(d->sources, d->cfg.n_pipelines, sz->index_at, &d->arena);
	return 0;
}

static void on_worker_exited(void *ctx, uint32_t index, pid_t pid, int wait_status)
{
	struct daemon *d = ctx;
	pool_worker_exited(d->pool, index, pid, wait_status);
}

static void on_zygote_lost(void *ctx, const char *why)
{
	struct daemon *d = ctx;
	log_error("%s; exiting, so that a fresh loaderd (a new arena, a new zygote) takes over",
		  why);
	d->exit_code = 1;
	daemon_stop(d, "fatal");
	pool_workers_gone(d->pool);
}

/* The worker zygote, then the seal: from here on nothing can map the arena
 * writable again, and the only writable mappings are the master's and
 * the zygote's, which its workers inherit. */
static int start_zygote(struct daemon *d, const char *worker_program)
{
	char err[PATH_MAX + 512];
	struct zygote_ops ops = {.ctx = d, .exited = on_worker_exited, .lost = on_zygote_lost};
	const char *program = d->cfg.worker_program[0] ? d->cfg.worker_program : worker_program;
	int rc = zygote_start(&d->loop, program, d->arena.fd, d->cfg.worker_timeout_ms,
			      (int)d->cfg.worker_nice, &ops, &d->zygote, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		return rc;
	}
	rc = arena_seal_writes(&d->arena);
	if (rc == -EINVAL) {
		log_error("shared memory: this kernel cannot seal the arena against new writable "
			  "mappings (F_SEAL_FUTURE_WRITE, Linux 5.1 or later); without that seal a "
			  "client running as loaderd's user, or as root, could change what every "
			  "other client receives: refusing to start");
		return rc;
	}
	if (rc < 0) {
		log_error("shared memory: sealing the arena against writes: %s", strerror(-rc));
		return rc;
	}
	return 0;
}

static int start(struct daemon *d, const char *worker_program)
{
	char err[PATH_MAX + 256];
	struct sched_ops sched_ops = {
		.attached = server_attached, .ready = server_send_ready, .fail = server_fail_client,
		.exits = &d->exits, .watch_exit = exitwatch_add,
	};
	d->exits.loop = &d->loop;
	d->sched = sched_create(&d->cfg, &d->arena, d->sources, d->cfg.n_pipelines, &sched_ops);
	if (!d->sched) {
		log_error("out of memory");
		return -ENOMEM;
	}
	pipetable_set(d->pt, &d->arena, d->sched);
	int rc = start_zygote(d, worker_program);
	if (rc < 0)
		return rc;
	struct pool_sink sink = {
		.sched = d->sched, .item_done = sched_item_done, .item_lost = sched_item_lost,
		.capacity = sched_pump, .workers_unable = sched_workers_unable,
		.describe_item = sched_describe_item, .describe_sample = sched_describe_sample,
	};
	struct pool_life life = {
		.ctx = d, .ready = on_pool_ready, .fatal = on_pool_fatal, .stopped = on_pool_stopped,
	};
	rc = pool_start(&d->loop, &d->cfg, &d->arena, d->zygote,
			d->cfg.worker_program[0] ? d->cfg.worker_program : worker_program, &sink,
			&life, &d->pool, err, sizeof(err));
	if (rc < 0) {
		log_error("%s", err);
		return rc;
	}
	d->reload.pool = d->pool;
	struct sched_workers workers = {.pool = d->pool, .submit = pool_submit};
	sched_set_workers(d->sched, &workers);
	if (autoworkers_start(&d->loop, &d->cfg, d->pool, d->sched, &d->autoworkers) < 0)
		log_error("workers = auto cannot run (out of memory): the count stays %u",
			  d->cfg.workers);
	d->gpu_ready = true;
	if (d->cfg.gpu == GPU_OFF) {
		snprintf(d->gpu_text, sizeof(d->gpu_text), "off");
		sched_set_no_device(d->sched, "this loaderd runs with gpu = off");
	} else {
#if LOADERD_HAVE_CUDA
		d->gpu_ready = false;
		if (start_gpu(d) < 0) {
			d->exit_code = 1;
			daemon_stop(d, "fatal");
		}
#else
		snprintf(d->gpu_text, sizeof(d->gpu_text), "unavailable: built without CUDA");
		sched_set_no_device(d->sched, "this loaderd was built without CUDA");
		if (d->cfg.gpu == GPU_REQUIRED) {
			log_error("gpu = required, but this loaderd was built without CUDA");
			d->exit_code = 1;
			daemon_stop(d, "fatal");
		}
#endif
	}
	server_up(d->server, d->sched, &d->arena);
	log_info("listening on %s%s: %zu pipeline%s, %u workers%s, %u staging slots, %zu bytes of "
		 "shared memory", d->socket_path, d->systemd_fd >= 0 ? " (socket from systemd)" : "",
		 d->cfg.n_pipelines, d->cfg.n_pipelines == 1 ? "" : "s", d->cfg.workers,
		 d->cfg.workers_auto ? " (auto, to start)" : "", d->cfg.staging_slots,
		 d->arena.bytes);
	return 0;
}

/* The socket systemd passed (loaderd.socket), if any, into d->systemd_fd:
 * 0 when none was passed, 1 when taken, -1 (logged) when it is not one
 * loaderd can serve or is bound to a path other than the configured one,
 * where clients would not look. */
static int take_systemd_socket(struct daemon *d, bool have_path)
{
	char err[PATH_MAX + 256], bound[PATH_MAX], where[PATH_MAX + 128];
	d->systemd_fd = -1;
	int rc = listenfd_take(&d->systemd_fd, bound, sizeof(bound), err, sizeof(err));
	if (rc < 0) {
		log_error("the socket from systemd: %s", err);
		return -1;
	}
	if (rc == 0 || !have_path)
		return 0;
	if (strcmp(bound, d->socket_path) != 0) {
		log_error("the socket from systemd is bound to %s, but %s: set the same path in the "
			  ".socket unit's ListenSequentialPacket=", bound,
			  preflight_socket_where(&d->cfg, d->socket_path, where, sizeof(where)));
		return -1;
	}
	log_info("socket %s: from systemd (socket activation)", bound);
	if (config_key_line(&d->cfg, NULL, "socket_group") > 0 ||
	    config_key_line(&d->cfg, NULL, "socket_mode") > 0)
		log_warning("%s: socket_group and socket_mode apply only to a socket loaderd binds "
			    "itself; the one from systemd has the .socket unit's SocketGroup= and "
			    "SocketMode=", d->cfg.file);
	return 1;
}


/* The handles start-up made, closed: with no pool (a start that failed,
 * or stopped, before the pool ran) the loop then ends. */
static void close_handles(struct daemon *d)
{
	zygote_close(d->zygote);
	d->zygote = NULL;
	jobs_stop(d->jobs);
	uv_close((uv_handle_t *)&d->sig_term, on_handle_closed);
	uv_close((uv_handle_t *)&d->sig_int, on_handle_closed);
	uv_close((uv_handle_t *)&d->sig_hup, on_handle_closed);
	uv_close((uv_handle_t *)&d->watchdog, on_handle_closed);
}

/* On libuv's thread pool: every check that reads the data (startup.h). */
static void scan_work(uv_work_t *w)
{
	struct daemon *d = w->data;
	progress_set_cancel(&d->scan_cancel);
	d->scan_found = preflight_scan(&d->cfg, d->sources, d->worker_program, &d->sizing);
	progress_set_cancel(NULL);
}

/* What the scan sized, made; the held HELLOs served. */
static int start_scanned(struct daemon *d)
{
	d->pt = pipetable_create(&d->loop, &d->cfg, d->sources, d->cfg.n_pipelines,
				 d->sizing.index_at, d->sizing.runtime_index_at);
	if (!d->pt) {
		log_error("out of memory");
		return -ENOMEM;
	}
	d->reload.pt = d->pt;
	if (create_arena(d, &d->sizing) < 0)
		return -ENOMEM;
	d->jobs = jobs_create(&d->loop, &d->cfg, d->pt, on_declared, d);
	if (!d->jobs) {
		log_error("out of memory");
		return -ENOMEM;
	}
	return start(d, d->worker_program);
}

static void scan_after(uv_work_t *w, int status)
{
	struct daemon *d = w->data;
	d->scanning = false;
	notify_progress_stop();
	if (d->stopping) { /* daemon_stop: the socket is shut, the scan given up */
		log_capture(NULL, 0);
		log_info("start-up stopped");
		close_handles(d);
		return;
	}
	if (status < 0 && !d->scan_found) {
		log_error("start-up's scan: %s", uv_strerror(status));
		d->scan_found = 1;
	}
	if (d->scan_found) {
		report_problems(d->config_file, d->scan_found, false);
		log_capture(NULL, 0);
		server_start_failed(d->server, d->start_why);
	} else {
		if (d->cfg.n_pipelines == 0)
			log_warning("no pipelines are configured: clients will have nothing to "
				    "attach to");
		int rc = start_scanned(d);
		log_capture(NULL, 0);
		if (rc == 0) {
			log_set_ratelimit(true);
			return;
		}
		server_start_failed(d->server, d->start_why);
	}
	d->exit_code = 1;
	d->stopping = true;
	server_shutdown(d->server);
	close_handles(d);
}

void startup_stop(struct daemon *d)
{
	if (!d->scanning) /* a start that failed on the loop has closed them */
		return;
	char what[PROGRESS_TEXT_MAX];
	progress_first(what, sizeof(what)); /* before the scan hears it, and ends */
	if (what[0])
		log_info("stopping the scan: %s", what);
	atomic_store(&d->scan_cancel, true);
}

void startup_describe(struct daemon *d, struct status_text *t)
{
	unsigned long long ms = status_now_ms() - d->start_ms;
	uint32_t held = server_held(d->server);
	status_field(t, "state", "state: %s", d->stopping ? "stopping" : "starting");
	status_object(t, "starting");
	status_field(t, "seconds", " for %.1f s", (double)(ms / 100) / 10);
	status_field(t, "clients_waiting", ", %u client", held);
	status_printf(t, "%s waiting\n", held == 1 ? "" : "s");
	status_close(t);
}

/* The checks and their verdict without a loop: --check-config, and a start
 * that could not serve its socket (each problem listed, then exit 1). */
static int check_all(struct daemon *d, bool check_only, int path_rc, int systemd_rc)
{
	notify_progress_start();
	unsigned found = preflight_run(&d->cfg, d->sources, d->worker_program,
				       path_rc == 0 && systemd_rc == 0 ? d->socket_path : NULL,
				       &d->sizing);
	notify_progress_stop();
	found += path_rc < 0;
	found += systemd_rc < 0;
	if (found) { /* always, but for --check-config */
		report_problems(d->config_file, found, check_only);
		return 1;
	}
	printf("loaderd: configuration %s is valid (%zu pipeline%s)\n",
	       d->config_file ? d->config_file : "(defaults)", d->cfg.n_pipelines,
	       d->cfg.n_pipelines == 1 ? "" : "s");
	return 0;
}

/* The loop, its signals and the watchdog, and the socket, served while
 * the daemon starts. 0, or -errno (logged). */
static int serve(struct daemon *d)
{
	uv_loop_init(&d->loop);
	d->start_ms = status_now_ms();
	d->reload = (struct reload){.running = &d->cfg, .done = on_reloaded, .ctx = d};
	uv_signal_init(&d->loop, &d->sig_term);
	uv_signal_init(&d->loop, &d->sig_int);
	uv_signal_init(&d->loop, &d->sig_hup);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
	uv_timer_init(&d->loop, &d->watchdog);
	d->watchdog_usec = notify_watchdog_usec();
	if (d->watchdog_usec)
		uv_timer_start(&d->watchdog, on_watchdog, d->watchdog_usec / 2000,
			       d->watchdog_usec / 2000);
	char err[PATH_MAX + 256];
	struct server_ops server_ops = {.ctx = d, .status = render_status,
				     .summary = render_summary, .reload = daemon_reload,
				     .declare = daemon_declare};
	int rc = server_start(&d->loop, &d->cfg, d->socket_path, d->systemd_fd, NULL, NULL,
			      &server_ops, &d->server, err, sizeof(err));
	if (rc < 0) {
		char where[PATH_MAX + 128];
		log_error("%s: %s", preflight_socket_where(&d->cfg, d->socket_path, where,
							   sizeof(where)), err);
		return rc;
	}
	if ((rc = server_metrics_start(d->server)) < 0) { /* GET /metrics, if metrics_listen */
		server_shutdown(d->server);
		return rc;
	}
	return 0;
}

int startup_run(struct daemon *d, bool check_only)
{
	int path_rc = 0;
	if (d->cfg.socket[0])
		snprintf(d->socket_path, sizeof(d->socket_path), "%s", d->cfg.socket);
	else if ((path_rc = paths_default_socket(d->socket_path, sizeof(d->socket_path))) < 0)
		log_error(path_rc == -ENOENT ? "no socket path: set `socket` in [daemon], or "
			  "$LOADERD_SOCKET, or $XDG_RUNTIME_DIR" : "the socket path from "
			  "$LOADERD_SOCKET or $XDG_RUNTIME_DIR is too long");
	int systemd_rc = take_systemd_socket(d, path_rc == 0);
	if (check_only || path_rc < 0 || systemd_rc < 0)
		return check_all(d, check_only, path_rc, systemd_rc);
	/* What serving the socket needs; when it fails, the rest is checked
	 * too (on this thread) so that one run lists every problem. */
	unsigned found = preflight_serve_checks(&d->cfg, systemd_rc == 0 ? d->socket_path : NULL);
	if (found) {
		notify_progress_start();
		found += preflight_scan(&d->cfg, d->sources, d->worker_program, &d->sizing);
		notify_progress_stop();
		report_problems(d->config_file, found, false);
		return 1;
	}
	server_raise_fd_limit(&d->cfg);
	if (serve(d) < 0) {
		d->exit_code = 1;
		close_handles(d);
	} else {
		/* The scan's error lines are what held clients are told if it
		 * fails (server_start_failed). */
		log_capture(d->start_why, sizeof(d->start_why));
		notify_progress_start();
		d->scan.data = d;
		d->scanning = true;
		int rc = uv_queue_work(&d->loop, &d->scan, scan_work, scan_after);
		if (rc < 0) {
			log_error("start-up's scan cannot start: %s", uv_strerror(rc));
			d->scanning = false;
			notify_progress_stop();
			log_capture(NULL, 0);
			d->exit_code = 1;
			server_shutdown(d->server);
			close_handles(d);
		}
	}
	uv_run(&d->loop, UV_RUN_DEFAULT);

	server_free(d->server);
#if LOADERD_HAVE_CUDA
	pinner_free(d->pinner);
#endif
	pool_free(d->pool);
	jobs_free(d->jobs);
	pipetable_free(d->pt);
	sched_free(d->sched);
	arena_close(&d->arena);
	uv_loop_close(&d->loop);
	return d->exit_code;
}
