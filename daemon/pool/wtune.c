/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wtune: the worker count of `workers = auto` (wtune.h has the rule and
 * why). Pure: the caller passes the time and the measurements, applies
 * the count and logs the reason (daemon/autoworkers.c).
 */
#include "daemon/pool/wtune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define RAISE_FRAC 0.03   /* a client waiting more than this of a window asks for workers */
#define QUIET_FRAC 0.005  /* at most this is a window without wait */
#define QUIET_WINDOWS 2u  /* without wait this many windows before a lower */
#define FREE_MIN 0.5      /* idle cores the node must have for a raise */
#define KEEP_MIN 0.02     /* a raise is kept when the rate rose by at least this ... */
#define KEEP_PART (1.0 / 3.0) /* ... and this part of what the added workers could give */
#define HOLD_NS 60000000000ull /* a cap (raise taken back) or floor (lower that made a wait) */
#define HOLD_DOUBLINGS 4u /* the cap's hold doubles with each raise taken back, this often */
#define PER_WORKER_MIN 0.05 /* cores a worker is taken to use at least */
#define FRAC_TOP 0.9      /* a wait fraction counts as at most this when sizing a raise */
#define SILENT_WINDOWS 5u /* a client without a RELEASE this many windows counts as not waiting */

static uint32_t lo_bound(const struct wtune_limits *l)
{
	return l->min ? l->min : 1;
}

static uint32_t hi_bound(const struct wtune_limits *l)
{
	uint32_t hi = l->max < l->cores ? l->max : l->cores;
	return hi < lo_bound(l) ? lo_bound(l) : hi;
}

static void snapshot(struct wtune *w, const struct wtune_tick *t)
{
	w->n_seen = 0;
	for (size_t i = 0; i < t->n_clients && w->n_seen < WTUNE_CLIENTS_MAX; i++) {
		const struct wtune_client *c = &t->clients[i];
		w->seen[w->n_seen++] = (struct wtune_seen){.id = c->id, .releases = c->releases,
							    .wait_ns = c->wait_ns};
	}
}

static void window_reset(struct wtune *w, const struct wtune_tick *t)
{
	w->win_start_ns = t->now_ns;
	w->win_idle_core_ns = w->win_workers_core_ns = 0;
	w->win_cpu_ns = 0;
	w->win_cpu_known = true;
	w->clients_changed = false;
	snapshot(w, t);
}

void wtune_init(struct wtune *w, const struct wtune_limits *lim, uint32_t workers,
		uint64_t now_ns)
{
	*w = (struct wtune){.lim = *lim, .n = workers, .win_start_ns = now_ns, .last_ns = now_ns,
			    .win_cpu_known = true, .idle_cores = -1, .workers_cores = -1};
}

void wtune_set_limits(struct wtune *w, const struct wtune_limits *lim)
{
	w->lim = *lim;
}

void wtune_refused(struct wtune *w, uint32_t workers)
{
	w->n = workers;
	w->judging = false;
	w->lowered_from = 0;
}

/* The window's clients against those at its start: the most any waited
 * (f, and who), the RELEASEs per second of those measured throughout.
 * Returns how many were measured. */
static size_t measure(struct wtune *w, const struct wtune_tick *t, double window_ns)
{
	size_t measured = 0, matched = 0;
	w->frac = 0;
	w->frac_id = 0;
	w->frac_pid = 0;
	w->rate = 0;
	bool silent = false;
	for (size_t i = 0; i < t->n_clients; i++) {
		const struct wtune_client *c = &t->clients[i];
		const struct wtune_seen *s = NULL;
		for (size_t k = 0; k < w->n_seen && !s; k++)
			if (w->seen[k].id == c->id)
				s = &w->seen[k];
		if (!s) {
			w->clients_changed = true; /* came in the window */
			continue;
		}
		matched++;
		/* Its first RELEASE's wait is the pipeline's start, not a rate. */
		if (s->releases == 0 || c->releases < s->releases || c->wait_ns < s->wait_ns) {
			w->clients_changed = true;
			continue;
		}
		measured++;
		/* No RELEASE: it may be waiting still (a wait is known only once
		 * its batch comes), or paused. */
		silent |= c->releases == s->releases;
		double f = (double)(c->wait_ns - s->wait_ns) / window_ns;
		if (f > 1.0)
			f = 1.0;
		if (f > w->frac || (w->frac_id == 0 && measured == 1)) {
			w->frac = f;
			w->frac_id = c->id;
			w->frac_pid = c->pid;
		}
		w->rate += (double)(c->releases - s->releases) * 1e9 / window_ns;
	}
	if (matched < w->n_seen)
		w->clients_changed = true; /* went in the window */
	w->silent = silent ? w->silent + 1 : 0;
	return measured;
}

