/* pool: spawn, feed and supervise the worker processes (pool.h). */
#include "daemon/pool.h"

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
#include <unistd.h>

#include "common/log.h"
#include "daemon/status.h"
#include "worker/worker.h"

_Static_assert(POOL_WORKER_INFLIGHT <= RING_ENTRIES, "completions must always fit the done ring");

#define POOL_BACKOFF_FIRST_MS 100ull
#define POOL_BACKOFF_MAX_MS 30000ull
/* The watchdog looks this often (or four times per worker_timeout_ms). */
#define POOL_WATCH_MS 1000ull

enum worker_state {
	WORKER_STARTING, /* spawned, not yet reported ready */
	WORKER_RUNNING,
	WORKER_BACKOFF,  /* waiting to be respawned */
	WORKER_FAILED,   /* exited with a fatal code; never respawned */
	WORKER_STOPPING, /* told to exit */
	WORKER_STOPPED,
	WORKER_RETIRING, /* beyond the worker count after pool_resize: finishes its items, exits */
	WORKER_RETIRED,  /* exited after retiring; spawned again if the count grows back */
};

static const char *const worker_state_names[] = {
	[WORKER_STARTING] = "starting", [WORKER_RUNNING] = "running",
	[WORKER_BACKOFF] = "backoff",   [WORKER_FAILED] = "failed",
	[WORKER_STOPPING] = "stopping", [WORKER_STOPPED] = "stopped",
	[WORKER_RETIRING] = "retiring", [WORKER_RETIRED] = "retired",
};

struct worker {
	struct pool *pool;
	uint32_t index;
	enum worker_state state;
	uv_process_t proc;
	bool proc_open;       /* proc is initialised and not yet closed */
	int pid;
	int cmd_efd;          /* master -> worker doorbell */
	int done_efd;         /* worker -> master doorbell */
	uv_poll_t done_poll;
	uv_timer_t retry_timer;
	struct ring cmd, done;
	const struct worker_beat *beat;
	uint64_t outstanding[POOL_WORKER_INFLIGHT];
	uint32_t n_outstanding;
	uint64_t items_done;
	uint64_t items_this_run;
	uint32_t restarts;
	uint32_t quick_failures; /* start failures in a row */
	bool ready_this_run;
	bool exit_sent;       /* WORK_EXIT is on its command ring (retiring, stopping) */
	bool killed_stuck;    /* the watchdog killed this run */
	uint64_t seen_beats;  /* the beat count last read... */
	unsigned long long beat_ms; /* ...and when it last moved (or items were given) */
	unsigned long long started_ms;
	unsigned long long retry_at_ms;
	char last_exit[96];
};

struct pool {
	uv_loop_t *loop;
	const struct config *cfg;
	struct arena *arena;
	struct pool_callbacks cb;
	char program[PATH_MAX];
	char parent_pid[24];
	bool ready_sent;
	bool pread_noted;
	bool stopping;
	bool unable;     /* no worker can run: unable_text says why */
	char unable_text[PATH_MAX + 256];
	uv_timer_t kill_timer;
	uv_timer_t watch_timer;
	unsigned handles_open;
	uint32_t n;      /* the worker count: workers [0, n) run, the rest retire */
	uint32_t n_init; /* workers whose fds and handles exist: [0, n_init) */
	uint32_t cap;    /* ring pairs in the arena: n never exceeds it */
	struct worker workers[];
};

static int worker_spawn(struct worker *w);

static void drain_eventfd(int fd)
{
	uint64_t v;
	while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
}

static void remove_outstanding(struct worker *w, uint64_t item_id)
{
	for (uint32_t i = 0; i < w->n_outstanding; i++) {
		if (w->outstanding[i] == item_id) {
			w->outstanding[i] = w->outstanding[--w->n_outstanding];
			return;
		}
	}
	log_warning("worker %u: completion for item %#" PRIx64 " it was not given; ignored",
		    w->index, item_id);
}

