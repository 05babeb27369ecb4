/* SPDX-License-Identifier: Apache-2.0 */
/*
 * session: a client's session with the scheduler (sched.h): attaching
 * (checks, resume, depth, the WELCOME), detaching, releasing its batches,
 * and its status line.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "common/gpu_uuid.h"
#include "common/log.h"
#include "common/position.h"
#include "common/suggest.h"
#include "daemon/sched/sched_impl.h"
#include "daemon/core/status.h"

/* Refuses a token of the older format (position.h), which names no
 * pipeline and no data: what to do instead, and, when its fields fit this
 * stream, the token it would be here, for an operator who knows it was
 * saved on this pipeline's present data. */
static int resume_refuse_v1(const struct source *src, uint32_t split, const char *token,
			    const char *quoted, char *err, size_t cap)
{
	struct position p;
	char here[POSITION_TEXT_MAX] = "";
	if (position_parse_v1(token, &p, NULL, 0) == 0 && p.seed == src->cfg->seed &&
	    p.split == split && p.n_samples == src->splits[split].n_samples) {
		snprintf(p.pipeline, sizeof(p.pipeline), "%s", src->cfg->name);
		p.data = src->data_id;
		position_format(&p, here, sizeof(here));
	}
	return errtext(err, cap, -EINVAL, "resume token \"%s\" is of an older format (ldr1) that "
		       "names no pipeline and no data, so it cannot be checked against pipeline "
		       "\"%s\": attach without a resume token to start over%s%s%s", quoted,
		       src->cfg->name, here[0] ? ", or, only if it was saved on this pipeline and "
		       "its data has not changed since, resume with \"" : "", here,
		       here[0] ? "\"" : "");
}

/* Applies a resume token to a new client's stream position in split
 * `split`: a token names its pipeline and data (position.h), and resumes
 * only a stream of the same ones. */
static int resume_at(const struct source *src, uint32_t split, const char *token, uint64_t *epoch,
		     uint64_t *g, char *err, size_t cap)
{
	struct position p;
	char why[200], shown[ESCAPE_SIZE(PROTO_TOKEN_MAX - 1)];
	const char *quoted = escape_str(token, shown, sizeof(shown)); /* a client's bytes */
	const char *name = src->cfg->name;
	int rc = position_parse(token, &p, why, sizeof(why));
	if (rc == -EPROTONOSUPPORT)
		return resume_refuse_v1(src, split, token, quoted, err, cap);
	if (rc < 0)
		return errtext(err, cap, -EINVAL, "resume token \"%s\" is not a loaderd position "
			       "token (ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT]): %s", quoted,
			       why);
	if (strcmp(p.pipeline, name) != 0)
		return errtext(err, cap, -EINVAL, "resume token \"%s\" is a position in pipeline "
			       "\"%s\" (data %016" PRIx64 "); this client attaches to pipeline \"%s\" "
			       "(data %016" PRIx64 ")", quoted, p.pipeline, p.data, name,
			       src->data_id);
	if (p.data != src->data_id)
		return errtext(err, cap, -EINVAL, "resume token \"%s\" is a position in pipeline "
			       "\"%s\" when its data was %016" PRIx64 "; the data changed since (it "
			       "is %016" PRIx64 " now: other files, sizes, samples, splits or order), "
			       "so the token's places are not the same samples: attach without a "
			       "resume token to start over", quoted, name, p.data, src->data_id);
	if (p.seed != src->cfg->seed)
		return errtext(err, cap, -EINVAL, "resume token \"%s\" is for a stream with seed %"
			       PRIu64 "; pipeline \"%s\" has seed %" PRIu64, quoted, p.seed,
			       name, src->cfg->seed);
	if (p.split != split)
		return errtext(err, cap, -EINVAL, "resume token \"%s\" is a position in split \"%s\"; "
			       "this client attaches to split \"%s\" of pipeline \"%s\"", quoted,
			       split_name(p.split), split_name(split), name);
	uint64_t n = src->splits[split].n_samples;
	if (p.n_samples != n)
		return errtext(err, cap, -EINVAL, "resume token \"%s\" was saved when the dataset had %"
			       PRIu64 " samples; pipeline \"%s\" has %" PRIu64 " now%s%s", quoted,
			       p.n_samples, name, n, src->has_splits ? " in split " : "",
			       src->has_splits ? split_name(split) : "");
	*epoch = p.epoch;
	*g = p.offset;
	return 0;
}

/* The pipeline a HELLO names, or NULL with err: the name, the closest
 * pipeline's and the daemon's pipelines, as many as fit in cap
 * (PROTO_ERROR_TEXT_MAX: an ERROR frame's text). */
