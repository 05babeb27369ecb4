/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/sched/gpushare: the GPU's share of a client's
 * JPEG decoding, driven by the client's data wait, against a simulated
 * pipeline. The workers decode C images/s (a row left to the GPU costs
 * them a tenth of a decode: its read and header checks), the GPU's engines
 * G images/s after them, the model takes D images/s, batches of B rows,
 * depth k (a batch starts when one of the k before it is released, with
 * the share of that moment). Which rows go to the GPU is the workers' own
 * rule (worker/image_rows.c: the sample's hash against the share). The
 * client's wait for each batch follows, and goes back in its RELEASE.
 *
 * Run with -v for the figures (convergence, share, wait), -vv for every
 * change, --seed N for other jitter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/hash.h"
#include "daemon/sched/gpushare.h"
#include "shm/layout.h"

#define RNG_SEED 0x9e3779b97f4a7c15ull
#include "rng.h"

#define NS 1e9
#define SEED 7

static int verbose;

struct sim {
	/* the pipeline */
	double C, G, D;       /* images/s: workers, engines, model */
	uint32_t B, k;
	double gpu_row_cost;  /* a GPU row's cost to the workers, in decodes */
	double seconds;       /* simulated */
	enum gpushare_mode mode;
	double max;
	/* a pause of the client (it stops calling next) */
	double pause_at, pause_s;
	/* the model's rate becomes D2 at switch_at (0: never) */
	double switch_at, D2;
	/* results */
	double gpu_rows, rows;           /* decoded by the GPU, all */
	double tail_wait, tail_time;     /* the second half: the client's waits, its time */
	double share_end, share_top;     /* at the end; the largest */
	double tail_min, tail_max;       /* the share's range over the second half */
	double tail_share;               /* and its mean over time */
	double settled_s;                /* last time the share was outside target +- 0.1 */
	double target;
	double before_pause, after_pause; /* the share just before the pause and at the first
					   * RELEASE after it */
	double before_switch, zero_after;  /* the share at the switch, and how long after it
					    * it was last above 0 */
	uint64_t batches;
};

/* Rows of batch i the GPU takes at share units u: the workers' rule. */
static uint32_t gpu_rows_of(uint64_t i, uint32_t B, uint32_t u)
{
	if (u >= WORK_GPU_SHARE_ONE)
		return B;
	uint32_t n = 0;
	for (uint32_t r = 0; r < B; r++)
		n += hash_sample(SEED, 0x6770756465636f64ull, 0, i * B + r) < ((uint64_t)u << 48);
	return n;
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

#define SIM_BATCHES_MAX 200000
#define K_MAX 16

static void simulate(struct sim *s)
{
	struct gpushare g;
	gpushare_init(&g, s->mode, s->max, s->k, 1);
	double start[K_MAX];    /* the batch's start, by i % k */
	uint32_t units[K_MAX];  /* its share */
	for (uint32_t j = 0; j < s->k; j++) {
		start[j] = 0.0;
		units[j] = gpushare_units(g.share);
	}
	double workers_free = 0, gpu_free = 0, client = 0;
	s->gpu_rows = s->rows = s->tail_wait = s->tail_time = s->tail_share = 0;
	s->share_top = g.share;
	s->tail_min = 1.0;
	s->tail_max = 0.0;
	s->settled_s = 0.0;
	s->before_pause = s->after_pause = -1;
	s->before_switch = s->zero_after = 0;
	bool paused = false;
	uint64_t i;
	for (i = 0; client < s->seconds && i < SIM_BATCHES_MAX; i++) {
		uint32_t j = (uint32_t)(i % s->k);
		uint32_t on_gpu = gpu_rows_of(i, s->B, units[j]);
		double work = ((s->B - on_gpu) + s->gpu_row_cost * on_gpu) / s->C;
		double filled = max2(start[j], workers_free) + work * rng_real(0.9, 1.1);
		workers_free = filled;
		double ready = max2(filled, gpu_free) + on_gpu / s->G + 0.0002;
		gpu_free = ready;
		s->gpu_rows += on_gpu;
		s->rows += s->B;
		/* The client asks when its last step is done. */
		if (!paused && s->pause_s > 0 && client >= s->pause_at) {
			paused = true;
			s->before_pause = g.share;
			client += s->pause_s;
		}
		double wait = ready > client ? ready - client : 0.0;
		double t0 = client;
		if (s->switch_at > 0 && client >= s->switch_at && s->D2 > 0) {
			s->before_switch = g.share;
			s->D = s->D2;
			s->D2 = 0;
		}
		client = max2(client, ready) + s->B / s->D * rng_real(0.97, 1.03);
		double was = g.share;
		enum gpushare_event ev = gpushare_release(&g, (uint64_t)(wait * NS),
							  (uint64_t)(client * NS) + 1, true);
		if (verbose > 1 && ev != GPUSHARE_SAME && (ev != GPUSHARE_LOWERED || g.share == 0))
			fprintf(stderr, "  %8.3f s: %s %.3f -> %.3f (wait %.2f%% of %.0f ms)\n", client,
				ev == GPUSHARE_RAISED ? "raised" : ev == GPUSHARE_UNDONE ? "undone" :
				"lowered", was, g.share, 100 * g.frac, g.window_ns / 1e6);
		if (verbose > 2 && client > 2.5 && client < 4.5)
			fprintf(stderr, "    %.3f ready %.3f wait %.1f ms share %.3f gpu rows %u\n", client,
				ready, wait * 1e3, g.share, on_gpu);
		if (paused && s->after_pause < 0)
			s->after_pause = g.share;
		if (t0 >= s->seconds / 2) {
			s->tail_wait += wait;
			s->tail_time += client - t0;
			s->tail_min = g.share < s->tail_min ? g.share : s->tail_min;
			s->tail_max = g.share > s->tail_max ? g.share : s->tail_max;
			s->tail_share += g.share * (client - t0);
		}
		if (g.share > s->share_top)
			s->share_top = g.share;
		if (g.share < s->target - 0.1 || g.share > s->target + 0.1)
			s->settled_s = client;
		if (s->switch_at > 0 && client >= s->switch_at && g.share > 0)
			s->zero_after = client - s->switch_at;
		/* Its slot is free: batch i + k starts now, with the share of now. */
		start[j] = client;
		units[j] = gpushare_units(g.share);
	}
	s->batches = i;
	s->share_end = g.share;
	if (s->tail_time > 0)
		s->tail_share /= s->tail_time;
	if (verbose)
		fprintf(stderr, "C %.0f G %.0f D %.0f B %u k %u: %.0f s, %llu batches; share end %.3f "
			"top %.3f, second half %.3f..%.3f mean %.3f; within 0.1 of %.3f from %.2f s; GPU rows "
			"%.2f%%; second half wait %.2f%%\n", s->C, s->G, s->D, s->B, s->k, s->seconds,
			(unsigned long long)s->batches, s->share_end, s->share_top, s->tail_min,
			s->tail_max, s->tail_share, s->target, s->settled_s, 100 * s->gpu_rows / s->rows,
			s->tail_time > 0 ? 100 * s->tail_wait / s->tail_time : 0.0);
}

static struct sim pipeline(double C, double G, double D)
{
	return (struct sim){.C = C, .G = G, .D = D, .B = 256, .k = 4, .gpu_row_cost = 0.05,
			    .seconds = 60, .mode = GPUSHARE_AUTO, .max = 1.0,
			    .target = D > C ? (D - C) / D : 0.0};
}

/* ResNet-50: the model is slower than the workers: no GPU decoding. */
static void test_slow_model_none(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 3950);
	simulate(&s);
	assert_true(s.share_end == 0.0);
	assert_true(s.tail_max == 0.0);
	assert_true(s.gpu_rows / s.rows < 0.02);
	assert_true(s.settled_s < 5.0);
	/* depth 2 and 16 too */
	s.k = 2;
	simulate(&s);
	assert_true(s.share_end == 0.0 && s.gpu_rows / s.rows < 0.02);
	s.k = 16;
	simulate(&s);
	assert_true(s.share_end == 0.0 && s.gpu_rows / s.rows < 0.02);
}

/* A model that becomes slower than the workers (a fast one's share, then
 * a slow one's rate): the share comes back to 0 within seconds once the
 * client no longer waits. */
static void test_returns_to_zero(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 11800);
	s.switch_at = 30;
	s.D2 = 3950;
	simulate(&s);
	if (verbose)
		fprintf(stderr, "share %.3f at the switch, 0 from %.2f s after it\n", s.before_switch,
			s.zero_after);
	assert_true(s.before_switch > 0.15);
	assert_true(s.share_end == 0.0);
	assert_true(s.zero_after < 2.5 + s.before_switch / 0.02);
}

