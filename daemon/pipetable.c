/* SPDX-License-Identifier: Apache-2.0 */
/* pipetable: the pipelines while loaderd runs (pipetable.h). */
#include "daemon/pipetable.h"

#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/core/progress.h"
#include "daemon/sched/sched.h"

enum pipe_state {
	PIPE_FREE = 0,
	PIPE_LIVE,     /* a pipeline clients may attach to */
	PIPE_MEMBER,   /* a blend's member (owner: the blend's entry) */
	PIPE_RESERVED, /* pipetable_reserve took it; pipetable_commit fills it */
	PIPE_REMOVED,  /* removed; freed once nothing names it (pipetable_reap) */
};

struct pipe_entry {
	enum pipe_state state;
	uint32_t owner;        /* PIPE_MEMBER, and a reserved member: its blend's entry */
	uint32_t generation;   /* the arena entry's (arena_pipeline.generation) */
	bool runtime;          /* its list's share is in the runtime index area */
	uint64_t index_bytes;  /* that share's bytes (at pt->index_at[entry]) */
	struct pipeline_cfg cfg; /* a pipeline's (not a member's) running configuration */
};

struct pipetable {
	uv_loop_t *loop;
	struct source *sources; /* ARENA_PIPELINES_MAX, the daemon's */
	struct arena *arena;
	struct sched *sched;
	uint64_t runtime_at, runtime_end; /* the runtime index area, in the index area */
	uint64_t index_at[ARENA_PIPELINES_MAX]; /* each entry's list, in the index area */
	struct pipe_entry e[ARENA_PIPELINES_MAX];
	unsigned opens_running;   /* opens under way on the thread pool */
	atomic_bool stopping;     /* pipetable_stop: opens under way give up */
};

struct pipetable *pipetable_create(uv_loop_t *loop, const struct config *cfg,
				   struct source *sources, size_t n, const uint64_t *index_at,
				   uint64_t runtime_at)
{
	struct pipetable *pt = calloc(1, sizeof(*pt));
	if (!pt)
		return NULL;
	pt->loop = loop;
	pt->sources = sources;
	pt->runtime_at = runtime_at;
	pt->runtime_end = runtime_at + arena_align(cfg->runtime_index_bytes);
	memcpy(pt->index_at, index_at, sizeof(pt->index_at));
	for (size_t i = 0; i < n; i++) {
		pt->e[i].state = PIPE_LIVE;
		pt->e[i].cfg = cfg->pipelines[i];
		sources[i].cfg = &pt->e[i].cfg;
		for (uint32_t m = 0; m < sources[i].n_members; m++) {
			uint32_t at = sources[i].members[m].arena_index;
			pt->e[at].state = PIPE_MEMBER;
			pt->e[at].owner = (uint32_t)i;
		}
	}
	return pt;
}

void pipetable_set(struct pipetable *pt, struct arena *arena, struct sched *sched)
{
	pt->arena = arena;
	pt->sched = sched;
}

static void unreserve(struct pipetable *pt, struct pipe_open *list);

void pipetable_discard(struct pipetable *pt, struct pipe_open *list)
{
	unreserve(pt, list);
	while (list) {
		struct pipe_open *next = list->next;
		source_close(&list->src);
		free(list);
		list = next;
	}
}

void pipetable_free(struct pipetable *pt)
{
	if (!pt)
		return;
	free(pt);
}

int pipetable_find(const struct pipetable *pt, const char *name)
{
	return pipetable_find_declared(pt, "", name);
}

int pipetable_find_declared(const struct pipetable *pt, const char *job, const char *name)
{
	for (int i = 0; i < ARENA_PIPELINES_MAX; i++)
		if (pt->e[i].state == PIPE_LIVE && strcmp(pt->e[i].cfg.job, job) == 0 &&
		    strcmp(pt->e[i].cfg.name, name) == 0)
			return i;
	return -1;
}

uint64_t pipetable_index_bytes(const struct source *src)
{
	uint64_t bytes = arena_align(source_index_bytes(src));
	for (uint32_t m = 0; m < src->n_members; m++)
		bytes += arena_align(source_index_bytes(&src->members[m].src));
	return bytes;
}

const struct pipeline_cfg *pipetable_cfg(const struct pipetable *pt, int entry)
{
	return &pt->e[entry].cfg;
}

uint64_t pipetable_slot_bytes(const struct pipetable *pt)
{
	return pt->arena->hdr->slot_bytes;
}

