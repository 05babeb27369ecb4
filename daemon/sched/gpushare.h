/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpushare: how much of a client's JPEG decoding its GPU takes, driven by
 * the client's data wait (docs/config.md, "The split between the workers
 * and the engines").
 *
 * The workers decode what they keep up with; the GPU's engines take a
 * share of the rows only while the client waits for data, because every
 * image the engines decode costs the training beside them GPU time. Each
 * RELEASE says how long the client's call for that batch waited, no batch
 * being ready (proto_release.wait_ns); the controller turns those waits
 * into the share of the client's next work items (work_cmd.gpu_share).
 *
 * The rule, per client (decode = auto; the constants are gpushare.c's):
 *  - It starts at 0. The first RELEASE only starts the clock (its batch
 *    was the pipeline's first: a latency, not a rate), and the next
 *    2 x depth are not measured either (batches begun together at attach).
 *  - Waits and the time between RELEASEs are summed over a window of at
 *    least max(8, depth) RELEASEs and 50 ms; the window's wait fraction
 *    is f = waits / time. An interval longer than max(1 s, 8 x the usual
 *    one) is a pause of the client (evaluation, a checkpoint, a debugger):
 *    neither its time nor its wait counts, and nothing changes; a client
 *    that sends no RELEASE changes nothing either.
 *  - f above 1%: the workers fall behind the model by f of its rate. With
 *    the workers' rate C spread over the rows left to them, a share s
 *    delivers C / (1 - s), so the share that would just keep up is
 *    s + f (1 - s); the share is raised to that, plus 0.02 of headroom,
 *    but by at most 0.1 a step, and capped at the most
 *    (gpu_decode_percent). Why the step is bounded: on an H100 beside
 *    ResNet-18, the first windows after attach (the batches ahead still
 *    filling) said 59% wait and a raise to 0.61 at once, where the engines
 *    in the training's process, not the workers, became the limit, and
 *    the share never came back down to the 0.15 the workers' shortfall
 *    needed (bench/RESULTS.md, "Training-first GPU decoding"). The batches
 *    already begun (depth of them) carry the old share, and those after
 *    them start from an empty queue: the next 2 x depth RELEASEs are not
 *    measured, and a share raised to is measured over two windows, so
 *    each step is judged on its own effect.
 *  - Raises are judged by the client's rate, the time between its
 *    RELEASEs, not by its wait: a training whose host thread runs ahead
 *    of its GPU waits in next() for most of each step whenever the loader
 *    is behind at all, by a little or by much (measured on an H100: 52%
 *    of the time at share 0 and 50% at 0.2 beside ResNet-18, 56% with
 *    decode = cpu at 0.85x its synthetic speed), so the wait says whether
 *    the loader is behind, not by how much. Raises in a row that do not
 *    make the client faster (after two of them, or one stopped by a cap of
 *    the rule below: the time per batch is not under 99% of the shortest
 *    measured in the row, the window that started the row counting as 1%
 *    slower than it was; judged only after a wait of 5% or more) mean the
 *    engines, not the workers, are what the client waits for (a GPU busy
 *    training decodes slowly). The share goes back to where the client was
 *    fastest and stays below the middle of that and the next share tried
 *    for 60 s (that cap then rises by 0.1 a minute). When the fastest was
 *    where the raises began, half a step below is tried, in case that was
 *    past the best already: kept (and the cap brought down to the middle)
 *    when the client is no slower there (within 1%), else taken back.
 *    Repeated, the steps halve, and the share settles near where the
 *    engines and the workers together deliver most (within a few points of
 *    the best, in tests/unit/test_gpushare.c). A single raise is not
 *    judged: it may
 *    answer a wait not yet seen whole (the batches ahead were still
 *    running out when it was measured). A raise under 0.01 is not made.
 *  - f at most 0.25% for 2 s in a row (the measured windows): the share is
 *    lowered by 0.02 per second after that, so a model slower than the
 *    workers returns to none, and one faster keeps only its excess (the
 *    batches prepared ahead hide the slow descent until the wait shows
 *    again, which raises it back: a sawtooth of a few hundredths).
 *    Between 0.25% and 1% nothing changes.
 * decode = cpu: 0, and decode = gpu: 1, always, whatever the waits.
 *
 * Pure: no clock, no log, no allocation; the caller passes the time.
 */
#ifndef LDR_DAEMON_GPUSHARE_H
#define LDR_DAEMON_GPUSHARE_H

#include <stdbool.h>
#include <stdint.h>

enum gpushare_mode {
	GPUSHARE_CPU,  /* decode = cpu: 0 */
	GPUSHARE_GPU,  /* decode = gpu: 1 */
	GPUSHARE_AUTO, /* decode = auto: adapted, 0..max */
};

/* What a RELEASE did to the share. */
enum gpushare_event {
	GPUSHARE_SAME,
	GPUSHARE_RAISED,  /* the client waited: frac of window_ns */
	GPUSHARE_LOWERED, /* no wait for a while */
	GPUSHARE_UNDONE,  /* raises, or a share tried below them, that did not
			   * make the client faster (judged_ns a batch before,
			   * batch_ns after): taken back */
};

struct gpushare {
	enum gpushare_mode mode;
	double max;        /* the most it may be */
	uint32_t depth;    /* the batches prepared ahead: the client's, x members */
	uint32_t client_depth; /* one client's */
	uint32_t members;  /* clients whose RELEASEs feed it (the ranks of one job), >= 1 */
	double share;      /* now: of the rows the GPU could take, those it gets */
	/* all of the client's RELEASEs, for status */
	uint64_t start_ns;
	uint64_t wait_ns;
	uint64_t releases;
	/* the controller */
	uint64_t last_ns;      /* previous RELEASE, 0 before the first */
	uint64_t interval_ns;  /* usual time between RELEASEs (moving mean), 0 unknown */
	uint32_t settle;       /* RELEASEs still not measured */
	uint32_t win_n;
	uint64_t win_wait_ns, win_ns;
	uint64_t quiet_ns;     /* measured time without a wait, in a row */
	uint32_t streak;       /* raises in a row, the wait not shortened yet */
	double streak_from;    /* the share before the first */
	double streak_frac;    /* the wait fraction that started it */
	double best_share, best_ns; /* of its shares, the one with the shortest time per batch */
	double above_best;     /* the share tried after that one, < 0 none */
	bool probing;          /* a share below probe_from, tried after raises from there */
	double probe_from, probe_ns;
	double ceiling;        /* a raise goes at most to this (max when none) ... */
	uint64_t ceiling_until_ns; /* ... until then, when it rises a step */
	/* the last window measured, for messages */
	double frac;
	double batch_ns;       /* its time per batch */
	double judged_ns;      /* GPUSHARE_UNDONE: the shortest time per batch before */
	uint64_t window_ns;
};

/* A client attached at now_ns. max: decode = auto's cap (gpu_decode_percent
 * / 100), clamped to 0..1; the other modes fix their own. depth >= 1. */
void gpushare_init(struct gpushare *g, enum gpushare_mode mode, double max, uint32_t depth,
		   uint64_t now_ns);

/* A RELEASE at now_ns whose batch the client waited wait_ns for. adapt:
 * the client's GPU decodes what the workers leave it; when false the share
 * is not changed (the waits are still counted). */
enum gpushare_event gpushare_release(struct gpushare *g, uint64_t wait_ns, uint64_t now_ns,
				     bool adapt);

/* The ranks of one data-parallel job step together: each waits for the
 * slowest at every step, so one rank's rate is the job's, and a share
 * raised for one rank alone makes no rank faster (measured on four H100s
 * beside ResNet-18: each rank's own controller took its raises back, the
 * job at 0.86x of decode = cpu). Their clients therefore share one
 * controller: every member's RELEASE feeds it (gpushare_feed), its waits
 * counted as 1/members of a wait, so the window's fraction is the
 * members' mean; the window, the settling and the pause scale with the
 * members; the share it decides is every member's. gpushare_members sets
 * their number (a change restarts the measuring). */
void gpushare_members(struct gpushare *g, uint32_t members);

/* Counts a member's RELEASE into the shared controller g and adapts it,
 * as gpushare_release does with adapt, without counting it into g's own
 * totals (the member's own struct counts it: gpushare_release, adapt
 * false). */
enum gpushare_event gpushare_feed(struct gpushare *g, uint64_t wait_ns, uint64_t now_ns);

/* The share in 1/WORK_GPU_SHARE_ONE (work_cmd.gpu_share) of a share 0..1. */
uint32_t gpushare_units(double share);

/* Of the time since the client attached, the part it waited for data. */
double gpushare_wait_fraction(const struct gpushare *g, uint64_t now_ns);

#endif
