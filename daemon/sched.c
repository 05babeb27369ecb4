/* sched: batches, staging slots, work items and in-order delivery (sched.h). */
#include "daemon/sched.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/escape.h"
#include "common/gpu_uuid.h"
#include "common/position.h"
#include "common/regfile.h"
#include "common/sampler.h"
#include "daemon/pool.h"
#include "daemon/status.h"
#include "worker/worker.h"

enum slot_state {
	SLOT_FREE,
	SLOT_FILLING, /* items outstanding */
	SLOT_DONE,    /* complete, waiting for earlier batches of its client */
	SLOT_HELD,    /* READY sent; the client's until RELEASE (host delivery) */
	SLOT_ORPHAN,  /* its client left while it was filling */
	SLOT_PINNING, /* the pinner reads it (device delivery); client may be NULL */
};

enum dev_state { DEV_FREE, DEV_COPYING, DEV_HELD };

/* Where a batch sits in its client's stream of batches: what READY says. */
struct batch_pos {
	uint64_t seq, epoch, g, batch, first;
	uint32_t rows;
	bool last;
};

/* A device slot of a client's ring, with the batch it holds (the staging
 * slot may be reused before READY goes out). */
struct dev_slot {
	enum dev_state state;
	uint32_t generation;
	struct batch_pos pos;
};

enum item_state { ITEM_PENDING, ITEM_DISPATCHED, ITEM_DONE };

struct item {
	uint32_t first_row;
	uint32_t count;
	enum item_state state;
	uint32_t strikes; /* times lost as suspect (sched.h) */
};

struct slot {
	enum slot_state state;
	uint32_t generation;
	struct sched_client *client;
	struct batch_pos pos;
	uint32_t n_items, items_done;
	struct item *items;
	int error;         /* first failure of an item: -errno (-ECHILD: struck out) */
	uint32_t bad_row;
	uint64_t error_detail;
	char lost_why[96]; /* -ECHILD: how the last worker holding it ended */
};

struct sched_client {
	void *conn;
	uint64_t session;
	pid_t pid;
	char name[ESCAPE_SIZE(PROTO_NAME_MAX - 1)]; /* the client's, escaped (escape.h) */
	uint32_t pipeline;
	struct sampler sampler;
	uint32_t depth;
	uint64_t epoch, g, next_batch, segment_batches;
	uint64_t next_seq;  /* seq of the next batch to start */
	uint64_t send_seq;  /* seq of the next batch to deliver */
	uint64_t released;
	uint32_t in_flight; /* batches started and not yet released */
	uint32_t staging;   /* staging slots it has in use (filling, done, held, pinning) */
	bool failed;
	/* device delivery */
	bool device;
	bool attaching;     /* waiting for the pinner's ring */
	bool direct;        /* batches come from the page-locked file, not staging */
	bool gone;          /* detached while attaching: retire once the ring exists */
	void *pc;           /* the pinner's client, NULL until attached */
	uint64_t pin_seq;   /* seq of the next batch to hand to the pinner */
	uint64_t dev_slot_bytes;
	uint8_t uuid[PROTO_UUID_BYTES];
	struct proto_welcome welcome; /* kept while attaching */
	struct sched *retire_sched;   /* for retire_ring */
	struct sched_client *retiring_next; /* detached, ring not yet freed */
	struct dev_slot dev[PROTO_DEVICE_SLOTS_MAX];
};

/* Pending item references (slot << 16 | item), a ring-buffer deque. */
struct pending {
	uint32_t *refs;
	size_t cap, head, count;
};

struct sched {
	const struct config *cfg;
	struct arena *arena;
	const struct source *sources;
	size_t n_sources;
	struct sched_ops ops;
	struct sched_device_ops dev_ops;
	bool has_device;
	char no_device[200]; /* why device delivery is refused, when !has_device */
	char unable[PATH_MAX + 256]; /* why no worker can run, "" while they can */
	struct sched_client *retiring; /* detached device clients whose ring is not yet freed */
	struct pool *pool;
	uint32_t n_slots, free_slots;
	struct slot *slots;
	struct pending pending;
	struct sched_client **clients;
	uint32_t n_clients;
	uint32_t fair_start; /* rotates to break ties between equal clients */
	uint64_t next_session;
	uint64_t read_errors;
	uint64_t bad_images;      /* image samples that could not be used, each time met */
	uint64_t substituted;     /* of those, replaced by another sample */
	uint8_t *bad_seen[ARENA_PIPELINES_MAX]; /* image pipelines: a bit per sample, logged once */
};

#define ITEM_REF(slot, item) (((uint32_t)(slot) << 16) | (uint32_t)(item))

static void pending_push(struct pending *q, uint32_t ref, bool front)
{
	/* cannot overflow: capacity is every item of every slot */
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
	uint32_t max_items = 1;
	for (size_t i = 0; i < n_sources; i++) {
		uint32_t b = sources[i].cfg->batch_size, c = sources[i].chunk;
		uint32_t items = (b + c - 1) / c;
		if (items > max_items)
			max_items = items;
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
	}
	return s;
free_sched:
	sched_free(s);
	return NULL;
}