/* ResNet-18: the model is faster than the workers: the GPU takes the
 * excess, (D - C) / D, and the client hardly waits. */
static void test_fast_model_excess(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 11800);
	simulate(&s);
	assert_true(s.share_end > s.target - 0.1 && s.share_end < s.target + 0.1);
	assert_true(s.tail_min > s.target - 0.1 && s.tail_max < s.target + 0.1);
	assert_true(s.tail_share > s.target - 0.1 && s.tail_share < s.target + 0.1);
	assert_true(s.settled_s < 10.0);
	assert_true(s.tail_wait / s.tail_time < 0.03);
	/* depth 3 and 8, smaller and larger batches (depth 2 cannot keep up:
	 * at the model's rate a batch takes the workers as long as the model
	 * takes to consume it, so the next but one is late); a model twice
	 * the workers' rate */
	static const struct { uint32_t B, k; double D; } other[] = {
		{64, 3, 11800}, {512, 8, 11800}, {256, 4, 17400},
	};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		s = pipeline(8700, 25000, other[i].D);
		s.B = other[i].B;
		s.k = other[i].k;
		simulate(&s);
		assert_true(s.tail_share > s.target - 0.1 && s.tail_share < s.target + 0.1);
		assert_true(s.tail_min > s.target - 0.15 && s.tail_max < s.target + 0.15);
		assert_true(s.tail_wait / s.tail_time < 0.03);
	}
}

