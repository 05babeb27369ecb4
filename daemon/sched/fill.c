/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fill: the scheduler's engine (sched_impl.h): which client's batch
 * starts in a free staging slot, its work items queued and handed to the
 * workers, their completions and losses, and finished batches delivered
 * in order (host delivery here, device delivery through devpath.c).
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/sched/sched_impl.h"

#define ITEM_REF(slot, item) (((uint32_t)(slot) << 16) | (uint32_t)(item))

static void pending_push(struct pending *q, uint32_t ref, bool front)
{
	assert(q->count < q->cap); /* capacity is every item of every slot */
	if (front) {
		q->head = (q->head + q->cap - 1) % q->cap;
		q->refs[q->head] = ref;
	} else {
		q->refs[(q->head + q->count) % q->cap] = ref;
	}
	q->count++;
}

static void pending_pop(struct pending *q)
{
	q->head = (q->head + 1) % q->cap;
	q->count--;
}

/* A document-shuffled pipeline's batch in sl: where each row's window
 * starts in its epoch's document order (daemon/source/docorder.h). 0 or -errno. */
static int batch_docs(struct sched *s, struct slot *sl, const struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	for (uint32_t r = 0; r < sl->pos.rows; r++) {
		uint64_t window = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g, sl->pos.first + r);
		int rc = sched_doc_locate(s, c->pipeline, c->split, sl->pos.epoch, src->cfg->seq_len,
					  window, &sl->doc_pos[r], &sl->doc_skip[r]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Starts client c's next batch in slot sl and queues its items. */
static void batch_start(struct sched *s, struct slot *sl, struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	uint32_t slot_index = (uint32_t)(sl - s->slots);
	sl->state = SLOT_FILLING;
	sl->generation++;
	sl->client = c;
	sl->pipeline = c->pipeline;
	sl->pos = sched_batch_next(c);
	group_started(c);
	sl->n_items = (sl->pos.rows + src->chunk - 1) / src->chunk;
	sl->items_done = 0;
	sl->error = 0;
	c->staging++;
	s->free_slots--;
	sl->docs = src->desc.docs.n_documents > 0;
	sl->blend = false;
	int rc = src->n_members ? sched_blend_plan(s, sl, c) : sl->docs ? batch_docs(s, sl, c) : 0;
	if (rc < 0) {
		batchfail_docorder(s, sl, rc);
		return;
	}
	for (uint32_t k = 0; k < sl->n_items; k++) {
		struct item *it = &sl->items[k];
		if (!sl->blend) {
			it->first_row = k * src->chunk;
			it->count = sl->pos.rows - it->first_row < src->chunk ?
				    sl->pos.rows - it->first_row : src->chunk;
		}
		it->state = ITEM_PENDING;
		it->strikes = 0;
		pending_push(&s->pending, ITEM_REF(slot_index, k), false);
	}
}

bool sched_uses_staging(const struct sched_client *c)
{
	return !c->failed && !c->attaching && !c->direct && !group_follower(c);
}

/* The most staging slots a client may have in use (sched.h): an equal
 * part of the slots for every client attached and one more, so a client
 * that attaches next finds its part free even while the others, stopped,
 * keep all they hold. With no client, the share the first one will have. */
uint32_t sched_slot_share(const struct sched *s)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < s->n_clients; k++)
		n += sched_uses_staging(s->clients[k]);
	uint32_t share = s->n_slots / ((n ? n : 1) + 1);
	return share ? share : 1;
}

/* The client that should get the next free slot: the one furthest below
 * its depth, ties broken in rotation, among those under their share. NULL
 * when every client is full. */
static struct sched_client *neediest_client(struct sched *s)
{
	struct sched_client *best = NULL;
	uint32_t share = sched_slot_share(s);
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *c = s->clients[(s->fair_start + k) % s->n_clients];
		if (!sched_uses_staging(c) || c->in_flight >= c->depth || c->staging >= share ||
		    sched_stream_ended(c) || !group_may_start(c) || !sched_orders_ready(s, c))
			continue;
		if (!best || (uint64_t)c->in_flight * best->depth < (uint64_t)best->in_flight * c->depth)
			best = c;
	}
	return best;
}

