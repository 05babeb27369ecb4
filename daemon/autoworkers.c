/* SPDX-License-Identifier: Apache-2.0 */
/*
 * autoworkers: workers = auto's timer (autoworkers.h): the measurements
 * the controller takes (daemon/pool/wtune.h), and its changes applied,
 * logged and shown.
 */
#include "daemon/autoworkers.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/pool/pool.h"
#include "daemon/pool/wtune.h"
#include "daemon/sched/sched.h"
#include "shm/layout.h"

#define TICK_MS 1000

struct autoworkers {
	uv_timer_t timer;
	struct config *cfg;
	struct pool *pool;
	struct sched *sched;
	struct wtune tune;
	bool tuning;          /* workers = auto, and tune follows the pool */
	long clk_tck;
	/* /proc/stat at the last tick */
	uint64_t cpu_total, cpu_idle;
	bool cpu_known;
	uint64_t last_ns;
	/* each worker's CPU time at the last tick, by index */
	struct {
		int pid;
		uint64_t ticks;
	} prev[ARENA_WORKERS_MAX];
	struct sched_wait waits[WTUNE_CLIENTS_MAX];
	struct wtune_client clients[WTUNE_CLIENTS_MAX];
};

/* Reads a small /proc file whole; its length, or -errno. */
static ssize_t read_proc(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, cap - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	buf[n] = '\0';
	return n;
}

/* The node's CPU time, all of it and the idle part (idle + iowait), in
 * clock ticks since boot: /proc/stat's "cpu" line. */
static int node_cpu(uint64_t *total, uint64_t *idle)
{
	char buf[512];
	if (read_proc("/proc/stat", buf, sizeof(buf)) < 0)
		return -1;
	unsigned long long v[8] = {0};
	if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]) < 5)
		return -1;
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	*idle = v[3] + v[4];
	return 0;
}

/* A process's CPU time (utime + stime) in clock ticks: /proc/PID/stat. */
static int proc_cpu(int pid, uint64_t *ticks)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (read_proc(path, buf, sizeof(buf)) < 0)
		return -1;
	const char *s = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
	if (!s)
		return -1;
	unsigned long long utime, stime;
	/* after the name: state ppid pgrp session tty_nr tpgid flags minflt
	 * cminflt majflt cmajflt utime stime */
	if (sscanf(s + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
		   &stime) != 2)
		return -1;
	*ticks = utime + stime;
	return 0;
}

/* The tick's CPU: the node's idle cores and the workers' cores since the
 * last tick (-1 each when unknown). */
static void measure_cpu(struct autoworkers *a, uint64_t now_ns, double *idle_cores,
			double *workers_cores)
{
	*idle_cores = *workers_cores = -1;
	double dt_s = a->last_ns && now_ns > a->last_ns ? (double)(now_ns - a->last_ns) / 1e9 : 0;
	uint64_t total = 0, idle = 0;
	bool known = node_cpu(&total, &idle) == 0;
	if (known && a->cpu_known && total > a->cpu_total && dt_s > 0) {
		long online = sysconf(_SC_NPROCESSORS_ONLN);
		double frac = (double)(idle - a->cpu_idle) / (double)(total - a->cpu_total);
		*idle_cores = frac * (double)(online > 0 ? online : 1);
	}
	a->cpu_known = known;
	a->cpu_total = total;
	a->cpu_idle = idle;
	int pids[ARENA_WORKERS_MAX];
	uint32_t idx[ARENA_WORKERS_MAX];
	uint32_t n = pool_pids(a->pool, pids, idx, ARENA_WORKERS_MAX);
	uint64_t used = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t t;
		if (proc_cpu(pids[i], &t) < 0)
			continue; /* ended meanwhile */
		if (a->prev[idx[i]].pid == pids[i] && t >= a->prev[idx[i]].ticks)
			used += t - a->prev[idx[i]].ticks;
		a->prev[idx[i]].pid = pids[i];
		a->prev[idx[i]].ticks = t;
	}
	if (dt_s > 0 && a->clk_tck > 0 && *idle_cores >= 0)
		*workers_cores = (double)used / (double)a->clk_tck / dt_s;
	a->last_ns = now_ns;
}

