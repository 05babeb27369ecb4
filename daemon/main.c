/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd: the master process. Start-up order and lifetime only; every job
 * lives in its module:
 *
 *   config -> preflight (data files, the worker program's --probe answer,
 *   socket_group, the socket path, the arena's size against shm_bytes
 *   and free memory; all of this is what --check-config runs) -> arena
 *   (shared memory) -> scheduler -> worker zygote (fork+exec; it maps the
 *   arena read-write) -> the arena sealed against every new writable
 *   mapping (shm/arena.h) -> socket -> worker pool (each worker a fork of
 *   the zygote) -> GPU threads (CUDA, after the zygote was started; one
 *   per GPU) -> READY=1 once every worker is up and the GPU threads have
 *   started (or found no GPU: host delivery only)
 *
 * SIGTERM/SIGINT: STOPPING=1, stop accepting, tell clients, stop workers,
 * remove the socket, exit 0. SIGHUP (and `loaderctl reload`): reload the
 * configuration (daemon/reload.h), between RELOADING=1 and READY=1.
 * Exit status 1: the configuration or the system does not let loaderd
 * start (the message says which), or the worker zygote died, after which
 * no worker could ever be started again (daemon/pool/zygote.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/paths.h"
#include "daemon/autoworkers.h"
#include "daemon/config/config.h"
#include "daemon/listenfd.h"
#include "daemon/pool/exitwatch.h"
#include "daemon/jobs.h"
#include "daemon/notify.h"
#include "daemon/pipetable.h"
#include "daemon/pool/pool.h"
#include "daemon/preflight.h"
#if LOADERD_HAVE_CUDA
#include "gpudecode/nvjd.h"
#include "daemon/gpu/pinner.h"
#endif
#include "daemon/reload.h"
#include "daemon/sched/sched.h"
#include "daemon/server/server.h"
#include "daemon/source/source.h"
#include "daemon/core/status.h"
#include "daemon/pool/zygote.h"

#define STOP_TIMEOUT_MS 5000

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
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: loaderd [--config FILE] [--check-config] [--version] [--help]\n"
		"  -c, --config FILE   configuration file (INI); without it, defaults and no pipelines\n"
		"  -t, --check-config  check the configuration and every pipeline's data, then exit\n"
		"  -V, --version       print version and build facts\n"
		"  -h, --help          this text\n");
}

static void print_version(void)
{
	printf("loaderd %s\n", LOADERD_VERSION);
	printf("libuv %s\n", uv_version_string());
#if LOADERD_HAVE_CUDA
	pinner_print_system(stdout);
	/* Whether JPEGs could be decoded on the GPU's engines: nvJPEG found
	 * by its soname (gpudecode/nvjd.h), or why not. */
	char text[256];
	int rc = nvjd_load(NULL, text, sizeof text);
	printf("gpu decode: %s%s\n", rc ? "unavailable: " : "", text);
#else
	printf("cuda: not built in (host delivery only)\n");
	printf("gpus: 0\n");
	printf("gpu decode: unavailable: not built with CUDA\n");
#endif
}

/* loaderd-worker sits beside loaderd in a build tree, else in the
 * libexec directory relative to loaderd's own (common/paths.h). */
static void default_worker_program(char *buf, size_t cap)
{
	paths_program("loaderd-worker", LOADERD_PROGRAMS_FROM_BIN, LOADERD_PROGRAMS_DIR, buf, cap);
}

static void render_status(void *ctx, struct status_text *t)
{
	struct daemon *d = ctx;
	unsigned long long up = status_now_ms() - d->start_ms;
	status_object(t, "daemon");
	status_field(t, "version", "loaderd %s", LOADERD_VERSION);
	status_field(t, "pid", " pid %d", (int)getpid());
	status_field(t, "uptime_s", " uptime %.1fs\n", (double)(up / 100) / 10);
	status_close(t);
#if LOADERD_HAVE_CUDA
	if (d->pinner) {
		pinner_describe(d->pinner, t);
	} else
#endif
	{
		status_object(t, "delivery");
		status_json_bool(t, "device", false);
		status_field(t, "gpu", "delivery: host (GPU %s)\n", d->gpu_text);
		status_close(t);
		status_no_gpus(t);
	}
	sched_describe_arena(d->sched, t);
	pool_describe(d->pool, t);
	sched_describe(d->sched, t);
}

