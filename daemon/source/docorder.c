/* SPDX-License-Identifier: Apache-2.0 */
/* docorder: the daemon's per-epoch block sums of the document order (docorder.h). */
#include "daemon/source/docorder.h"

#include <errno.h>
#include <stdlib.h>

/* One epoch's sums, computed off the loop into prefix. The thread reads
 * block_tokens (the arena's) and the shape; it writes only prefix. */
struct docorder_job {
	struct docorder_cache *cache; /* NULL once the cache is freed: done frees the job */
	struct docorder_entry *entry;
	const uint64_t *block_tokens;
	struct docorder_shape shape;
	uint64_t epoch;
	uint64_t n_blocks;
	uint64_t *prefix;
};

void docorder_block_sums(const uint64_t *doc_tokens, uint64_t first_doc,
			 const struct docorder_shape *sh, uint64_t *block_tokens)
{
	uint64_t nb = docorder_blocks(sh);
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t from = first_doc + b * sh->block;
		block_tokens[b] = doc_tokens[from + docorder_block_docs(sh, b)] - doc_tokens[from];
	}
}

void docorder_cache_init(struct docorder_cache *c, docorder_offload_fn offload, void *offload_ctx,
			 void (*ready)(void *ctx), void *ready_ctx)
{
	*c = (struct docorder_cache){.offload = offload, .offload_ctx = offload_ctx,
				     .ready = ready, .ready_ctx = ready_ctx};
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->idle, NULL);
	c->lock_ready = true;
}

/* The thread's part: the running sum of the blocks' tokens in the epoch's
 * block order. */
static void docorder_job_run(void *arg)
{
	struct docorder_job *job = arg;
	uint64_t *prefix = job->prefix;
	prefix[0] = 0;
	for (uint64_t q = 0; q < job->n_blocks; q++)
		prefix[q + 1] = prefix[q] +
				job->block_tokens[docorder_block_at(&job->shape, job->epoch, q)];
	struct docorder_cache *c = job->cache;
	if (c && c->lock_ready) {
		pthread_mutex_lock(&c->lock);
		if (--c->running == 0)
			pthread_cond_broadcast(&c->idle);
		pthread_mutex_unlock(&c->lock);
	}
}

/* The loop's part: the sums become the entry's, or are thrown away when
 * the entry was dropped meanwhile. */
static void docorder_job_done(void *arg)
{
	struct docorder_job *job = arg;
	struct docorder_cache *c = job->cache;
	if (!c || !job->entry) {
		free(job->prefix);
		free(job);
		return;
	}
	struct docorder_entry *e = job->entry;
	e->prefix = job->prefix;
	e->state = DOCORDER_READY;
	e->job = NULL;
	c->computed++;
	free(job);
	if (c->ready && c->offload)
		c->ready(c->ready_ctx);
}

/* The entry of (pipeline, split, epoch), or NULL. */
static struct docorder_entry *docorder_find(struct docorder_cache *c, uint32_t pipeline,
					    uint32_t split, uint64_t epoch)
{
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		struct docorder_entry *e = &c->entries[i];
		if (e->state != DOCORDER_FREE && e->pipeline == pipeline && e->split == split &&
		    e->epoch == epoch)
			return e;
	}
	return NULL;
}

/* Starts the epoch's computation into the least recently used entry that
 * no thread is computing. 0, -ENOMEM, -EBUSY. */