/* How many workers a raise adds now, or 0 with w->held saying why not. */
static uint32_t raise_by(struct wtune *w, uint64_t now_ns)
{
	uint32_t n = w->n, hi = hi_bound(&w->lim);
	double f = w->frac < FRAC_TOP ? w->frac : FRAC_TOP;
	uint32_t k = (uint32_t)ceil((double)n * f / (1.0 - f));
	uint32_t kmax = (n + 1) / 2;
	if (k > kmax)
		k = kmax;
	if (k < 1)
		k = 1;
	if (n >= hi) {
		snprintf(w->held, sizeof(w->held), "at the most: max_workers %u, %u online cores",
			 w->lim.max, w->lim.cores);
		return 0;
	}
	if (n + k > hi)
		k = hi - n;
	if (now_ns < w->ceiling_until_ns) {
		if (n >= w->ceiling) {
			snprintf(w->held, sizeof(w->held), "a raise above %u workers did not make the "
				 "clients faster; not tried again for %.0f s", w->ceiling,
				 (double)(w->ceiling_until_ns - now_ns) / 1e9);
			return 0;
		}
		if (n + k > w->ceiling)
			k = w->ceiling - n;
	}
	if (w->idle_cores < 0 || w->workers_cores < 0)
		return k; /* CPU not measured: the bounds above only */
	if (w->idle_cores < FREE_MIN) {
		snprintf(w->held, sizeof(w->held), "the node has %.1f idle cores: its other processes "
			 "need them", w->idle_cores);
		return 0;
	}
	double per = n ? w->workers_cores / n : 1.0;
	if (per < PER_WORKER_MIN)
		per = PER_WORKER_MIN;
	double by_idle = floor(w->idle_cores / per);
	if (by_idle < 1)
		by_idle = 1; /* half a core idle or more: one */
	if (k > by_idle)
		k = (uint32_t)by_idle;
	double by_budget = floor((w->lim.budget_cores - w->workers_cores) / per + 0.05);
	if (by_budget < 1) {
		snprintf(w->held, sizeof(w->held), "the workers use %.1f cores of worker_cpu_budget's "
			 "%.1f", w->workers_cores, w->lim.budget_cores);
		return 0;
	}
	if (k > by_budget)
		k = (uint32_t)by_budget;
	return k;
}

/* A raise judged on the window after its settling: kept when the rate rose
 * by enough of what the added workers could give, else taken back. */
static enum wtune_event judge(struct wtune *w, uint64_t now_ns, uint32_t *to)
{
	w->judging = false;
	if (w->clients_changed || w->rate_before <= 0 || w->n <= w->from)
		return WTUNE_SAME; /* nothing to compare: kept */
	double could = (double)(w->n - w->from) / w->from;
	double fb = w->frac_before < FRAC_TOP ? w->frac_before : FRAC_TOP;
	if (fb / (1.0 - fb) < could)
		could = fb / (1.0 - fb);
	double need = could * KEEP_PART > KEEP_MIN ? could * KEEP_PART : KEEP_MIN;
	if (w->rate >= w->rate_before * (1.0 + need)) {
		w->undo_streak = 0;
		return WTUNE_SAME;
	}
	uint32_t doublings = w->undo_streak < HOLD_DOUBLINGS ? w->undo_streak : HOLD_DOUBLINGS;
	uint64_t hold = HOLD_NS << doublings;
	w->undo_streak++;
	w->ceiling = w->from;
	w->ceiling_until_ns = now_ns + hold;
	snprintf(w->reason, sizeof(w->reason), "workers %u -> %u: the raise from %u did not make the "
		 "clients faster (%.1f batches/s before, %.1f after): the workers are not what they "
		 "wait for; at most %u workers for %llu s", w->n, w->from, w->from, w->rate_before,
		 w->rate, w->from, (unsigned long long)(hold / 1000000000ull));
	*to = w->from;
	w->n = w->from;
	w->settle = 1;
	w->quiet = 0;
	return WTUNE_UNDONE;
}