void sched_set_pool(struct sched *s, struct pool *pool)
{
	s->pool = pool;
}

void sched_set_device(struct sched *s, const struct sched_device_ops *ops)
{
	s->dev_ops = *ops;
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
	for (uint32_t i = 0; s->slots && i < s->n_slots; i++)
		free(s->slots[i].items);
	for (uint32_t i = 0; i < s->n_clients; i++)
		free(s->clients[i]);
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

static void slot_free(struct sched *s, struct slot *sl)
{
	if (sl->client)
		sl->client->staging--;
	sl->state = SLOT_FREE;
	sl->client = NULL;
	s->free_slots++;
}

/* Advances client c to its next batch and says where that batch sits. */
static struct batch_pos batch_next(struct sched_client *c)
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
	c->in_flight++;
	return pos;
}

/* READY for the batch at pos, in the given slot. */
static struct proto_ready ready_of(const struct batch_pos *pos, uint32_t slot, uint32_t generation,
				   uint64_t slot_offset)
{
	return (struct proto_ready){
		.seq = pos->seq, .epoch = pos->epoch, .epoch_offset = pos->g, .batch = pos->batch,
		.first = pos->first, .slot_offset = slot_offset, .slot = slot, .generation = generation,
		.rows = pos->rows, .flags = pos->last ? PROTO_READY_LAST_IN_EPOCH : 0,
	};
}

/* Starts client c's next batch in slot sl and queues its items. */
static void batch_start(struct sched *s, struct slot *sl, struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	uint32_t slot_index = (uint32_t)(sl - s->slots);
	sl->state = SLOT_FILLING;
	sl->generation++;
	sl->client = c;
	sl->pos = batch_next(c);
	sl->n_items = (sl->pos.rows + src->chunk - 1) / src->chunk;
	sl->items_done = 0;
	sl->error = 0;
	c->staging++;
	for (uint32_t k = 0; k < sl->n_items; k++) {
		struct item *it = &sl->items[k];
		it->first_row = k * src->chunk;
		it->count = sl->pos.rows - it->first_row < src->chunk ? sl->pos.rows - it->first_row : src->chunk;
		it->state = ITEM_PENDING;
		it->strikes = 0;
		pending_push(&s->pending, ITEM_REF(slot_index, k), false);
	}
	s->free_slots--;
}

/* Clients that take staging slots: every attached one but direct clients. */
static bool uses_staging(const struct sched_client *c)
{
	return !c->failed && !c->attaching && !c->direct;
}

/* The most staging slots a client may have in use (sched.h): an equal
 * part of the slots for every client attached and one more, so a client
 * that attaches next finds its part free even while the others, stopped,
 * keep all they hold. With no client, the share the first one will have. */
static uint32_t slot_share(const struct sched *s)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < s->n_clients; k++)
		n += uses_staging(s->clients[k]);
	uint32_t share = s->n_slots / ((n ? n : 1) + 1);
	return share ? share : 1;
}

/* Client c has been handed every batch of epoch POSITION_EPOCHS - 1: its
 * stream ends there, rather than wrapping (common/position.h). */
static bool stream_ended(const struct sched_client *c)
{
	return c->next_batch >= c->segment_batches && c->epoch + 1 >= POSITION_EPOCHS;
}

/* Once a client whose stream has ended has released its last batch, it
 * would wait for a batch that never comes: it gets an error instead. */
static void end_stream(struct sched *s, struct sched_client *c)
{
	char text[PROTO_ERROR_TEXT_MAX];
	snprintf(text, sizeof(text), "pipeline \"%s\": the stream has ended: epoch %" PRIu64 " was "
		 "the last a stream has (epochs are below 2^32); attach again without a resume token "
		 "to start a new one", s->sources[c->pipeline].cfg->name, c->epoch);
	log_notice("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
	c->failed = true;
	s->ops.fail(c->conn, EOVERFLOW, text);
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
		if (!uses_staging(c) || c->in_flight >= c->depth || c->staging >= share ||
		    stream_ended(c))
			continue;
		if (!best || (uint64_t)c->in_flight * best->depth < (uint64_t)best->in_flight * c->depth)
			best = c;
	}
	return best;
}

/* A direct client's next batch, straight into a free device slot: the
 * pinner copies its samples from the page-locked file. */
static void direct_start(struct sched *s, struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	uint32_t d = 0;
	while (d < c->depth && c->dev[d].state != DEV_FREE)
		d++;
	if (d == c->depth) /* cannot happen: in_flight < depth */
		return;
	struct dev_slot *ds = &c->dev[d];
	ds->pos = batch_next(c);
	uint64_t *offsets = malloc(ds->pos.rows * sizeof(*offsets));
	if (!offsets) {
		log_error("client %" PRIu64 " (pid %d): out of memory for a batch", c->session,
			  (int)c->pid);
		c->failed = true;
		s->ops.fail(c->conn, ENOMEM, "loaderd is out of memory");
		return;
	}
	for (uint32_t i = 0; i < ds->pos.rows; i++)
		offsets[i] = sampler_sample(&c->sampler, ds->pos.epoch, ds->pos.g, ds->pos.first + i) *
			     src->desc.sample_stride;
	ds->state = DEV_COPYING;
	ds->generation++;
	c->pin_seq++;
	s->dev_ops.copy_direct(s->dev_ops.ctx, c->pc, d, offsets, ds->pos.rows);
}

