/* SPDX-License-Identifier: Apache-2.0 */
/* pool: the pool's interface (pool.h): start, feed, resize, stop and
 * describe the workers. What happens when one ends is pool_supervise.c's;
 * one worker's process and rings are pool_worker.c's. */
#include "daemon/pool/pool.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/pool/pool_impl.h"
#include "daemon/core/status.h"
#include "worker/worker.h"

_Static_assert(POOL_WORKER_INFLIGHT <= RING_ENTRIES, "completions must always fit the done ring");

static void on_done_readable(uv_poll_t *h, int status, int events)
{
	struct worker *w = h->data;
	pool_drain_eventfd(w->done_efd);
	pool_worker_drain(w);
	if (w->state == WORKER_RETIRING)
		pool_worker_send_exit(w);
	w->pool->sink.capacity(w->pool->sink.sched);
}

/* Creates worker i's eventfds; its rings are the arena's. */
static int worker_open(struct pool *p, uint32_t i, char *err, size_t err_cap)
{
	struct worker *w = &p->workers[i];
	w->pool = p;
	w->index = i;
	w->pidfd = -1;
	w->cmd = arena_cmd_ring(p->arena, i);
	w->done = arena_done_ring(p->arena, i);
	w->beat = arena_worker_beat(p->arena, i);
	w->stats = arena_worker_stats(p->arena, i);
	/* Handed to the worker's process on purpose: sent to the zygote with
	 * each fork request, which keeps them in that child only. */
	w->cmd_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->done_efd = w->cmd_efd < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->done_efd < 0) {
		int rc = -errno;
		snprintf(err, err_cap, "eventfd for worker %u: %s", i, strerror(errno));
		if (w->cmd_efd >= 0)
			close(w->cmd_efd);
		w->cmd_efd = -1;
		return rc;
	}
	return 0;
}

/* Worker i's loop handles; from here on pool_stop closes them. */
static void worker_start_handles(struct pool *p, uint32_t i)
{
	struct worker *w = &p->workers[i];
	uv_timer_init(p->loop, &w->retry_timer);
	w->retry_timer.data = w;
	uv_poll_init(p->loop, &w->done_poll, w->done_efd);
	w->done_poll.data = w;
	uv_poll_start(&w->done_poll, UV_READABLE, on_done_readable);
	p->n_init = i + 1;
}

int pool_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
	       struct zygote *zygote, const char *program, const struct pool_sink *sink,
	       const struct pool_life *life, struct pool **out, char *err, size_t err_cap)
{
	uint32_t cap = arena->hdr->n_workers_max;
	if (cfg->workers < 1 || cfg->workers > cap) {
		snprintf(err, err_cap, "%u workers, but the arena has rings for %u", cfg->workers, cap);
		return -EINVAL;
	}
	struct pool *p = calloc(1, sizeof(*p) + cap * sizeof(struct worker));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = cfg;
	p->arena = arena;
	p->zygote = zygote;
	p->sink = *sink;
	p->life = *life;
	p->n = cfg->workers;
	p->cap = cap;
	snprintf(p->program, sizeof(p->program), "%s", program);
	for (uint32_t i = 0; i < p->n; i++) {
		int rc = worker_open(p, i, err, err_cap);
		if (rc < 0) {
			for (uint32_t k = 0; k < i; k++) {
				close(p->workers[k].cmd_efd);
				close(p->workers[k].done_efd);
			}
			free(p);
			return rc;
		}
	}
	uv_timer_init(loop, &p->kill_timer);
	p->kill_timer.data = p;
	pool_watch_start(p);
	for (uint32_t i = 0; i < p->n; i++)
		worker_start_handles(p, i);
	/* Handed out before the first spawn: a spawn that fails may reach
	 * life.fatal, whose caller stops the pool. */
	*out = p;
	for (uint32_t i = 0; i < p->n; i++)
		pool_worker_start(&p->workers[i]);
	return 0;
}

