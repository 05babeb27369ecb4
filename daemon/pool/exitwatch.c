/* SPDX-License-Identifier: Apache-2.0 */
/* exitwatch: process exit notification on the loop (exitwatch.h). */
#include "daemon/pool/exitwatch.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"

struct exitwatch {
	struct exitwatch_set *set;
	struct exitwatch *next, *prev;
	pid_t pid;
	int pidfd; /* -1: probing with the timer */
	void (*fn)(void *arg);
	void *arg;
	union {
		uv_handle_t handle;
		uv_poll_t poll;
		uv_timer_t timer;
	} h;
};

static void on_closed(uv_handle_t *h)
{
	struct exitwatch *w = h->data;
	if (w->pidfd >= 0)
		close(w->pidfd);
	free(w);
}

static void watch_end(struct exitwatch *w, bool call)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		w->set->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	if (call)
		w->fn(w->arg);
	uv_close(&w->h.handle, on_closed);
}

static void on_pidfd(uv_poll_t *h, int status, int events)
{
	watch_end(h->data, true);
}

static void on_probe(uv_timer_t *t)
{
	struct exitwatch *w = t->data;
	if (kill(w->pid, 0) < 0 && errno == ESRCH)
		watch_end(w, true);
}

void exitwatch_add(struct exitwatch_set *set, pid_t pid, void (*fn)(void *arg), void *arg)
{
	if (set->closed)
		return;
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH)) {
		fn(arg);
		return;
	}
	struct exitwatch *w = calloc(1, sizeof(*w));
	if (!w) {
		log_error("out of memory watching pid %d; acting as if it had exited", (int)pid);
		fn(arg);
		return;
	}
	w->set = set;
	w->pid = pid;
	w->fn = fn;
	w->arg = arg;
	w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (w->pidfd >= 0) {
		uv_poll_init(set->loop, &w->h.poll, w->pidfd);
		uv_poll_start(&w->h.poll, UV_READABLE, on_pidfd);
	} else if (errno == ESRCH) {
		free(w);
		fn(arg);
		return;
	} else {
		uv_timer_init(set->loop, &w->h.timer);
		uv_timer_start(&w->h.timer, on_probe, EXITWATCH_PROBE_MS, EXITWATCH_PROBE_MS);
	}
	w->h.handle.data = w;
	w->next = set->head;
	if (set->head)
		set->head->prev = w;
	set->head = w;
}

void exitwatch_close_all(struct exitwatch_set *set)
{
	set->closed = true;
	while (set->head)
		watch_end(set->head, false);
}