/* Puts WORK_EXIT on the worker's command ring, behind the items it holds:
 * it finishes those, then exits 0. */
static void worker_send_exit(struct worker *w)
{
	static const struct work_cmd exit_cmd = {.op = WORK_EXIT};
	if (w->exit_sent || !ring_push(&w->cmd, &exit_cmd))
		return;
	w->exit_sent = true;
	uint64_t one = 1;
	ssize_t wr = write(w->cmd_efd, &one, sizeof(one));
	(void)wr; /* an eventfd write only fails when the counter would overflow */
}

/* Hands every completion in the worker's ring to the scheduler. */
static void worker_drain(struct worker *w)
{
	struct pool *p = w->pool;
	struct work_done d;
	while (ring_pop(&w->done, &d)) {
		if (d.status == WORK_STATUS_READY) {
			w->ready_this_run = true;
			w->quick_failures = 0;
			if (w->state == WORKER_STARTING)
				w->state = WORKER_RUNNING;
			if (p->unable && !p->stopping) {
				p->unable = false;
				log_notice("worker %u (pid %d) is up: workers run again", w->index, w->pid);
				p->cb.able(p->cb.ctx);
			}
			if ((d.flags & WORK_FLAG_NO_URING) && !p->pread_noted) {
				log_warning("io_uring is not available to workers (blocked by a seccomp "
					    "filter or an old kernel?): they read with pread");
				p->pread_noted = true;
			}
			continue;
		}
		remove_outstanding(w, d.item_id);
		w->items_done++;
		w->items_this_run++;
		p->cb.item_done(p->cb.ctx, &d);
	}
	if (!p->ready_sent && !p->stopping) {
		for (uint32_t i = 0; i < p->n; i++)
			if (p->workers[i].state != WORKER_RUNNING)
				return;
		p->ready_sent = true;
		p->cb.ready(p->cb.ctx);
	}
}

static void on_done_readable(uv_poll_t *h, int status, int events)
{
	struct worker *w = h->data;
	drain_eventfd(w->done_efd);
	worker_drain(w);
	if (w->state == WORKER_RETIRING)
		worker_send_exit(w);
	w->pool->cb.capacity(w->pool->cb.ctx);
}

static void on_retry_timer(uv_timer_t *t)
{
	struct worker *w = t->data;
	if (w->pool->stopping || w->state != WORKER_BACKOFF)
		return;
	worker_spawn(w);
}

static void on_handle_closed(uv_handle_t *h)
{
	struct pool *p = h->data;
	if (--p->handles_open == 0)
		p->cb.stopped(p->cb.ctx);
}

/* Once no worker process is left, closes every handle; cb.stopped follows. */
static void pool_check_stopped(struct pool *p)
{
	if (!p->stopping || p->handles_open != 0)
		return;
	for (uint32_t i = 0; i < p->n_init; i++)
		if (p->workers[i].proc_open)
			return;
	uv_timer_stop(&p->kill_timer);
	p->kill_timer.data = p;
	p->handles_open++;
	uv_close((uv_handle_t *)&p->kill_timer, on_handle_closed);
	uv_timer_stop(&p->watch_timer);
	p->watch_timer.data = p;
	p->handles_open++;
	uv_close((uv_handle_t *)&p->watch_timer, on_handle_closed);
	for (uint32_t i = 0; i < p->n_init; i++) {
		struct worker *w = &p->workers[i];
		w->done_poll.data = p;
		w->retry_timer.data = p;
		p->handles_open += 2;
		uv_close((uv_handle_t *)&w->done_poll, on_handle_closed);
		uv_close((uv_handle_t *)&w->retry_timer, on_handle_closed);
	}
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
		p->cb.fatal(p->cb.ctx, p->unable_text);
		return;
	}
	log_error("%s; clients waiting for workers get this error until one starts", p->unable_text);
	p->cb.unable(p->cb.ctx, p->unable_text);
}