static void limits(const struct config *cfg, struct wtune_limits *lim)
{
	long cpus = config_cpus();
	*lim = (struct wtune_limits){.min = cfg->min_workers, .max = cfg->max_workers,
				     .cores = cpus > 0 ? (uint32_t)cpus : 1,
				     .budget_cores = config_cpu_budget_cores(cfg, cpus > 0 ? cpus : 1)};
}

/* What status says of workers = auto: the count, the bounds, the last
 * change and what holds a raise back. */
static void show(struct autoworkers *a, uint64_t now_ns)
{
	const struct wtune *w = &a->tune;
	uint32_t hi = w->lim.max < w->lim.cores ? w->lim.max : w->lim.cores;
	struct pool_auto st = {.on = true, .count = pool_count(a->pool), .min = w->lim.min,
			       .max = hi < w->lim.min ? w->lim.min : hi,
			       .cpu_budget = w->lim.budget_cores};
	if (w->last_change_ns) {
		st.changed = true;
		st.last_change_ago_ms = (now_ns - w->last_change_ns) / 1000000;
		snprintf(st.last_change, sizeof(st.last_change), "%s", w->reason);
	}
	snprintf(st.held, sizeof(st.held), "%s", w->held);
	pool_set_auto(a->pool, &st);
}

static void on_tick(uv_timer_t *t)
{
	struct autoworkers *a = t->data;
	uint64_t now = clock_mono_ns();
	struct wtune_limits lim;
	double idle_cores, workers_cores;
	if (!a->cfg->workers_auto) { /* nothing measured: the next start begins afresh */
		if (a->tuning)
			pool_set_auto(a->pool, &(struct pool_auto){.on = false});
		a->tuning = false;
		a->cpu_known = false;
		a->last_ns = 0;
		return;
	}
	measure_cpu(a, now, &idle_cores, &workers_cores);
	limits(a->cfg, &lim);
	if (!a->tuning) { /* auto from here: the pool's count is where it starts */
		wtune_init(&a->tune, &lim, pool_count(a->pool), now);
		a->tuning = true;
		show(a, now);
		return;
	}
	wtune_set_limits(&a->tune, &lim);
	size_t n = sched_waits(a->sched, a->waits, WTUNE_CLIENTS_MAX);
	for (size_t i = 0; i < n; i++)
		a->clients[i] = (struct wtune_client){.id = a->waits[i].session,
						      .pid = (int)a->waits[i].pid,
						      .releases = a->waits[i].releases,
						      .wait_ns = a->waits[i].wait_ns};
	uint32_t count = pool_count(a->pool), to = count;
	struct wtune_tick tick = {.now_ns = now, .workers = count, .idle_cores = idle_cores,
				  .workers_cores = workers_cores, .clients = a->clients,
				  .n_clients = n};
	enum wtune_event ev = wtune_tick(&a->tune, &tick, &to);
	if (ev != WTUNE_SAME && to != count) {
		char err[256];
		int rc = pool_resize(a->pool, to, err, sizeof(err));
		if (rc < 0) {
			log_warning("workers = auto: %s: not applied: %s", a->tune.reason, err);
			wtune_refused(&a->tune, count);
		} else {
			a->cfg->workers = to;
			log_info("%s", a->tune.reason);
		}
	}
	show(a, now);
}

int autoworkers_start(uv_loop_t *loop, struct config *cfg, struct pool *pool, struct sched *sched,
		      struct autoworkers **out)
{
	struct autoworkers *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cfg = cfg;
	a->pool = pool;
	a->sched = sched;
	a->clk_tck = sysconf(_SC_CLK_TCK);
	uv_timer_init(loop, &a->timer);
	a->timer.data = a;
	uv_timer_start(&a->timer, on_tick, 0, TICK_MS);
	*out = a;
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

void autoworkers_stop(struct autoworkers *a)
{
	if (!a)
		return;
	uv_timer_stop(&a->timer);
	uv_close((uv_handle_t *)&a->timer, on_closed);
}