void sched_fill(struct sched *s)
{
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *c = s->clients[k];
		if (c->direct)
			devpath_fill_direct(s, c);
		if (sched_stream_ended(c) && c->in_flight == 0 && !c->failed && !c->attaching)
			batchfail_stream_end(s, c);
		group_drain(s, c);
	}
	while (s->free_slots > 0 && s->n_clients > 0) {
		struct sched_client *c = neediest_client(s);
		if (!c)
			break;
		s->fair_start++;
		uint32_t i = 0;
		while (s->slots[i].state != SLOT_FREE)
			i++; /* free_slots > 0: one is free */
		batch_start(s, &s->slots[i], c);
	}
	sched_pump(s);
}

static void orphan_item_done(struct sched *s, struct slot *sl)
{
	if (++sl->items_done == sl->n_items)
		sched_slot_free(s, sl);
}

void sched_pump(struct sched *s)
{
	if (!s->workers.submit)
		return;
	struct work_cmd cmd;
	while (s->pending.count > 0) {
		uint32_t ref = s->pending.refs[s->pending.head];
		struct slot *sl = &s->slots[ref >> 16];
		struct item *it = &sl->items[ref & 0xffff];
		if (sl->state == SLOT_ORPHAN) {
			pending_pop(&s->pending);
			it->state = ITEM_DONE;
			orphan_item_done(s, sl);
			continue;
		}
		assert(sl->state == SLOT_FILLING && it->state == ITEM_PENDING);
		const struct sched_client *c = sl->client;
		cmd.item_id = ((uint64_t)sl->generation << 32) | ref;
		cmd.op = WORK_READ;
		cmd.pipeline = c->pipeline;
		cmd.slot_offset = arena_slot_offset(s->arena, ref >> 16);
		cmd.first_row = it->first_row;
		cmd.count = it->count;
		cmd.flags = (c->gpu_decode ? WORK_CMD_GPU_DECODE : 0) |
			    (s->cfg->stage_timing ? 0 : WORK_CMD_NO_TIMING);
		cmd.gpu_share = sched_share_units(c); /* of now: the client's latest wait */
		cmd.reserved = 0;
		cmd.split = c->split;
		cmd.epoch = sl->pos.epoch;
		for (uint32_t i = 0; !sl->blend && i < it->count; i++) {
			cmd.sample_index[i] = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g,
							     sl->pos.first + it->first_row + i);
			cmd.doc_pos[i] = sl->docs ? sl->doc_pos[it->first_row + i] : 0;
			cmd.doc_skip[i] = sl->docs ? sl->doc_skip[it->first_row + i] : 0;
		}
		if (sl->blend)
			sched_blend_cmd(s, sl, it, &cmd);
		if (!s->workers.submit(s->workers.pool, &cmd))
			break;
		pending_pop(&s->pending);
		it->state = ITEM_DISPATCHED;
	}
}

/* Delivers, in seq order, every finished batch of c that is next in line. */
static void client_flush(struct sched *s, struct sched_client *c)
{
	if (c->device) {
		devpath_flush(s, c);
		return;
	}
	while (!c->failed) {
		struct slot *sl = sched_done_slot(s, c, c->send_seq);
		if (!sl)
			return;
		if (sl->error) {
			batchfail_batch(s, sl);
			return;
		}
		sl->state = SLOT_HELD;
		sl->pos.t_ready = sched_now_ns();
		sched_stage(c, STAGE_FILL, sl->pos.t_pick, sl->pos.t_filled);
		sched_stage(c, STAGE_ORDER, sl->pos.t_filled, sl->pos.t_ready);
		uint32_t slot = (uint32_t)(sl - s->slots);
		struct proto_ready r = sched_ready_of(&sl->pos, slot, sl->generation,
						      arena_slot_offset(s->arena, slot));
		if (c->group) {
			group_deliver(s, c, sl, &r);
			continue;
		}
		c->send_seq++;
		s->ops.ready(c->conn, &r);
	}
}

