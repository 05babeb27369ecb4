/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_supervise: what the pool does when a worker ends (pool.h): collect
 * what it finished, re-issue what it held (as suspect when it crashed or
 * hung), respawn it at once or after back-off, or give it up; whether any
 * worker can run at all; and the watchdog that kills stuck workers.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/pool/pool_impl.h"
#include "daemon/core/status.h"
#include "worker/worker.h"

static void on_retry_timer(uv_timer_t *t)
{
	struct worker *w = t->data;
	if (w->pool->stopping || w->state != WORKER_BACKOFF)
		return;
	pool_worker_start(w);
}

/* Whether any worker is running or on its way up. */
static bool any_live(const struct pool *p)
{
	for (uint32_t i = 0; i < p->n; i++) {
		enum worker_state st = p->workers[i].state;
		if ((st == WORKER_RUNNING || st == WORKER_STARTING) && p->workers[i].proc_open)
			return true;
	}
	return false;
}

/* No worker can run: each failed fatally or failed to start too often
 * in a row, and none is up. Says so once (fatal before the pool was ever
 * ready: the daemon cannot serve at all). */
static void check_unable(struct pool *p)
{
	if (p->stopping || p->unable || any_live(p))
		return;
	const struct worker *last = NULL;
	for (uint32_t i = 0; i < p->n; i++) {
		const struct worker *w = &p->workers[i];
		if (w->state != WORKER_FAILED && w->quick_failures < POOL_UNABLE_FAILURES)
			return;
		if (!last || w->state == WORKER_FAILED)
			last = w;
	}
	if (!last)
		return;
	p->unable = true;
	if (last->state == WORKER_FAILED)
		snprintf(p->unable_text, sizeof(p->unable_text), "no worker can run: %s %s, a fatal "
			 "code (see loaderd's log)", p->program, last->last_exit);
	else
		snprintf(p->unable_text, sizeof(p->unable_text), "no worker can run: %s: %s right "
			 "after start, %u times in a row", p->program, last->last_exit,
			 last->quick_failures);
	if (!p->ready_sent) {
		p->life.fatal(p->life.ctx, p->unable_text);
		return;
	}
	log_error("%s; clients waiting for workers get this error until one starts", p->unable_text);
	p->sink.workers_unable(p->sink.sched, p->unable_text);
}

/* The worker's process is gone and accounted for (worker_ended): what next. */
static void worker_closed(struct worker *w)
{
	struct pool *p = w->pool;
	w->proc_open = false;
	w->pid = 0;
	if (w->pidfd >= 0)
		close(w->pidfd);
	w->pidfd = -1;
	if (p->stopping) {
		if (w->state != WORKER_FAILED)
			w->state = WORKER_STOPPED;
		pool_check_stopped(p);
		return;
	}
	if (w->state == WORKER_FAILED) {
		check_unable(p);
		return;
	}
	if (w->index >= p->n) {
		w->state = WORKER_RETIRED;
		return;
	}
	if (w->quick_failures == 0) {
		pool_worker_start(w);
		return;
	}
	unsigned long long delay = POOL_BACKOFF_FIRST_MS << (w->quick_failures - 1 < 20 ? w->quick_failures - 1 : 20);
	if (delay > POOL_BACKOFF_MAX_MS)
		delay = POOL_BACKOFF_MAX_MS;
	w->state = WORKER_BACKOFF;
	w->retry_at_ms = status_now_ms() + delay;
	uv_timer_start(&w->retry_timer, on_retry_timer, delay, 0);
	check_unable(p);
}

/* Signals by which a process crashes on its own, as opposed to being
 * killed from outside (SIGKILL, SIGTERM: an operator, the OOM killer, the
 * watchdog). */
static bool crash_signal(int sig)
{
	return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
	       sig == SIGABRT || sig == SIGSYS;
}

/* A worker process ended (or never started): collect what it finished,
 * give back what it did not, decide whether and when to respawn. */
