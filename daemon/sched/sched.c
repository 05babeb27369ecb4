/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched: the scheduler made and freed, wired to its workers and GPU
 * thread, and its status lines (sched.h; the files and their order are
 * in sched_impl.h).
 */
#include "daemon/sched/sched.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "daemon/core/stagestats.h"
#include "daemon/core/status.h"
#include "daemon/sched/sched_impl.h"

static int sched_room(struct sched *s, uint32_t max_items, uint32_t max_doc_rows,
		      uint32_t max_blend_rows);

struct sched *sched_create(const struct config *cfg, struct arena *arena,
			   const struct source *sources, size_t n_sources,
			   const struct sched_ops *ops)
{
	struct sched *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->cfg = cfg;
	s->arena = arena;
	stagestats_enable(cfg->stage_timing);
	s->sources = sources;
	s->n_sources = ARENA_PIPELINES_MAX;
	s->ops = *ops;
	s->n_slots = arena->hdr->n_slots;
	s->free_slots = s->n_slots;
	s->next_session = 1;
	sched_docwork_init(s);
	snprintf(s->no_device, sizeof(s->no_device), "this loaderd serves host delivery only");
	s->slots = calloc(s->n_slots, sizeof(*s->slots));
	s->clients = calloc(cfg->max_clients, sizeof(*s->clients));
	if (!s->slots || !s->clients || sched_room(s, 1, 0, 0) < 0)
		goto free_sched;
	for (size_t i = 0; i < n_sources; i++)
		if (sched_pipeline_add(s, (uint32_t)i) < 0)
			goto free_sched;
	return s;
free_sched:
	sched_free(s);
	return NULL;
}

/* Room in every slot for batches of up to max_items items, max_doc_rows
 * rows of a document-shuffled pipeline and max_blend_rows rows of a blend:
 * the slots' arrays grow (their contents kept), never shrink. 0 or
 * -ENOMEM (what grew stays grown). */
static int sched_room(struct sched *s, uint32_t max_items, uint32_t max_doc_rows,
		      uint32_t max_blend_rows)
{
	if (max_items > s->max_items) {
		size_t cap = (size_t)s->n_slots * max_items;
		uint32_t *refs = calloc(cap, sizeof(uint32_t));
		if (!refs)
			return -ENOMEM;
		for (size_t k = 0; k < s->pending.count; k++) /* the queue, in order, from 0 */
			refs[k] = s->pending.refs[(s->pending.head + k) % s->pending.cap];
		free(s->pending.refs);
		s->pending.refs = refs;
		s->pending.cap = cap;
		s->pending.head = 0;
		for (uint32_t i = 0; i < s->n_slots; i++) {
			struct item *items = realloc(s->slots[i].items, max_items * sizeof(struct item));
			if (!items)
				return -ENOMEM;
			s->slots[i].items = items;
		}
		s->max_items = max_items;
	}
	if (max_blend_rows > s->max_blend_rows) {
		for (uint32_t i = 0; i < s->n_slots; i++) {
			struct slot *sl = &s->slots[i];
			uint64_t *a = calloc(3 * (size_t)max_blend_rows, sizeof(uint64_t));
			if (!a)
				return -ENOMEM;
			for (uint32_t r = 0; sl->blend_member && r < s->max_blend_rows; r++) {
				a[r] = sl->blend_member[r];
				a[max_blend_rows + r] = sl->blend_sample[r];
				a[2 * (size_t)max_blend_rows + r] = sl->blend_epoch[r];
			}
			free(sl->blend_member);
			sl->blend_member = a;
			sl->blend_sample = a + max_blend_rows;
			sl->blend_epoch = a + 2 * (size_t)max_blend_rows;
		}
		s->max_blend_rows = max_blend_rows;
	}
	if (max_doc_rows > s->max_doc_rows) {
		for (uint32_t i = 0; i < s->n_slots; i++) {
			struct slot *sl = &s->slots[i];
			uint64_t *a = calloc(2 * (size_t)max_doc_rows, sizeof(uint64_t));
			if (!a)
				return -ENOMEM;
			for (uint32_t r = 0; sl->doc_pos && r < s->max_doc_rows; r++) {
				a[r] = sl->doc_pos[r];
				a[max_doc_rows + r] = sl->doc_skip[r];
			}
			free(sl->doc_pos);
			sl->doc_pos = a;
			sl->doc_skip = a + max_doc_rows;
		}
		s->max_doc_rows = max_doc_rows;
	}
	return 0;
}

