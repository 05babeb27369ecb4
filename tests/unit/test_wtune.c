/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for daemon/pool/wtune: the worker count of `workers = auto`
 * against a simulated node. Each worker makes `per_worker` batches/s and
 * uses a core doing it; the disk gives at most `disk` batches/s; the
 * node's other processes keep `others` cores busy; the consumer takes at
 * most `want` batches/s. Delivered: the least of those (the workers'
 * share of the cores left to them included), with a few percent of noise;
 * the consumer waits for the part of its time the supply falls short of
 * what it wants. A tick a second, as the daemon's timer.
 *
 * Run with -v for every change.
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

#include "daemon/pool/wtune.h"

#define RNG_SEED 0x77756e6531323334ull
#include "rng.h"

#define S 1000000000ull

static int verbose;

struct node {
	double per_worker, disk, want, others, noise;
	uint32_t cores;
	/* results */
	uint32_t n, n_max, changes, raised, lowered, undone;
	uint32_t changes_tail;      /* changes over the second half */
	double tail_wait, tail_time; /* the consumer's over the second half */
	double rate_tail;
	uint64_t releases, wait_ns;
	char held[WTUNE_REASON_MAX];
};

/* Runs `seconds` of the node from count n0; `clients` 0 runs it with no client. */
static void run(struct node *sim, const struct wtune_limits *lim, uint32_t n0, uint32_t seconds,
		int clients)
{
	struct wtune w;
	uint64_t now = 5 * S;
	wtune_init(&w, lim, n0, now);
	sim->n = n0;
	sim->n_max = n0;
	double rel_acc = 0;
	for (uint32_t s = 0; s < seconds; s++) {
		now += S;
		double cores_left = (double)sim->cores - sim->others;
		if (cores_left < 0)
			cores_left = 0;
		double cpu_workers = sim->n < cores_left ? sim->n : cores_left;
		double supply = cpu_workers * sim->per_worker;
		if (sim->disk > 0 && supply > sim->disk)
			supply = sim->disk;
		double jitter = 1.0 + rng_real(-sim->noise, sim->noise);
		supply *= jitter;
		double rate = supply < sim->want ? supply : sim->want;
		double wait = supply < sim->want ? 1.0 - supply / sim->want : 0.0;
		rel_acc += rate;
		uint64_t r = (uint64_t)rel_acc;
		rel_acc -= (double)r;
		sim->releases += r;
		sim->wait_ns += (uint64_t)(wait * S);
		double workers_cores = rate / sim->per_worker;
		double idle = (double)sim->cores - sim->others - workers_cores;
		if (idle < 0)
			idle = 0;
		struct wtune_client c = {.id = 3, .pid = 4242, .releases = sim->releases,
					 .wait_ns = sim->wait_ns};
		struct wtune_tick t = {.now_ns = now, .workers = sim->n, .idle_cores = idle,
				       .workers_cores = workers_cores, .clients = &c,
				       .n_clients = clients ? 1 : 0};
		uint32_t to;
		enum wtune_event ev = wtune_tick(&w, &t, &to);
		if (s >= seconds / 2) {
			sim->tail_wait += wait;
			sim->tail_time += 1.0;
			sim->rate_tail += rate;
		}
		if (ev == WTUNE_SAME)
			continue;
		assert_true(to >= lim->min && to <= lim->max && to <= sim->cores);
		if (verbose)
			printf("  t=%3us %s\n", s, w.reason);
		sim->changes++;
		sim->changes_tail += s >= seconds / 2;
		sim->raised += ev == WTUNE_RAISED;
		sim->lowered += ev == WTUNE_LOWERED;
		sim->undone += ev == WTUNE_UNDONE;
		sim->n = to;
		if (to > sim->n_max)
			sim->n_max = to;
	}
	snprintf(sim->held, sizeof(sim->held), "%s", w.held);
	if (verbose)
		printf("  end: %u workers (most %u), %u changes (%u in the second half), tail wait %.1f%%, "
		       "held: %s\n", sim->n, sim->n_max, sim->changes, sim->changes_tail,
		       100 * sim->tail_wait / (sim->tail_time ? sim->tail_time : 1), sim->held);
}

static double tail_wait(const struct node *sim)
{
	return sim->tail_wait / sim->tail_time;
}

