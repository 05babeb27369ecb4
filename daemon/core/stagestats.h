/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stagestats: the latency histograms of the stages the daemon itself
 * times, per pipeline table entry (enum pstage, shm/layout.h: GPU
 * decode, staging wait, pinned copy, device copy), and the rendering of
 * a pipeline's whole set, the workers' stages included, into the status.
 *
 * One table per daemon process, of ARENA_PIPELINES_MAX entries, with
 * atomic counters: the loop thread (staging wait) and the GPU threads
 * (the others) add to it, the loop reads it for a status. An entry is
 * cleared when a pipeline is made live in it (stagestats_reset), so a
 * reload's new pipeline starts from nothing. stagestats_enable(false)
 * ([daemon] stage_timing = off) makes every add a no-op: the switch that
 * measures what the measurements cost.
 */
#ifndef LDR_DAEMON_CORE_STAGESTATS_H
#define LDR_DAEMON_CORE_STAGESTATS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/hist.h"
#include "shm/layout.h"

struct status_text;

/* The stages' names in the status, the metrics' `stage` label. */
extern const char *const stagestats_names[PSTAGE_COUNT];

void stagestats_enable(bool on);
bool stagestats_on(void);

/* One batch (or sample) of table entry `pipeline` spent ns in stage st.
 * Safe from any thread. */
void stagestats_add(uint32_t pipeline, enum pstage st, uint64_t ns);

/* Entry `pipeline` holds a new pipeline: its figures start from 0. */
void stagestats_reset(uint32_t pipeline);

/* Adds entry `pipeline`'s daemon-side figures to h (by enum pstage). */
void stagestats_read(uint32_t pipeline, struct hist h[PSTAGE_COUNT]);

/* A pipeline's stages into its status item: in JSON the object "stages",
 * a member per stage with its count, sum_s, p50_ms, p99_ms and buckets
 * (counts per bucket of common/hist.h, not cumulative); in text one line
 * "    stages: read 1234 p50 0.12ms p99 3.4ms ...", stages with no count
 * left out. */
void stagestats_describe(struct status_text *t, const struct hist h[PSTAGE_COUNT]);

#endif