/* The summary lines before connections:, which the text always keeps. */
static void render_summary(void *ctx, struct status_text *t)
{
	struct daemon *d = ctx;
	sched_describe_errors(d->sched, t);
	reload_describe(&d->reload, t);
	pipetable_describe(d->pt, t);
}

static void on_handle_closed(uv_handle_t *h)
{
	(void)h;
}

static void on_pool_stopped(void *ctx)
{
	struct daemon *d = ctx;
	exitwatch_close_all(&d->exits);
	zygote_close(d->zygote);
	d->zygote = NULL;
	jobs_stop(d->jobs);
#if LOADERD_HAVE_CUDA
	pinner_stop(d->pinner);
#endif
	uv_close((uv_handle_t *)&d->sig_term, on_handle_closed);
	uv_close((uv_handle_t *)&d->sig_int, on_handle_closed);
	uv_close((uv_handle_t *)&d->sig_hup, on_handle_closed);
	uv_close((uv_handle_t *)&d->watchdog, on_handle_closed);
	log_info("stopped");
}

static void daemon_stop(struct daemon *d, const char *why)
{
	if (d->stopping)
		return;
	d->stopping = true;
	d->reload.stopping = true;
	log_info("%s: stopping", why);
	notify_send("STOPPING=1");
	if (d->server)
		server_shutdown(d->server);
	autoworkers_stop(d->autoworkers);
	d->autoworkers = NULL;
	pool_stop(d->pool, STOP_TIMEOUT_MS);
}

static void notify_ready(struct daemon *d);

/* server_ops.reload, and SIGHUP. systemd hears RELOADING=1, then READY=1
 * with the (maybe new) status line, whether or not the reload applied. */
static int daemon_reload(void *ctx, char *text, size_t cap)
{
	struct daemon *d = ctx;
	if (d->stopping || !d->pool) {
		snprintf(text, cap, "loaderd is %s", d->stopping ? "stopping" : "starting");
		return -EAGAIN;
	}
	char state[64];
	snprintf(state, sizeof(state), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)(clock_mono_ns() / 1000));
	notify_send(state);
	int rc = reload_run(&d->reload, text, cap);
	if (rc == RELOAD_PENDING)
		return SERVER_RELOAD_PENDING; /* on_reloaded answers */
	notify_ready(d);
	return rc;
}

/* A reload that added pipelines has ended (reload_run logged it). */
static void on_reloaded(void *ctx, int rc, const char *text)
{
	struct daemon *d = ctx;
	notify_ready(d);
	if (d->server)
		server_reload_answer(d->server, rc, text);
}

/* server_ops.declare: a HELLO that declares its pipeline (daemon/jobs.h). */
static int daemon_declare(void *ctx, const struct proto_hello *hello, int pid, uint64_t conn_id,
			  int *entry, char *text, size_t cap)
{
	struct daemon *d = ctx;
	if (d->stopping || !d->pool) {
		snprintf(text, cap, "loaderd is %s", d->stopping ? "stopping" : "starting");
		return -EAGAIN;
	}
	int rc = jobs_declare(d->jobs, hello, pid, conn_id, entry, text, cap);
	return rc == JOBS_PENDING ? SERVER_DECLARE_PENDING : rc;
}