int sched_pipeline_add(struct sched *s, uint32_t entry)
{
	const struct source *src = &s->sources[entry];
	uint32_t b = src->cfg->batch_size, c = src->chunk;
	uint32_t items = src->n_members ? b : (b + c - 1) / c; /* a blend: rows of one member */
	bool docs = src->desc.docs.n_documents;
	for (uint32_t m = 0; m < src->n_members; m++)
		docs |= src->members[m].src.desc.docs.n_documents > 0;
	int rc = sched_room(s, items > s->max_items ? items : s->max_items,
			    docs && b > s->max_doc_rows ? b : s->max_doc_rows,
			    src->n_members && b > s->max_blend_rows ? b : s->max_blend_rows);
	if (rc < 0)
		return rc;
	s->live[entry] = true;
	stagestats_reset(entry);
	return 0;
}

bool sched_pipeline_live(const struct sched *s, uint32_t entry)
{
	return entry < ARENA_PIPELINES_MAX && s->live[entry];
}

void sched_pipeline_remove(struct sched *s, uint32_t entry, const char *text)
{
	s->live[entry] = false;
	for (uint32_t k = 0; k < s->n_clients; k++) {
		struct sched_client *c = s->clients[k];
		if (c->pipeline != entry || c->failed)
			continue;
		log_notice("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
		c->failed = true;
		s->ops.fail(c->conn, ENOENT, text);
		group_fail_others(s, c, ENOENT, text);
	}
}

uint32_t sched_pipeline_clients(const struct sched *s, uint32_t entry)
{
	uint32_t n = 0;
	for (uint32_t k = 0; k < s->n_clients; k++)
		n += s->clients[k]->pipeline == entry;
	return n;
}

bool sched_pipeline_busy(const struct sched *s, uint32_t entry)
{
	for (uint32_t i = 0; i < s->n_slots; i++)
		if (s->slots[i].state != SLOT_FREE && s->slots[i].pipeline == entry)
			return true;
	for (uint32_t k = 0; k < s->n_clients; k++)
		if (s->clients[k]->pipeline == entry)
			return true;
	for (const struct sched_client *c = s->retiring; c; c = c->retiring_next)
		if (c->pipeline == entry)
			return true;
	return false;
}

void sched_pipeline_forget(struct sched *s, uint32_t entry)
{
	free(s->bad_seen[entry]);
	s->bad_seen[entry] = NULL;
	docorder_cache_drop(&s->docorder, entry);
	const struct source *src = &s->sources[entry];
	for (uint32_t m = 0; m < src->n_members; m++)
		docorder_cache_drop(&s->docorder, src->members[m].arena_index);
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

uint64_t sched_expire_groups(struct sched *s)
{
	if (s->cfg->group_timeout_ms == 0)
		return 0;
	uint64_t left = group_expire(s, sched_now_ns(), s->cfg->group_timeout_ms * 1000000ull);
	return left == UINT64_MAX ? 0 : left / 1000000 + 1;
}

void sched_describe_sample(struct sched *s, uint32_t pipeline, uint64_t sample, char *buf,
			   size_t cap)
{
	sched_describe_split_sample(s, pipeline, SPLIT_COUNT, sample, buf, cap);
}

void sched_describe_arena(const struct sched *s, struct status_text *t)
{
	status_object(t, "arena");
	status_field(t, "bytes", "arena: %zu bytes", s->arena->bytes);
	status_field(t, "staging_slots", ", %u staging slots", s->n_slots);
	status_field(t, "slot_bytes", " of %" PRIu64 " bytes", s->arena->hdr->slot_bytes);
	status_field(t, "in_use", ", %u in use", s->n_slots - s->free_slots);
	status_field(t, "share", ", share %u\n", sched_slot_share(s));
	status_close(t);
}

/* The workers' figures of table entry e into h: every worker's stats
 * block that counts for e's generation (shm/layout.h). */
static void worker_stages(const struct sched *s, uint32_t e, struct hist h[PSTAGE_COUNT])
{
	uint32_t gen = arena_pipeline(s->arena, e)->generation;
	for (uint32_t w = 0; w < s->arena->hdr->n_workers_max; w++) {
		const struct worker_stats *st = arena_worker_stats(s->arena, w);
		if (atomic_load_explicit(&st->gen[e], memory_order_acquire) != gen)
			continue;
		struct hist got[PSTAGE_WORKER_COUNT] = {0};
		for (int k = 0; k < PSTAGE_WORKER_COUNT; k++)
			hist_atomic_read(&st->stage[e][k], &got[k]);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&st->gen[e], memory_order_relaxed) != gen)
			continue; /* cleared for a newer generation meanwhile */
		for (int k = 0; k < PSTAGE_WORKER_COUNT; k++)
			hist_merge(&h[k], &got[k]);
	}
}

