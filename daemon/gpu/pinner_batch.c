/* SPDX-License-Identifier: Apache-2.0 */
/* pinner_batch: one batch's way to the GPU, on its GPU's thread
 * (pinner.h describes the path; pinner_impl.h the shared state). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/core/stagestats.h"
#include "daemon/gpu/pinner_impl.h"

/* A batch whose device slot the client has released, but whose released
 * event has not completed yet, is retried every POLL_NS for up to
 * DEFER_MAX_NS, then queued behind a GPU-side wait on the event.
 * Why: a GPU-side wait on an event recorded by another process cost
 * about 160 us of stream time per batch on the H100 host, even for an
 * event completed long before (one client at 16 MiB: 35 GB/s with the
 * wait, 51-54 without); a host-side query of the same event is cheap. */
#define POLL_NS 20000
#define DEFER_MAX_NS 2000000

/* Runs on a CUDA thread: only queues (no CUDA call is allowed here). */
static void CUDART_CB on_stream_point(void *arg)
{
	struct msg *m = arg;
	post_in(m->owner, m);
}

/* Queues a host callback reporting `kind` with m: on pc's stream at this
 * point (stream stalls until it has run), or, with `after`, on pc's done
 * stream once `after` (just recorded on pc's stream) has completed. */
cudaError_t pinner_stream_point(struct lane *l, struct pinner_client *pc, struct msg *m,
				enum msg_kind kind, cudaEvent_t after)
{
	m->kind = kind;
	m->pc = pc;
	m->tag = pc->tag;
	m->owner = l;
	if (!after)
		return cudaLaunchHostFunc(pc->stream, on_stream_point, m);
	cudaError_t e = cudaStreamWaitEvent(pc->done, after, 0);
	return e != cudaSuccess ? e : cudaLaunchHostFunc(pc->done, on_stream_point, m);
}

void pinner_client_sync(struct pinner_client *pc)
{
	cudaStreamSynchronize(pc->stream);
	cudaStreamSynchronize(pc->done);
}

static void staging_free(struct pinner *p, struct msg *m)
{
	struct msg *r = msg_new(R_STAGING_FREE);
	r->slot = m->slot;
	r->generation = m->generation;
	post_out(p, r);
}

static void landed(struct pinner *p, struct msg *m)
{
	struct msg *r = msg_new(R_LANDED);
	r->tag = m->pc->tag;
	r->d = m->d;
	post_out(p, r);
}

/* Copy done or abandoned: the staging slot goes back (register mode) and
 * the message is finished. */
static void batch_end(struct pinner *p, struct msg *m)
{
	if (m->slot != NO_STAGING)
		staging_free(p, m);
	msg_free(m);
}

/* Enqueues H2D into device slot d from src and records ready[d] and
 * copied[d] behind it; the batch is reported (READY) once copied[d] is
 * seen complete (pinner_poll_copies). On failure the client is failed and
 * the message is the caller's again. */
static bool enqueue_copy(struct lane *l, struct msg *m, const void *src)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	char text[TEXT_MAX];
	const char *what = NULL; /* the failing call; NULL: text already says it */
	uint8_t *dst = pc->ring + (uint64_t)m->d * pc->slot_bytes;
	cudaError_t e;
	if (m->offsets) {
		e = direct_copy(pc->direct, &l->scratch, pc->stream, dst, m->offsets, m->rows, text,
				sizeof(text));
		free(m->offsets); /* the batched copy has taken its own copy of the list */
		m->offsets = NULL;
	} else {
		what = "cudaMemcpyAsync into the device ring";
		e = cudaMemcpyAsync(dst, src, m->bytes, cudaMemcpyHostToDevice, pc->stream);
		if (e == cudaSuccess && pc->decode && !pinner_decode_batch(l, m, dst, text, sizeof(text))) {
			client_fail(p, pc, text);
			pinner_client_sync(pc); /* nothing may still read the source */
			return false;
		}
	}
	if (e == cudaSuccess) {
		what = "cudaEventRecord of the ready event";
		e = cudaEventRecord(pc->ready[m->d], pc->stream);
	}
	if (e == cudaSuccess) {
		what = "cudaEventRecord of the copied event";
		e = cudaEventRecord(pc->copied[m->d], pc->stream);
	}
	if (e == cudaSuccess) {
		atomic_fetch_add(&pc->stream_depth, 1);
		m->t_issue = pinner_now_ns();
		atomic_fetch_add(&pc->queue_ns, m->t_issue - m->t_request);
		atomic_fetch_add(&pc->n_issued, 1);
		m->kind = M_COPYING;
		msgq_push(&pc->inflight, m);
		l->n_copying++;
		return true;
	}
	if (what)
		cudaerr_failed(e, text, sizeof(text), what);
	client_fail(p, pc, text);
	pinner_client_sync(pc); /* nothing may still read the source */
	return false;
}

