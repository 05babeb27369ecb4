/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devpath: device delivery on the loop side (sched.h, sched_impl.h): a
 * device client's ring of device slots, asked for at attach and let go
 * at detach, the batches handed to the GPU thread in order, a direct
 * client's batches, and RELEASEs of device slots. The GPU thread's
 * answers arrive in gpuanswer.c.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpu_uuid.h"
#include "common/log.h"
#include "daemon/core/stagestats.h"
#include "daemon/sched/sched_impl.h"

/* Bytes of a batch of `rows` rows: up to the end of its last tensor. */
static uint64_t batch_copy_bytes(const struct source *src, uint32_t rows)
{
	uint64_t end = 0;
	for (uint32_t i = 0; i < src->n_tensors; i++) {
		const struct proto_tensor *t = &src->tensors[i];
		uint64_t row = proto_dtype_bytes(t->dtype);
		for (uint32_t d = 1; d < t->ndim; d++)
			row *= t->shape[d];
		if (t->offset + row * rows > end)
			end = t->offset + row * rows;
	}
	return end;
}

/* A free device slot of c. One always exists when a batch is handed on:
 * in_flight counts batches up to their RELEASE and never exceeds depth. */
static uint32_t free_dev_slot(const struct sched_client *c)
{
	uint32_t d = 0;
	while (d < c->depth && c->dev[d].state != DEV_FREE)
		d++;
	assert(d < c->depth);
	return d;
}

/* Whether the batch in staging slot sl has a row the workers left to the
 * GPU (shm/layout.h, struct arena_gpu_image). */
static bool has_gpu_rows(const struct sched *s, const struct sched_client *c,
			 const struct slot *sl)
{
	const struct arena_image_params *ip = &arena_pipeline(s->arena, c->pipeline)->image;
	const uint8_t *base = s->arena->base + arena_slot_offset(s->arena, (uint32_t)(sl - s->slots));
	const struct arena_gpu_image *desc = (const void *)(base + ip->gpu_desc_offset);
	for (uint32_t r = 0; r < sl->pos.rows; r++)
		if (desc[r].route == ARENA_ROUTE_GPU)
			return true;
	return false;
}

/* Asks the GPU thread to copy the batch in staging slot sl into a free
 * device slot of client c. A client that decodes gets the JPEGs the
 * workers left to its GPU from the staging slot itself, which is kept for
 * it once copied (devpath_staging_read) until its DECODED. */
static void hand_copy(struct sched *s, struct sched_client *c, struct slot *sl)
{
	uint32_t d = free_dev_slot(c);
	struct dev_slot *ds = &c->dev[d];
	ds->state = DEV_COPYING;
	ds->generation++;
	ds->pos = sl->pos;
	ds->decode = c->client_decode && !sl->group && has_gpu_rows(s, c, sl);
	ds->staging = (uint32_t)(sl - s->slots);
	ds->staging_generation = sl->generation;
	sl->decode_hold = ds->decode;
	sl->decoded_early = false;
	ds->pos.t_handed = sched_now_ns();
	if (group_follower(c)) /* its epoch is the leader's batch's; the leader's own runs ahead */
		c->epoch = sl->pos.epoch;
	sched_stage(c, STAGE_FILL, ds->pos.t_pick, ds->pos.t_filled);
	sched_stage(c, STAGE_ORDER, ds->pos.t_filled, ds->pos.t_handed);
	s->gpu.copy(s->gpu.gpu, c->pc, d, (uint32_t)(sl - s->slots), sl->generation,
		    batch_copy_bytes(&s->sources[c->pipeline], sl->pos.rows), sl->pos.rows);
}

void devpath_flush(struct sched *s, struct sched_client *c)
{
	while (!c->failed) {
		struct slot *sl = sched_done_slot(s, c, c->pin_seq);
		if (!sl)
			return;
		if (sl->error) {
			batchfail_batch(s, sl);
			return;
		}
		sl->state = SLOT_PINNING;
		c->pin_seq++;
		struct sched_group *g = c->group;
		if (!g) {
			hand_copy(s, c, sl);
			continue;
		}
		/* A group's batch: one copy per member from the one staging slot,
		 * which is free again once the GPU thread has read it for all. */
		sl->pins = 0;
		for (uint32_t i = 0; i < g->size; i++)
			sl->pins += g->members[i] && !g->members[i]->failed;
		for (uint32_t i = 0; i < g->size; i++) {
			struct sched_client *m = g->members[i];
			if (m && !m->failed)
				hand_copy(s, m, sl);
		}
	}
}

/* A direct client's next batch, straight into a free device slot: the GPU
 * thread copies its samples from the page-locked file. */
static void direct_start(struct sched *s, struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	uint32_t d = free_dev_slot(c);
	struct dev_slot *ds = &c->dev[d];
	ds->pos = sched_batch_next(c);
	uint64_t *offsets = malloc(ds->pos.rows * sizeof(*offsets));
	if (!offsets) {
		log_error("client %" PRIu64 " (pid %d): out of memory for a batch", c->session,
			  (int)c->pid);
		c->failed = true;
		s->ops.fail(c->conn, ENOMEM, "loaderd is out of memory");
		return;
	}
	for (uint32_t i = 0; i < ds->pos.rows; i++) {
		/* a direct pipeline's samples are each one range of its file
		 * (daemon/gpu/direct.h) */
		struct source_place at;
		source_locate(src, c->split, ds->pos.epoch,
			      sampler_sample(&c->sampler, ds->pos.epoch, ds->pos.g, ds->pos.first + i),
			      &at);
		offsets[i] = at.offset;
	}
	ds->state = DEV_COPYING;
	ds->generation++;
	ds->pos.t_filled = ds->pos.t_handed = ds->pos.t_pick; /* no workers, no order */
	c->pin_seq++;
	s->gpu.copy_direct(s->gpu.gpu, c->pc, d, offsets, ds->pos.rows);
}