static void on_proc_closed(uv_handle_t *h)
{
	struct worker *w = h->data;
	struct pool *p = w->pool;
	w->proc_open = false;
	w->pid = 0;
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
		worker_spawn(w);
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

	worker_drain(w);
	/* No longer a candidate for items: those handed back below must go to
	 * a live worker, not onto this ring, which is reset on respawn. */
	w->state = p->stopping ? WORKER_STOPPING : WORKER_STARTING;
	uint32_t lost = w->n_outstanding;
	w->n_outstanding = 0;
	bool suspect = w->killed_stuck || crash_signal(term_signal);
	if (!p->stopping) {
		for (uint32_t i = 0; i < lost; i++)
			p->cb.item_lost(p->cb.ctx, w->outstanding[i], suspect, w->last_exit);
	}
	ring_reset(&w->cmd);
	ring_reset(&w->done);
	drain_eventfd(w->cmd_efd);
	drain_eventfd(w->done_efd);
	bool asked = w->exit_sent;
	w->exit_sent = false;
	if (p->stopping)
		return;
	if (w->index >= p->n) { /* retired by pool_resize: not respawned (on_proc_closed) */
		log_info("worker %u (pid %d) retired: %s", w->index, w->pid, w->last_exit);
		if (lost)
			p->cb.capacity(p->cb.ctx);
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
		return; /* on_proc_closed checks whether any worker can run */
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
		p->cb.capacity(p->cb.ctx);
}

static void on_worker_exit(uv_process_t *proc, int64_t exit_status, int term_signal)
{
	struct worker *w = proc->data;
	worker_ended(w, exit_status, term_signal);
	uv_close((uv_handle_t *)proc, on_proc_closed);
}

static int worker_spawn(struct worker *w)
{
	struct pool *p = w->pool;
	char index[16];
	snprintf(index, sizeof(index), "%u", w->index);
	char *args[] = {p->program, "--index", index, "--parent", p->parent_pid, NULL};
	uv_stdio_container_t stdio[6] = {
		{.flags = UV_IGNORE},
		{.flags = UV_INHERIT_FD, .data.fd = STDOUT_FILENO},
		{.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
		{.flags = UV_INHERIT_FD, .data.fd = p->arena->fd},
		{.flags = UV_INHERIT_FD, .data.fd = w->cmd_efd},
		{.flags = UV_INHERIT_FD, .data.fd = w->done_efd},
	};
	uv_process_options_t opts = {
		.exit_cb = on_worker_exit, .file = p->program, .args = args,
		.stdio_count = 6, .stdio = stdio,
	};
	ring_reset(&w->cmd);
	ring_reset(&w->done);
	w->exit_sent = false; /* an exit queued for the previous process went with the ring */
	w->ready_this_run = false;
	w->killed_stuck = false;
	w->items_this_run = 0;
	w->started_ms = status_now_ms();
	w->proc.data = w;
	int rc = uv_spawn(p->loop, &w->proc, &opts);
	w->proc_open = true;
	if (rc < 0) {
		/* Counts as dying on start; the handle still has to be closed. */
		snprintf(w->last_exit, sizeof(w->last_exit), "spawn failed: %s", uv_strerror(rc));
		w->ready_this_run = false;
		worker_ended(w, -1, 0);
		uv_close((uv_handle_t *)&w->proc, on_proc_closed);
		return rc;
	}
	w->pid = w->proc.pid;
	w->state = WORKER_STARTING;
	return 0;
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
		p->cb.describe_item(p->cb.ctx, w->outstanding[0], item, sizeof(item));
	if (!starting && atomic_load_explicit(&w->beat->beats, memory_order_acquire) > 0)
		p->cb.describe_sample(p->cb.ctx, atomic_load(&w->beat->pipeline),
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
	uv_process_kill(&w->proc, SIGKILL); /* SIGKILL also ends a stopped process */
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

static uint64_t watch_period_ms(const struct config *cfg)
{
	uint64_t quarter = cfg->worker_timeout_ms / 4;
	return quarter < POOL_WATCH_MS ? (quarter ? quarter : 1) : POOL_WATCH_MS;
}

/* Creates worker i's eventfds; its rings are the arena's. */
static int worker_open(struct pool *p, uint32_t i, char *err, size_t err_cap)
{
	struct worker *w = &p->workers[i];
	w->pool = p;
	w->index = i;
	w->cmd = arena_cmd_ring(p->arena, i);
	w->done = arena_done_ring(p->arena, i);
	w->beat = arena_worker_beat(p->arena, i);
	/* Inherited by the worker on purpose: uv_spawn dup2()s them to fds 4
	 * and 5, clearing CLOEXEC on the child's copies only. */
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
	       const char *worker_program_default, const struct pool_callbacks *cb,
	       struct pool **out, char *err, size_t err_cap)
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
	p->cb = *cb;
	p->n = cfg->workers;
	p->cap = cap;
	snprintf(p->program, sizeof(p->program), "%s",
		 cfg->worker_program[0] ? cfg->worker_program : worker_program_default);
	snprintf(p->parent_pid, sizeof(p->parent_pid), "%d", (int)getpid());
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
	uv_timer_init(loop, &p->watch_timer);
	p->watch_timer.data = p;
	uint64_t period = watch_period_ms(cfg);
	uv_timer_start(&p->watch_timer, on_watch_timer, period, period);
	for (uint32_t i = 0; i < p->n; i++) {
		worker_start_handles(p, i);
		worker_spawn(&p->workers[i]);
	}
	*out = p;
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
			worker_send_exit(w);
		} /* else: it is exiting already, and on_proc_closed retires it */
	}
	for (uint32_t i = old; i < n; i++) { /* growing: spawn those not running */
		struct worker *w = &p->workers[i];
		if (w->state == WORKER_RETIRING && !w->exit_sent)
			w->state = w->ready_this_run ? WORKER_RUNNING : WORKER_STARTING;
		else if (!w->proc_open && w->state != WORKER_FAILED)
			worker_spawn(w); /* never spawned, or retired */
		/* else: exiting, and on_proc_closed respawns it */
	}
	log_info("workers: %u -> %u", old, n);
	p->cb.capacity(p->cb.ctx);
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
			uv_process_kill(&w->proc, SIGKILL);
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
			worker_send_exit(w);
			w->state = WORKER_STOPPING;
		} else if (w->state != WORKER_FAILED) {
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
	}
	free(p);
}