/* pin = copy: a free pinned buffer, or -1, and the lane is then marked
 * as waiting for one. The buffers are the daemon's, shared by its lanes. */
static int pinned_take(struct lane *l)
{
	struct pinner *p = l->p;
	int k = -1;
	pthread_mutex_lock(&p->pinned_mu);
	if (p->n_pinned > 0) {
		k = p->pinned_free[--p->n_pinned];
		atomic_fetch_sub(&p->pinned_free_count, 1);
	} else {
		l->pinned_waiting = true;
	}
	pthread_mutex_unlock(&p->pinned_mu);
	return k;
}

/* Gives buffer k back, and wakes the other lanes that waited for one. */
static void pinned_put(struct lane *l, int k)
{
	struct pinner *p = l->p;
	pthread_mutex_lock(&p->pinned_mu);
	p->pinned_free[p->n_pinned++] = k;
	atomic_fetch_add(&p->pinned_free_count, 1);
	struct lane *wake[PINNER_LANES_MAX];
	int n = 0;
	l->pinned_waiting = false; /* this lane retries at once (pinner_run_copies) */
	for (int i = 0; i < PINNER_LANES_MAX; i++)
		if (p->lanes[i].pinned_waiting) {
			p->lanes[i].pinned_waiting = false;
			wake[n++] = &p->lanes[i];
		}
	pthread_mutex_unlock(&p->pinned_mu);
	for (int i = 0; i < n; i++) {
		pthread_mutex_lock(&wake[i]->mu);
		wake[i]->pinned_back = true;
		pthread_cond_signal(&wake[i]->cv);
		pthread_mutex_unlock(&wake[i]->mu);
	}
}

static struct msg *copy_wait_pop(struct lane *l)
{
	struct msg *m = l->copy_wait.head;
	l->copy_wait.head = m->next;
	if (!l->copy_wait.head)
		l->copy_wait.tail = NULL;
	return m;
}

void pinner_run_copies(struct lane *l)
{
	struct pinner *p = l->p;
	while (l->copy_wait.head) {
		struct msg *m = l->copy_wait.head;
		struct pinner_client *pc = m->pc;
		if (pc->failed || pc->retiring) {
			batch_end(p, copy_wait_pop(l));
			continue;
		}
		int k = pinned_take(l);
		if (k < 0)
			return;
		copy_wait_pop(l);
		m->pinned = k;
		uint64_t t0 = pinner_now_ns();
		pthread_mutex_lock(&p->team_mu);
		team_copy(&p->team, p->pinned[k], p->arena->base + arena_slot_offset(p->arena, m->slot),
			  m->bytes);
		pthread_mutex_unlock(&p->team_mu);
		stagestats_add(pc->pipeline, PSTAGE_COPY, pinner_now_ns() - t0);
		staging_free(p, m);
		if (!enqueue_copy(l, m, p->pinned[k])) {
			pinned_put(l, k);
			msg_free(m);
		}
	}
}

uint64_t pinner_now_ns(void)
{
	return clock_mono_ns();
}

/* Starts batch m once its device slot is free on the GPU: at once when
 * released[d] has completed; else, with gpu_wait, behind a GPU-side wait
 * on it; else not (false: retry later). */
static bool start_copy(struct lane *l, struct msg *m, bool gpu_wait)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	char text[TEXT_MAX];
	cudaError_t e = cudaEventQuery(pc->released[m->d]);
	bool free_now = e == cudaSuccess;
	if (e == cudaErrorNotReady) {
		if (!gpu_wait)
			return false;
		e = cudaStreamWaitEvent(pc->stream, pc->released[m->d], 0);
	}
	if (cudaerr_failed(e, text, sizeof(text), "waiting for the released event")) {
		client_fail(p, pc, text);
		batch_end(p, m);
		return true;
	}
	if (p->cfg->pin == PIN_COPY && !m->offsets) {
		/* In order: behind an earlier batch's callback, this one's goes
		 * through the stream too. */
		if (free_now && pc->slot_free_pending == 0) {
			m->kind = M_SLOT_FREE;
			msgq_push(&l->copy_wait, m);
			pinner_run_copies(l);
			return true;
		}
		e = pinner_stream_point(l, pc, m, M_SLOT_FREE, NULL);
		if (cudaerr_failed(e, text, sizeof(text), "cudaLaunchHostFunc")) {
			client_fail(p, pc, text);
			batch_end(p, m);
		} else {
			pc->slot_free_pending++;
		}
		return true;
	}
	const void *src = m->offsets ? NULL : p->arena->base + arena_slot_offset(p->arena, m->slot);
	if (!enqueue_copy(l, m, src))
		batch_end(p, m);
	return true;
}

