/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batch: the scheduler's bottom layer (sched_impl.h): a client's stream
 * of batches (the next batch, where it sits, its READY), the staging
 * slots' freeing and lookup, the stages' clock and figures, its data wait
 * and GPU share (gpushare.h), and samples named for messages. Calls
 * nothing else of daemon/sched but gpushare.c.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/position.h"
#include "daemon/core/stagestats.h"
#include "daemon/core/status.h"
#include "daemon/sched/sched_impl.h"

void sched_slot_free(struct sched *s, struct slot *sl)
{
	if (sl->client) {
		assert(sl->client->staging > 0);
		sl->client->staging--;
	}
	sl->state = SLOT_FREE;
	sl->client = NULL;
	sl->group = NULL;
	sl->holders = 0;
	sl->pins = 0;
	sl->decode_hold = false;
	sl->decoded_early = false;
	s->free_slots++;
}

uint64_t sched_now_ns(void)
{
	return clock_mono_ns();
}

void sched_stage(struct sched_client *c, enum sched_stage st, uint64_t from, uint64_t to)
{
	uint64_t ns = to > from ? to - from : 0;
	c->stages.ns[st] += ns;
	c->stages.n[st]++;
	if (st == STAGE_ORDER) /* complete in staging until handed on */
		stagestats_add(c->pipeline, PSTAGE_STAGING, ns);
}

void sched_released(struct sched_client *c, const struct batch_pos *pos)
{
	sched_stage(c, STAGE_HELD, pos->t_ready, sched_now_ns());
	c->released_rows += pos->rows;
}

void sched_traffic_describe(const struct sched *s, const struct sched_client *c,
			    struct status_text *t)
{
	const struct source *src = &s->sources[c->pipeline];
	uint64_t row_bytes = 0;
	for (uint32_t i = 0; i < src->n_tensors; i++)
		row_bytes += src->row_bytes[i];
	status_field(t, "bytes", " bytes %" PRIu64, c->released_rows * row_bytes);
	status_field(t, "data_wait_s", " data_wait %.3fs", (double)c->share.wait_ns / 1e9);
	status_field(t, "ready_wait_s", " ready_wait %.3fs", (double)c->stages.ns[STAGE_ORDER] / 1e9);
}

int sched_stage_text(const struct sched_client *c, char *buf, size_t cap)
{
	double us[STAGE_COUNT];
	for (int i = 0; i < STAGE_COUNT; i++)
		us[i] = c->stages.n[i] ? (double)c->stages.ns[i] / (double)c->stages.n[i] / 1e3 : 0.0;
	return snprintf(buf, cap, " fill_us %.1f order_us %.1f gpu_us %.1f held_us %.1f",
			us[STAGE_FILL], us[STAGE_ORDER], us[STAGE_GPU], us[STAGE_HELD]);
}

void sched_stage_describe(const struct sched_client *c, struct status_text *t)
{
	static const char *const keys[STAGE_COUNT] = {
		[STAGE_FILL] = "fill_us", [STAGE_ORDER] = "order_us", [STAGE_GPU] = "gpu_us",
		[STAGE_HELD] = "held_us",
	};
	static const char *const fmts[STAGE_COUNT] = {
		[STAGE_FILL] = " fill_us %.1f", [STAGE_ORDER] = " order_us %.1f",
		[STAGE_GPU] = " gpu_us %.1f", [STAGE_HELD] = " held_us %.1f",
	};
	for (int i = 0; i < STAGE_COUNT; i++) {
		double us = c->stages.n[i] ? (double)c->stages.ns[i] / (double)c->stages.n[i] / 1e3 : 0.0;
		status_field_(t, keys[i], STATUS_F64, fmts[i], us);
	}
}

struct batch_pos sched_batch_peek(const struct sched_client *c)
{
	struct batch_pos pos = {.seq = c->next_seq, .epoch = c->epoch, .g = c->g,
				.batch = c->next_batch};
	uint64_t batches = c->segment_batches;
	if (c->next_batch >= c->segment_batches) {
		pos.epoch++;
		pos.g = 0;
		pos.batch = 0;
		batches = sampler_batches(&c->sampler, 0);
	}
	pos.first = pos.batch * c->sampler.batch_size;
	pos.rows = sampler_batch_rows(&c->sampler, pos.g, pos.batch);
	pos.last = pos.batch + 1 == batches;
	return pos;
}

