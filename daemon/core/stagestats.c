/* SPDX-License-Identifier: Apache-2.0 */
/* stagestats: the daemon's stage histograms, per pipeline (stagestats.h). */
#include "daemon/core/stagestats.h"

#include <inttypes.h>
#include <stdatomic.h>

#include "daemon/core/status.h"

const char *const stagestats_names[PSTAGE_COUNT] = {
	[PSTAGE_READ] = "read",           [PSTAGE_DECODE] = "decode",
	[PSTAGE_TRANSFORM] = "transform", [PSTAGE_GPU_DECODE] = "gpu_decode",
	[PSTAGE_STAGING] = "staging",     [PSTAGE_COPY] = "copy",
	[PSTAGE_H2D] = "h2d",
};

static struct hist_atomic table[ARENA_PIPELINES_MAX][PSTAGE_COUNT];
static atomic_bool enabled = true;

void stagestats_enable(bool on)
{
	atomic_store_explicit(&enabled, on, memory_order_relaxed);
}

bool stagestats_on(void)
{
	return atomic_load_explicit(&enabled, memory_order_relaxed);
}

void stagestats_add(uint32_t pipeline, enum pstage st, uint64_t ns)
{
	if (pipeline >= ARENA_PIPELINES_MAX || (unsigned)st >= PSTAGE_COUNT || !stagestats_on())
		return;
	hist_atomic_add(&table[pipeline][st], ns);
}

void stagestats_reset(uint32_t pipeline)
{
	if (pipeline >= ARENA_PIPELINES_MAX)
		return;
	for (int st = 0; st < PSTAGE_COUNT; st++)
		hist_atomic_clear(&table[pipeline][st]);
}

void stagestats_read(uint32_t pipeline, struct hist h[PSTAGE_COUNT])
{
	if (pipeline >= ARENA_PIPELINES_MAX)
		return;
	for (int st = PSTAGE_WORKER_COUNT; st < PSTAGE_COUNT; st++)
		hist_atomic_read(&table[pipeline][st], &h[st]);
}

void stagestats_describe(struct status_text *t, const struct hist h[PSTAGE_COUNT])
{
	status_object(t, "stages");
	status_printf(t, "    stages:");
	bool any = false;
	for (int st = 0; st < PSTAGE_COUNT; st++) {
		const struct hist *s = &h[st];
		if (s->count == 0 && !status_is_json(t))
			continue;
		any = true;
		status_object(t, stagestats_names[st]);
		status_printf(t, " %s", stagestats_names[st]);
		status_field(t, "count", " %" PRIu64, s->count);
		status_json_f64(t, "sum_s", (double)s->sum_ns / 1e9);
		status_field(t, "p50_ms", " p50 %.3gms", hist_quantile_ns(s, 0.5) / 1e6);
		status_field(t, "p99_ms", " p99 %.3gms", hist_quantile_ns(s, 0.99) / 1e6);
		status_array(t, "buckets");
		for (int i = 0; i < HIST_BUCKETS; i++)
			status_json_u64(t, NULL, s->bucket[i]);
		status_close(t);
		status_close(t);
	}
	if (!any)
		status_printf(t, " none yet");
	status_printf(t, "\n");
	status_close(t);
}