static void worker_ended(struct worker *w, int64_t exit_status, int term_signal)
{
	struct pool *p = w->pool;
	if (w->killed_stuck)
		; /* last_exit says why the watchdog killed it */
	else if (term_signal)
		snprintf(w->last_exit, sizeof(w->last_exit), "killed by signal %d (%s)", term_signal,
			 strsignal(term_signal));
	else if (exit_status >= 0)
		snprintf(w->last_exit, sizeof(w->last_exit), "exit code %" PRId64, exit_status);

	pool_worker_drain(w);
	/* No longer a candidate for items: those handed back below must go to
	 * a live worker, not onto this ring, which is reset on respawn. */
	w->state = p->stopping ? WORKER_STOPPING : WORKER_STARTING;
	uint32_t lost = w->n_outstanding;
	w->n_outstanding = 0;
	bool suspect = w->killed_stuck || crash_signal(term_signal);
	if (!p->stopping) {
		for (uint32_t i = 0; i < lost; i++)
			p->sink.item_lost(p->sink.sched, w->outstanding[i], suspect, w->last_exit);
	}
	ring_reset(&w->cmd);
	ring_reset(&w->done);
	pool_drain_eventfd(w->cmd_efd);
	pool_drain_eventfd(w->done_efd);
	bool asked = w->exit_sent;
	w->exit_sent = false;
	if (p->stopping)
		return;
	if (w->index >= p->n) { /* retired by pool_resize: not respawned (worker_closed) */
		log_info("worker %u (pid %d) retired: %s", w->index, w->pid, w->last_exit);
		if (lost)
			p->sink.capacity(p->sink.sched);
		return;
	}
	if (asked && !term_signal && exit_status == 0) { /* retiring, then the count grew back */
		w->quick_failures = 0;
		log_info("worker %u (pid %d) exited as asked; starting it again", w->index, w->pid);
		return;
	}

	w->restarts++;
	if (!term_signal && (exit_status == WORKER_EXIT_USAGE || exit_status == WORKER_EXIT_ARENA)) {
		w->state = WORKER_FAILED;
		log_error("worker %u (%s) %s: a fatal code, not respawning it", w->index, p->program,
			  w->last_exit);
		return; /* worker_closed checks whether any worker can run */
	}
	/* A failure to start: it ended on its own (an exit, a crash, a spawn
	 * failure) before reporting ready or before taking any item, or the
	 * watchdog found it not ready in time. A worker killed from outside
	 * (an operator, the OOM killer) is not one, ready or not: it is
	 * respawned at once, so a kill storm never leaves work waiting while
	 * workers sit in back-off. */
	bool own_end = term_signal != SIGKILL && term_signal != SIGTERM;
	bool quick = (!w->ready_this_run && (own_end || w->killed_stuck)) ||
		     (own_end && w->items_this_run == 0 && lost == 0);
	w->quick_failures = quick ? w->quick_failures + 1 : 0;
	if (quick && w->quick_failures > 1)
		log_warning("worker %u %s again right after start (%u times in a row); backing off",
			    w->index, w->last_exit, w->quick_failures);
	else if (!w->killed_stuck) /* the watchdog has said it */
		log_warning("worker %u %s; restarting it (%u item%s re-issued)", w->index,
			    w->last_exit, lost, lost == 1 ? "" : "s");
	if (lost)
		p->sink.capacity(p->sink.sched);
}

static void on_spawn_failed_timer(uv_timer_t *t)
{
	worker_closed(t->data);
}

/* Forking the worker failed with rc (-errno): it counts as failing to start. */
static void pool_spawn_failed(struct worker *w, int rc)
{
	snprintf(w->last_exit, sizeof(w->last_exit), "spawn failed: %s", strerror(-rc));
	w->ready_this_run = false;
	w->pid = 0;
	worker_ended(w, -1, 0);
	/* What follows (a respawn, back-off, giving up) waits for the loop's
	 * next turn, as after any other end: never inside the caller's spawn. */
	uv_timer_start(&w->retry_timer, on_spawn_failed_timer, 0, 0);
}

void pool_worker_exited(struct pool *p, uint32_t index, pid_t pid, int wait_status)
{
	if (!p || index >= p->n_init)
		return;
	struct worker *w = &p->workers[index];
	if (!w->proc_open || w->pid != pid)
		return; /* not its current process: nothing of it is outstanding */
	if (WIFSIGNALED(wait_status))
		worker_ended(w, 0, WTERMSIG(wait_status));
	else
		worker_ended(w, WEXITSTATUS(wait_status), 0);
	worker_closed(w);
}

void pool_workers_gone(struct pool *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->n_init; i++) {
		struct worker *w = &p->workers[i];
		if (!w->proc_open)
			continue;
		if (w->pid > 0) {
			snprintf(w->last_exit, sizeof(w->last_exit), "died with the worker zygote");
			worker_ended(w, -1, 0);
		}
		worker_closed(w);
	}
	pool_check_stopped(p);
}

/* Kills a worker the watchdog found stuck; worker_ended re-issues its
 * items as suspect and respawns it. */