static enum wtune_event decide(struct wtune *w, size_t measured, uint64_t now_ns, uint32_t *to)
{
	double window_s = (double)w->window_ns / 1e9;
	if (w->settle > 0) { /* the batches begun before the change */
		w->settle--;
		return WTUNE_SAME;
	}
	w->held[0] = '\0'; /* said again below while it lasts */
	if (w->judging) {
		enum wtune_event ev = judge(w, now_ns, to);
		if (ev != WTUNE_SAME)
			return ev;
	}
	if (measured > 0 && w->frac > RAISE_FRAC) {
		w->quiet = 0;
		if (w->lowered_from > w->n && now_ns < w->lowered_ns + HOLD_NS) {
			/* a lower of the last minute made a client wait: not below
			 * that count for a minute, then 2, 4, ... while it repeats */
			uint32_t d = w->floor_streak < HOLD_DOUBLINGS ? w->floor_streak : HOLD_DOUBLINGS;
			w->floor = w->lowered_from;
			w->floor_until_ns = now_ns + (HOLD_NS << d);
			w->floor_streak++;
		} else if (now_ns >= w->lowered_ns + HOLD_NS) {
			w->floor_streak = 0;
		}
		w->lowered_from = 0;
		uint32_t k = raise_by(w, now_ns);
		if (k == 0)
			return WTUNE_SAME;
		char idle[64] = "";
		if (w->idle_cores >= 0)
			snprintf(idle, sizeof(idle), " and the node has %.1f idle cores", w->idle_cores);
		snprintf(w->reason, sizeof(w->reason), "workers %u -> %u: client %llu (pid %d) waited "
			 "for data %.0f%% of the last %.1f s%s", w->n, w->n + k,
			 (unsigned long long)w->frac_id, w->frac_pid, 100 * w->frac, window_s, idle);
		w->judging = true;
		w->from = w->n;
		w->rate_before = w->rate;
		w->frac_before = w->frac;
		w->n += k;
		*to = w->n;
		w->settle = 1;
		return WTUNE_RAISED;
	}
	if (measured > 0 && (w->frac > QUIET_FRAC || (w->silent && w->silent < SILENT_WINDOWS))) {
		w->quiet = 0;
		return WTUNE_SAME;
	}
	if (++w->quiet < QUIET_WINDOWS || w->n <= lo_bound(&w->lim))
		return WTUNE_SAME;
	if (now_ns < w->floor_until_ns && w->n <= w->floor)
		return WTUNE_SAME;
	snprintf(w->reason, sizeof(w->reason), "workers %u -> %u: %s in the last %.1f s", w->n,
		 w->n - 1, measured ? "no client waited for data" : "no client released a batch",
		 w->quiet * window_s);
	w->lowered_from = w->n;
	w->lowered_ns = now_ns;
	w->n--;
	*to = w->n;
	return WTUNE_LOWERED;
}

enum wtune_event wtune_tick(struct wtune *w, const struct wtune_tick *t, uint32_t *to)
{
	*to = t->workers;
	uint64_t dt = t->now_ns > w->last_ns ? t->now_ns - w->last_ns : 0;
	w->last_ns = t->now_ns;
	if (t->workers != w->n) { /* set from outside: a reload */
		w->n = t->workers;
		w->judging = false;
		w->lowered_from = 0;
		w->settle = 1;
	}
	if (t->idle_cores >= 0 && t->workers_cores >= 0) {
		w->win_idle_core_ns += t->idle_cores * (double)dt;
		w->win_workers_core_ns += t->workers_cores * (double)dt;
		w->win_cpu_ns += dt;
	} else {
		w->win_cpu_known = false;
	}
	uint32_t lo = lo_bound(&w->lim), hi = hi_bound(&w->lim);
	if (w->n < lo || w->n > hi) {
		uint32_t n = w->n < lo ? lo : hi;
		if (w->n < lo)
			snprintf(w->reason, sizeof(w->reason), "workers %u -> %u: min_workers is %u", w->n,
				 n, w->lim.min);
		else
			snprintf(w->reason, sizeof(w->reason), "workers %u -> %u: at most max_workers %u "
				 "and the %u online cores", w->n, n, w->lim.max, w->lim.cores);
		w->n = n;
		*to = n;
		w->judging = false;
		w->lowered_from = 0;
		w->settle = 1;
		w->last_event = WTUNE_BOUNDED;
		w->last_change_ns = t->now_ns;
		window_reset(w, t);
		return WTUNE_BOUNDED;
	}
	if (t->now_ns < w->win_start_ns + WTUNE_WINDOW_NS)
		return WTUNE_SAME;
	w->window_ns = t->now_ns - w->win_start_ns;
	bool cpu = w->win_cpu_known && w->win_cpu_ns > 0;
	w->idle_cores = cpu ? w->win_idle_core_ns / (double)w->win_cpu_ns : -1;
	w->workers_cores = cpu ? w->win_workers_core_ns / (double)w->win_cpu_ns : -1;
	size_t measured = measure(w, t, (double)w->window_ns);
	enum wtune_event ev = decide(w, measured, t->now_ns, to);
	window_reset(w, t);
	if (ev != WTUNE_SAME)
		w->last_change_ns = t->now_ns;
	w->last_event = ev != WTUNE_SAME ? ev : w->last_event;
	return ev;
}