static const struct source *find_pipeline(const struct sched *s, const char *name, uint32_t *index,
					  char *err, size_t cap)
{
	const char *names[ARENA_PIPELINES_MAX];
	size_t n = 0;
	for (size_t i = 0; i < s->n_sources; i++) {
		if (!s->live[i] || s->sources[i].cfg->job[0]) /* a free entry; a job's own */
			continue;
		if (strcmp(s->sources[i].cfg->name, name) == 0) {
			*index = (uint32_t)i;
			return &s->sources[i];
		}
		if (n < ARENA_PIPELINES_MAX)
			names[n++] = s->sources[i].cfg->name;
	}
	char shown[ESCAPE_SIZE(PROTO_NAME_MAX - 1)];
	escape_str(name, shown, sizeof(shown));
	suggest_unknown_text("pipeline", name, shown, names, n, err, cap);
	return NULL;
}

/* The client's start in its stream: epoch 0 offset 0, or its resume token
 * (a token at the end of an epoch starts the next). */
static int stream_start(const struct source *src, uint32_t split, const struct proto_hello *hello,
			const struct sampler *smp, uint64_t *epoch, uint64_t *g, char *err,
			size_t cap)
{
	*epoch = *g = 0;
	if (hello->resume[0]) {
		int rc = resume_at(src, split, hello->resume, epoch, g, err, cap);
		if (rc < 0)
			return rc;
	}
	if (sampler_batches(smp, *g) > 0)
		return 0;
	if (*epoch + 1 >= POSITION_EPOCHS)
		return errtext(err, cap, -EINVAL, "pipeline \"%s\": resume token \"%s\" is at the end "
			       "of epoch %" PRIu64 ", the last a stream has (epochs are below 2^32): "
			       "nothing is left to deliver", src->cfg->name, hello->resume, *epoch);
	(*epoch)++;
	*g = 0;
	return 0;
}

static void welcome_fill(const struct sched *s, const struct sched_client *c,
			 const struct source *src, const struct proto_hello *hello,
			 struct proto_welcome *w)
{
	memset(w, 0, sizeof(*w));
	w->session = c->session;
	w->slot_bytes = s->arena->hdr->slot_bytes;
	w->arena_bytes = s->arena->bytes;
	w->n_samples = c->sampler.n_samples;
	w->seed = src->cfg->seed;
	w->data = src->data_id;
	snprintf(w->name, sizeof(w->name), "%s", src->cfg->name);
	w->epoch = c->epoch;
	w->offset = c->g;
	w->batch_size = src->cfg->batch_size;
	w->rank = hello->rank;
	w->world = hello->world;
	w->depth = c->depth;
	w->shuffle = c->sampler.shuffle;
	w->drop_last = src->cfg->drop_last;
	w->n_tensors = src->n_tensors;
	memcpy(w->tensors, src->tensors, sizeof(w->tensors));
}

int sched_attach(struct sched *s, const struct proto_hello *hello, pid_t pid, struct conn *conn,
		 struct sched_client **out, struct proto_welcome *w, char *err, size_t cap)
{
	return sched_attach_entry(s, -1, hello, pid, conn, out, w, err, cap);
}

