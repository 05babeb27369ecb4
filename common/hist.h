/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hist: latency histograms with fixed log-scale buckets, the same for
 * every stage of every pipeline, so that Prometheus can add them up
 * across pipelines, stages and daemons.
 *
 * Bucket i (0 <= i < HIST_FINITE) holds durations d with
 * HIST_BOUND_NS(i - 1) < d <= HIST_BOUND_NS(i), where HIST_BOUND_NS(i) =
 * 16 us * 2^i (16 us .. about 33.6 s); the last bucket holds what is
 * longer (Prometheus' le="+Inf"). Counts are kept per bucket, not
 * cumulative; the count is their sum.
 *
 * Two forms: struct hist, a plain value (merging, quantiles, tests), and
 * struct hist_atomic, the same counters as atomics for memory that
 * another thread or process reads while it is written (a worker's stats
 * block in the arena, shm/layout.h; the daemon's GPU threads). Readers
 * take a copy with hist_atomic_read: each counter is read whole, never
 * torn; the copy may be a few samples behind in some buckets, which
 * only ever grow.
 */
#ifndef LDR_COMMON_HIST_H
#define LDR_COMMON_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define HIST_FIRST_NS 16000ull /* the first bucket's upper bound: 16 us */
#define HIST_FINITE 22         /* finite bounds: 16 us * 2^0 .. 16 us * 2^21 (33.55 s) */
#define HIST_BUCKETS (HIST_FINITE + 1)
#define HIST_BOUND_NS(i) (HIST_FIRST_NS << (i))

struct hist {
	uint64_t bucket[HIST_BUCKETS];
	uint64_t sum_ns;
	uint64_t count;
};

struct hist_atomic {
	_Atomic uint64_t bucket[HIST_BUCKETS];
	_Atomic uint64_t sum_ns;
};

/* The bucket a duration falls in. */
static inline uint32_t hist_bucket(uint64_t ns)
{
	if (ns <= HIST_FIRST_NS)
		return 0;
	uint64_t q = (ns - 1) / HIST_FIRST_NS; /* >= 1 */
	uint32_t i = 64u - (uint32_t)__builtin_clzll(q);
	return i < HIST_FINITE ? i : HIST_FINITE;
}

static inline void hist_add(struct hist *h, uint64_t ns)
{
	h->bucket[hist_bucket(ns)]++;
	h->sum_ns += ns;
	h->count++;
}

/* One writer only (a worker's own block): a plain load and store of each
 * counter, no locked instruction. */
static inline void hist_atomic_add_own(struct hist_atomic *h, uint64_t ns)
{
	_Atomic uint64_t *b = &h->bucket[hist_bucket(ns)];
	atomic_store_explicit(b, atomic_load_explicit(b, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_store_explicit(&h->sum_ns, atomic_load_explicit(&h->sum_ns, memory_order_relaxed) + ns,
			      memory_order_relaxed);
}

/* Several writers (threads of the daemon). */
static inline void hist_atomic_add(struct hist_atomic *h, uint64_t ns)
{
	atomic_fetch_add_explicit(&h->bucket[hist_bucket(ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

/* Adds h's counters to *into (count included). */
void hist_atomic_read(const struct hist_atomic *h, struct hist *into);
void hist_atomic_clear(struct hist_atomic *h);

/* *into += from. */
void hist_merge(struct hist *into, const struct hist *from);

/* The q-quantile (0 <= q <= 1) in ns, estimated as Prometheus'
 * histogram_quantile does: linear within the bucket the rank falls in
 * (the first bucket from 0; the last, unbounded one answers the last
 * finite bound). 0 for an empty histogram. */
double hist_quantile_ns(const struct hist *h, double q);

#endif