/* A consumer that wants more than one worker gives: the count rises to
 * what it needs (7 of 100 batches/s for 680), the wait falls, then stays. */
static void test_wants_more(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 680, .others = 2, .cores = 16, .noise = 0.02};
	struct wtune_limits lim = {.min = 1, .max = 16, .cores = 16, .budget_cores = 15};
	run(&sim, &lim, 1, 300, 1);
	assert_true(sim.n >= 7 && sim.n <= 9);
	assert_true(tail_wait(&sim) < 0.05);
	assert_true(sim.changes_tail <= 6); /* at most a lower and its raise back a minute */
	assert_int_equal(sim.undone, 0);
}

/* A consumer slower than the workers: from 8 the count comes down to what
 * it needs (2 for 150 batches/s), and the wait stays small. */
static void test_slow_consumer(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 150, .others = 2, .cores = 16, .noise = 0.02};
	struct wtune_limits lim = {.min = 1, .max = 16, .cores = 16, .budget_cores = 15};
	run(&sim, &lim, 8, 300, 1);
	assert_true(sim.n >= 2 && sim.n <= 3);
	assert_true(sim.lowered >= 5);
	assert_true(tail_wait(&sim) < 0.1);
	assert_true(sim.changes_tail <= 6);
}

/* The disk gives 250 batches/s: raises past 3 workers do not make the
 * consumer faster and are taken back; the count stays near 3, and the
 * tries grow rare (the hold doubles). */
static void test_disk_bound(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .disk = 250, .want = 1000, .others = 1, .cores = 16,
			   .noise = 0.02};
	struct wtune_limits lim = {.min = 1, .max = 16, .cores = 16, .budget_cores = 15};
	run(&sim, &lim, 1, 900, 1);
	assert_true(sim.undone >= 1);
	assert_true(sim.n >= 3 && sim.n <= 4);
	assert_true(sim.n_max <= 6);
	assert_true(sim.undone <= 6);      /* 15 minutes: 1, 2, 4, 8 minute holds */
	assert_true(sim.changes_tail <= 6);
}

/* The node's CPU is busy with other processes (0.3 cores idle): no raise,
 * however long the consumer waits; the status says why. */
static void test_busy_node(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 1000, .others = 13.7, .cores = 16,
			   .noise = 0.02};
	struct wtune_limits lim = {.min = 1, .max = 16, .cores = 16, .budget_cores = 15};
	run(&sim, &lim, 2, 120, 1);
	assert_int_equal(sim.raised, 0);
	assert_int_equal(sim.n, 2);
	assert_non_null(strstr(sim.held, "idle cores"));
}

/* worker_cpu_budget = 4 cores: the count stops where the workers use 4. */
static void test_budget(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 1500, .others = 1, .cores = 16, .noise = 0.02};
	struct wtune_limits lim = {.min = 1, .max = 16, .cores = 16, .budget_cores = 4};
	run(&sim, &lim, 1, 200, 1);
	assert_int_equal(sim.n_max, 4);
	assert_int_equal(sim.n, 4);
	assert_non_null(strstr(sim.held, "worker_cpu_budget"));
}

/* Two cores, one worker busy, the consumer waiting: the other core is
 * free, the second worker is added and kept (the CI machine's case). */
static void test_two_cores(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 1000, .others = 0.1, .cores = 2, .noise = 0.03};
	struct wtune_limits lim = {.min = 1, .max = 4, .cores = 2, .budget_cores = 2};
	run(&sim, &lim, 1, 60, 1);
	assert_int_equal(sim.n, 2);
	assert_int_equal(sim.undone, 0);
}

/* A consumer on the edge of a count (3.05 workers' worth, noise 5%) for
 * 20 minutes: the count changes at most a few times a minute. */
static void test_oscillation_bounded(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 305, .others = 1, .cores = 16, .noise = 0.05};
	struct wtune_limits lim = {.min = 1, .max = 16, .cores = 16, .budget_cores = 15};
	run(&sim, &lim, 1, 1200, 1);
	assert_true(sim.n >= 3 && sim.n <= 5);
	assert_true(sim.changes <= 30);
	assert_true(sim.changes_tail <= 10);
}