void devpath_fill_direct(struct sched *s, struct sched_client *c)
{
	while (!c->failed && c->in_flight < c->depth && !sched_stream_ended(c))
		direct_start(s, c);
}

void devpath_attach(struct sched *s, struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	char uuid[GPU_UUID_TEXT_MAX];
	gpu_uuid_format(c->uuid, uuid);
	c->device = true;
	c->attaching = true;
	c->dev_slot_bytes = (src->batch_bytes + 4095) & ~(uint64_t)4095;
	c->welcome.delivery = PROTO_DELIVERY_DEVICE;
	log_info("client %" PRIu64 " (pid %d%s%s) attaching to pipeline \"%s\" as rank %u of %u "
		 "on GPU %s: %u device slots of %" PRIu64 " bytes", c->session, (int)c->pid,
		 c->name[0] ? ", " : "", c->name, src->cfg->name, c->sampler.rank, c->sampler.world, uuid, c->depth,
		 c->dev_slot_bytes);
	s->gpu.attach(s->gpu.gpu, c, c->uuid, c->pipeline, c->depth, c->dev_slot_bytes,
		      c->client_decode);
}

/* The process of a detached device client has exited: its ring can go. */
static void retire_on_exit(void *arg)
{
	struct sched_client *c = arg;
	c->sched->gpu.retire(c->sched->gpu.gpu, c->pc);
}

void devpath_detach(struct sched *s, struct sched_client *c, bool handles_closed)
{
	if (!c->attaching && !c->pc) { /* its attach failed: no ring */
		free(c);
		return;
	}
	c->retiring_next = s->retiring;
	s->retiring = c;
	if (c->attaching) {
		c->gone = true; /* gpu_attached retires or frees it */
	} else if (handles_closed) {
		s->gpu.retire(s->gpu.gpu, c->pc);
	} else {
		log_info("client %" PRIu64 ": its GPU ring is freed once pid %d has exited", c->session,
			 (int)c->pid);
		s->ops.watch_exit(s->ops.exits, c->pid, retire_on_exit, c);
	}
}

bool devpath_staging_read(struct slot *sl)
{
	if (!sl->decode_hold || !sl->client || sl->decoded_early)
		return true;
	sl->state = SLOT_DECODING;
	return false;
}

bool devpath_decoded(struct sched *s, struct sched_client *c, const struct proto_decoded *d)
{
	struct slot *sl = d->staging_slot < s->n_slots ? &s->slots[d->staging_slot] : NULL;
	if (!sl || sl->client != c || !sl->decode_hold || sl->generation != d->staging_generation ||
	    sl->pos.seq != d->seq || (sl->state != SLOT_DECODING && sl->state != SLOT_PINNING)) {
		log_debug("client %" PRIu64 ": stale or duplicate DECODED of staging slot %u "
			  "generation %u seq %" PRIu64 "; ignored", c->session, d->staging_slot,
			  d->staging_generation, d->seq);
		return false;
	}
	c->decoded.batches++;
	c->decoded.gpu += d->gpu;
	c->decoded.cpu += d->cpu;
	c->decoded.bad += d->bad;
	c->decoded.submit_ns += d->submit_ns;
	/* the GPU decode of a client that decodes in its own process: its
	 * decoding thread's host time, as its DECODED says (capped: a peer's
	 * figure must not wrap the sum) */
	stagestats_add(c->pipeline, PSTAGE_GPU_DECODE,
		       d->submit_ns < (1ull << 40) ? d->submit_ns : (1ull << 40));
	if (d->bad > 0) {
		char where[1200];
		const struct source *src = &s->sources[c->pipeline];
		source_sample_where(src, s->arena, c->pipeline, c->split, d->bad_sample, where,
				    sizeof(where));
		log_warning("client %" PRIu64 " (pid %d): pipeline \"%s\": %u bad image%s in batch %"
			    PRIu64 " that neither its GPU's decoder nor the CPU's took, the first %s "
			    "(on_error = %s)", c->session, (int)c->pid, src->cfg->name, d->bad,
			    d->bad == 1 ? "" : "s", d->seq, where,
			    src->cfg->on_error == ON_ERROR_FAIL ? "fail" : "substitute");
	}
	if (sl->state == SLOT_PINNING) { /* the GPU thread's read is yet to be answered */
		sl->decoded_early = true;
		return false;
	}
	sched_slot_free(s, sl);
	return true;
}

bool devpath_release(struct sched_client *c, const struct proto_release *r)
{
	struct dev_slot *ds = r->slot < c->depth ? &c->dev[r->slot] : NULL;
	if (!ds || ds->state != DEV_HELD || ds->generation != r->generation || ds->pos.seq != r->seq) {
		log_debug("client %" PRIu64 ": stale or duplicate RELEASE of device slot %u generation "
			  "%u seq %" PRIu64 "; ignored", c->session, r->slot, r->generation, r->seq);
		return false;
	}
	sched_released(c, &ds->pos);
	ds->state = DEV_FREE;
	c->in_flight--;
	c->released++;
	return true;
}
