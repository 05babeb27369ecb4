/*
 * batchfail: what goes wrong with a client's batches, decided and logged
 * here, once (sched_impl.h): bad images (counted, each file logged once),
 * a batch whose item failed (the client's ERROR names the pipeline, file,
 * sample and policy), a stream past its last epoch, workers that cannot run.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regfile.h"
#include "daemon/sched/sched_impl.h"
#include "worker/worker.h"

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
			 "document order (a running sum over its %" PRIu64 " documents) cannot be "
			 "computed: %s", src->cfg->name, split_name(c->split), sl->pos.epoch,
			 src->desc.docs.n_docs[c->split], strerror(-err));
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
	if (pipeline >= s->n_sources || (!substituted && done->bad_status >= 0))
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
	uint64_t shard_samples = 0;
	char shard[200];
	if (!source_image_shard(s->arena, pipeline, index, shard, sizeof(shard), &shard_samples))
		snprintf(buf, cap, "on_error = substitute, and none of the %u other samples tried "
			 "could replace it", tried);
	else if (shard_samples >= 2)
		snprintf(buf, cap, "on_error = substitute, and none of the %u other samples of shard "
			 "%.180s tried could replace it", tried, shard);
	else
		snprintf(buf, cap, "on_error = substitute, and none of the %u samples of other shards "
			 "tried (its shard has no other) could replace it", tried);
}

/* The ERROR text of an image batch whose item failed. */
static void image_text(struct sched *s, const struct slot *sl, uint64_t index, char *text,
		       size_t cap)
{
	const struct source *src = &s->sources[sl->client->pipeline];
	if (!(sl->error_detail & WORKER_DETAIL_IMAGE)) { /* no image was read */
		snprintf(text, cap, "pipeline \"%s\": %.800s: %s (a worker could not use the "
			 "pipeline's data, so no sample could be read or replaced)", src->cfg->name,
			 src->cfg->path, strerror(-sl->error));
		return;
	}
	char where[2200], policy[400];
	image_policy(s, sl->client->pipeline, index, sl->error, sl->error_detail, policy,
		     sizeof(policy));
	snprintf(text, cap, "pipeline \"%s\": %.500s: sample %" PRIu64 ": %s (%.300s)",
		 src->cfg->name,
		 source_sample_where(src, s->arena, sl->client->pipeline, SPLIT_TRAIN, index, where,
				     sizeof(where)),
		 index, source_image_why(sl->error), policy);
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
	if (src->desc.kind == ARENA_SOURCE_IMAGES) {
		image_text(s, sl, index, text, sizeof(text));
		fail_client(s, c, sl->error == -EBADMSG ? EBADMSG : EIO, text);
		return;
	}
	uint64_t offset = src->desc.split_base[c->split] + index * src->desc.sample_stride;
	char why[128];
	if (sl->error == -ENODATA)
		snprintf(why, sizeof(why), "file is shorter than at start (read %" PRIu64 " of %" PRIu64 " bytes)",
			 sl->error_detail, src->desc.sample_read_bytes);
	else if (sl->error == REGFILE_NOT_REGULAR)
		snprintf(why, sizeof(why), "not a regular file any more (replaced since start)");
	else
		snprintf(why, sizeof(why), "%s", strerror(-sl->error));
	if (src->desc.docs.n_documents || src->desc.shards.n_shards || src->n_members) {
		char where[1200];
		source_sample_where(src, s->arena, c->pipeline, c->split, index, where, sizeof(where));
		snprintf(text, sizeof(text), "pipeline \"%s\": epoch %" PRIu64 " sample %" PRIu64
			 ": %.700s: %s", src->cfg->name, sl->pos.epoch, index, where, why);
		fail_client(s, c, EIO, text);
		return;
	}
	char path[PATH_MAX];
	snprintf(text, sizeof(text), "pipeline \"%s\": %.700s: %s%s%ssample %" PRIu64 " (bytes %"
		 PRIu64 "..%" PRIu64 "): %s", src->cfg->name,
		 source_data_path(src->cfg, path, sizeof(path)),
		 src->has_splits ? "split " : "", src->has_splits ? split_name(c->split) : "",
		 src->has_splits ? " " : "", index, offset, offset + src->desc.sample_read_bytes, why);
	fail_client(s, c, EIO, text);
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