static void sched_fill(struct sched *s)
{
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *c = s->clients[k];
		while (c->direct && !c->failed && c->in_flight < c->depth && !stream_ended(c))
			direct_start(s, c);
		if (stream_ended(c) && c->in_flight == 0 && !c->failed && !c->attaching)
			end_stream(s, c);
	}
	while (s->free_slots > 0 && s->n_clients > 0) {
		struct sched_client *c = neediest_client(s);
		if (!c)
			break;
		s->fair_start++;
		for (uint32_t i = 0; i < s->n_slots; i++) {
			if (s->slots[i].state == SLOT_FREE) {
				batch_start(s, &s->slots[i], c);
				break;
			}
		}
	}
	sched_pump(s);
}

static void orphan_item_done(struct sched *s, struct slot *sl)
{
	if (++sl->items_done == sl->n_items)
		slot_free(s, sl);
}

void sched_pump(struct sched *s)
{
	if (!s->pool)
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
		const struct sched_client *c = sl->client;
		cmd.item_id = ((uint64_t)sl->generation << 32) | ref;
		cmd.op = WORK_READ;
		cmd.pipeline = c->pipeline;
		cmd.slot_offset = arena_slot_offset(s->arena, ref >> 16);
		cmd.first_row = it->first_row;
		cmd.count = it->count;
		cmd.epoch = sl->pos.epoch;
		for (uint32_t i = 0; i < it->count; i++)
			cmd.sample_index[i] = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g,
							     sl->pos.first + it->first_row + i);
		if (!pool_submit(s->pool, &cmd))
			break;
		pending_pop(&s->pending);
		it->state = ITEM_DISPATCHED;
	}
}

/* Where an image pipeline's sample index lives, for messages: the file
 * (ROOT/CLASS/NAME.jpg), or the tar shard, member and its data offset. */
static const char *image_where(const struct sched *s, uint32_t pipeline, uint64_t index,
			       char *buf, size_t cap)
{
	const struct arena_pipeline *p = arena_pipeline(s->arena, pipeline);
	const struct arena_image_params *ip = &p->image;
	const char *paths = (const char *)s->arena->base + ip->paths_offset;
	const struct arena_image *e = arena_range(s->arena, ip->index_offset +
						  index * sizeof(struct arena_image), sizeof(*e));
	if (!e || e->path_offset >= ip->paths_bytes) {
		snprintf(buf, cap, "%.1000s: sample %" PRIu64, p->path, index);
		return buf;
	}
	if (ip->n_shards == 0) {
		snprintf(buf, cap, "%.1000s/%.1000s", p->path, paths + e->path_offset);
		return buf;
	}
	const struct arena_shard *sh = arena_range(s->arena, ip->shards_offset +
						   (uint64_t)e->shard * sizeof(*sh), sizeof(*sh));
	snprintf(buf, cap, "%.1000s: member %.1000s (data at offset %" PRIu64 ")",
		 sh && sh->path_offset < ip->paths_bytes ? paths + sh->path_offset : p->path,
		 paths + e->path_offset, e->data_offset);
	return buf;
}

void sched_describe_sample(const struct sched *s, uint32_t pipeline, uint64_t sample, char *buf,
			   size_t cap)
{
	if (pipeline >= s->n_sources) {
		snprintf(buf, cap, "pipeline %u (none such) sample %" PRIu64, pipeline, sample);
		return;
	}
	const struct source *src = &s->sources[pipeline];
	if (src->desc.kind == ARENA_SOURCE_IMAGES) {
		char where[2200];
		snprintf(buf, cap, "pipeline \"%s\" sample %" PRIu64 ": %s", src->cfg->name, sample,
			 image_where(s, pipeline, sample, where, sizeof(where)));
		return;
	}
	uint64_t offset = sample * src->desc.sample_stride;
	snprintf(buf, cap, "pipeline \"%s\" sample %" PRIu64 ": %.1000s bytes %" PRIu64 "..%" PRIu64,
		 src->cfg->name, sample, src->cfg->path, offset, offset + src->desc.sample_read_bytes);
}

static const char *image_why(int status)
{
	switch (status) {
	case -EBADMSG: return "corrupt, or not a JPEG";
	case -ENODATA: return "empty or truncated";
	case -EFBIG: return "larger than max_image_pixels, or a file over 64 MiB";
	case -ETIME: return "its decode took over max_decode_ms of CPU time";
	case REGFILE_NOT_REGULAR: return "not a regular file (replaced since start)";
	default: return strerror(-status);
	}
}

/* Why a failed image row was not replaced: the pipeline's on_error, and
 * under substitute what stopped it. detail is the worker's:
 * WORKER_DETAIL_IMAGE | the replacements it tried (worker/reader.h). */