size_t pipetable_count(const struct pipetable *pt)
{
	size_t n = 0;
	for (int i = 0; i < ARENA_PIPELINES_MAX; i++)
		n += pt->e[i].state == PIPE_LIVE;
	return n;
}

uint32_t pipetable_entry_clients(const struct pipetable *pt, int entry)
{
	return pt->e[entry].state != PIPE_LIVE ? 0 :
	       sched_pipeline_clients(pt->sched, (uint32_t)entry);
}

uint32_t pipetable_clients(const struct pipetable *pt, const char *name)
{
	int entry = pipetable_find(pt, name);
	return entry < 0 || !pt->sched ? 0 : sched_pipeline_clients(pt->sched, (uint32_t)entry);
}

/* ---- opening on the thread pool ---- */

/* A pool thread: the source's data checked and listed, into the
 * pipe_open's own memory. */
static void open_work(uv_work_t *w)
{
	struct pipe_open *po = w->data;
	progress_scope(po->cfg.name); /* status lists its scan (daemon/core/progress.h) */
	progress_set_cancel(&po->pt->stopping);
	po->rc = source_open(&po->cfg, &po->src, po->err, sizeof(po->err));
	progress_set_cancel(NULL);
	progress_scope(NULL);
}

static void open_after(uv_work_t *w, int status)
{
	struct pipe_open *po = w->data;
	struct pipetable *pt = po->pt;
	if (status < 0 && po->rc == 0) { /* cancelled: the loop is closing */
		po->rc = status;
		snprintf(po->err, sizeof(po->err), "pipeline \"%s\": %s", po->cfg.name,
			 uv_strerror(status));
	}
	pt->opens_running--;
	po->done(po, po->ctx);
}

int pipetable_open(struct pipetable *pt, const struct pipeline_cfg *cfg,
		   void (*done)(struct pipe_open *po, void *ctx), void *ctx, struct pipe_open **out)
{
	struct pipe_open *po = calloc(1, sizeof(*po));
	if (!po)
		return -ENOMEM;
	po->pt = pt;
	po->cfg = *cfg;
	po->entry = -1;
	po->done = done;
	po->ctx = ctx;
	po->work.data = po;
	int rc = uv_queue_work(pt->loop, &po->work, open_work, open_after);
	if (rc < 0) {
		free(po);
		return rc;
	}
	pt->opens_running++;
	*out = po;
	return 0;
}

/* A reserved list's sample lists, copied into the arena on the pool. */
struct pipe_place {
	uv_work_t work;
	struct pipetable *pt;
	struct pipe_open *list;
	void (*done)(void *ctx);
	void *ctx;
};

/* A pool thread: only the list's reserved shares of the index area are
 * written, which nothing reads before pipetable_commit. */
static void place_work(uv_work_t *w)
{
	struct pipe_place *pp = w->data;
	for (struct pipe_open *po = pp->list; po; po = po->next)
		source_place_index(&po->src, (uint32_t)po->entry, pp->pt->index_at, pp->pt->arena);
}

static void place_after(uv_work_t *w, int status)
{
	struct pipe_place *pp = w->data;
	(void)status; /* cancelled: the lists are still the sources', which commit copies */
	pp->pt->opens_running--;
	pp->done(pp->ctx);
	free(pp);
}