int sched_attach_entry(struct sched *s, int entry, const struct proto_hello *hello, pid_t pid,
		       struct conn *conn, struct sched_client **out, struct proto_welcome *w,
		       char *err, size_t cap)
{
	if (s->n_clients >= s->cfg->max_clients)
		return errtext(err, cap, -EBUSY, "too many clients (max_clients = %u)",
			       s->cfg->max_clients);
	uint32_t index = 0;
	const struct source *src;
	if (entry < 0) {
		src = find_pipeline(s, hello->pipeline, &index, err, cap);
	} else if (!sched_pipeline_live(s, (uint32_t)entry)) {
		src = NULL;
		errtext(err, cap, -ENOENT, "the declared pipeline was removed before this client "
			"could attach");
	} else {
		index = (uint32_t)entry;
		src = &s->sources[index];
	}
	if (!src)
		return -ENOENT;
	bool device = hello->delivery == PROTO_DELIVERY_DEVICE;
	if (!device && s->unable[0]) /* a device client may be direct: devpath answers */
		return errtext(err, cap, -EAGAIN, "pipeline \"%s\": %s", src->cfg->name, s->unable);
	if (device && !s->has_device)
		return errtext(err, cap, -EOPNOTSUPP, "pipeline \"%s\": GPU delivery is not "
			       "available: %s", src->cfg->name, s->no_device);
	if (device && gpu_uuid_is_zero(hello->device_uuid))
		return errtext(err, cap, -EINVAL, "pipeline \"%s\": device delivery needs the GPU's "
			       "UUID", src->cfg->name);
	uint32_t split;
	int rc = source_split_find(src, hello->split, &split, err, cap);
	if (rc < 0)
		return rc;
	struct sampler smp = {
		.n_samples = src->splits[split].n_samples, .seed = src->cfg->seed,
		.batch_size = src->cfg->batch_size,
		.rank = hello->rank, .world = hello->world,
		/* a blend's order is not shuffled again: its members are (sched_blend.c) */
		.shuffle = src->cfg->shuffle && !src->n_members,
		.drop_last = src->cfg->drop_last,
	};
	if (sampler_batches(&smp, 0) == 0)
		return errtext(err, cap, -EINVAL, "pipeline \"%s\": %" PRIu64 " samples%s%s over world "
			       "size %u with batch_size %u and drop_last leave rank %u no batch",
			       src->cfg->name, smp.n_samples, src->has_splits ? " of split " : "",
			       src->has_splits ? split_name(split) : "", hello->world,
			       src->cfg->batch_size, hello->rank);
	uint64_t epoch, g;
	rc = stream_start(src, split, hello, &smp, &epoch, &g, err, cap);
	if (rc < 0)
		return rc;
	struct sched_client *c = calloc(1, sizeof(*c));
	if (!c)
		return errtext(err, cap, -ENOMEM, "out of memory");
	c->conn = conn;
	c->sched = s;
	c->session = s->next_session++;
	c->pid = pid;
	escape_str(hello->client_name, c->name, sizeof(c->name));
	c->pipeline = index;
	c->split = split;
	c->sampler = smp;
	c->depth = hello->depth ? hello->depth : s->cfg->default_depth;
	if (c->depth > s->cfg->max_depth)
		c->depth = s->cfg->max_depth;
	if (device && c->depth > s->cfg->device_slots)
		c->depth = s->cfg->device_slots;
	c->epoch = epoch;
	c->g = g;
	c->segment_batches = sampler_batches(&smp, g);
	sched_share_init(s, c);
	rc = group_join(s, c, hello, err, cap);
	if (rc < 0) {
		free(c);
		return rc;
	}
	/* Not a group's member: its members share one staging slot, which
	 * each would decode from on its own. */
	c->client_decode = device && (hello->flags & PROTO_HELLO_DECODE) && !c->group &&
			   src->desc.kind == ARENA_SOURCE_IMAGES && src->cfg->decode != DECODE_CPU;
	s->clients[s->n_clients++] = c;
	welcome_fill(s, c, src, hello, w);
	if (c->client_decode) {
		w->decode = 1;
		w->pipeline = index;
		w->decode_memory = s->cfg->gpu_decode_memory;
	}
	*out = c;
	if (device) {
		memcpy(c->uuid, hello->device_uuid, sizeof(c->uuid));
		c->welcome = *w;
		devpath_attach(s, c);
		return SCHED_ATTACH_PENDING;
	}
	char group[ESCAPE_SIZE(PROTO_GROUP_MAX - 1) + 64];
	group_status_text(c, group, sizeof(group));
	log_info("client %" PRIu64 " (pid %d%s%s) attached to pipeline \"%s\"%s%s as rank %u of %u, "
		 "depth %u, epoch %" PRIu64 " offset %" PRIu64 "%s", c->session, (int)pid,
		 c->name[0] ? ", " : "", c->name, src->cfg->name, src->has_splits ? " split " : "",
		 src->has_splits ? split_name(split) : "", hello->rank, hello->world, c->depth, epoch, g,
		 group);
	sched_fill(s);
	return 0;
}