/* No client: down to min_workers, one a window after two quiet ones. */
static void test_no_client(void **state)
{
	(void)state;
	struct node sim = {.per_worker = 100, .want = 100, .cores = 16};
	struct wtune_limits lim = {.min = 2, .max = 16, .cores = 16, .budget_cores = 15};
	run(&sim, &lim, 6, 30, 0);
	assert_int_equal(sim.n, 2);
	assert_int_equal(sim.lowered, 4);
}

/* A client whose batches take longer than a window (so its waits come in
 * late): windows without its RELEASE do not lower the count; one silent
 * for 5 windows (paused, or stopped but attached) no longer holds it. */
static void test_silent_client(void **state)
{
	(void)state;
	struct wtune w;
	struct wtune_limits lim = {.min = 1, .max = 8, .cores = 8, .budget_cores = 8};
	wtune_init(&w, &lim, 4, S);
	struct wtune_client c = {.id = 1, .pid = 10, .releases = 1, .wait_ns = 0};
	struct wtune_tick t = {.now_ns = S, .workers = 4, .idle_cores = 0.2, .workers_cores = 4,
			       .clients = &c, .n_clients = 1};
	uint32_t to;
	int lowered_at = -1;
	for (int s = 1; s <= 30 && lowered_at < 0; s++) {
		t.now_ns += S;
		if (s <= 12 && s % 3 == 0) { /* a batch every 3 s, each waited for 2.9 s */
			c.releases++;
			c.wait_ns += 29 * S / 10;
		}
		if (wtune_tick(&w, &t, &to) == WTUNE_LOWERED)
			lowered_at = s;
	}
	assert_true(lowered_at > 12 + 2 * 5); /* only once silent for 5 windows after the last */
	assert_int_equal(to, 3);
}

/* Bounds: a count outside them (a reload) is brought in at the next tick;
 * a count set from outside is taken as it is; the log's reasons. */
static void test_bounds_and_reasons(void **state)
{
	(void)state;
	struct wtune w;
	struct wtune_limits lim = {.min = 2, .max = 6, .cores = 4, .budget_cores = 4};
	wtune_init(&w, &lim, 8, S);
	struct wtune_tick t = {.now_ns = 2 * S, .workers = 8, .idle_cores = 3, .workers_cores = 0};
	uint32_t to;
	assert_int_equal(wtune_tick(&w, &t, &to), WTUNE_BOUNDED);
	assert_int_equal(to, 4);
	assert_non_null(strstr(w.reason, "4 online cores"));
	t.workers = 1;
	t.now_ns += S;
	assert_int_equal(wtune_tick(&w, &t, &to), WTUNE_BOUNDED);
	assert_int_equal(to, 2);
	assert_non_null(strstr(w.reason, "min_workers is 2"));
	/* a client waiting 50%: the reason names it, its wait and the idle cores */
	struct wtune_client c = {.id = 3, .pid = 4242, .releases = 1, .wait_ns = 0};
	t.clients = &c;
	t.n_clients = 1;
	t.workers = 2;
	t.workers_cores = 2;
	t.idle_cores = 2;
	for (int i = 0; i < 6; i++) {
		t.now_ns += S;
		c.releases += 10;
		c.wait_ns += S / 2;
		enum wtune_event ev = wtune_tick(&w, &t, &to);
		if (ev == WTUNE_RAISED)
			break;
		assert_int_equal(ev, WTUNE_SAME);
	}
	assert_int_equal(to, 3);
	assert_string_equal(w.reason, "workers 2 -> 3: client 3 (pid 4242) waited for data 50% of "
			    "the last 2.0 s and the node has 2.0 idle cores");
	/* a reload's count is taken as it is */
	t.workers = 3;
	wtune_refused(&w, 2);
	t.now_ns += S;
	assert_int_equal(wtune_tick(&w, &t, &to), WTUNE_SAME);
	assert_int_equal(w.n, 3);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0)
			verbose = 1;
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			rng_state = strtoull(argv[++i], NULL, 0);
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wants_more),
		cmocka_unit_test(test_slow_consumer),
		cmocka_unit_test(test_disk_bound),
		cmocka_unit_test(test_busy_node),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_two_cores),
		cmocka_unit_test(test_oscillation_bounded),
		cmocka_unit_test(test_no_client),
		cmocka_unit_test(test_silent_client),
		cmocka_unit_test(test_bounds_and_reasons),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
