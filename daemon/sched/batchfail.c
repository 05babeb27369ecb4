/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batchfail: what goes wrong with a client's batches, decided and logged
 * here, once (sched_impl.h): bad images (counted, each file logged once),
 * a batch whose item failed (the client's ERROR, whose text the source
 * writes: source_batch_error), a stream past its last epoch, workers that
 * cannot run.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/sched/sched_impl.h"

/* Logs the client's failure where it is decided, and ends its stream. */
static void fail_client(struct sched *s, struct sched_client *c, int code, const char *text)
{
	log_error("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
	s->read_errors++;
	c->failed = true;
	s->ops.fail(c->conn, code, text);
	group_fail_others(s, c, code, text);
}

void batchfail_docorder(struct sched *s, struct slot *sl, int err)
{
	struct sched_client *c = sl->client;
	const struct source *src = &s->sources[c->pipeline];
	char text[PROTO_ERROR_TEXT_MAX];
	if (src->n_members) /* sched_blend.c: one of the members' orders */
		snprintf(text, sizeof(text), "pipeline \"%s\": split %s epoch %" PRIu64 ": a blend "
			 "member's document order cannot be computed: %s", src->cfg->name,
			 split_name(c->split), sl->pos.epoch, strerror(-err));
	else
		snprintf(text, sizeof(text), "pipeline \"%s\": split %s epoch %" PRIu64 ": the epoch's "
			 "document order (a running sum over the blocks of its %" PRIu64 " documents) cannot be "
			 "computed: %s", src->cfg->name, split_name(c->split), sl->pos.epoch,
			 src->desc.docs.split[c->split].n_docs, strerror(-err));
	c->in_flight--;
	sched_slot_free(s, sl);
	fail_client(s, c, err == -ENOMEM ? ENOMEM : EIO, text);
}

void batchfail_note_bad(struct sched *s, uint32_t pipeline, const struct work_done *done)
{
	/* n bad images, counted each time (substituted: each was replaced);
	 * the first is logged once per file, the others of the same item
	 * when an item meets them first. */
	bool substituted = done->n_bad > 0 && done->status == 0;
	if (pipeline >= s->n_sources || !s->sources[pipeline].ops ||
	    (!substituted && done->bad_status >= 0))
		return;
	uint32_t n = substituted ? done->n_bad : done->n_bad + 1;
	uint64_t index = done->bad_index;
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
		    source_sample_where(src, s->arena, pipeline, SPLIT_TRAIN, index, where, sizeof(where)),
		    source_image_why(done->bad_status),
		    substituted ? "; replaced by another sample (on_error = substitute)" : "");
}

void batchfail_batch(struct sched *s, struct slot *sl)
{
	struct sched_client *c = sl->client;
	const struct source *src = &s->sources[c->pipeline];
	uint64_t index = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g, sl->pos.first + sl->bad_row);
	char text[PROTO_ERROR_TEXT_MAX];
	if (sl->error == -ECHILD) { /* struck out: sched_item_lost */
		char where[2200];
		sched_describe_split_sample(s, c->pipeline, c->split, index, where, sizeof(where));
		snprintf(text, sizeof(text), "pipeline \"%s\": epoch %" PRIu64 " batch %" PRIu64 " rows %u.."
			 "%" PRIu64 " (the first: %.700s): %d workers in a row died producing them, the "
			 "last %.96s", src->cfg->name, sl->pos.epoch, sl->pos.batch, sl->bad_row,
			 sl->bad_row + sl->error_detail - 1, where, SCHED_ITEM_STRIKES, sl->lost_why);
		fail_client(s, c, EIO, text);
		return;
	}
	struct source_failure f = {
		.entry = c->pipeline, .split = c->split, .epoch = sl->pos.epoch, .index = index,
		.error = sl->error, .detail = sl->error_detail,
	};
	int code = source_batch_error(src, s->arena, &f, text, sizeof(text));
	fail_client(s, c, code, text);
}

void batchfail_stream_end(struct sched *s, struct sched_client *c)
{
	char text[PROTO_ERROR_TEXT_MAX];
	snprintf(text, sizeof(text), "pipeline \"%s\": the stream has ended: epoch %" PRIu64 " was "
		 "the last a stream has (epochs are below 2^32); attach again without a resume token "
		 "to start a new one", s->sources[c->pipeline].cfg->name, c->epoch);
	log_notice("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
	c->failed = true;
	s->ops.fail(c->conn, EOVERFLOW, text);
	group_fail_others(s, c, EOVERFLOW, text);
}

void batchfail_unable(struct sched *s, struct sched_client *c)
{
	log_notice("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, s->unable);
	c->failed = true;
	s->ops.fail(c->conn, EAGAIN, s->unable);
	group_fail_others(s, c, EAGAIN, s->unable);
}