void sched_detach(struct sched *s, struct sched_client *c, bool handles_closed)
{
	group_leave(s, c, handles_closed);
	for (uint32_t i = 0; i < s->n_slots; i++) {
		struct slot *sl = &s->slots[i];
		if (sl->client != c)
			continue;
		if (sl->state == SLOT_FILLING) {
			sl->state = SLOT_ORPHAN;
			sl->client = NULL;
		} else if (sl->state == SLOT_PINNING) {
			sl->client = NULL; /* freed when the GPU thread lets go of it */
		} else {
			sched_slot_free(s, sl);
		}
	}
	for (uint32_t i = 0; i < s->n_clients; i++) {
		if (s->clients[i] == c) {
			s->clients[i] = s->clients[--s->n_clients];
			break;
		}
	}
	char stages[128], share[96];
	sched_stage_text(c, stages, sizeof(stages));
	sched_share_text(c, share, sizeof(share));
	struct status_text *gpu = NULL; /* the GPU thread's figures of a device client */
	if (c->device && c->pc && (gpu = malloc(sizeof(*gpu)))) {
		status_init(gpu);
		s->gpu.describe_client(c->pc, gpu);
	}
	log_info("client %" PRIu64 " (pid %d) detached after %" PRIu64 " batches; per batch:%s%.300s%s",
		 c->session, (int)c->pid, c->released, stages, gpu ? gpu->buf : "", share);
	free(gpu);
	c->conn = NULL;
	if (c->device)
		devpath_detach(s, c, handles_closed);
	else
		free(c);
	sched_fill(s);
}

void sched_release(struct sched *s, struct sched_client *c, const struct proto_release *r)
{
	if (c->device) {
		if (devpath_release(c, r)) {
			sched_share_note(s, c, r->wait_ns);
			sched_fill(s);
		}
		return;
	}
	if (c->group) {
		if (group_release(s, c, r)) {
			sched_share_note(s, c, r->wait_ns);
			sched_fill(s);
		} else {
			log_debug("client %" PRIu64 ": stale or duplicate RELEASE of slot %u generation "
				  "%u seq %" PRIu64 "; ignored", c->session, r->slot, r->generation, r->seq);
		}
		return;
	}
	struct slot *sl = r->slot < s->n_slots ? &s->slots[r->slot] : NULL;
	if (!sl || sl->state != SLOT_HELD || sl->client != c || sl->generation != r->generation ||
	    sl->pos.seq != r->seq) {
		log_debug("client %" PRIu64 ": stale or duplicate RELEASE of slot %u generation %u "
			  "seq %" PRIu64 "; ignored", c->session, r->slot, r->generation, r->seq);
		return;
	}
	sched_released(c, &sl->pos);
	sched_slot_free(s, sl);
	c->in_flight--;
	c->released++;
	sched_share_note(s, c, r->wait_ns);
	sched_fill(s);
}

void sched_decoded(struct sched *s, struct sched_client *c, const struct proto_decoded *d)
{
	if (c->device && devpath_decoded(s, c, d))
		sched_fill(s);
}

void session_describe(const struct sched *s, struct status_text *t)
{
	struct status_list l;
	status_printf(t, "clients: %u\n", s->n_clients);
	status_list_begin(t, &l, "clients");
	for (uint32_t i = 0; i < s->n_clients; i++) {
		const struct sched_client *c = s->clients[i];
		if (!status_item_begin(t, &l))
			continue;
		status_field(t, "id", "  client %" PRIu64, c->session);
		status_field(t, "pid", " pid %d", (int)c->pid);
		status_field(t, "name", " name \"%s\"", c->name); /* escaped at HELLO */
		status_field(t, "pipeline", " pipeline %s", s->sources[c->pipeline].cfg->name);
		if (s->sources[c->pipeline].has_splits)
			status_field(t, "split", " split %s", split_name(c->split));
		status_field(t, "rank", " rank %u", c->sampler.rank);
		status_field(t, "world", " world %u", c->sampler.world);
		status_field(t, "depth", " depth %u", c->depth);
		status_field(t, "epoch", " epoch %" PRIu64, c->epoch);
		status_field(t, "sent", " sent %" PRIu64, c->send_seq);
		status_field(t, "released", " released %" PRIu64, c->released);
		status_field(t, "in_flight", " in_flight %u", c->in_flight);
		status_field(t, "staging", " staging %u", c->staging);
		sched_share_describe(c, t);
		group_describe(c, t);
		sched_stage_describe(c, t);
		if (c->device && c->pc) {
			status_object(t, "device");
			s->gpu.describe_client(c->pc, t);
			status_close(t);
		}
		if (c->client_decode) {
			status_object(t, "client_decode");
			status_field(t, "batches", " client_decode batches %" PRIu64, c->decoded.batches);
			status_field(t, "gpu", " gpu %" PRIu64, c->decoded.gpu);
			status_field(t, "cpu", " cpu %" PRIu64, c->decoded.cpu);
			status_field(t, "bad", " bad %" PRIu64, c->decoded.bad);
			status_field(t, "submit_us", " submit_us %" PRIu64, c->decoded.submit_ns / 1000);
			status_close(t);
		}
		sched_traffic_describe(s, c, t);
		status_printf(t, "\n");
		status_item_end(t, &l);
	}
	status_list_end(t, &l);
}