/* gpu_decode_percent caps the share: at the cap, the client waits what
 * the cap leaves. */
static void test_capped(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 11800);
	s.max = 0.1;
	simulate(&s);
	assert_true(s.share_top <= 0.1 + 1e-9);
	assert_true(s.share_end > 0.09);
	s.max = 0.0;
	simulate(&s);
	assert_true(s.share_top == 0.0 && s.gpu_rows == 0);
}

/* Engines slower than the workers' excess (a GPU busy training): more
 * share makes it worse (at the top the client waits 87% of its time), and
 * the controller does not run there. The best is where C / (1 - 0.95 s) =
 * G / s; the waits of a window are too noisy for it to be found exactly
 * (with -v over seeds: mostly 15-18% of wait against 14% at the best, at
 * times stuck near 0: 26%), but never worse than no GPU decoding. */
static void test_engines_limit(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 1500, 11800);
	double best = 1500.0 / (8700 + 0.95 * 1500);
	s.target = best;
	s.seconds = 180;
	simulate(&s);
	double f = s.tail_wait / s.tail_time;
	double f_best = 1 - (1500 / best) / 11800, f_none = 1 - 8700.0 / 11800;
	if (verbose)
		fprintf(stderr, "engines the limit: best share %.3f, wait there %.1f%%, with none "
			"%.1f%%; got %.1f%%\n", best, 100 * f_best, 100 * f_none, 100 * f);
	assert_true(s.share_end < 0.3 && s.tail_max < 0.35);
	assert_true(f < f_none + 0.01);
}

/* Rows left to the GPU cost the workers as much as decoding them (the
 * reads are the limit, say): more share never shortens the wait, and the
 * share does not run to the top (mostly back to 0; at times noise leaves
 * it near where the first raise took it). */
static void test_engines_no_help(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 11800);
	s.gpu_row_cost = 1.0;
	s.seconds = 180;
	simulate(&s);
	assert_true(s.tail_max < 0.4);
	assert_true(s.gpu_rows / s.rows < 0.35);
}

/* The ranks of one data-parallel job: N ranks step together (each step
 * ends when the slowest rank's is done, where DDP's all-reduce waits),
 * each on a GPU of its own (engines G each), fed by one pool of workers (C
 * images/s for all of them, filling the ranks' batches in turn). Each
 * rank's RELEASE carries its own wait. shared: one controller for the job
 * (gpushare_members, gpushare_feed), as the scheduler runs it; else each
 * rank its own. Returns the job's images/s over the second half. */
#define RANKS_MAX 8