int pool_resize(struct pool *p, uint32_t n, char *err, size_t err_cap)
{
	if (p->stopping) {
		snprintf(err, err_cap, "the worker pool is stopping");
		return -ECANCELED;
	}
	if (n < 1 || n > p->cap) {
		snprintf(err, err_cap, "over max_workers = %u, the worker rings reserved at start "
			 "(raise max_workers and restart loaderd to go beyond)", p->cap);
		return -ERANGE;
	}
	for (uint32_t i = p->n_init; i < n; i++) {
		int rc = worker_open(p, i, err, err_cap);
		if (rc < 0)
			return rc; /* those opened before stay, unused; the count is unchanged */
		worker_start_handles(p, i);
	}
	uint32_t old = p->n;
	p->n = n;
	for (uint32_t i = n; i < old; i++) { /* shrinking: these finish their items and exit */
		struct worker *w = &p->workers[i];
		if (w->state == WORKER_BACKOFF) {
			uv_timer_stop(&w->retry_timer);
			w->state = WORKER_RETIRED;
		} else if ((w->state == WORKER_STARTING || w->state == WORKER_RUNNING) && w->proc_open &&
			   w->pid > 0) {
			w->state = WORKER_RETIRING;
			pool_worker_send_exit(w);
		} /* else: it is exiting already, and worker_closed retires it */
	}
	for (uint32_t i = old; i < n; i++) { /* growing: spawn those not running */
		struct worker *w = &p->workers[i];
		if (w->state == WORKER_RETIRING && !w->exit_sent)
			w->state = w->ready_this_run ? WORKER_RUNNING : WORKER_STARTING;
		else if (!w->proc_open && w->state != WORKER_FAILED)
			pool_worker_start(w); /* never spawned, or retired */
		/* else: exiting, and worker_closed respawns it */
	}
	log_info("workers: %u -> %u", old, n);
	p->sink.capacity(p->sink.sched);
	return 0;
}

bool pool_submit(struct pool *p, const struct work_cmd *cmd)
{
	struct worker *best = NULL;
	for (uint32_t i = 0; i < p->n; i++) {
		struct worker *w = &p->workers[i];
		if (w->state != WORKER_RUNNING || w->n_outstanding >= POOL_WORKER_INFLIGHT)
			continue;
		if (!best || w->n_outstanding < best->n_outstanding)
			best = w;
	}
	if (!best || !ring_push(&best->cmd, cmd))
		return false;
	if (best->n_outstanding == 0) { /* the watchdog's clock starts with the first item */
		best->seen_beats = atomic_load_explicit(&best->beat->beats, memory_order_acquire);
		best->beat_ms = status_now_ms();
	}
	best->outstanding[best->n_outstanding++] = cmd->item_id;
	uint64_t one = 1;
	ssize_t wr = write(best->cmd_efd, &one, sizeof(one));
	(void)wr; /* an eventfd write only fails when the counter would overflow */
	return true;
}

static void on_kill_timer(uv_timer_t *t)
{
	struct pool *p = t->data;
	for (uint32_t i = 0; i < p->n_init; i++) {
		struct worker *w = &p->workers[i];
		if (w->proc_open && w->pid > 0) {
			log_warning("worker %u (pid %d) did not exit in time; killing it", w->index, w->pid);
			pool_worker_kill(w, SIGKILL);
		}
	}
}

void pool_stop(struct pool *p, uint64_t timeout_ms)
{
	if (p->stopping)
		return;
	p->stopping = true;
	uv_timer_stop(&p->watch_timer);
	for (uint32_t i = 0; i < p->n_init; i++) {
		struct worker *w = &p->workers[i];
		uv_timer_stop(&w->retry_timer);
		if (w->proc_open && w->pid > 0) {
			/* A ring too full for the exit command is covered by the
			 * kill timer below. */
			pool_worker_send_exit(w);
			w->state = WORKER_STOPPING;
		} else {
			/* No process: a start that failed and waits only for its
			 * retry timer, stopped above. */
			w->proc_open = false;
			if (w->state != WORKER_FAILED)
				w->state = WORKER_STOPPED;
		}
	}
	uv_timer_start(&p->kill_timer, on_kill_timer, timeout_ms, 0);
	pool_check_stopped(p);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->n_init; i++) {
		close(p->workers[i].cmd_efd);
		close(p->workers[i].done_efd);
		if (p->workers[i].pidfd >= 0)
			close(p->workers[i].pidfd);
	}
	free(p);
}