/* Pipeline i's stages, the workers' and the daemon's; a blend's workers
 * work under its members' entries. */
static void pipeline_stages(const struct sched *s, uint32_t i, struct status_text *t)
{
	struct hist h[PSTAGE_COUNT] = {0};
	const struct source *src = &s->sources[i];
	if (src->n_members == 0)
		worker_stages(s, i, h);
	for (uint32_t m = 0; m < src->n_members; m++)
		worker_stages(s, src->members[m].arena_index, h);
	stagestats_read(i, h);
	stagestats_describe(t, h);
}

void sched_describe(const struct sched *s, struct status_text *t)
{
	struct status_list l;
	size_t n = 0;
	for (size_t i = 0; i < s->n_sources; i++)
		n += s->live[i];
	status_printf(t, "pipelines: %zu\n", n);
	status_list_begin(t, &l, "pipelines");
	for (size_t i = 0; i < s->n_sources; i++) {
		const struct source *src = &s->sources[i];
		if (!s->live[i] || !status_item_begin(t, &l))
			continue;
		source_describe(src, t);
		pipeline_stages(s, (uint32_t)i, t);
		if (src->cfg->job[0]) { /* declared by a client (daemon/jobs.h) */
			status_object(t, "declared");
			status_quoted(t, "job", "    declared job ", src->cfg->job);
			status_field(t, "pid", " pid %d\n", (int)src->cfg->declared_pid);
			status_close(t);
		}
		status_item_end(t, &l);
	}
	status_list_end(t, &l);
	session_describe(s, t);
}

void sched_describe_errors(const struct sched *s, struct status_text *t)
{
	status_object(t, "errors");
	status_field(t, "read", "errors: read %" PRIu64, s->read_errors);
	status_field(t, "bad_images", " bad_images %" PRIu64, s->bad_images);
	status_field(t, "substituted", " substituted %" PRIu64 "\n", s->substituted);
	status_close(t);
}

size_t sched_waits(const struct sched *s, struct sched_wait *out, size_t cap)
{
	size_t n = 0;
	for (uint32_t i = 0; i < s->n_clients && n < cap; i++) {
		const struct sched_client *c = s->clients[i];
		if (!c || !c->conn || c->failed || c->direct || c->attaching)
			continue;
		out[n++] = (struct sched_wait){.session = c->session, .pid = c->pid,
					       .releases = c->share.releases,
					       .wait_ns = c->share.wait_ns};
	}
	return n;
}