/* A declaration jobs_declare left pending is decided. */
static void on_declared(void *ctx, uint64_t conn_id, int rc, int entry, const char *text)
{
	struct daemon *d = ctx;
	if (d->server && !d->stopping)
		server_declared(d->server, conn_id, rc, entry, text);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;
	if (signum == SIGHUP) {
		char text[PROTO_ERROR_TEXT_MAX];
		log_info("SIGHUP: reloading %s", d->cfg.file[0] ? d->cfg.file : "(no file)");
		daemon_reload(d, text, sizeof(text)); /* reload_run (or its end) logs the outcome */
		return;
	}
	daemon_stop(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_watchdog(uv_timer_t *t)
{
	(void)t;
	notify_send("WATCHDOG=1");
}

static void notify_ready(struct daemon *d)
{
	if (!d->pool_ready || !d->gpu_ready || d->stopping)
		return;
	char state[256];
	size_t n = pipetable_count(d->pt);
	snprintf(state, sizeof(state), "READY=1\nSTATUS=serving %zu pipeline%s with %u workers on %.180s",
		 n, n == 1 ? "" : "s", d->cfg.workers, d->socket_path);
	if (!d->ready_logged) /* again after each reload, for systemd only */
		log_info("%s", strchr(state, '=') + 10);
	d->ready_logged = true;
	notify_send(state);
}

static void on_pool_ready(void *ctx)
{
	struct daemon *d = ctx;
	d->pool_ready = true;
	notify_ready(d);
}

static void on_pool_fatal(void *ctx, const char *why)
{
	struct daemon *d = ctx;
	log_error("%s; exiting", why);
	d->exit_code = 1;
	daemon_stop(d, "fatal");
}

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
	struct server_ops server_ops = {.ctx = d, .status = render_status,
				     .summary = render_summary, .reload = daemon_reload,
				     .declare = daemon_declare};
	rc = server_start(&d->loop, &d->cfg, d->socket_path, d->systemd_fd, d->sched, &d->arena,
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
		server_shutdown(d->server);
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

/* The last line of a refused start or --check-config: how many problems
 * the lines above list. */
static void report_problems(const char *config_file, unsigned n, bool check_only)
{
	log_error("configuration %s: %u problem%s%s", config_file ? config_file : "(defaults)", n,
		  n == 1 ? "" : "s", check_only ? " found" : ", not started");
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{"config", required_argument, NULL, 'c'}, {"check-config", no_argument, NULL, 't'},
		{"version", no_argument, NULL, 'V'},      {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *config_file = NULL;
	bool check_only = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "c:tVh", options, NULL)) != -1) {
		switch (opt) {
		case 'c': config_file = optarg; break;
		case 't': check_only = true; break;
		case 'V': print_version(); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "loaderd: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	log_init("loaderd", LOG_LEVEL_INFO);
	/* Start-up writes a bounded number of lines (some per pipeline), all
	 * of which an operator may need; the rate limit starts with the loop. */
	log_set_ratelimit(false);
	signal(SIGPIPE, SIG_IGN);

	static struct daemon d; /* large (pipeline tables); lives for the whole run */
	d.arena.fd = -1;
	d.arena.client_fd = -1;
	struct config_problems *problems = calloc(1, sizeof(*problems));
	if (!problems) {
		log_error("%s", strerror(ENOMEM));
		return 1;
	}
	char worker_program[PATH_MAX];
	default_worker_program(worker_program, sizeof(worker_program));
	if (config_load_problems(config_file, &d.cfg, problems) < 0) {
		for (unsigned i = 0; i < problems->kept; i++)
			log_error("%s", problems->text[i]);
		if (problems->n > problems->kept)
			log_error("%s: and %u more problems", config_file, problems->n - problems->kept);
		unsigned found = problems->n;
		/* The sections without a problem are as the file says: check
		 * their data too (not for a file that cannot be read). */
		if (d.cfg.file[0] && problems->line[0] > 0)
			found += preflight_sections(&d.cfg, problems->pipelines_with_problems,
						    !problems->daemon_with_problems, d.sources,
						    worker_program);
		report_problems(config_file, found, check_only);
		config_problems_free(problems);
		free(problems);
		return 1;
	}
	free(problems);
	log_set_level(d.cfg.log_level);
	int path_rc = 0;
	if (d.cfg.socket[0])
		snprintf(d.socket_path, sizeof(d.socket_path), "%s", d.cfg.socket);
	else if ((path_rc = paths_default_socket(d.socket_path, sizeof(d.socket_path))) < 0)
		log_error(path_rc == -ENOENT ? "no socket path: set `socket` in [daemon], or "
			  "$LOADERD_SOCKET, or $XDG_RUNTIME_DIR" : "the socket path from "
			  "$LOADERD_SOCKET or $XDG_RUNTIME_DIR is too long");
	int systemd_rc = take_systemd_socket(&d, path_rc == 0);
	notify_progress_start();
	struct arena_sizing sizing;
	unsigned found = preflight_run(&d.cfg, d.sources, worker_program,
				       path_rc == 0 && systemd_rc == 0 ? d.socket_path : NULL, &sizing);
	notify_progress_stop();
	found += path_rc < 0;
	found += systemd_rc < 0;
	if (found) {
		report_problems(config_file, found, check_only);
		return 1;
	}
	if (check_only) {
		printf("loaderd: configuration %s is valid (%zu pipeline%s)\n",
		       config_file ? config_file : "(defaults)", d.cfg.n_pipelines,
		       d.cfg.n_pipelines == 1 ? "" : "s");
		return 0;
	}
	if (d.cfg.n_pipelines == 0)
		log_warning("no pipelines are configured: clients will have nothing to attach to");
	server_raise_fd_limit(&d.cfg);
	d.pt = pipetable_create(&d.loop, &d.cfg, d.sources, d.cfg.n_pipelines, sizing.index_at,
				sizing.runtime_index_at);
	if (!d.pt) {
		log_error("out of memory");
		return 1;
	}
	d.reload = (struct reload){.running = &d.cfg, .pt = d.pt, .done = on_reloaded, .ctx = &d};
	if (create_arena(&d, &sizing) < 0)
		return 1;

	uv_loop_init(&d.loop);
	d.jobs = jobs_create(&d.loop, &d.cfg, d.pt, on_declared, &d);
	if (!d.jobs) {
		log_error("out of memory");
		return 1;
	}
	d.start_ms = status_now_ms();
	uv_signal_init(&d.loop, &d.sig_term);
	uv_signal_init(&d.loop, &d.sig_int);
	uv_signal_init(&d.loop, &d.sig_hup);
	d.sig_term.data = d.sig_int.data = d.sig_hup.data = &d;
	uv_signal_start(&d.sig_term, on_signal, SIGTERM);
	uv_signal_start(&d.sig_int, on_signal, SIGINT);
	uv_signal_start(&d.sig_hup, on_signal, SIGHUP);
	uv_timer_init(&d.loop, &d.watchdog);
	d.watchdog_usec = notify_watchdog_usec();
	if (d.watchdog_usec)
		uv_timer_start(&d.watchdog, on_watchdog, d.watchdog_usec / 2000, d.watchdog_usec / 2000);

	if (start(&d, worker_program) < 0) {
		d.exit_code = 1;
		zygote_close(d.zygote);
		d.zygote = NULL;
		jobs_stop(d.jobs);
		uv_close((uv_handle_t *)&d.sig_term, on_handle_closed);
		uv_close((uv_handle_t *)&d.sig_int, on_handle_closed);
		uv_close((uv_handle_t *)&d.sig_hup, on_handle_closed);
		uv_close((uv_handle_t *)&d.watchdog, on_handle_closed);
	}
	log_set_ratelimit(true);
	uv_run(&d.loop, UV_RUN_DEFAULT);

	server_free(d.server);
#if LOADERD_HAVE_CUDA
	pinner_free(d.pinner);
#endif
	pool_free(d.pool);
	jobs_free(d.jobs);
	pipetable_free(d.pt);
	sched_free(d.sched);
	arena_close(&d.arena);
	uv_loop_close(&d.loop);
	return d.exit_code;
}
