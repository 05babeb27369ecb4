/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpushare: the GPU's share of a client's JPEG decoding, from its data
 * wait (gpushare.h has the rule and why). Pure: the scheduler passes the
 * time and logs what changed (batch.c).
 */
#include "daemon/sched/gpushare.h"

#include "shm/layout.h"

#define RAISE_FRAC 0.01       /* a window's wait fraction above this raises the share */
#define QUIET_FRAC 0.0025     /* at most this is a window without wait */
#define HEADROOM 0.02         /* added to a raise, so the batches ahead fill again */
#define RAISE_STEP_MAX 0.1    /* the most one raise adds (gpushare.h says why) */
#define QUIET_NS 2000000000ull /* without wait this long before the share is lowered */
#define LOWER_PER_S 0.02      /* then lowered this much per second */
#define WINDOW_MIN 8u         /* RELEASEs a window holds at least ... */
#define WINDOW_NS 50000000ull /* ... and time */
#define PAUSE_MIN_NS 1000000000ull /* an interval over this and over ... */
#define PAUSE_FACTOR 8u            /* ... this many usual ones is a pause */
#define JUDGE_KEEP 0.99       /* more share helped when the time per batch is under this
			       * part of the shortest at less */
#define JUDGE_NOISE 1.01      /* less share is no worse when the time per batch is under
			       * this times that at more */
#define JUDGE_START 1.01      /* the time per batch that starts raises counts as this
			       * much of itself */
#define JUDGE_MIN 0.05        /* raises are judged only after a wait of this much */
#define JUDGE_WINDOWS 2u      /* a share raised to is measured over this many windows */
#define CEILING_NS 60000000000ull  /* a cap from a raise taken back lasts this long, */
#define CEILING_STEP 0.1           /* then rises by this, and so on */
#define STEP_MIN 0.01         /* a raise smaller than this is not made */
#define SETTLE_FACTOR 2u      /* RELEASEs not measured after a change, per batch of depth */

void gpushare_init(struct gpushare *g, enum gpushare_mode mode, double max, uint32_t depth,
		   uint64_t now_ns)
{
	*g = (struct gpushare){.mode = mode, .depth = depth ? depth : 1, .start_ns = now_ns,
			       .members = 1};
	g->client_depth = g->depth;
	if (mode == GPUSHARE_GPU)
		g->max = 1.0;
	else if (mode == GPUSHARE_AUTO)
		g->max = max > 1.0 ? 1.0 : max > 0.0 ? max : 0.0;
	g->share = mode == GPUSHARE_GPU ? 1.0 : 0.0;
	g->ceiling = g->max;
	g->settle = SETTLE_FACTOR * g->depth;
}

/* The cap on a raise now: the most, or a ceiling from a raise taken back,
 * which rises by a step every CEILING_NS until it is the most again. */
static double raise_cap(struct gpushare *g, uint64_t now_ns)
{
	while (g->ceiling < g->max && now_ns >= g->ceiling_until_ns) {
		g->ceiling += CEILING_STEP;
		g->ceiling_until_ns += CEILING_NS;
		if (g->ceiling_until_ns < now_ns)
			g->ceiling_until_ns = now_ns + CEILING_NS;
	}
	if (g->ceiling > g->max)
		g->ceiling = g->max;
	return g->ceiling;
}

static void lower_ceiling(struct gpushare *g, double to, uint64_t now_ns)
{
	if (to < raise_cap(g, now_ns))
		g->ceiling = to;
	g->ceiling_until_ns = now_ns + CEILING_NS;
}

/* A streak of raises that did not shorten the wait: back to the share
 * where it was shortest, not above the middle of that one and the next
 * for a while; when that was where the streak began, half the step below
 * is tried. */
static enum gpushare_event streak_undo(struct gpushare *g, uint64_t now_ns)
{
	double back = g->best_share, step = g->above_best - g->best_share;
	lower_ceiling(g, back + step / 2, now_ns);
	g->judged_ns = g->best_ns;
	g->share = back;
	g->streak = 0;
	if (back > 0 && back == g->streak_from) {
		g->share = back > step / 2 ? back - step / 2 : 0.0;
		g->probing = true;
		g->probe_from = back;
		g->probe_ns = g->best_ns;
	}
	g->settle = SETTLE_FACTOR * g->depth;
	return GPUSHARE_UNDONE;
}

/* A window measured: its wait fraction f over window_ns, and its time per
 * batch batch_ns (what raises are judged by: gpushare.h). */
