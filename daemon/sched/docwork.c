/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docwork: the scheduler's document orders (daemon/source/docorder.h)
 * computed on libuv's thread pool, on the loop the worker pool runs on,
 * and the scheduler filled again once one is ready. Without a worker pool
 * (unit tests) the orders are computed at once, as they are asked for.
 *
 * Threads: the loop, and the pool's thread that runs one computation
 * (docorder's job, which touches only its own sums).
 */
#include <errno.h>
#include <stdlib.h>

#include <uv.h>

#include "common/position.h"
#include "daemon/pool/pool.h"
#include "daemon/sched/sched_impl.h"

struct docwork {
	uv_work_t req;
	void (*fn)(void *arg);
	void (*done)(void *arg);
	void *arg;
};

static void docwork_run(uv_work_t *req)
{
	struct docwork *w = req->data;
	w->fn(w->arg);
}

static void docwork_after(uv_work_t *req, int status)
{
	struct docwork *w = req->data;
	if (status == UV_ECANCELED) /* never ran: run it here, the result is still wanted */
		w->fn(w->arg);
	w->done(w->arg);
	free(w);
}

static int docwork_offload(void *ctx, void (*fn)(void *arg), void (*done)(void *arg), void *arg)
{
	struct sched *s = ctx;
	uv_loop_t *loop = s->workers.pool ? pool_loop(s->workers.pool) : NULL;
	if (!loop)
		return -ENOSYS;
	struct docwork *w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct docwork){.fn = fn, .done = done, .arg = arg};
	w->req.data = w;
	int rc = uv_queue_work(loop, &w->req, docwork_run, docwork_after);
	if (rc < 0)
		free(w);
	return rc;
}

static void docwork_ready(void *ctx)
{
	sched_fill(ctx);
}

void sched_docwork_init(struct sched *s)
{
	docorder_cache_init(&s->docorder, docwork_offload, s, docwork_ready, s);
}

void sched_doc_split(const struct sched *s, uint32_t entry, uint32_t split,
		     struct docorder_split *out)
{
	const struct arena_doc_params *dp = &arena_pipeline(s->arena, entry)->docs;
	const uint64_t *sums = (const uint64_t *)(s->arena->base + dp->sums_offset);
	*out = (struct docorder_split){
		.shape = {.n_docs = dp->split[split].n_docs, .block = dp->block,
			  .key = dp->split[split].key, .shuffle = 1},
	};
	for (uint32_t k = 0; k < split; k++) { /* the splits before it: their blocks first */
		struct docorder_shape before = {.n_docs = dp->split[k].n_docs, .block = dp->block};
		sums += docorder_blocks(&before);
	}
	out->block_tokens = sums;
}

/* Whether (entry, split, epoch)'s order is ready; asked for when not. */
static bool docwork_ready_for(struct sched *s, uint32_t entry, uint32_t split, uint64_t epoch)
{
	struct docorder_split sp;
	sched_doc_split(s, entry, split, &sp);
	if (docorder_prepare(&s->docorder, entry, split, &sp, epoch) < 0)
		return true; /* no room to compute it ahead: batch_start computes or fails */
	return docorder_ready(&s->docorder, entry, split, epoch);
}

bool sched_orders_ready(struct sched *s, const struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	struct batch_pos pos = sched_batch_peek(c);
	if (src->n_members) {
		for (uint32_t r = 0; r < pos.rows; r++) {
			uint64_t index = sampler_sample(&c->sampler, pos.epoch, pos.g, pos.first + r);
			struct source_place at;
			source_locate(src, c->split, pos.epoch, index, &at);
			uint32_t entry = src->members[at.member].arena_index;
			if (arena_pipeline(s->arena, entry)->docs.n_documents &&
			    !docwork_ready_for(s, entry, c->split, at.epoch))
				return false;
		}
		return true;
	}
	if (src->desc.docs.n_documents == 0)
		return true;
	bool ready = docwork_ready_for(s, c->pipeline, c->split, pos.epoch);
	uint64_t batches = sampler_batches(&c->sampler, pos.g);
	if (ready && pos.epoch + 1 < POSITION_EPOCHS && pos.batch >= batches - batches / 4)
		(void)docwork_ready_for(s, c->pipeline, c->split, pos.epoch + 1);
	return ready;
}

int sched_doc_locate(struct sched *s, uint32_t entry, uint32_t split, uint64_t epoch,
		     uint64_t seq_len, uint64_t window, uint64_t *k, uint64_t *skip)
{
	struct docorder_split sp;
	sched_doc_split(s, entry, split, &sp);
	/* sched_orders_ready saw the order ready; should the batch need more
	 * orders than the cache holds, one evicted since is computed here,
	 * at once, rather than fail the batch */
	docorder_offload_fn offload = s->docorder.offload;
	s->docorder.offload = NULL;
	int rc = docorder_locate(&s->docorder, entry, split, &sp, epoch, seq_len, window, k, skip);
	s->docorder.offload = offload;
	return rc;
}