static void watchdog_kill(struct worker *w, unsigned long long idle_ms)
{
	struct pool *p = w->pool;
	char what[64], item[1200] = "", where[1200] = "";
	bool starting = w->state == WORKER_STARTING;
	snprintf(what, sizeof(what), starting ? "not ready %llu.%llu s after start" :
		 "no progress for %llu.%llu s", idle_ms / 1000, idle_ms % 1000 / 100);
	snprintf(w->last_exit, sizeof(w->last_exit), "killed: %s", what);
	/* The first item it holds, and the last sample it touched, if any. */
	if (!starting && w->n_outstanding > 0)
		p->sink.describe_item(p->sink.sched, w->outstanding[0], item, sizeof(item));
	if (!starting && atomic_load_explicit(&w->beat->beats, memory_order_acquire) > 0)
		p->sink.describe_sample(p->sink.sched, atomic_load(&w->beat->pipeline),
				      atomic_load(&w->beat->sample), where, sizeof(where));
	if (starting)
		log_warning("worker %u (pid %d) %s (worker_timeout_ms = %u); killing it", w->index,
			    w->pid, what, p->cfg->worker_timeout_ms);
	else
		log_warning("worker %u (pid %d) made %s while holding %u item%s (worker_timeout_ms = "
			    "%u), the first %s%s%s; killing it, its items are re-issued", w->index,
			    w->pid, what, w->n_outstanding, w->n_outstanding == 1 ? "" : "s",
			    p->cfg->worker_timeout_ms, item, where[0] ? "; it was last on " : "", where);
	w->killed_stuck = true;
	pool_worker_kill(w, SIGKILL); /* SIGKILL also ends a stopped process */
}

/* The watchdog: a worker that holds items and whose beat has not moved
 * for worker_timeout_ms is stuck (stopped, blocked in a read, spinning);
 * so is one that has not reported ready that long after its start. */
static void on_watch_timer(uv_timer_t *t)
{
	struct pool *p = t->data;
	if (p->stopping)
		return;
	unsigned long long now = status_now_ms(), limit = p->cfg->worker_timeout_ms;
	pool_sample_busy(p, now);
	for (uint32_t i = 0; i < p->n_init; i++) {
		struct worker *w = &p->workers[i];
		if (!w->proc_open || w->pid <= 0 || w->killed_stuck)
			continue;
		if (w->state == WORKER_STARTING) {
			if (now - w->started_ms > limit)
				watchdog_kill(w, now - w->started_ms);
			continue;
		}
		if ((w->state != WORKER_RUNNING && w->state != WORKER_RETIRING) || w->n_outstanding == 0)
			continue;
		uint64_t beats = atomic_load_explicit(&w->beat->beats, memory_order_acquire);
		if (beats != w->seen_beats) {
			w->seen_beats = beats;
			w->beat_ms = now;
		} else if (now - w->beat_ms > limit) {
			watchdog_kill(w, now - w->beat_ms);
		}
	}
}

void pool_sample_busy(struct pool *p, unsigned long long now_ms)
{
	for (uint32_t i = 0; i < p->n_init; i++) {
		struct worker *w = &p->workers[i];
		uint64_t busy = atomic_load_explicit(&w->stats->busy_ns, memory_order_relaxed);
		uint64_t io = atomic_load_explicit(&w->stats->idle_io_ns, memory_order_relaxed);
		unsigned long long dt_ms = now_ms - w->seen_time_ms;
		if (w->seen_time_ms && dt_ms > 0) {
			double span = (double)dt_ms * 1e6;
			double b = (double)(busy - w->seen_busy_ns) / span;
			double o = (double)(io - w->seen_io_ns) / span;
			/* a worker's figures move when it posts an item or waits:
			 * a share may straddle two looks */
			w->busy_ratio = w->proc_open ? (b > 1.0 ? 1.0 : b) : 0.0;
			w->io_ratio = w->proc_open ? (o > 1.0 ? 1.0 : o) : 0.0;
		}
		w->seen_busy_ns = busy;
		w->seen_io_ns = io;
		w->seen_time_ms = now_ms;
	}
}

static uint64_t watch_period_ms(const struct config *cfg)
{
	uint64_t quarter = cfg->worker_timeout_ms / 4;
	return quarter < POOL_WATCH_MS ? (quarter ? quarter : 1) : POOL_WATCH_MS;
}

void pool_watch_start(struct pool *p)
{
	uv_timer_init(p->loop, &p->watch_timer);
	p->watch_timer.data = p;
	uint64_t period = watch_period_ms(p->cfg);
	uv_timer_start(&p->watch_timer, on_watch_timer, period, period);
}

void pool_worker_start(struct worker *w)
{
	int rc = pool_worker_spawn(w);
	if (rc < 0)
		pool_spawn_failed(w, rc);
}