static enum gpushare_event decide(struct gpushare *g, double f, uint64_t window_ns, double batch_ns,
				  uint64_t now_ns)
{
	g->frac = f;
	g->window_ns = window_ns;
	g->batch_ns = batch_ns;
	if (g->probing) { /* a share below one a raise was taken back from */
		g->probing = false;
		if (f > RAISE_FRAC && batch_ns > g->probe_ns * JUDGE_NOISE) { /* slower: back */
			g->judged_ns = g->probe_ns;
			g->share = g->probe_from;
			g->settle = SETTLE_FACTOR * g->depth;
			return GPUSHARE_UNDONE;
		}
		lower_ceiling(g, (g->share + g->probe_from) / 2, now_ns);
	}
	if (f <= RAISE_FRAC) {
		g->streak = 0;
		if (f > QUIET_FRAC)
			return GPUSHARE_SAME;
		g->quiet_ns += window_ns;
		if (g->quiet_ns < QUIET_NS || g->share <= 0.0)
			return GPUSHARE_SAME;
		g->share -= LOWER_PER_S * (double)window_ns / 1e9;
		if (g->share < 1e-6)
			g->share = 0.0;
		return GPUSHARE_LOWERED;
	}
	g->quiet_ns = 0;
	double next = g->share + f * (1.0 - g->share) + HEADROOM;
	if (next > g->share + RAISE_STEP_MAX)
		next = g->share + RAISE_STEP_MAX;
	double cap = raise_cap(g, now_ns);
	if (next > cap)
		next = cap;
	if (g->streak == 0) {
		/* the window that starts a streak: taken as a little slower, so
		 * noise does not make the next look clearly faster */
		g->streak_from = g->best_share = g->share;
		g->best_ns = batch_ns * JUDGE_START;
		g->streak_frac = f;
		g->above_best = -1.0;
	} else if (g->share == g->best_share) { /* measured there again */
		g->best_ns = (g->best_ns + batch_ns) / 2;
	} else if (batch_ns < JUDGE_KEEP * g->best_ns) { /* clearly faster: the best so far */
		g->best_share = g->share;
		g->best_ns = batch_ns;
		g->above_best = -1.0;
	} else if (g->above_best < 0) {
		g->above_best = g->share;
	}
	/* Judged after two raises (the first may answer a wait not yet seen
	 * whole: the batches ahead were still running out when it was
	 * measured), or once it can rise no further: a share above the best
	 * that is not clearly better is taken back. */
	bool stuck = next < g->share + STEP_MIN; /* at the cap */
	if (g->streak > 0 && (g->streak >= 2 || (stuck && cap < g->max)) && g->above_best >= 0 &&
	    g->share > g->best_share && g->streak_frac >= JUDGE_MIN)
		return streak_undo(g, now_ns);
	if (stuck)
		return GPUSHARE_SAME;
	g->streak++;
	g->share = next;
	g->settle = SETTLE_FACTOR * g->depth;
	return GPUSHARE_RAISED;
}

/* The controller's step for one RELEASE (gpushare_release, gpushare_feed). */
static enum gpushare_event step(struct gpushare *g, uint64_t wait_ns, uint64_t now_ns)
{
	uint64_t last = g->last_ns;
	g->last_ns = now_ns ? now_ns : 1;
	if (g->mode != GPUSHARE_AUTO || last == 0)
		return GPUSHARE_SAME;
	uint64_t dt = now_ns > last ? now_ns - last : 0;
	uint64_t pause = (uint64_t)PAUSE_FACTOR * g->interval_ns * g->members;
	if (dt > (pause > PAUSE_MIN_NS ? pause : PAUSE_MIN_NS))
		return GPUSHARE_SAME; /* a pause: not a wait, and not time without one */
	if (g->interval_ns == 0)
		g->interval_ns = dt;
	else if (dt >= g->interval_ns)
		g->interval_ns += (dt - g->interval_ns) / 8;
	else
		g->interval_ns -= (g->interval_ns - dt) / 8;
	if (g->settle > 0) {
		g->settle--;
		return GPUSHARE_SAME;
	}
	/* A wait is at most the time it was in: since the last RELEASE, or,
	 * for members interleaved, one member's usual step. */
	uint64_t span = g->members > 1 ? g->interval_ns * g->members : dt;
	g->win_wait_ns += (wait_ns < span ? wait_ns : span) / g->members;
	g->win_ns += dt;
	g->win_n++;
	uint32_t need = g->depth > WINDOW_MIN ? g->depth : WINDOW_MIN;
	if (g->streak > 0)
		need *= JUDGE_WINDOWS;
	if (g->win_n < need || g->win_ns < WINDOW_NS)
		return GPUSHARE_SAME;
	double f = (double)g->win_wait_ns / (double)g->win_ns;
	uint64_t window_ns = g->win_ns;
	double batch_ns = (double)g->win_ns / g->win_n;
	g->win_n = 0;
	g->win_wait_ns = g->win_ns = 0;
	return decide(g, f, window_ns, batch_ns, now_ns);
}

enum gpushare_event gpushare_release(struct gpushare *g, uint64_t wait_ns, uint64_t now_ns,
				     bool adapt)
{
	g->wait_ns += wait_ns;
	g->releases++;
	if (!adapt) {
		g->last_ns = now_ns ? now_ns : 1;
		return GPUSHARE_SAME;
	}
	return step(g, wait_ns, now_ns);
}

enum gpushare_event gpushare_feed(struct gpushare *g, uint64_t wait_ns, uint64_t now_ns)
{
	return step(g, wait_ns, now_ns);
}

void gpushare_members(struct gpushare *g, uint32_t members)
{
	if (members == 0)
		members = 1;
	if (members == g->members)
		return;
	g->members = members;
	g->depth = g->client_depth * members;
	g->settle = SETTLE_FACTOR * g->depth;
	g->interval_ns = 0;
	g->win_n = 0;
	g->win_wait_ns = g->win_ns = 0;
	g->streak = 0;
	g->probing = false;
}

uint32_t gpushare_units(double share)
{
	if (!(share > 0.0))
		return 0;
	if (share >= 1.0)
		return WORK_GPU_SHARE_ONE;
	return (uint32_t)(share * WORK_GPU_SHARE_ONE + 0.5);
}

double gpushare_wait_fraction(const struct gpushare *g, uint64_t now_ns)
{
	if (now_ns <= g->start_ns)
		return 0.0;
	double f = (double)g->wait_ns / (double)(now_ns - g->start_ns);
	return f < 1.0 ? f : 1.0;
}