/* Finds the slot and item an item id names, or NULL for a stale id. */
static struct slot *item_lookup(struct sched *s, uint64_t item_id, struct item **it)
{
	uint32_t ref = (uint32_t)item_id;
	uint32_t slot = ref >> 16, k = ref & 0xffff;
	if (slot >= s->n_slots)
		return NULL;
	struct slot *sl = &s->slots[slot];
	if (sl->generation != (uint32_t)(item_id >> 32) || k >= sl->n_items ||
	    sl->items[k].state != ITEM_DISPATCHED ||
	    (sl->state != SLOT_FILLING && sl->state != SLOT_ORPHAN))
		return NULL;
	*it = &sl->items[k];
	return sl;
}

/* One more item of sl is done: the batch is complete once all are. */
static void item_finished(struct sched *s, struct slot *sl)
{
	if (++sl->items_done < sl->n_items)
		return;
	sl->state = SLOT_DONE;
	sl->pos.t_filled = sched_now_ns();
	client_flush(s, sl->client);
}

void sched_item_done(struct sched *s, const struct work_done *done)
{
	struct item *it;
	struct slot *sl = item_lookup(s, done->item_id, &it);
	if (!sl) {
		log_warning("completion for unknown work item %#" PRIx64 "; ignored", done->item_id);
		return;
	}
	it->state = ITEM_DONE;
	if (sl->client)
		batchfail_note_bad(s, sl->client->pipeline, done);
	if (sl->state == SLOT_ORPHAN) {
		orphan_item_done(s, sl);
		sched_fill(s);
		return;
	}
	if (done->status < 0 && sl->error == 0) {
		sl->error = done->status;
		sl->bad_row = done->bad_row < sl->pos.rows ? done->bad_row : it->first_row;
		sl->error_detail = done->detail;
	}
	item_finished(s, sl);
}

void sched_item_lost(struct sched *s, uint64_t item_id, bool suspect, const char *why)
{
	struct item *it;
	struct slot *sl = item_lookup(s, item_id, &it);
	if (!sl)
		return;
	if (suspect && ++it->strikes >= SCHED_ITEM_STRIKES && sl->state == SLOT_FILLING) {
		/* Each worker that held it crashed or hung: the item itself is
		 * the likely cause, and issuing it again would go on killing. */
		it->state = ITEM_DONE;
		if (sl->error == 0) {
			sl->error = -ECHILD;
			sl->bad_row = it->first_row;
			sl->error_detail = it->count;
			snprintf(sl->lost_why, sizeof(sl->lost_why), "%s", why);
		}
		item_finished(s, sl);
		return;
	}
	it->state = ITEM_PENDING;
	pending_push(&s->pending, (uint32_t)item_id, true);
}

void sched_describe_item(struct sched *s, uint64_t item_id, char *buf, size_t cap)
{
	struct item *it;
	struct slot *sl = item_lookup(s, item_id, &it);
	if (!sl || !sl->client) {
		snprintf(buf, cap, "an item no longer wanted");
		return;
	}
	const struct sched_client *c = sl->client;
	uint64_t first = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g,
					sl->pos.first + it->first_row);
	char where[1200];
	sched_describe_split_sample(s, c->pipeline, c->split, first, where, sizeof(where));
	snprintf(buf, cap, "epoch %" PRIu64 " batch %" PRIu64 " rows %u..%u of client %" PRIu64
		 " (pid %d), from %.1000s", sl->pos.epoch, sl->pos.batch, it->first_row,
		 it->first_row + it->count - 1, c->session, (int)c->pid, where);
}

void sched_workers_unable(struct sched *s, const char *why)
{
	snprintf(s->unable, sizeof(s->unable), "%s", why ? why : "");
	if (!why)
		return;
	for (uint32_t k = 0; k < s->n_clients; k++)
		if (sched_uses_staging(s->clients[k]))
			batchfail_unable(s, s->clients[k]);
}
