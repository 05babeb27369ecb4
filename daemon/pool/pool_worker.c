/* SPDX-License-Identifier: Apache-2.0 */
/* pool_worker: one worker's process and rings (pool_impl.h): forking it
 * from the zygote, signalling it, handing its completions to the sink,
 * queueing its exit; and closing every handle once no process is left.
 * The bottom of daemon/pool/'s own files: it calls none of them. */
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/pool/pool_impl.h"
#include "worker/worker.h"

void pool_drain_eventfd(int fd)
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

void pool_worker_send_exit(struct worker *w)
{
	static const struct work_cmd exit_cmd = {.op = WORK_EXIT};
	if (w->exit_sent || !ring_push(&w->cmd, &exit_cmd))
		return;
	w->exit_sent = true;
	uint64_t one = 1;
	ssize_t wr = write(w->cmd_efd, &one, sizeof(one));
	(void)wr; /* an eventfd write only fails when the counter would overflow */
}

void pool_worker_drain(struct worker *w)
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
				p->sink.workers_unable(p->sink.sched, NULL);
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
		p->sink.item_done(p->sink.sched, &d);
	}
	if (!p->ready_sent && !p->stopping) {
		for (uint32_t i = 0; i < p->n; i++)
			if (p->workers[i].state != WORKER_RUNNING)
				return;
		p->ready_sent = true;
		p->life.ready(p->life.ctx);
	}
}

static void on_handle_closed(uv_handle_t *h)
{
	struct pool *p = h->data;
	if (--p->handles_open == 0)
		p->life.stopped(p->life.ctx);
}

void pool_check_stopped(struct pool *p)
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

int pool_worker_spawn(struct worker *w)
{
	struct pool *p = w->pool;
	ring_reset(&w->cmd);
	ring_reset(&w->done);
	w->exit_sent = false; /* an exit queued for the previous process went with the ring */
	w->ready_this_run = false;
	w->killed_stuck = false;
	w->items_this_run = 0;
	w->started_ms = status_now_ms();
	w->proc_open = true;
	pid_t pid = 0;
	int pidfd = -1;
	int rc = zygote_fork(p->zygote, w->index, w->cmd_efd, w->done_efd, &pid, &pidfd);
	if (rc < 0)
		return rc;
	w->pid = pid;
	w->pidfd = pidfd;
	w->state = WORKER_STARTING;
	return 0;
}

void pool_worker_kill(struct worker *w, int sig)
{
	if (!w->proc_open || w->pid <= 0)
		return;
	/* The pidfd cannot name another process: the master is not the
	 * worker's parent, so a bare pid could have been reaped and reused. */
	if (w->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, w->pidfd, sig, NULL, 0);
	else
		kill(w->pid, sig);
}
