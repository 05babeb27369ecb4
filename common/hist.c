/* SPDX-License-Identifier: Apache-2.0 */
/* hist: latency histograms with fixed log-scale buckets (hist.h). */
#include "common/hist.h"

void hist_atomic_read(const struct hist_atomic *h, struct hist *into)
{
	for (uint32_t i = 0; i < HIST_BUCKETS; i++) {
		uint64_t n = atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
		into->bucket[i] += n;
		into->count += n;
	}
	into->sum_ns += atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
}

void hist_atomic_clear(struct hist_atomic *h)
{
	for (uint32_t i = 0; i < HIST_BUCKETS; i++)
		atomic_store_explicit(&h->bucket[i], 0, memory_order_relaxed);
	atomic_store_explicit(&h->sum_ns, 0, memory_order_relaxed);
}

void hist_merge(struct hist *into, const struct hist *from)
{
	for (uint32_t i = 0; i < HIST_BUCKETS; i++)
		into->bucket[i] += from->bucket[i];
	into->sum_ns += from->sum_ns;
	into->count += from->count;
}

double hist_quantile_ns(const struct hist *h, double q)
{
	if (h->count == 0)
		return 0.0;
	if (q < 0.0)
		q = 0.0;
	if (q > 1.0)
		q = 1.0;
	double rank = q * (double)h->count;
	uint64_t below = 0;
	for (uint32_t i = 0; i < HIST_BUCKETS; i++) {
		uint64_t n = h->bucket[i];
		if (n == 0 || (double)(below + n) < rank) {
			below += n;
			continue;
		}
		if (i == HIST_FINITE) /* unbounded: its lower bound, as Prometheus */
			return (double)HIST_BOUND_NS(HIST_FINITE - 1);
		double lo = i == 0 ? 0.0 : (double)HIST_BOUND_NS(i - 1);
		double hi = (double)HIST_BOUND_NS(i);
		return lo + (hi - lo) * ((rank - (double)below) / (double)n);
	}
	return (double)HIST_BOUND_NS(HIST_FINITE - 1);
}