static double simulate_ranks(uint32_t n, double C, double G, double D, bool shared, double *share)
{
	const uint32_t B = 256, k = 4;
	const double seconds = 60;
	struct gpushare g[RANKS_MAX];
	for (uint32_t r = 0; r < n; r++)
		gpushare_init(&g[r], GPUSHARE_AUTO, 1.0, k, 1);
	if (shared)
		gpushare_members(&g[0], n);
	double start[RANKS_MAX][K_MAX] = {{0}};
	uint32_t units[RANKS_MAX][K_MAX] = {{0}};
	double gpu_free[RANKS_MAX] = {0};
	double workers_free = 0, client = 0, tail_from = -1, tail_images = 0, share_sum = 0;
	uint64_t i, tail_steps = 0;
	for (i = 0; client < seconds && i < SIM_BATCHES_MAX; i++) {
		uint32_t j = (uint32_t)(i % k);
		double ready[RANKS_MAX];
		for (uint32_t r = 0; r < n; r++) {
			uint32_t on_gpu = gpu_rows_of(i * n + r, B, units[r][j]);
			double work = ((B - on_gpu) + 0.05 * on_gpu) / C;
			workers_free = max2(start[r][j], workers_free) + work * rng_real(0.9, 1.1);
			ready[r] = max2(workers_free, gpu_free[r]) + on_gpu / G + 0.0002;
			gpu_free[r] = ready[r];
		}
		double end = 0;
		for (uint32_t r = 0; r < n; r++)
			end = max2(end, max2(client, ready[r]) + B / D * rng_real(0.97, 1.03));
		for (uint32_t r = 0; r < n; r++) {
			double wait = ready[r] > client ? ready[r] - client : 0.0;
			uint64_t at = (uint64_t)((end + 1e-5 * r) * NS) + 1;
			if (!shared) {
				gpushare_release(&g[r], (uint64_t)(wait * NS), at, true);
			} else if (r == 0) {
				gpushare_release(&g[0], (uint64_t)(wait * NS), at, true);
			} else {
				gpushare_release(&g[r], (uint64_t)(wait * NS), at, false);
				gpushare_feed(&g[0], (uint64_t)(wait * NS), at);
				g[r].share = g[0].share;
			}
		}
		if (client >= seconds / 2) {
			if (tail_from < 0)
				tail_from = client;
			tail_images += (double)B * n;
			tail_steps++;
			for (uint32_t r = 0; r < n; r++)
				share_sum += g[r].share / n;
		}
		client = end;
		for (uint32_t r = 0; r < n; r++) {
			start[r][j] = client;
			units[r][j] = gpushare_units(shared ? g[0].share : g[r].share);
		}
	}
	*share = tail_steps ? share_sum / (double)tail_steps : 0.0;
	return tail_images / (client - tail_from);
}

/* Four ranks of ResNet-18 on four H100s fed by 60 workers (the figures of
 * a 4-GPU node: the workers 28,500 images/s for all, the model 11,400 a
 * rank): the job's controller takes the excess, and the job runs faster
 * than with no GPU decoding and than with each rank's own controller. */
static void test_job_ranks_share(void **state)
{
	(void)state;
	const double C = 28500, G = 6000, D = 11400;
	const uint32_t n = 4;
	double share_job, share_own;
	double job = simulate_ranks(n, C, G, D, true, &share_job);
	double own = simulate_ranks(n, C, G, D, false, &share_own);
	double target = (n * D - C) / (n * D); /* the excess: 0.375 */
	if (verbose)
		fprintf(stderr, "4 ranks: one controller %.0f images/s (share %.3f), one a rank %.0f "
			"(%.3f); workers alone %.0f, the model %.0f, excess share %.3f\n", job,
			share_job, own, share_own, C, n * D, target);
	assert_true(job > 1.15 * C);
	assert_true(job > 1.05 * own);
	assert_true(share_job > target - 0.15 && share_job < target + 0.15);
	/* a model slower than the workers gets no share, job or not */
	job = simulate_ranks(n, C, G, 3900, true, &share_job);
	assert_true(share_job < 0.01);
}

/* A client that stops for ten minutes: no RELEASE, no change; the RELEASE
 * after the pause does not count it as a wait, nor as time without one. */
static void test_pause_changes_nothing(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 11800);
	s.pause_at = 20;
	s.pause_s = 600;
	s.seconds = 640;
	simulate(&s);
	assert_true(s.before_pause > 0.1);
	assert_true(s.after_pause == s.before_pause);
	/* and a pause spent waiting in next is not a wait either */
	struct gpushare g;
	gpushare_init(&g, GPUSHARE_AUTO, 1.0, 4, 1);
	uint64_t t = 1;
	for (int i = 0; i < 200; i++)
		gpushare_release(&g, 0, t += 20000000, true);
	assert_true(g.share == 0.0);
	t += 600 * (uint64_t)NS;
	gpushare_release(&g, 600 * (uint64_t)NS, t, true);
	assert_true(g.share == 0.0);
	for (int i = 0; i < 8; i++)
		gpushare_release(&g, 0, t += 20000000, true);
	assert_true(g.share == 0.0);
	/* a raised share stays as it was over a pause */
	for (int i = 0; i < 200 && g.share == 0; i++)
		gpushare_release(&g, 10000000, t += 20000000, true);
	double was = g.share;
	assert_true(was > 0);
	gpushare_release(&g, 0, t += 300 * (uint64_t)NS, true);
	assert_true(g.share == was);
}

