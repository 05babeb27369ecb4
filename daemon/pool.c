/* pool: spawn, feed and supervise the worker processes (pool.h). */
#include "daemon/pool.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
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

/* A worker that dies within this long of starting (or before it reported
 * ready) counts as failing on start and is retried with back-off. */
#define POOL_QUICK_EXIT_MS 1000ull
#define POOL_BACKOFF_FIRST_MS 100ull
#define POOL_BACKOFF_MAX_MS 30000ull

enum worker_state {
	WORKER_STARTING, /* spawned, not yet reported ready */
	WORKER_RUNNING,
	WORKER_BACKOFF,  /* waiting to be respawned */
	WORKER_FAILED,   /* exited with a fatal code; never respawned */
	WORKER_STOPPING, /* told to exit */
	WORKER_STOPPED,
};

static const char *const worker_state_names[] = {
	[WORKER_STARTING] = "starting", [WORKER_RUNNING] = "running",
	[WORKER_BACKOFF] = "backoff",   [WORKER_FAILED] = "failed",
	[WORKER_STOPPING] = "stopping", [WORKER_STOPPED] = "stopped",
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
	uint64_t outstanding[POOL_WORKER_INFLIGHT];
	uint32_t n_outstanding;
	uint64_t items_done;
	uint32_t restarts;
	uint32_t quick_failures;
	bool ready_this_run;
	unsigned long long started_ms;
	unsigned long long retry_at_ms;
	char last_exit[64];
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
	uv_timer_t kill_timer;
	unsigned handles_open;
	uint32_t n;
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

/* Hands every completion in the worker's ring to the scheduler. */
static void worker_drain(struct worker *w)
{
	struct pool *p = w->pool;
	struct work_done d;
	while (ring_pop(&w->done, &d)) {
		if (d.status == WORK_STATUS_READY) {
			w->ready_this_run = true;
			if (w->state == WORKER_STARTING)
				w->state = WORKER_RUNNING;
			if ((d.flags & WORK_FLAG_NO_URING) && !p->pread_noted) {
				log_warning("io_uring is not available to workers (blocked by a seccomp "
					    "filter or an old kernel?): they read with pread");
				p->pread_noted = true;
			}
			continue;
		}
		remove_outstanding(w, d.item_id);
		w->items_done++;
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
	for (uint32_t i = 0; i < p->n; i++)
		if (p->workers[i].proc_open)
			return;
	uv_timer_stop(&p->kill_timer);
	p->kill_timer.data = p;
	p->handles_open++;
	uv_close((uv_handle_t *)&p->kill_timer, on_handle_closed);
	for (uint32_t i = 0; i < p->n; i++) {
		struct worker *w = &p->workers[i];
		w->done_poll.data = p;
		w->retry_timer.data = p;
		p->handles_open += 2;
		uv_close((uv_handle_t *)&w->done_poll, on_handle_closed);
		uv_close((uv_handle_t *)&w->retry_timer, on_handle_closed);
	}
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
	if (w->state == WORKER_FAILED)
		return;
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
}

static bool all_failed(const struct pool *p)
{
	for (uint32_t i = 0; i < p->n; i++)
		if (p->workers[i].state != WORKER_FAILED)
			return false;
	return true;
}

/* A worker process ended (or never started): collect what it finished,
 * give back what it did not, decide whether and when to respawn. */
static void worker_ended(struct worker *w, int64_t exit_status, int term_signal)
{
	struct pool *p = w->pool;
	if (term_signal)
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
	if (!p->stopping) {
		for (uint32_t i = 0; i < lost; i++)
			p->cb.item_lost(p->cb.ctx, w->outstanding[i]);
	}
	ring_reset(&w->cmd);
	ring_reset(&w->done);
	drain_eventfd(w->cmd_efd);
	drain_eventfd(w->done_efd);
	if (p->stopping)
		return;

	unsigned long long ran_ms = status_now_ms() - w->started_ms;
	bool quick = !w->ready_this_run || ran_ms < POOL_QUICK_EXIT_MS;
	w->restarts++;
	if (!term_signal && (exit_status == WORKER_EXIT_USAGE || exit_status == WORKER_EXIT_ARENA)) {
		w->state = WORKER_FAILED;
		log_error("worker %u (%s) %s: a fatal code, not respawning it", w->index, p->program,
			  w->last_exit);
		if (all_failed(p))
			p->cb.fatal(p->cb.ctx);
		return;
	}
	w->quick_failures = quick ? w->quick_failures + 1 : 0;
	if (quick && w->quick_failures > 1)
		log_warning("worker %u %s again right after start (%u times in a row); backing off",
			    w->index, w->last_exit, w->quick_failures);
	else
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
	w->ready_this_run = false;
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

int pool_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
	       const char *worker_program_default, const struct pool_callbacks *cb,
	       struct pool **out, char *err, size_t err_cap)
{
	uint32_t n = cfg->workers;
	struct pool *p = calloc(1, sizeof(*p) + n * sizeof(struct worker));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = cfg;
	p->arena = arena;
	p->cb = *cb;
	p->n = n;
	snprintf(p->program, sizeof(p->program), "%s",
		 cfg->worker_program[0] ? cfg->worker_program : worker_program_default);
	snprintf(p->parent_pid, sizeof(p->parent_pid), "%d", (int)getpid());
	for (uint32_t i = 0; i < n; i++) {
		struct worker *w = &p->workers[i];
		w->pool = p;
		w->index = i;
		w->cmd_efd = w->done_efd = -1;
	}
	int rc = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct worker *w = &p->workers[i];
		w->cmd = arena_cmd_ring(arena, i);
		w->done = arena_done_ring(arena, i);
		/* Inherited by the worker on purpose: uv_spawn dup2()s them to
		 * fds 4 and 5, clearing CLOEXEC on the child's copies only. */
		w->cmd_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		w->done_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (w->cmd_efd < 0 || w->done_efd < 0) {
			rc = -errno;
			snprintf(err, err_cap, "eventfd for worker %u: %s", i, strerror(errno));
			goto close_fds;
		}
	}
	uv_timer_init(loop, &p->kill_timer);
	p->kill_timer.data = p;
	for (uint32_t i = 0; i < n; i++) {
		struct worker *w = &p->workers[i];
		uv_timer_init(loop, &w->retry_timer);
		w->retry_timer.data = w;
		uv_poll_init(loop, &w->done_poll, w->done_efd);
		w->done_poll.data = w;
		uv_poll_start(&w->done_poll, UV_READABLE, on_done_readable);
		worker_spawn(w);
	}
	*out = p;
	return 0;
close_fds:
	for (uint32_t i = 0; i < n; i++) {
		if (p->workers[i].cmd_efd >= 0)
			close(p->workers[i].cmd_efd);
		if (p->workers[i].done_efd >= 0)
			close(p->workers[i].done_efd);
	}
	free(p);
	return rc;
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
	best->outstanding[best->n_outstanding++] = cmd->item_id;
	uint64_t one = 1;
	ssize_t wr = write(best->cmd_efd, &one, sizeof(one));
	(void)wr; /* an eventfd write only fails when the counter would overflow */
	return true;
}

static void on_kill_timer(uv_timer_t *t)
{
	struct pool *p = t->data;
	for (uint32_t i = 0; i < p->n; i++) {
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
	struct work_cmd exit_cmd = {.op = WORK_EXIT};
	for (uint32_t i = 0; i < p->n; i++) {
		struct worker *w = &p->workers[i];
		uv_timer_stop(&w->retry_timer);
		if (w->proc_open && w->pid > 0) {
			/* A ring too full for the exit command is covered by the
			 * kill timer below. */
			ring_push(&w->cmd, &exit_cmd);
			uint64_t one = 1;
			ssize_t wr = write(w->cmd_efd, &one, sizeof(one));
			(void)wr;
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
	for (uint32_t i = 0; i < p->n; i++) {
		close(p->workers[i].cmd_efd);
		close(p->workers[i].done_efd);
	}
	free(p);
}

void pool_describe(const struct pool *p, struct status_text *t)
{
	unsigned long long now = status_now_ms();
	status_printf(t, "workers: %u\n", p->n);
	for (uint32_t i = 0; i < p->n; i++) {
		const struct worker *w = &p->workers[i];
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
