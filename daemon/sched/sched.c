/* sched: batches, staging slots, work items and in-order delivery (sched.h). */
#include "daemon/sched/sched.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/position.h"
#include "daemon/sched/sched_impl.h"
#include "daemon/core/status.h"

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

struct sched *sched_create(const struct config *cfg, struct arena *arena,
			   const struct source *sources, size_t n_sources,
			   const struct sched_ops *ops)
{
	struct sched *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->cfg = cfg;
	s->arena = arena;
	s->sources = sources;
	s->n_sources = n_sources;
	s->ops = *ops;
	s->n_slots = arena->hdr->n_slots;
	s->free_slots = s->n_slots;
	s->next_session = 1;
	snprintf(s->no_device, sizeof(s->no_device), "this loaderd serves host delivery only");
	uint32_t max_items = 1, max_doc_rows = 0, max_blend_rows = 0;
	for (size_t i = 0; i < n_sources; i++) {
		uint32_t b = sources[i].cfg->batch_size, c = sources[i].chunk;
		uint32_t items = sources[i].n_members ? b : (b + c - 1) / c; /* a blend: rows of one member */
		if (items > max_items)
			max_items = items;
		bool docs = sources[i].desc.docs.n_documents;
		for (uint32_t m = 0; m < sources[i].n_members; m++)
			docs |= sources[i].members[m].src.desc.docs.n_documents > 0;
		if (docs && b > max_doc_rows)
			max_doc_rows = b;
		if (sources[i].n_members && b > max_blend_rows)
			max_blend_rows = b;
	}
	s->slots = calloc(s->n_slots, sizeof(*s->slots));
	s->clients = calloc(cfg->max_clients, sizeof(*s->clients));
	s->pending.cap = (size_t)s->n_slots * max_items;
	s->pending.refs = calloc(s->pending.cap, sizeof(uint32_t));
	if (!s->slots || !s->clients || !s->pending.refs)
		goto free_sched;
	for (uint32_t i = 0; i < s->n_slots; i++) {
		s->slots[i].items = calloc(max_items, sizeof(struct item));
		if (!s->slots[i].items)
			goto free_sched;
		if (max_blend_rows) {
			s->slots[i].blend_member = calloc(3 * (size_t)max_blend_rows, sizeof(uint64_t));
			if (!s->slots[i].blend_member)
				goto free_sched;
			s->slots[i].blend_sample = s->slots[i].blend_member + max_blend_rows;
			s->slots[i].blend_epoch = s->slots[i].blend_sample + max_blend_rows;
		}
		if (max_doc_rows == 0)
			continue;
		s->slots[i].doc_pos = calloc(2 * (size_t)max_doc_rows, sizeof(uint64_t));
		if (!s->slots[i].doc_pos)
			goto free_sched;
		s->slots[i].doc_skip = s->slots[i].doc_pos + max_doc_rows;
	}
	return s;
free_sched:
	sched_free(s);
	return NULL;
}

void sched_set_workers(struct sched *s, const struct sched_workers *workers)
{
	s->workers = *workers;
}

void sched_set_gpu(struct sched *s, const struct gpu_requests *gpu)
{
	s->gpu = *gpu;
	s->has_device = true;
}

void sched_set_no_device(struct sched *s, const char *why)
{
	snprintf(s->no_device, sizeof(s->no_device), "%s", why);
}

void sched_free(struct sched *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; s->slots && i < s->n_slots; i++) {
		free(s->slots[i].items);
		free(s->slots[i].doc_pos);
		free(s->slots[i].blend_member);
	}
	docorder_cache_free(&s->docorder);
	for (uint32_t i = 0; i < s->n_clients; i++)
		free(s->clients[i]);
	while (s->groups) {
		struct sched_group *g = s->groups;
		s->groups = g->next;
		free(g);
	}
	while (s->retiring) {
		struct sched_client *c = s->retiring;
		s->retiring = c->retiring_next;
		free(c);
	}
	for (size_t i = 0; i < ARENA_PIPELINES_MAX; i++)
		free(s->bad_seen[i]);
	free(s->slots);
	free(s->clients);
	free(s->pending.refs);
	free(s);
}

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
	s->free_slots++;
}

uint64_t sched_now_ns(void)
{
	return clock_mono_ns();
}

void sched_stage(struct sched_client *c, enum sched_stage st, uint64_t from, uint64_t to)
{
	c->stages.ns[st] += to > from ? to - from : 0;
	c->stages.n[st]++;
}

int sched_stage_text(const struct sched_client *c, char *buf, size_t cap)
{
	double us[STAGE_COUNT];
	for (int i = 0; i < STAGE_COUNT; i++)
		us[i] = c->stages.n[i] ? (double)c->stages.ns[i] / (double)c->stages.n[i] / 1e3 : 0.0;
	return snprintf(buf, cap, " fill_us %.1f order_us %.1f gpu_us %.1f held_us %.1f",
			us[STAGE_FILL], us[STAGE_ORDER], us[STAGE_GPU], us[STAGE_HELD]);
}