const char *pool_unable_reason(const struct pool *p)
{
	return p && p->unable ? p->unable_text : NULL;
}

void pool_describe(const struct pool *p, struct status_text *t)
{
	unsigned long long now = status_now_ms();
	/* The worker count, then those still retiring (their line says so). */
	uint32_t listed = 0;
	for (uint32_t i = 0; i < p->n_init; i++)
		listed += i < p->n || p->workers[i].state == WORKER_RETIRING;
	status_printf(t, "workers: %u\n", listed);
	for (uint32_t i = 0; i < p->n_init; i++) { /* n <= n_init: pool_resize opens before it grows */
		const struct worker *w = &p->workers[i];
		if (i >= p->n && w->state != WORKER_RETIRING)
			continue;
		status_printf(t, "  worker %u pid %d state %s items %" PRIu64 " inflight %u restarts %u",
			      w->index, w->pid, worker_state_names[w->state], w->items_done,
			      w->n_outstanding, w->restarts);
		if (w->last_exit[0])
			status_printf(t, " last_exit \"%s\"", w->last_exit);
		if (w->state == WORKER_BACKOFF)
			status_printf(t, " retry_in_ms %llu", w->retry_at_ms > now ? w->retry_at_ms - now : 0);
		status_printf(t, "\n");
	}
}