static void image_policy(const struct sched *s, uint32_t pipeline, uint64_t index, int status,
			 uint64_t detail, char *buf, size_t cap)
{
	const struct source *src = &s->sources[pipeline];
	uint32_t tried = (uint32_t)(detail & ~WORKER_DETAIL_IMAGE);
	if (src->cfg->on_error == ON_ERROR_FAIL) {
		snprintf(buf, cap, "on_error = fail");
		return;
	}
	if (src->n_samples < 2) {
		snprintf(buf, cap, "on_error = substitute, but the pipeline has no other sample");
		return;
	}
	if (tried == 0) { /* the worker gives up at once only when out of memory */
		snprintf(buf, cap, "on_error = substitute, but no replacement could be tried: %s",
			 strerror(-status));
		return;
	}
	/* Where the replacements came from: the sample's shard when it has
	 * another sample (worker/image_rows.c), else the whole list. */
	const struct arena_pipeline *p = arena_pipeline(s->arena, pipeline);
	const struct arena_image_params *ip = &p->image;
	const struct arena_image *e = arena_range(s->arena, ip->index_offset +
						  index * sizeof(struct arena_image), sizeof(*e));
	const struct arena_shard *sh = e && ip->n_shards ?
		arena_range(s->arena, ip->shards_offset + (uint64_t)e->shard * sizeof(*sh), sizeof(*sh)) :
		NULL;
	const char *paths = (const char *)s->arena->base + ip->paths_offset;
	if (sh && sh->n_samples >= 2 && sh->path_offset < ip->paths_bytes)
		snprintf(buf, cap, "on_error = substitute, and none of the %u other samples of shard "
			 "%.180s tried could replace it", tried, paths + sh->path_offset);
	else if (sh)
		snprintf(buf, cap, "on_error = substitute, and none of the %u samples of other shards "
			 "tried (its shard has no other) could replace it", tried);
	else
		snprintf(buf, cap, "on_error = substitute, and none of the %u other samples tried "
			 "could replace it", tried);
}

/* Bad images a work item met: n of them, counted each time (substituted:
 * each was replaced); the first (index, status its -errno) is logged once
 * per file. The others of the same item are logged when an item meets
 * them first. */
static void note_bad_image(struct sched *s, uint32_t pipeline, uint64_t index, int status,
			   uint32_t n, bool substituted)
{
	const struct source *src = &s->sources[pipeline];
	s->bad_images += n;
	s->substituted += substituted ? n : 0;
	if (index >= src->n_samples)
		return;
	if (!s->bad_seen[pipeline] && !(s->bad_seen[pipeline] = calloc(src->n_samples / 8 + 1, 1)))
		return;
	uint8_t *seen = &s->bad_seen[pipeline][index / 8];
	if (*seen & (1u << (index % 8)))
		return;
	*seen |= (uint8_t)(1u << (index % 8));
	char where[2200];
	log_warning("pipeline \"%s\": %s: %s%s", src->cfg->name,
		    image_where(s, pipeline, index, where, sizeof(where)), image_why(status),
		    substituted ? "; replaced by another sample (on_error = substitute)" : "");
}

/* The ERROR text for a batch whose item failed: names pipeline, file,
 * sample and byte range. Logged here, once, where the decision is made. */