/* Starts, in order, the deferred batches of pc whose slots are free. A
 * started message is off the queue before it starts: its next field is
 * the copy path's from then on (a callback may already reuse it). */
static void run_deferred(struct lane *l, struct pinner_client *pc, uint64_t now)
{
	while (pc->deferred.head) {
		struct msg *m = pc->deferred.head;
		pc->deferred.head = m->next;
		if (!pc->deferred.head)
			pc->deferred.tail = NULL;
		if (pc->failed || pc->retiring) {
			batch_end(l->p, m);
		} else if (start_copy(l, m, now - pc->deferred_since >= DEFER_MAX_NS)) {
			pc->deferred_since = now;
		} else { /* back at the head */
			m->next = pc->deferred.head;
			pc->deferred.head = m;
			if (!pc->deferred.tail)
				pc->deferred.tail = m;
			return;
		}
	}
	l->n_deferring--;
}

void pinner_do_copy(struct lane *l, struct msg *m)
{
	struct pinner_client *pc = m->pc;
	if (pc->failed) {
		batch_end(l->p, m);
		return;
	}
	if (!pc->deferred.head) {
		if (start_copy(l, m, false))
			return;
		l->n_deferring++;
		pc->deferred_since = pinner_now_ns();
	}
	msgq_push(&pc->deferred, m);
}

/* Retries every client's deferred batches. */
uint64_t pinner_poll_deferred(struct lane *l)
{
	uint64_t now = pinner_now_ns();
	for (uint32_t i = 0; i < l->n_clients && l->n_deferring > 0; i++)
		if (l->clients[i]->deferred.head)
			run_deferred(l, l->clients[i], now);
	return POLL_NS;
}

void pinner_slot_free(struct lane *l, struct msg *m)
{
	m->pc->slot_free_pending--;
	msgq_push(&l->copy_wait, m);
	pinner_run_copies(l);
}

/* The copy of m has landed: READY may go out, and the staging slot (or
 * the pinned buffer) is free. */
static void copy_done(struct lane *l, struct msg *m)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	atomic_fetch_sub(&pc->stream_depth, 1);
	atomic_fetch_add(&pc->bytes_moved, m->bytes);
	uint64_t copy_ns = pinner_now_ns() - m->t_issue;
	atomic_fetch_add(&pc->copy_ns, copy_ns);
	/* host-observed: the copied[d] events time nothing (cudaEventDisableTiming) */
	stagestats_add(pc->pipeline, PSTAGE_H2D, copy_ns);
	atomic_fetch_add(&pc->n_copied, 1);
	landed(p, m);
	if (m->pinned >= 0) {
		pinned_put(l, m->pinned);
		msg_free(m); /* the staging slot went back after the host copy */
		pinner_run_copies(l);
		return;
	}
	batch_end(p, m);
}

/* The oldest copy of pc in flight, taken off its queue. */
static struct msg *inflight_pop(struct lane *l, struct pinner_client *pc)
{
	struct msg *m = pc->inflight.head;
	pc->inflight.head = m->next;
	if (!pc->inflight.head)
		pc->inflight.tail = NULL;
	l->n_copying--;
	return m;
}

void pinner_poll_copies(struct lane *l)
{
	for (uint32_t i = 0; i < l->n_clients && l->n_copying > 0; i++) {
		struct pinner_client *pc = l->clients[i];
		if (!pc->inflight.head)
			continue;
		while (pc->inflight.head) {
			cudaError_t e = cudaEventQuery(pc->copied[pc->inflight.head->d]);
			if (e == cudaErrorNotReady)
				break;
			char text[TEXT_MAX];
			if (cudaerr_failed(e, text, sizeof(text), "waiting for a copy to land")) {
				client_fail(l->p, pc, text);
				pinner_client_sync(pc); /* nothing may still read the source */
			}
			copy_done(l, inflight_pop(l, pc));
		}
	}
}

static void drop_deferred(struct lane *l, struct pinner_client *pc)
{
	if (!pc->deferred.head)
		return;
	struct msg *m = msgq_take_all(&pc->deferred), *next;
	for (; m; m = next) {
		next = m->next;
		batch_end(l->p, m);
	}
	l->n_deferring--;
}

static void purge_copy_wait(struct lane *l, struct pinner_client *pc)
{
	struct msg *m = msgq_take_all(&l->copy_wait), *next;
	for (; m; m = next) {
		next = m->next;
		if (m->pc == pc)
			batch_end(l->p, m);
		else
			msgq_push(&l->copy_wait, m);
	}
}

void pinner_drop_waiting(struct lane *l, struct pinner_client *pc)
{
	drop_deferred(l, pc);
	purge_copy_wait(l, pc);
	if (pc->inflight.head) /* the stream is idle: they have landed */
		pinner_client_sync(pc);
	while (pc->inflight.head)
		copy_done(l, inflight_pop(l, pc));
}