struct batch_pos sched_batch_next(struct sched_client *c)
{
	if (c->next_batch >= c->segment_batches) {
		c->epoch++;
		c->g = 0;
		c->next_batch = 0;
		c->segment_batches = sampler_batches(&c->sampler, 0);
	}
	struct batch_pos pos = {
		.seq = c->next_seq++, .epoch = c->epoch, .g = c->g, .batch = c->next_batch++,
	};
	pos.first = pos.batch * c->sampler.batch_size;
	pos.rows = sampler_batch_rows(&c->sampler, c->g, pos.batch);
	pos.last = pos.batch + 1 == c->segment_batches;
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

/* A document-shuffled pipeline's batch in sl: where each row's window
 * starts in its epoch's document order (daemon/source/docorder.h). 0 or -errno. */
static int batch_docs(struct sched *s, struct slot *sl, const struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	const struct arena_doc_params *dp = &arena_pipeline(s->arena, c->pipeline)->docs;
	const struct docorder_split sp = {
		.doc_tokens = (const uint64_t *)(s->arena->base + dp->docs_offset),
		.first_doc = dp->first_doc[c->split], .n_docs = dp->n_docs[c->split],
		.key = dp->key[c->split], .shuffle = 1,
	};
	for (uint32_t r = 0; r < sl->pos.rows; r++) {
		uint64_t window = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g, sl->pos.first + r);
		int rc = docorder_locate(&s->docorder, c->pipeline, c->split, &sp, sl->pos.epoch,
					 src->cfg->seq_len, window, &sl->doc_pos[r], &sl->doc_skip[r]);
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
static uint32_t slot_share(const struct sched *s)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < s->n_clients; k++)
		n += sched_uses_staging(s->clients[k]);
	uint32_t share = s->n_slots / ((n ? n : 1) + 1);
	return share ? share : 1;
}

/* Client c has been handed every batch of epoch POSITION_EPOCHS - 1: its
 * stream ends there, rather than wrapping (common/position.h). */
bool sched_stream_ended(const struct sched_client *c)
{
	return c->next_batch >= c->segment_batches && c->epoch + 1 >= POSITION_EPOCHS;
}

/* The client that should get the next free slot: the one furthest below
 * its depth, ties broken in rotation, among those under their share. NULL
 * when every client is full. */
static struct sched_client *neediest_client(struct sched *s)
{
	struct sched_client *best = NULL;
	uint32_t share = slot_share(s);
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *c = s->clients[(s->fair_start + k) % s->n_clients];
		if (!sched_uses_staging(c) || c->in_flight >= c->depth || c->staging >= share ||
		    sched_stream_ended(c) || !group_may_start(c))
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

uint64_t sched_expire_groups(struct sched *s)
{
	if (s->cfg->group_timeout_ms == 0)
		return 0;
	uint64_t left = group_expire(s, sched_now_ns(), s->cfg->group_timeout_ms * 1000000ull);
	return left == UINT64_MAX ? 0 : left / 1000000 + 1;
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
		cmd.flags = c->gpu_decode ? WORK_CMD_GPU_DECODE : 0;
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

struct slot *sched_done_slot(struct sched *s, struct sched_client *c, uint64_t seq)
{
	for (uint32_t i = 0; i < s->n_slots; i++) {
		struct slot *sl = &s->slots[i];
		if (sl->client == c && sl->state == SLOT_DONE && sl->pos.seq == seq)
			return sl;
	}
	return NULL;
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

void sched_describe_sample(struct sched *s, uint32_t pipeline, uint64_t sample, char *buf,
			   size_t cap)
{
	sched_describe_split_sample(s, pipeline, SPLIT_COUNT, sample, buf, cap);
}

void sched_describe_split_sample(struct sched *s, uint32_t pipeline, uint32_t split,
				 uint64_t sample, char *buf, size_t cap)
{
	if (pipeline >= s->n_sources) { /* a blend's member (a worker's last sample) */
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

void sched_describe_arena(const struct sched *s, struct status_text *t)
{
	status_printf(t, "arena: %zu bytes, %u staging slots of %" PRIu64 " bytes, %u in use, "
		      "share %u\n", s->arena->bytes, s->n_slots, s->arena->hdr->slot_bytes,
		      s->n_slots - s->free_slots, slot_share(s));
}

void sched_describe(const struct sched *s, struct status_text *t)
{
	struct status_list l;
	status_printf(t, "pipelines: %zu\n", s->n_sources);
	status_list_begin(t, &l, "pipelines");
	for (size_t i = 0; i < s->n_sources; i++) {
		const struct source *src = &s->sources[i];
		if (!status_item_begin(t, &l))
			continue;
		source_describe(src, t);
		status_item_end(t, &l);
	}
	status_list_end(t, &l);
	session_describe(s, t);
}

void sched_describe_errors(const struct sched *s, struct status_text *t)
{
	status_printf(t, "errors: read %" PRIu64 " bad_images %" PRIu64 " substituted %" PRIu64 "\n",
		      s->read_errors, s->bad_images, s->substituted);
}