int pipetable_place(struct pipetable *pt, struct pipe_open *list, void (*done)(void *ctx),
		    void *ctx)
{
	struct pipe_place *pp = calloc(1, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	*pp = (struct pipe_place){.pt = pt, .list = list, .done = done, .ctx = ctx};
	pp->work.data = pp;
	int rc = uv_queue_work(pt->loop, &pp->work, place_work, place_after);
	if (rc < 0) {
		free(pp);
		return rc;
	}
	pt->opens_running++;
	return 0;
}

void pipetable_stop(struct pipetable *pt)
{
	if (pt)
		atomic_store(&pt->stopping, true);
}

/* ---- the runtime index area: first fit between the shares taken ---- */

static bool index_overlaps(const struct pipetable *pt, uint64_t at, uint64_t bytes)
{
	for (int i = 0; i < ARENA_PIPELINES_MAX; i++) {
		const struct pipe_entry *e = &pt->e[i];
		if (e->state != PIPE_FREE && e->runtime && e->index_bytes &&
		    at < pt->index_at[i] + e->index_bytes && pt->index_at[i] < at + bytes)
			return true;
	}
	return false;
}

/* The lowest place for bytes that no share overlaps: candidates are the
 * area's start and the end of every share. */
static int index_alloc(const struct pipetable *pt, uint64_t bytes, uint64_t *at)
{
	bytes = arena_align(bytes);
	uint64_t best = UINT64_MAX;
	for (int i = -1; i < ARENA_PIPELINES_MAX; i++) {
		uint64_t c = pt->runtime_at;
		if (i >= 0) {
			const struct pipe_entry *e = &pt->e[i];
			if (e->state == PIPE_FREE || !e->runtime || !e->index_bytes)
				continue;
			c = pt->index_at[i] + e->index_bytes;
		}
		if (c < best && c + bytes <= pt->runtime_end && !index_overlaps(pt, c, bytes))
			best = c;
	}
	if (best == UINT64_MAX)
		return -ENOSPC;
	*at = best;
	return 0;
}

static uint64_t index_used(const struct pipetable *pt)
{
	uint64_t used = 0;
	for (int i = 0; i < ARENA_PIPELINES_MAX; i++)
		if (pt->e[i].state != PIPE_FREE && pt->e[i].runtime)
			used += pt->e[i].index_bytes;
	return used;
}

/* ---- reserving, committing, removing ---- */

static void entry_release(struct pipetable *pt, int i)
{
	pt->e[i] = (struct pipe_entry){.generation = pt->e[i].generation};
}

/* Entry i (a pipeline's or a member's) for src, with its list's share. */
static int reserve_entry(struct pipetable *pt, const struct source *src, uint32_t owner,
			 int *entry)
{
	int i = 0;
	while (i < ARENA_PIPELINES_MAX && pt->e[i].state != PIPE_FREE)
		i++;
	if (i == ARENA_PIPELINES_MAX)
		return -EMFILE;
	uint64_t bytes = source_index_bytes(src), at = 0;
	if (bytes && index_alloc(pt, bytes, &at) < 0)
		return -ENOSPC;
	pt->e[i].state = PIPE_RESERVED;
	pt->e[i].owner = owner;
	pt->e[i].runtime = bytes > 0;
	pt->e[i].index_bytes = bytes ? arena_align(bytes) : 0;
	pt->index_at[i] = at;
	*entry = i;
	return 0;
}

/* Undoes the reservations of list (a refused reload). */
static void unreserve(struct pipetable *pt, struct pipe_open *list)
{
	for (struct pipe_open *po = list; po; po = po->next) {
		if (po->entry < 0)
			continue;
		for (uint32_t m = 0; m < po->src.n_members; m++)
			if (pt->e[po->src.members[m].arena_index].state == PIPE_RESERVED)
				entry_release(pt, (int)po->src.members[m].arena_index);
		entry_release(pt, po->entry);
		po->entry = -1;
	}
}

/* Why pipeline po cannot be reserved (rc), in text. */
static int reserve_refused(struct pipetable *pt, const struct pipe_open *po, int rc,
			   const struct source *what, char *text, size_t cap)
{
	if (rc == -EMFILE) {
		unsigned used = 0;
		for (int i = 0; i < ARENA_PIPELINES_MAX; i++)
			used += pt->e[i].state != PIPE_FREE;
		snprintf(text, cap, "pipeline \"%s\": no free entry in the pipeline table (%u entries, "
			 "one per pipeline and blend member, %u of them taken or still draining)",
			 po->cfg.name, ARENA_PIPELINES_MAX, used);
		return -ENOSPC;
	}
	uint64_t used = index_used(pt), size = pt->runtime_end - pt->runtime_at;
	snprintf(text, cap, "pipeline \"%s\": its sample list%s needs %" PRIu64 " bytes of the index "
		 "area for pipelines added while running, of which %" PRIu64 " of %" PRIu64 " bytes "
		 "(runtime_index_bytes in [daemon]) are taken: raise runtime_index_bytes (it takes a "
		 "restart)", po->cfg.name, what != &po->src ? " (of a blend member)" : "",
		 arena_align(source_index_bytes(what)), used, size);
	return -ENOSPC;
}

int pipetable_reserve(struct pipetable *pt, struct pipe_open *list, char *text, size_t cap)
{
	pipetable_reap(pt);
	int rc = 0;
	for (struct pipe_open *po = list; po; po = po->next) {
		const struct source *src = &po->src;
		if (po->cfg.direct) {
			snprintf(text, cap, "pipeline \"%s\": direct = on is for pipelines configured "
				 "when loaderd starts, whose files are page-locked then (a restart)",
				 po->cfg.name);
			rc = -EOPNOTSUPP;
			break;
		}
		if (src->slot_bytes > pt->arena->hdr->slot_bytes) {
			snprintf(text, cap, "pipeline \"%s\": a batch needs a staging slot of %" PRIu64
				 " bytes; the slots are %" PRIu64 " bytes (the largest batch at start, or "
				 "staging_slot_bytes in [daemon]): raise staging_slot_bytes (it takes a "
				 "restart) or lower batch_size", po->cfg.name, src->slot_bytes,
				 pt->arena->hdr->slot_bytes);
			rc = -ENOSPC;
			break;
		}
		rc = reserve_entry(pt, src, 0, &po->entry);
		if (rc < 0) {
			rc = reserve_refused(pt, po, rc, src, text, cap);
			break;
		}
		for (uint32_t m = 0; m < src->n_members && rc == 0; m++) {
			int at;
			rc = reserve_entry(pt, &src->members[m].src, (uint32_t)po->entry, &at);
			if (rc < 0)
				rc = reserve_refused(pt, po, rc, &src->members[m].src, text, cap);
			else
				po->src.members[m].arena_index = (uint32_t)at;
		}
		if (rc < 0)
			break;
	}
	if (rc < 0)
		unreserve(pt, list);
	return rc;
}

/* Writes entry i's table entry (filled by its source's fill_arena) with a
 * new generation. */
static void entry_stamp(struct pipetable *pt, uint32_t i)
{
	arena_pipeline(pt->arena, i)->generation = ++pt->e[i].generation;
}

size_t pipetable_commit(struct pipetable *pt, struct pipe_open *list)
{
	size_t n = 0;
	while (list) {
		struct pipe_open *po = list;
		list = po->next;
		uint32_t i = (uint32_t)po->entry;
		struct pipe_entry *e = &pt->e[i];
		struct source *src = &pt->sources[i];
		e->cfg = po->cfg;
		*src = po->src;
		src->cfg = &e->cfg;
		src->added = true;
		for (uint32_t m = 0; m < src->n_members; m++) {
			src->members[m].src.added = true;
			pt->e[src->members[m].arena_index].state = PIPE_MEMBER;
		}
		source_fill_arena_entry(src, i, pt->index_at, pt->arena);
		entry_stamp(pt, i);
		for (uint32_t m = 0; m < src->n_members; m++)
			entry_stamp(pt, src->members[m].arena_index);
		e->state = PIPE_LIVE;
		free(po);
		if (sched_pipeline_add(pt->sched, i) < 0) {
			log_error("pipeline \"%s\": out of memory making room for its batches; it is "
				  "not added", e->cfg.name);
			e->state = PIPE_REMOVED;
			continue;
		}
		log_notice("pipeline \"%s\" added (table entry %u)", e->cfg.name, i);
		n++;
	}
	return n;
}

void pipetable_remove(struct pipetable *pt, int entry, const char *text)
{
	pt->e[entry].state = PIPE_REMOVED;
	sched_pipeline_remove(pt->sched, (uint32_t)entry, text);
	log_notice("%s", text);
}

void pipetable_reap(struct pipetable *pt)
{
	for (int i = 0; i < ARENA_PIPELINES_MAX; i++) {
		if (pt->e[i].state != PIPE_REMOVED || sched_pipeline_busy(pt->sched, (uint32_t)i))
			continue;
		struct source *src = &pt->sources[i];
		sched_pipeline_forget(pt->sched, (uint32_t)i);
		for (int k = 0; k < ARENA_PIPELINES_MAX; k++)
			if (pt->e[k].state == PIPE_MEMBER && pt->e[k].owner == (uint32_t)i)
				entry_release(pt, k);
		log_info("pipeline \"%s\": its table entry %d is free again", pt->e[i].cfg.name, i);
		source_close(src);
		memset(src, 0, sizeof(*src));
		entry_release(pt, i);
	}
}

void pipetable_describe(struct pipetable *pt, struct status_text *t)
{
	pipetable_reap(pt);
	unsigned draining = 0;
	for (int i = 0; i < ARENA_PIPELINES_MAX; i++)
		draining += pt->e[i].state == PIPE_REMOVED;
	status_object(t, "runtime_index");
	status_field(t, "taken_bytes", "runtime_index: %" PRIu64, index_used(pt));
	status_field(t, "bytes", " of %" PRIu64 " bytes taken", pt->runtime_end - pt->runtime_at);
	status_field(t, "draining", ", %u removed ", draining);
	status_printf(t, "pipeline%s draining\n", draining == 1 ? "" : "s");
	status_close(t);
}