static int docorder_start(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
			  const struct docorder_split *sp, uint64_t epoch)
{
	struct docorder_entry *victim = NULL;
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		struct docorder_entry *e = &c->entries[i];
		if (e->state == DOCORDER_COMPUTING)
			continue;
		if (!victim || e->state == DOCORDER_FREE ||
		    (victim->state != DOCORDER_FREE && e->used < victim->used))
			victim = e;
	}
	if (!victim)
		return -EBUSY;
	uint64_t nb = docorder_blocks(&sp->shape);
	struct docorder_job *job = malloc(sizeof(*job));
	uint64_t *prefix = malloc((nb + 1) * sizeof(*prefix));
	if (!job || !prefix) {
		free(job);
		free(prefix);
		return -ENOMEM;
	}
	*job = (struct docorder_job){.cache = c, .entry = victim, .block_tokens = sp->block_tokens,
				     .shape = sp->shape, .epoch = epoch, .n_blocks = nb,
				     .prefix = prefix};
	free(victim->prefix);
	*victim = (struct docorder_entry){.state = DOCORDER_COMPUTING, .pipeline = pipeline,
					  .split = split, .epoch = epoch, .n_blocks = nb,
					  .used = ++c->clock, .job = job};
	if (c->offload && c->lock_ready) {
		pthread_mutex_lock(&c->lock);
		c->running++;
		pthread_mutex_unlock(&c->lock);
		int rc = c->offload(c->offload_ctx, docorder_job_run, docorder_job_done, job);
		if (rc == 0)
			return 0;
		pthread_mutex_lock(&c->lock);
		c->running--;
		pthread_mutex_unlock(&c->lock);
	}
	/* no offloader (or it failed): computed here, at once */
	job->cache = NULL; /* the run's count is not the threads' */
	docorder_job_run(job);
	job->cache = c;
	docorder_job_done(job);
	return 0;
}

bool docorder_ready(const struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		    uint64_t epoch)
{
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		const struct docorder_entry *e = &c->entries[i];
		if (e->state == DOCORDER_READY && e->pipeline == pipeline && e->split == split &&
		    e->epoch == epoch)
			return true;
	}
	return false;
}

int docorder_prepare(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		     const struct docorder_split *sp, uint64_t epoch)
{
	if (docorder_find(c, pipeline, split, epoch))
		return 0;
	return docorder_start(c, pipeline, split, sp, epoch);
}

int docorder_locate(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		    const struct docorder_split *sp, uint64_t epoch, uint64_t seq_len,
		    uint64_t window, uint64_t *k, uint64_t *skip)
{
	struct docorder_entry *e = docorder_find(c, pipeline, split, epoch);
	if (!e) {
		int rc = docorder_start(c, pipeline, split, sp, epoch);
		if (rc < 0)
			return rc == -EBUSY ? -EAGAIN : rc;
		e = docorder_find(c, pipeline, split, epoch);
	}
	if (!e || e->state != DOCORDER_READY)
		return -EAGAIN;
	e->used = ++c->clock;
	uint64_t x = window * seq_len;
	uint64_t nb = e->n_blocks;
	if (nb == 0 || x >= e->prefix[nb])
		return -ERANGE;
	/* the last block position whose block starts at or before x: its
	 * block holds x (a later one starts after x, and empty blocks before
	 * it start at x too but hold nothing) */
	uint64_t lo = 0, hi = nb; /* prefix[lo] <= x < prefix[hi] */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (e->prefix[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	*k = docorder_block_start(&sp->shape, epoch, lo);
	*skip = x - e->prefix[lo];
	return 0;
}

/* Frees entry e's sums; a computing entry's job is orphaned (its done
 * callback frees what the thread made). */
static void docorder_entry_clear(struct docorder_entry *e)
{
	if (e->state == DOCORDER_COMPUTING && e->job)
		e->job->entry = NULL;
	free(e->prefix);
	*e = (struct docorder_entry){0};
}

void docorder_cache_free(struct docorder_cache *c)
{
	if (c->lock_ready) {
		pthread_mutex_lock(&c->lock);
		while (c->running > 0)
			pthread_cond_wait(&c->idle, &c->lock);
		pthread_mutex_unlock(&c->lock);
	}
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		struct docorder_entry *e = &c->entries[i];
		if (e->state == DOCORDER_COMPUTING && e->job)
			e->job->cache = NULL;
		docorder_entry_clear(e);
	}
	if (c->lock_ready) {
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->idle);
	}
	docorder_offload_fn offload = c->offload;
	void *offload_ctx = c->offload_ctx;
	void (*ready)(void *) = c->ready;
	void *ready_ctx = c->ready_ctx;
	docorder_cache_init(c, offload, offload_ctx, ready, ready_ctx);
}

void docorder_cache_drop(struct docorder_cache *c, uint32_t pipeline)
{
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		struct docorder_entry *e = &c->entries[i];
		if (e->state != DOCORDER_FREE && e->pipeline == pipeline)
			docorder_entry_clear(e);
	}
}
