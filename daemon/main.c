/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd: the master process. Options, the configuration, lifetime and
 * the status header; every job lives in its module, the start itself in
 * daemon/startup.h:
 *
 *   config -> the socket, served from here on -> on a thread, preflight's
 *   scan (data files, the worker program's --probe answer, the arena's
 *   size against shm_bytes and free memory; with socket_group and the
 *   socket path, all of this is what --check-config runs) -> arena
 *   (shared memory) -> scheduler -> worker zygote (fork+exec; it maps the
 *   arena read-write) -> the arena sealed against every new writable
 *   mapping (shm/arena.h) -> worker pool (each worker a fork of the
 *   zygote) -> GPU threads (CUDA, after the zygote was started; one per
 *   GPU) -> clients served -> READY=1 once every worker is up and the GPU
 *   threads have started (or found no GPU: host delivery only)
 *
 * SIGTERM/SIGINT: STOPPING=1, stop accepting, tell clients, stop workers
 * (or, while starting, the scan), remove the socket, exit 0. SIGHUP (and
 * `loaderctl reload`): reload the configuration (daemon/reload.h),
 * between RELOADING=1 and READY=1. Exit status 1: the configuration or
 * the system does not let loaderd start (the message says which), or the
 * worker zygote died, after which no worker could ever be started again
 * (daemon/pool/zygote.h).
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
#include "daemon/core/progress.h"
#include "daemon/daemon.h"
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
#include "daemon/startup.h"
#include "daemon/pool/zygote.h"

#define STOP_TIMEOUT_MS 5000


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

void render_status(void *ctx, struct status_text *t)
{
	struct daemon *d = ctx;
	unsigned long long up = status_now_ms() - d->start_ms;
	status_object(t, "daemon");
	status_field(t, "version", "loaderd %s", LOADERD_VERSION);
	status_field(t, "pid", " pid %d", (int)getpid());
	status_field(t, "uptime_s", " uptime %.1fs\n", (double)(up / 100) / 10);
	status_close(t);
	if (!d->sched) { /* starting (or stopped while it did): no arena, no pool yet */
		startup_describe(d, t);
		return;
	}
	if (t->json) /* the text says it by having the rest */
		status_field(t, "state", "%s", d->stopping ? "stopping" : "running");
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
void render_summary(void *ctx, struct status_text *t)
{
	struct daemon *d = ctx;
	if (d->sched)
		sched_describe_errors(d->sched, t);
	progress_describe(t); /* start-up's scan, or pipelines being added */
	reload_describe(&d->reload, t);
	if (d->pt)
		pipetable_describe(d->pt, t);
}

void on_handle_closed(uv_handle_t *h)
{
	(void)h;
}

void on_pool_stopped(void *ctx)
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

void daemon_stop(struct daemon *d, const char *why)
{
	if (d->stopping)
		return;
	d->stopping = true;
	d->reload.stopping = true;
	log_info("%s: stopping", why);
	notify_send("STOPPING=1");
	if (d->server)
		server_shutdown(d->server);
	if (!d->pool) { /* still starting */
		startup_stop(d);
		return;
	}
	pipetable_stop(d->pt); /* pipelines being added: their scans give up */
	autoworkers_stop(d->autoworkers);
	d->autoworkers = NULL;
	pool_stop(d->pool, STOP_TIMEOUT_MS);
}

/* server_ops.reload, and SIGHUP. systemd hears RELOADING=1, then READY=1
 * with the (maybe new) status line, whether or not the reload applied. */
int daemon_reload(void *ctx, char *text, size_t cap)
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
void on_reloaded(void *ctx, int rc, const char *text)
{
	struct daemon *d = ctx;
	notify_ready(d);
	if (d->server)
		server_reload_answer(d->server, rc, text);
}

/* server_ops.declare: a HELLO that declares its pipeline (daemon/jobs.h). */
int daemon_declare(void *ctx, const struct proto_hello *hello, int pid, uint64_t conn_id,
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
void on_declared(void *ctx, uint64_t conn_id, int rc, int entry, const char *text)
{
	struct daemon *d = ctx;
	if (d->server && !d->stopping)
		server_declared(d->server, conn_id, rc, entry, text);
}

void on_signal(uv_signal_t *h, int signum)
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

void on_watchdog(uv_timer_t *t)
{
	(void)t;
	notify_send("WATCHDOG=1");
}

void notify_ready(struct daemon *d)
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

void on_pool_ready(void *ctx)
{
	struct daemon *d = ctx;
	d->pool_ready = true;
	notify_ready(d);
}

void on_pool_fatal(void *ctx, const char *why)
{
	struct daemon *d = ctx;
	log_error("%s; exiting", why);
	d->exit_code = 1;
	daemon_stop(d, "fatal");
}

/* The last line of a refused start or --check-config: how many problems
 * the lines above list. */
void report_problems(const char *config_file, unsigned n, bool check_only)
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
	default_worker_program(d.worker_program, sizeof(d.worker_program));
	d.config_file = config_file;
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
						    d.worker_program);
		report_problems(config_file, found, check_only);
		config_problems_free(problems);
		free(problems);
		return 1;
	}
	free(problems);
	log_set_level(d.cfg.log_level);
	return startup_run(&d, check_only);
}