void pool_describe(const struct pool *p, struct status_text *t)
{
	unsigned long long now = status_now_ms();
	/* The worker count, then those still retiring (their line says so). */
	uint32_t listed = 0;
	for (uint32_t i = 0; i < p->n_init; i++)
		listed += i < p->n || p->workers[i].state == WORKER_RETIRING;
	status_field(t, "worker_count", "workers: %u", listed);
	const struct pool_auto *a = &p->autow;
	if (a->on) {
		status_object(t, "workers_auto");
		status_printf(t, " auto");
		status_field(t, "count", " count %u", a->count);
		status_field(t, "min", " min %u", a->min);
		status_field(t, "max", " max %u", a->max);
		status_field(t, "cpu_budget", " cpu_budget %.1f", a->cpu_budget);
		if (a->changed) {
			status_field(t, "last_change_ago_s", " last_change %.1fs ago",
				     (double)(a->last_change_ago_ms / 100) / 10.0);
			status_quoted(t, "last_change", " ", a->last_change);
		}
		if (a->held[0])
			status_quoted(t, "held", " held ", a->held);
		status_close(t);
	}
	double busy = 0.0; /* the workers' mean share busy over the watchdog's last period */
	for (uint32_t i = 0; i < p->n_init; i++)
		if (i < p->n || p->workers[i].state == WORKER_RETIRING)
			busy += p->workers[i].busy_ratio;
	status_field(t, "workers_busy_ratio", " busy %.2f", listed ? busy / listed : 0.0);
	status_printf(t, "\n");
	struct status_list l;
	status_list_begin(t, &l, "workers");
	for (uint32_t i = 0; i < p->n_init; i++) { /* n <= n_init: pool_resize opens before it grows */
		const struct worker *w = &p->workers[i];
		if (i >= p->n && w->state != WORKER_RETIRING)
			continue;
		if (!status_item_begin(t, &l))
			continue;
		status_field(t, "index", "  worker %u", w->index);
		status_field(t, "pid", " pid %d", (int)w->pid);
		status_field(t, "state", " state %s", pool_state_names[w->state]);
		status_field(t, "items", " items %" PRIu64, w->items_done);
		status_field(t, "inflight", " inflight %u", w->n_outstanding);
		status_field(t, "restarts", " restarts %u", w->restarts);
		if (w->last_exit[0])
			status_field(t, "last_exit", " last_exit \"%s\"", w->last_exit);
		if (w->state == WORKER_BACKOFF)
			status_field(t, "retry_in_ms", " retry_in_ms %llu",
				     w->retry_at_ms > now ? w->retry_at_ms - now : 0ULL);
		status_field(t, "busy_ratio", " busy %.2f", w->busy_ratio);
		status_field(t, "io_wait_ratio", " io_wait %.2f", w->io_ratio);
		status_printf(t, "\n");
		status_item_end(t, &l);
	}
	status_list_end(t, &l);
}

uv_loop_t *pool_loop(const struct pool *p)
{
	return p->loop;
}

uint32_t pool_count(const struct pool *p)
{
	return p->n;
}

uint32_t pool_pids(const struct pool *p, int *pids, uint32_t *indexes, uint32_t cap)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < p->n_init && k < cap; i++) {
		const struct worker *w = &p->workers[i];
		if (!w->proc_open || w->pid <= 0)
			continue;
		pids[k] = w->pid;
		indexes[k++] = i;
	}
	return k;
}

void pool_set_auto(struct pool *p, const struct pool_auto *a)
{
	p->autow = *a;
}