/* decode = cpu: 0 and decode = gpu: 1, whatever the waits; a client whose
 * GPU does not decode (adapt false) keeps its share. */
static void test_fixed_modes(void **state)
{
	(void)state;
	struct sim s = pipeline(8700, 25000, 11800);
	s.mode = GPUSHARE_CPU;
	simulate(&s);
	assert_true(s.share_top == 0.0 && s.share_end == 0.0 && s.gpu_rows == 0);
	s.mode = GPUSHARE_GPU;
	s.max = 0.3; /* gpu_decode_percent does not apply */
	simulate(&s);
	assert_true(s.share_end == 1.0 && s.tail_min == 1.0 && s.gpu_rows == s.rows);
	s = pipeline(8700, 25000, 3950);
	s.mode = GPUSHARE_GPU;
	simulate(&s);
	assert_true(s.share_end == 1.0 && s.tail_min == 1.0);
	struct gpushare g;
	gpushare_init(&g, GPUSHARE_AUTO, 1.0, 4, 1);
	uint64_t t = 1;
	for (int i = 0; i < 100; i++)
		gpushare_release(&g, 15000000, t += 20000000, false);
	assert_true(g.share == 0.0);
	assert_int_equal(g.wait_ns, 100 * 15000000ull);
}

/* The totals status shows; the units work_cmd carries. */
static void test_totals_and_units(void **state)
{
	(void)state;
	struct gpushare g;
	gpushare_init(&g, GPUSHARE_AUTO, 0.8, 4, 1000);
	gpushare_release(&g, 100, 2000, true);
	gpushare_release(&g, 150, 3000, true);
	assert_int_equal(g.wait_ns, 250);
	assert_int_equal(g.releases, 2);
	assert_true(gpushare_wait_fraction(&g, 6000) > 0.049 && gpushare_wait_fraction(&g, 6000) < 0.051);
	assert_true(gpushare_wait_fraction(&g, 1000) == 0.0);
	assert_int_equal(gpushare_units(0.0), 0);
	assert_int_equal(gpushare_units(-1.0), 0);
	assert_int_equal(gpushare_units(0.5), WORK_GPU_SHARE_ONE / 2);
	assert_int_equal(gpushare_units(1.0), WORK_GPU_SHARE_ONE);
	assert_int_equal(gpushare_units(2.0), WORK_GPU_SHARE_ONE);
	/* the workers' rule: the candidates of a share are among those of any
	 * larger one, and about that share of the samples */
	uint32_t last = 0;
	for (uint32_t u = 0; u <= WORK_GPU_SHARE_ONE; u += WORK_GPU_SHARE_ONE / 8) {
		uint32_t n = gpu_rows_of(0, 20000, u);
		assert_true(n >= last);
		assert_true(n > 20000.0 * u / WORK_GPU_SHARE_ONE - 400 &&
			    n < 20000.0 * u / WORK_GPU_SHARE_ONE + 400);
		for (uint32_t r = 0; r < 20000 && u > 0; r++)
			if (hash_sample(SEED, 0x6770756465636f64ull, 0, r) <
			    ((uint64_t)(u - WORK_GPU_SHARE_ONE / 8) << 48))
				assert_true(u >= WORK_GPU_SHARE_ONE ||
					    hash_sample(SEED, 0x6770756465636f64ull, 0, r) <
					    ((uint64_t)u << 48));
		last = n;
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0)
			verbose = 1;
		else if (strcmp(argv[i], "-vv") == 0)
			verbose = 2;
		else if (strcmp(argv[i], "-vvv") == 0)
			verbose = 3;
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			rng_state = strtoull(argv[++i], NULL, 0);
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slow_model_none),
		cmocka_unit_test(test_returns_to_zero),
		cmocka_unit_test(test_fast_model_excess),
		cmocka_unit_test(test_capped),
		cmocka_unit_test(test_engines_limit),
		cmocka_unit_test(test_engines_no_help),
		cmocka_unit_test(test_pause_changes_nothing),
		cmocka_unit_test(test_job_ranks_share),
		cmocka_unit_test(test_fixed_modes),
		cmocka_unit_test(test_totals_and_units),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
