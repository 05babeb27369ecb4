/*
 * sched: the scheduler made and freed, wired to its workers and GPU
 * thread, and its status lines (sched.h; the files and their order are
 * in sched_impl.h).
 */
#include "daemon/sched/sched.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/core/status.h"
#include "daemon/sched/sched_impl.h"

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
	status_printf(t, "arena: %zu bytes, %u staging slots of %" PRIu64 " bytes, %u in use, "
		      "share %u\n", s->arena->bytes, s->n_slots, s->arena->hdr->slot_bytes,
		      s->n_slots - s->free_slots, sched_slot_share(s));
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