struct batch_pos sched_batch_next(struct sched_client *c)
{
	struct batch_pos pos = sched_batch_peek(c);
	if (c->next_batch >= c->segment_batches) {
		c->epoch = pos.epoch;
		c->g = 0;
		c->segment_batches = sampler_batches(&c->sampler, 0);
	}
	c->next_batch = pos.batch + 1;
	c->next_seq++;
	pos.t_pick = sched_now_ns();
	c->in_flight++;
	return pos;
}

struct proto_ready sched_ready_of(const struct batch_pos *pos, uint32_t slot, uint32_t generation,
				  uint64_t slot_offset)
{
	return (struct proto_ready){
		.seq = pos->seq, .epoch = pos->epoch, .epoch_offset = pos->g, .batch = pos->batch,
		.first = pos->first, .slot_offset = slot_offset, .slot = slot, .generation = generation,
		.rows = pos->rows, .flags = pos->last ? PROTO_READY_LAST_IN_EPOCH : 0,
	};
}

/* Client c has been handed every batch of epoch POSITION_EPOCHS - 1: its
 * stream ends there, rather than wrapping (common/position.h). */
bool sched_stream_ended(const struct sched_client *c)
{
	return c->next_batch >= c->segment_batches && c->epoch + 1 >= POSITION_EPOCHS;
}

struct slot *sched_done_slot(struct sched *s, struct sched_client *c, uint64_t seq)
{
	for (uint32_t i = 0; i < s->n_slots; i++) {
		struct slot *sl = &s->slots[i];
		if (sl->client == c && sl->state == SLOT_DONE && sl->pos.seq == seq)
			return sl;
	}
	return NULL;
}

void sched_describe_split_sample(struct sched *s, uint32_t pipeline, uint32_t split,
				 uint64_t sample, char *buf, size_t cap)
{
	if (pipeline >= s->n_sources || !s->sources[pipeline].ops) { /* a blend's member (a
								       * worker's last sample) */
		const struct source *owner;
		uint32_t at;
		const struct source_member *mb = source_member_at(s->sources, s->n_sources, pipeline,
								  &owner, &at);
		char where[2200];
		if (!mb)
			snprintf(buf, cap, "pipeline %u (none such) sample %" PRIu64, pipeline, sample);
		else
			snprintf(buf, cap, "pipeline \"%s\" blend member %u sample %" PRIu64 ": %s",
				 owner->cfg->name, (uint32_t)(mb - owner->members) + 1, sample,
				 source_sample_where(&mb->src, s->arena, pipeline, split, sample, where,
						     sizeof(where)));
		return;
	}
	const struct source *src = &s->sources[pipeline];
	char where[2200];
	snprintf(buf, cap, "pipeline \"%s\" sample %" PRIu64 ": %s", src->cfg->name, sample,
		 source_sample_where(src, s->arena, pipeline, split, sample, where, sizeof(where)));
}

void sched_share_init(const struct sched *s, struct sched_client *c)
{
	const struct pipeline_cfg *cfg = s->sources[c->pipeline].cfg;
	enum gpushare_mode mode = cfg->decode == DECODE_GPU ? GPUSHARE_GPU :
				  cfg->decode == DECODE_CPU ? GPUSHARE_CPU : GPUSHARE_AUTO;
	gpushare_init(&c->share, mode, cfg->gpu_decode_percent / 100.0, c->depth, sched_now_ns());
}

/* c's own share: none while its GPU does not decode its images. */
static double client_share(const struct sched_client *c)
{
	return c->gpu_decode ? c->share.share : 0.0;
}

/* Whether clients a and b are ranks of one data-parallel job, as far as
 * the daemon can tell: the same pipeline, split and world size (> 1),
 * both decoding on their GPUs under decode = auto. Their controllers are
 * one (gpushare.h, gpushare_members). */
static bool same_job(const struct sched_client *a, const struct sched_client *b)
{
	return a->conn && b->conn && a->gpu_decode && b->gpu_decode && !a->group && !b->group &&
	       a->share.mode == GPUSHARE_AUTO && b->share.mode == GPUSHARE_AUTO &&
	       a->pipeline == b->pipeline && a->split == b->split &&
	       a->sampler.world > 1 && a->sampler.world == b->sampler.world;
}

/* The client whose controller decides c's share, the job's earliest
 * attached rank (c itself when it is in no job), and the job's ranks
 * attached now. */