static void fail_batch(struct sched *s, struct slot *sl)
{
	struct sched_client *c = sl->client;
	const struct source *src = &s->sources[c->pipeline];
	uint64_t index = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g, sl->pos.first + sl->bad_row);
	if (sl->error == -ECHILD) { /* struck out: sched_item_lost */
		char text[PROTO_ERROR_TEXT_MAX], where[2200];
		sched_describe_sample(s, c->pipeline, index, where, sizeof(where));
		snprintf(text, sizeof(text), "pipeline \"%s\": epoch %" PRIu64 " batch %" PRIu64 " rows %u.."
			 "%" PRIu64 " (the first: %.700s): %d workers in a row died producing them, the "
			 "last %.96s", src->cfg->name, sl->pos.epoch, sl->pos.batch, sl->bad_row,
			 sl->bad_row + sl->error_detail - 1, where, SCHED_ITEM_STRIKES, sl->lost_why);
		log_error("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
		s->read_errors++;
		c->failed = true;
		s->ops.fail(c->conn, EIO, text);
		return;
	}
	if (src->desc.kind == ARENA_SOURCE_IMAGES) {
		char text[PROTO_ERROR_TEXT_MAX], where[2200], policy[400];
		if (sl->error_detail & WORKER_DETAIL_IMAGE) {
			image_policy(s, c->pipeline, index, sl->error, sl->error_detail, policy,
				     sizeof(policy));
			snprintf(text, sizeof(text), "pipeline \"%s\": %.500s: sample %" PRIu64 ": %s "
				 "(%.300s)", src->cfg->name,
				 image_where(s, c->pipeline, index, where, sizeof(where)), index,
				 image_why(sl->error), policy);
		} else { /* no image was read: the worker could not use the pipeline */
			snprintf(text, sizeof(text), "pipeline \"%s\": %.800s: %s (a worker could not "
				 "use the pipeline's data, so no sample could be read or replaced)",
				 src->cfg->name, src->cfg->path, strerror(-sl->error));
		}
		log_error("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
		s->read_errors++;
		c->failed = true;
		s->ops.fail(c->conn, sl->error == -EBADMSG ? EBADMSG : EIO, text);
		return;
	}
	uint64_t offset = index * src->desc.sample_stride;
	char why[128], text[PROTO_ERROR_TEXT_MAX];
	if (sl->error == -ENODATA)
		snprintf(why, sizeof(why), "file is shorter than at start (read %" PRIu64 " of %" PRIu64 " bytes)",
			 sl->error_detail, src->desc.sample_read_bytes);
	else if (sl->error == REGFILE_NOT_REGULAR)
		snprintf(why, sizeof(why), "not a regular file any more (replaced since start)");
	else
		snprintf(why, sizeof(why), "%s", strerror(-sl->error));
	snprintf(text, sizeof(text), "pipeline \"%s\": %.700s: sample %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64 "): %s",
		 src->cfg->name, src->cfg->path, index, offset, offset + src->desc.sample_read_bytes, why);
	log_error("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
	s->read_errors++;
	c->failed = true;
	s->ops.fail(c->conn, EIO, text);
}

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

/* Device delivery: hands, in seq order, every finished batch of c that is
 * next in line to the pinner, each into a free device slot. */
static void client_flush_device(struct sched *s, struct sched_client *c)
{
	while (!c->failed) {
		struct slot *sl = NULL;
		for (uint32_t i = 0; i < s->n_slots && !sl; i++) {
			struct slot *x = &s->slots[i];
			if (x->client == c && x->state == SLOT_DONE && x->pos.seq == c->pin_seq)
				sl = x;
		}
		if (!sl)
			return;
		if (sl->error) {
			fail_batch(s, sl);
			return;
		}
		uint32_t d = 0;
		while (d < c->depth && c->dev[d].state != DEV_FREE)
			d++;
		if (d == c->depth) /* cannot happen: in_flight <= depth (sched.h) */
			return;
		struct dev_slot *ds = &c->dev[d];
		ds->state = DEV_COPYING;
		ds->generation++;
		ds->pos = sl->pos;
		sl->state = SLOT_PINNING;
		c->pin_seq++;
		s->dev_ops.copy(s->dev_ops.ctx, c->pc, d, (uint32_t)(sl - s->slots), sl->generation,
				batch_copy_bytes(&s->sources[c->pipeline], sl->pos.rows));
	}
}

/* Delivers, in seq order, every finished batch of c that is next in line. */
static void client_flush(struct sched *s, struct sched_client *c)
{
	if (c->device) {
		client_flush_device(s, c);
		return;
	}
	while (!c->failed) {
		struct slot *sl = NULL;
		for (uint32_t i = 0; i < s->n_slots; i++) {
			struct slot *x = &s->slots[i];
			if (x->client == c && x->state == SLOT_DONE && x->pos.seq == c->send_seq) {
				sl = x;
				break;
			}
		}
		if (!sl)
			return;
		if (sl->error) {
			fail_batch(s, sl);
			return;
		}
		sl->state = SLOT_HELD;
		uint32_t slot = (uint32_t)(sl - s->slots);
		struct proto_ready r = ready_of(&sl->pos, slot, sl->generation,
						arena_slot_offset(s->arena, slot));
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

void sched_item_done(struct sched *s, const struct work_done *done)
{
	struct item *it;
	struct slot *sl = item_lookup(s, done->item_id, &it);
	if (!sl) {
		log_warning("completion for unknown work item %#" PRIx64 "; ignored", done->item_id);
		return;
	}
	it->state = ITEM_DONE;
	uint32_t pipeline = sl->client ? sl->client->pipeline : UINT32_MAX;
	if (pipeline < s->n_sources && done->n_bad > 0 && done->status == 0)
		note_bad_image(s, pipeline, done->bad_index, done->bad_status, done->n_bad, true);
	else if (pipeline < s->n_sources && done->bad_status < 0)
		note_bad_image(s, pipeline, done->bad_index, done->bad_status, done->n_bad + 1, false);
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
	if (++sl->items_done < sl->n_items)
		return;
	sl->state = SLOT_DONE;
	client_flush(s, sl->client);
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
		if (++sl->items_done == sl->n_items) {
			sl->state = SLOT_DONE;
			client_flush(s, sl->client);
		}
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
	sched_describe_sample(s, c->pipeline, first, where, sizeof(where));
	snprintf(buf, cap, "epoch %" PRIu64 " batch %" PRIu64 " rows %u..%u of client %" PRIu64
		 " (pid %d), from %.1000s", sl->pos.epoch, sl->pos.batch, it->first_row,
		 it->first_row + it->count - 1, c->session, (int)c->pid, where);
}

static int attach_error(char *err, size_t cap, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int attach_error(char *err, size_t cap, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return code;
}

/* Applies a resume token to a new client's stream position. */
static int resume_at(const struct source *src, const char *token, uint64_t *epoch, uint64_t *g,
		     char *err, size_t cap)
{
	struct position p;
	char why[200], shown[ESCAPE_SIZE(PROTO_TOKEN_MAX - 1)];
	const char *quoted = escape_str(token, shown, sizeof(shown)); /* a client's bytes */
	if (position_parse(token, &p, why, sizeof(why)) < 0)
		return attach_error(err, cap, -EINVAL, "resume token \"%s\" is not a loaderd position "
				    "token (ldr1:SEED:N:EPOCH:OFFSET): %s", quoted, why);
	if (p.seed != src->cfg->seed)
		return attach_error(err, cap, -EINVAL, "resume token \"%s\" is for a stream with seed %"
				    PRIu64 "; pipeline \"%s\" has seed %" PRIu64, quoted, p.seed,
				    src->cfg->name, src->cfg->seed);
	if (p.n_samples != src->n_samples)
		return attach_error(err, cap, -EINVAL, "resume token \"%s\" was saved when the dataset had %"
				    PRIu64 " samples; pipeline \"%s\" has %" PRIu64 " now", quoted,
				    p.n_samples, src->cfg->name, src->n_samples);
	*epoch = p.epoch;
	*g = p.offset;
	return 0;
}

/* A client that needs workers, while none can run, gets the reason. */
static void fail_unable(struct sched *s, struct sched_client *c)
{
	log_notice("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, s->unable);
	c->failed = true;
	s->ops.fail(c->conn, EAGAIN, s->unable);
}

void sched_workers_unable(struct sched *s, const char *why)
{
	snprintf(s->unable, sizeof(s->unable), "%s", why ? why : "");
	if (!why)
		return;
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *c = s->clients[k];
		if (uses_staging(c))
			fail_unable(s, c);
	}
}

int sched_attach(struct sched *s, const struct proto_hello *hello, pid_t pid, void *conn,
		 struct sched_client **out, struct proto_welcome *w, char *err, size_t cap)
{
	if (s->n_clients >= s->cfg->max_clients)
		return attach_error(err, cap, -EBUSY, "too many clients (max_clients = %u)",
				    s->cfg->max_clients);
	const struct source *src = NULL;
	uint32_t index = 0;
	for (size_t i = 0; i < s->n_sources; i++) {
		if (strcmp(s->sources[i].cfg->name, hello->pipeline) == 0) {
			src = &s->sources[i];
			index = (uint32_t)i;
		}
	}
	if (!src) {
		char shown[ESCAPE_SIZE(PROTO_NAME_MAX - 1)];
		return attach_error(err, cap, -ENOENT, "unknown pipeline \"%s\"",
				    escape_str(hello->pipeline, shown, sizeof(shown)));
	}
	bool device = hello->delivery == PROTO_DELIVERY_DEVICE;
	if (!device && s->unable[0]) /* a device client may be direct: sched_device_attached */
		return attach_error(err, cap, -EAGAIN, "pipeline \"%s\": %s", hello->pipeline,
				    s->unable);
	if (device && !s->has_device)
		return attach_error(err, cap, -EOPNOTSUPP, "pipeline \"%s\": GPU delivery is not "
				    "available: %s", src->cfg->name, s->no_device);
	if (device && gpu_uuid_is_zero(hello->device_uuid))
		return attach_error(err, cap, -EINVAL, "pipeline \"%s\": device delivery needs the "
				    "GPU's UUID", src->cfg->name);
	struct sampler smp = {
		.n_samples = src->n_samples, .seed = src->cfg->seed, .batch_size = src->cfg->batch_size,
		.rank = hello->rank, .world = hello->world, .shuffle = src->cfg->shuffle,
		.drop_last = src->cfg->drop_last,
	};
	if (sampler_batches(&smp, 0) == 0)
		return attach_error(err, cap, -EINVAL, "pipeline \"%s\": %" PRIu64 " samples over world "
				    "size %u with batch_size %u and drop_last leave rank %u no batch",
				    src->cfg->name, src->n_samples, hello->world, src->cfg->batch_size,
				    hello->rank);
	uint64_t epoch = 0, g = 0;
	if (hello->resume[0]) {
		int rc = resume_at(src, hello->resume, &epoch, &g, err, cap);
		if (rc < 0)
			return rc;
	}
	if (sampler_batches(&smp, g) == 0) { /* resumed at (or past) the epoch's end */
		if (epoch + 1 >= POSITION_EPOCHS)
			return attach_error(err, cap, -EINVAL, "pipeline \"%s\": resume token \"%s\" is "
					    "at the end of epoch %" PRIu64 ", the last a stream has "
					    "(epochs are below 2^32): nothing is left to deliver",
					    hello->pipeline, hello->resume, epoch);
		epoch++;
		g = 0;
	}
	struct sched_client *c = calloc(1, sizeof(*c));
	if (!c)
		return attach_error(err, cap, -ENOMEM, "out of memory");
	c->conn = conn;
	c->session = s->next_session++;
	c->pid = pid;
	escape_str(hello->client_name, c->name, sizeof(c->name));
	c->pipeline = index;
	c->sampler = smp;
	c->depth = hello->depth ? hello->depth : s->cfg->default_depth;
	if (c->depth > s->cfg->max_depth)
		c->depth = s->cfg->max_depth;
	if (device && c->depth > s->cfg->device_slots)
		c->depth = s->cfg->device_slots;
	c->epoch = epoch;
	c->g = g;
	c->segment_batches = sampler_batches(&smp, g);
	s->clients[s->n_clients++] = c;

	memset(w, 0, sizeof(*w));
	w->session = c->session;
	w->slot_bytes = s->arena->hdr->slot_bytes;
	w->arena_bytes = s->arena->bytes;
	w->n_samples = src->n_samples;
	w->seed = src->cfg->seed;
	w->epoch = epoch;
	w->offset = g;
	w->batch_size = src->cfg->batch_size;
	w->rank = hello->rank;
	w->world = hello->world;
	w->depth = c->depth;
	w->shuffle = src->cfg->shuffle;
	w->drop_last = src->cfg->drop_last;
	w->n_tensors = src->n_tensors;
	memcpy(w->tensors, src->tensors, sizeof(w->tensors));
	*out = c;
	if (device) {
		char uuid[GPU_UUID_TEXT_MAX];
		gpu_uuid_format(hello->device_uuid, uuid);
		c->device = true;
		c->attaching = true;
		c->dev_slot_bytes = (src->batch_bytes + 4095) & ~(uint64_t)4095;
		memcpy(c->uuid, hello->device_uuid, sizeof(c->uuid));
		c->welcome = *w;
		c->welcome.delivery = PROTO_DELIVERY_DEVICE;
		log_info("client %" PRIu64 " (pid %d%s%s) attaching to pipeline \"%s\" on GPU %s: %u "
			 "device slots of %" PRIu64 " bytes", c->session, (int)pid, c->name[0] ? ", " : "",
			 c->name, src->cfg->name, uuid, c->depth, c->dev_slot_bytes);
		s->dev_ops.attach(s->dev_ops.ctx, c, hello->device_uuid, c->pipeline, c->depth,
				  c->dev_slot_bytes);
		return SCHED_ATTACH_PENDING;
	}
	log_info("client %" PRIu64 " (pid %d%s%s) attached to pipeline \"%s\" as rank %u of %u, "
		 "depth %u, epoch %" PRIu64 " offset %" PRIu64, c->session, (int)pid,
		 c->name[0] ? ", " : "", c->name, src->cfg->name, hello->rank, hello->world,
		 c->depth, epoch, g);
	sched_fill(s);
	return 0;
}

/* The process of a detached device client has exited: its ring can go. */
static void retire_ring(void *arg)
{
	struct sched_client *c = arg;
	c->retire_sched->dev_ops.retire(c->retire_sched->dev_ops.ctx, c->pc);
}

void sched_detach(struct sched *s, struct sched_client *c, bool handles_closed)
{
	for (uint32_t i = 0; i < s->n_slots; i++) {
		struct slot *sl = &s->slots[i];
		if (sl->client != c)
			continue;
		if (sl->state == SLOT_FILLING) {
			sl->state = SLOT_ORPHAN;
			sl->client = NULL;
		} else if (sl->state == SLOT_PINNING) {
			sl->client = NULL; /* freed when the pinner lets go of it */
		} else {
			slot_free(s, sl);
		}
	}
	for (uint32_t i = 0; i < s->n_clients; i++) {
		if (s->clients[i] == c) {
			s->clients[i] = s->clients[--s->n_clients];
			break;
		}
	}
	log_info("client %" PRIu64 " (pid %d) detached after %" PRIu64 " batches", c->session,
		 (int)c->pid, c->released);
	c->conn = NULL;
	if (!c->device || (!c->attaching && !c->pc)) {
		free(c);
		sched_fill(s);
		return;
	}
	c->retiring_next = s->retiring;
	s->retiring = c;
	if (c->attaching) {
		c->gone = true; /* sched_device_attached retires or frees it */
	} else if (handles_closed) {
		s->dev_ops.retire(s->dev_ops.ctx, c->pc);
	} else {
		log_info("client %" PRIu64 ": its GPU ring is freed once pid %d has exited", c->session,
			 (int)c->pid);
		c->retire_sched = s;
		s->ops.watch_exit(s->ops.ctx, c->pid, retire_ring, c);
	}
	sched_fill(s);
}

static void release_device(struct sched *s, struct sched_client *c, const struct proto_release *r)
{
	struct dev_slot *ds = r->slot < c->depth ? &c->dev[r->slot] : NULL;
	if (!ds || ds->state != DEV_HELD || ds->generation != r->generation || ds->pos.seq != r->seq) {
		log_debug("client %" PRIu64 ": stale or duplicate RELEASE of device slot %u generation "
			  "%u seq %" PRIu64 "; ignored", c->session, r->slot, r->generation, r->seq);
		return;
	}
	ds->state = DEV_FREE;
	c->in_flight--;
	c->released++;
	sched_fill(s);
}

void sched_release(struct sched *s, struct sched_client *c, const struct proto_release *r)
{
	if (c->device) {
		release_device(s, c, r);
		return;
	}
	struct slot *sl = r->slot < s->n_slots ? &s->slots[r->slot] : NULL;
	if (!sl || sl->state != SLOT_HELD || sl->client != c || sl->generation != r->generation ||
	    sl->pos.seq != r->seq) {
		log_debug("client %" PRIu64 ": stale or duplicate RELEASE of slot %u generation %u "
			  "seq %" PRIu64 "; ignored", c->session, r->slot, r->generation, r->seq);
		return;
	}
	slot_free(s, sl);
	c->in_flight--;
	c->released++;
	sched_fill(s);
}

void sched_describe_arena(const struct sched *s, struct status_text *t)
{
	status_printf(t, "arena: %zu bytes, %u staging slots of %" PRIu64 " bytes, %u in use, "
		      "share %u\n", s->arena->bytes, s->n_slots, s->arena->hdr->slot_bytes,
		      s->n_slots - s->free_slots, slot_share(s));
}

void sched_describe(const struct sched *s, struct status_text *t)
{
	status_printf(t, "pipelines: %zu\n", s->n_sources);
	for (size_t i = 0; i < s->n_sources; i++) {
		const struct source *src = &s->sources[i];
		status_printf(t, "  pipeline %s source %s:%s samples %" PRIu64 " batch_size %u shuffle %d "
			      "drop_last %d\n", src->cfg->name,
			      config_source_name(src->cfg->kind), src->cfg->path,
			      src->n_samples, src->cfg->batch_size, src->cfg->shuffle, src->cfg->drop_last);
	}
	status_printf(t, "clients: %u\n", s->n_clients);
	for (uint32_t i = 0; i < s->n_clients; i++) {
		const struct sched_client *c = s->clients[i];
		status_printf(t, "  client %" PRIu64 " pid %d name \"%s\" pipeline %s rank %u world %u "
			      "depth %u epoch %" PRIu64 " sent %" PRIu64 " released %" PRIu64
			      " in_flight %u staging %u", c->session, (int)c->pid, c->name,
			      s->sources[c->pipeline].cfg->name, c->sampler.rank, c->sampler.world,
			      c->depth, c->epoch, c->send_seq, c->released, c->in_flight, c->staging);
		if (c->device && c->pc)
			s->dev_ops.describe_client(c->pc, t);
		status_printf(t, "\n");
	}
	status_printf(t, "errors: read %" PRIu64 " bad_images %" PRIu64 " substituted %" PRIu64 "\n",
		      s->read_errors, s->bad_images, s->substituted);
}

/* ---- device delivery: the pinner's answers ---- */

void sched_device_attached(struct sched *s, void *tag, void *pc, int rc, const char *text,
			   const struct proto_device *dev, bool direct)
{
	struct sched_client *c = tag;
	c->attaching = false;
	c->pc = pc;
	c->direct = direct;
	if (c->gone) { /* never saw WELCOME: it holds no handle */
		if (pc)
			s->dev_ops.retire(s->dev_ops.ctx, pc);
		else
			sched_device_retired(s, c);
		return;
	}
	if (rc < 0) {
		char why[PROTO_ERROR_TEXT_MAX];
		snprintf(why, sizeof(why), "pipeline \"%s\": %s", s->sources[c->pipeline].cfg->name, text);
		log_notice("client %" PRIu64 " (pid %d) refused: %s", c->session, (int)c->pid, why);
		c->failed = true; /* the server closes; sched_detach frees it */
		s->ops.attached(c->conn, rc, NULL, why);
		return;
	}
	if (!direct && s->unable[0]) {
		c->failed = true;
		s->ops.attached(c->conn, -EAGAIN, NULL, s->unable);
		return;
	}
	c->welcome.device = *dev;
	s->ops.attached(c->conn, 0, &c->welcome, NULL);
	sched_fill(s);
}

void sched_device_issued(struct sched *s, void *tag, uint32_t d)
{
	struct sched_client *c = tag;
	if (!c->conn || c->failed || d >= c->depth || c->dev[d].state != DEV_COPYING)
		return;
	struct dev_slot *ds = &c->dev[d];
	ds->state = DEV_HELD;
	struct proto_ready r = ready_of(&ds->pos, d, ds->generation, (uint64_t)d * c->dev_slot_bytes);
	c->send_seq++;
	s->ops.ready(c->conn, &r);
}

void sched_device_staging_free(struct sched *s, uint32_t slot, uint32_t generation)
{
	struct slot *sl = slot < s->n_slots ? &s->slots[slot] : NULL;
	if (!sl || sl->state != SLOT_PINNING || sl->generation != generation) {
		log_warning("pinner returned staging slot %u generation %u, which it does not hold; "
			    "ignored", slot, generation);
		return;
	}
	slot_free(s, sl);
	sched_fill(s);
}

void sched_device_failed(struct sched *s, void *tag, const char *text)
{
	struct sched_client *c = tag;
	if (!c->conn || c->failed)
		return;
	log_error("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
	c->failed = true;
	s->ops.fail(c->conn, EIO, text);
}

void sched_device_retired(struct sched *s, void *tag)
{
	struct sched_client *c = tag;
	for (struct sched_client **pp = &s->retiring; *pp; pp = &(*pp)->retiring_next) {
		if (*pp == c) {
			*pp = c->retiring_next;
			break;
		}
	}
	if (c->pc)
		log_info("client %" PRIu64 " (pid %d): GPU ring freed", c->session, (int)c->pid);
	free(c);
}