static struct sched_client *share_leader(const struct sched *s, struct sched_client *c,
					 uint32_t *members)
{
	struct sched_client *lead = c;
	uint32_t n = 1;
	*members = 1;
	if (!same_job(c, c)) /* in no job: a client of world 1, or not decoding under auto */
		return c;
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *m = s->clients[k];
		if (m == c || !same_job(c, m))
			continue;
		n++;
		if (m->session < lead->session)
			lead = m;
	}
	*members = n;
	return lead;
}

void sched_share_note(const struct sched *s, struct sched_client *c, uint64_t wait_ns)
{
	double was = client_share(c);
	uint32_t members;
	struct sched_client *lead = share_leader(s, c, &members);
	enum gpushare_event ev;
	gpushare_members(&lead->share, members);
	if (lead == c) {
		ev = gpushare_release(&c->share, wait_ns, sched_now_ns(), c->gpu_decode);
	} else { /* counted as its own, decided by the job's */
		gpushare_release(&c->share, wait_ns, sched_now_ns(), false);
		ev = gpushare_feed(&lead->share, wait_ns, sched_now_ns());
		c->share.share = lead->share.share;
	}
	const struct gpushare *g = &lead->share;
	double now = client_share(c);
	if (ev == GPUSHARE_SAME)
		return;
	const char *name = s->sources[c->pipeline].cfg->name;
	double window_s = (double)g->window_ns / 1e9;
	char who[96];
	if (members > 1)
		snprintf(who, sizeof(who), "the %" PRIu32 " ranks of world %" PRIu32 " (client %" PRIu64
			 ", pid %d, and the others)", members, c->sampler.world, c->session, (int)c->pid);
	else
		snprintf(who, sizeof(who), "client %" PRIu64 " (pid %d)", c->session, (int)c->pid);
	if (ev == GPUSHARE_UNDONE && now < was)
		log_info("%s pipeline \"%s\": GPU decoding share %.2f -> %.2f, at most %.2f for a "
			 "while: more share did not make it faster (%.0f batches/s at %.2f, %.0f at "
			 "%.2f, waiting for data %.1f%% of its time): the GPU's engines, not the workers, "
			 "are what it waits for", who, name, was, now, g->ceiling, 1e9 / g->judged_ns, now,
			 1e9 / g->batch_ns, was, 100 * g->frac);
	else if (ev == GPUSHARE_UNDONE)
		log_info("%s pipeline \"%s\": GPU decoding share %.2f -> %.2f: less share made it "
			 "slower (%.0f batches/s at %.2f, %.0f at %.2f)", who, name, was, now,
			 1e9 / g->batch_ns, was, 1e9 / g->judged_ns, now);
	else if (ev == GPUSHARE_RAISED && (was == 0.0 || now >= g->max))
		log_info("%s pipeline \"%s\": GPU decoding share %.2f -> %.2f%s: it waited for data "
			 "%.1f%% of its last %.2f s, the workers fall behind it", who, name, was, now,
			 now >= g->max ? ", the most (gpu_decode_percent)" : "", 100 * g->frac, window_s);
	else if (ev == GPUSHARE_LOWERED && now == 0.0)
		log_info("%s pipeline \"%s\": GPU decoding share back to 0: it has not waited for "
			 "data for %.1f s; the workers decode all its images", who, name,
			 (double)g->quiet_ns / 1e9);
	else
		log_debug("%s: GPU decoding share %.2f -> %.2f (data wait %.1f%% of %.2f s)", who, was,
			  now, 100 * g->frac, window_s);
}

uint32_t sched_share_units(const struct sched_client *c)
{
	double share = client_share(c);
	for (uint32_t i = 0; c->group && i < c->group->size; i++) {
		const struct sched_client *m = c->group->members[i];
		if (m && client_share(m) > share)
			share = client_share(m);
	}
	return gpushare_units(share);
}

void sched_share_describe(const struct sched_client *c, struct status_text *t)
{
	status_field(t, "gpu_share", " gpu_share %.2f", client_share(c));
	status_field(t, "wait_ms", " wait_ms %" PRIu64, c->share.wait_ns / 1000000);
	status_field(t, "wait_pct", " wait_pct %.1f",
		     100 * gpushare_wait_fraction(&c->share, sched_now_ns()));
}

int sched_share_text(const struct sched_client *c, char *buf, size_t cap)
{
	return snprintf(buf, cap, " gpu_share %.2f wait_ms %" PRIu64 " wait_pct %.1f", client_share(c),
			c->share.wait_ns / 1000000, 100 * gpushare_wait_fraction(&c->share, sched_now_ns()));
}
