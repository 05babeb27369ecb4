/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_blend: a pipeline that blends token sources (docs/config.md,
 * "Blending"; common/blend.h): its members opened as lone sources, the
 * blend's table of each split, and a blended sample traced to the member
 * sample it is (struct source_ops, source.h). A blend is no kind of the
 * config's: a pipeline with members (cfg->n_members > 0) is one, its kind
 * the first member's. Its members are lone sources opened through their
 * own kinds' ops, each with a table entry in the arena of its own, which
 * work items name; the blend's own entry is never read by a worker.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/blend.h"
#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/source/source_impl.h"

static const char *member_path(const struct pipeline_cfg *cfg, uint32_t m)
{
	return cfg->member_paths + cfg->members[m].path_at;
}

/* Member m's config: the pipeline's, with the member's kind and path; its
 * stored token type where the config gives it (tokens: token_dtype, llmc:
 * uint16), delivered as token_output or, unset, as stored; its seed
 * blend_member_key(seed, m), so that each megatron member's documents
 * are shuffled in orders of their own. */
static void member_cfg(const struct pipeline_cfg *cfg, uint32_t m, struct pipeline_cfg *out)
{
	*out = *cfg;
	out->seed = blend_member_key(cfg->seed, m);
	out->n_members = 0;
	out->blend_samples = 0;
	out->kind = cfg->members[m].kind;
	snprintf(out->path, sizeof(out->path), "%s", member_path(cfg, m));
	if (out->kind == SOURCE_LLMC)
		out->token_bytes = 2;
	if (out->kind != SOURCE_MEGATRON && !out->token_out_dtype)
		out->token_out_dtype = out->token_bytes == 2 ? PROTO_DTYPE_UINT16 : PROTO_DTYPE_UINT32;
}

/* The members' layouts of a batch are the same (each writes its rows
 * into the blend's slots): 0, or -EINVAL with err naming the two that
 * differ. */
static int members_alike(const struct source *s, char *err, size_t cap)
{
	const struct source *a = &s->members[0].src;
	for (uint32_t m = 1; m < s->n_members; m++) {
		const struct source *b = &s->members[m].src;
		if (a->tensors[0].dtype != b->tensors[0].dtype) {
			snprintf(err, cap, "pipeline \"%s\": blend member 1 (%s) delivers %s tokens, member "
				 "%u (%s) %s: token_output (int32, int64) delivers every member's tokens "
				 "alike", s->cfg->name, a->cfg->path, proto_dtype_name(a->tensors[0].dtype),
				 m + 1, b->cfg->path, proto_dtype_name(b->tensors[0].dtype));
			return -EINVAL;
		}
		if (a->n_tensors != b->n_tensors || a->batch_bytes != b->batch_bytes ||
		    memcmp(a->tensors, b->tensors, sizeof(a->tensors)) != 0) {
			snprintf(err, cap, "pipeline \"%s\": blend members 1 (%s) and %u (%s) lay out a "
				 "batch differently", s->cfg->name, a->cfg->path, m + 1, b->cfg->path);
			return -EINVAL;
		}
	}
	return 0;
}

/* The blend's split k: present when every member has it; its samples
 * (train: blend_samples when given, else the members' sum) and table.
 * A member without a sample in it leaves it empty (refused when a
 * client asks for it), except train, refused here. */
static int blend_split(struct source *s, uint32_t k, const double *w, char *err, size_t cap)
{
	uint64_t n = 0;
	for (uint32_t m = 0; m < s->n_members; m++)
		if (!s->members[m].src.splits[k].present)
			return 0;
	for (uint32_t m = 0; m < s->n_members; m++) {
		const struct source_split *sp = &s->members[m].src.splits[k];
		if (sp->n_samples == 0) {
			if (k != SPLIT_TRAIN) {
				s->splits[k].present = true;
				return 0;
			}
			snprintf(err, cap, "pipeline \"%s\": %s: blend member %u has no window of "
				 "seq_len + 1 = %" PRIu64 " tokens in split train", s->cfg->name,
				 s->members[m].cfg.path, m + 1, s->cfg->seq_len + 1);
			return -EINVAL;
		}
		n += sp->n_samples;
	}
	if (k == SPLIT_TRAIN && s->cfg->blend_samples)
		n = s->cfg->blend_samples;
	struct source_blend_split *b = &s->blend[k];
	b->member = malloc(n);
	b->member_sample = malloc(n * sizeof(*b->member_sample));
	if (!b->member || !b->member_sample) {
		snprintf(err, cap, "pipeline \"%s\": out of memory for the blend's table of split %s "
			 "(%" PRIu64 " samples, 9 bytes each)", s->cfg->name, split_name(k), n);
		return -ENOMEM;
	}
	blend_build(w, s->n_members, n, b->member, b->member_sample, b->taken);
	s->splits[k] = (struct source_split){.present = true, .n_samples = n};
	s->desc.split_samples[k] = n;
	return 0;
}

/* Every member opened and checked (errors name the member's file), their
 * token layouts the same, the blend's table of each split built, and
 * its own layout: the first member's. */
static int blend_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
		      size_t err_cap)
{
	double raw[CONFIG_BLEND_MAX], w[CONFIG_BLEND_MAX];
	for (uint32_t m = 0; m < cfg->n_members; m++)
		raw[m] = cfg->members[m].weight;
	if (blend_normalise(raw, cfg->n_members, w) < 0) { /* config_source.c checked each */
		snprintf(err, err_cap, "pipeline \"%s\": the blend's weights do not sum to a finite "
			 "number", cfg->name);
		return -EINVAL;
	}
	out->members = calloc(cfg->n_members, sizeof(*out->members));
	if (!out->members) {
		snprintf(err, err_cap, "pipeline \"%s\": %s", cfg->name, strerror(ENOMEM));
		return -ENOMEM;
	}
	int rc = 0;
	for (uint32_t m = 0; m < cfg->n_members && rc == 0; m++) {
		struct source_member *mb = &out->members[m];
		member_cfg(cfg, m, &mb->cfg);
		mb->weight = w[m];
		mb->key = blend_member_key(cfg->seed, m);
		char why[PATH_MAX + 256];
		rc = source_open_member(&mb->cfg, &mb->src, why, sizeof(why));
		if (rc < 0)
			snprintf(err, err_cap, "%s (blend member %u)", why, m + 1);
		else
			out->n_members = m + 1;
	}
	if (rc == 0)
		rc = members_alike(out, err, err_cap);
	for (uint32_t k = 0; k < SPLIT_COUNT && rc == 0; k++)
		rc = blend_split(out, k, w, err, err_cap);
	if (rc < 0)
		return rc; /* source_open closes what is open */
	const struct source *first = &out->members[0].src;
	out->n_samples = out->splits[SPLIT_TRAIN].n_samples;
	out->has_splits = out->splits[SPLIT_VALID].present;
	out->n_tensors = first->n_tensors;
	memcpy(out->tensors, first->tensors, sizeof(out->tensors));
	memcpy(out->row_bytes, first->row_bytes, sizeof(out->row_bytes));
	out->batch_bytes = first->batch_bytes;
	out->chunk = first->chunk;
	for (uint32_t m = 0; m < out->n_members; m++)
		if (out->members[m].src.slot_bytes > out->slot_bytes)
			out->slot_bytes = out->members[m].src.slot_bytes;
	/* The blend's own table entry: the first member's layout, no file
	 * of its own (work items name the members' entries). */
	out->desc = first->desc;
	memset(&out->desc.docs, 0, sizeof(out->desc.docs));
	memset(&out->desc.shards, 0, sizeof(out->desc.shards));
	out->desc.n_samples = out->n_samples;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		out->desc.split_base[k] = 0;
		out->desc.split_samples[k] = out->splits[k].n_samples;
	}
	snprintf(out->desc.name, sizeof(out->desc.name), "%s", cfg->name);
	snprintf(out->data_path, sizeof(out->data_path), "%s", first->data_path);
	return 0;
}

static void blend_close(struct source *s)
{
	for (uint32_t m = 0; m < s->n_members; m++)
		source_close(&s->members[m].src);
	free(s->members);
	s->members = NULL;
	s->n_members = 0;
	for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
		free(s->blend[k].member);
		free(s->blend[k].member_sample);
		s->blend[k].member = NULL;
		s->blend[k].member_sample = NULL;
	}
}

uint32_t source_blend_number(struct source *sources, size_t n)
{
	uint32_t next = (uint32_t)n;
	for (size_t i = 0; i < n; i++)
		for (uint32_t m = 0; m < sources[i].n_members; m++)
			sources[i].members[m].arena_index = next++;
	return next;
}

/* Blended sample `index` of `split` in `epoch`: the member, the member's
 * sample in its split and the epoch of the member's order it is read in
 * (common/blend.h). */
static void blend_locate(const struct source *src, uint32_t split, uint64_t epoch, uint64_t index,
			 struct source_place *out)
{
	const struct source_blend_split *b = &src->blend[split];
	uint32_t d = b->member[index];
	uint64_t k = b->member_sample[index];
	const struct source_member *mb = &src->members[d];
	uint64_t size = mb->src.splits[split].n_samples;
	out->member = d;
	out->epoch = blend_member_epoch(size, b->taken[d], epoch, k);
	out->sample = blend_member_sample(size, b->taken[d], mb->key, epoch, k, src->cfg->shuffle);
}

const struct source_member *source_member_at(const struct source *sources, size_t n,
					     uint32_t arena_index, const struct source **owner,
					     uint32_t *owner_index)
{
	for (size_t i = 0; i < n; i++)
		for (uint32_t m = 0; m < sources[i].n_members; m++)
			if (sources[i].members[m].arena_index == arena_index) {
				*owner = &sources[i];
				*owner_index = (uint32_t)i;
				return &sources[i].members[m];
			}
	return NULL;
}

/* A blended sample: its member, the member's file and its sample there
 * (split SPLIT_COUNT: train). */
static const char *blend_where(const struct source *src, const struct arena *arena,
			       uint32_t entry, uint32_t split, uint64_t index, char *buf,
			       size_t cap)
{
	(void)arena, (void)entry;
	uint32_t k = split < SPLIT_COUNT ? split : SPLIT_TRAIN;
	const struct source_blend_split *b = &src->blend[k];
	if (!b->member || index >= src->splits[k].n_samples) {
		snprintf(buf, cap, "blend sample %" PRIu64 " (none such in split %s)", index,
			 split_name(k));
		return buf;
	}
	uint32_t d = b->member[index];
	snprintf(buf, cap, "blend sample %" PRIu64 " of split %s: member %u (%.1000s), its sample %"
		 PRIu64 " of the epoch in the member's order", index, split_name(k), d + 1,
		 src->members[d].cfg.path, b->member_sample[index]);
	return buf;
}

/* The pipeline, then each member with its weight (normalised), its
 * samples and those the blend takes from it an epoch, per split. */
static void blend_describe(const struct source *src, struct status_text *t)
{
	const struct pipeline_cfg *cfg = src->cfg;
	status_field(t, "name", "  pipeline %s", cfg->name);
	status_field(t, "source", " source %s", "blend");
	status_field(t, "samples", " samples %" PRIu64, src->n_samples);
	status_field(t, "batch_size", " batch_size %u", cfg->batch_size);
	status_field(t, "shuffle", " shuffle %d", cfg->shuffle);
	status_field(t, "drop_last", " drop_last %d\n", cfg->drop_last);
	status_array(t, "members");
	for (uint32_t m = 0; m < src->n_members; m++) {
		const struct source_member *mb = &src->members[m];
		status_object(t, NULL);
		status_field(t, "member", "    member %u", m + 1);
		status_field(t, "source", " source %s", config_source_name(mb->cfg.kind));
		status_field(t, "path", ":%s", mb->cfg.path);
		status_field(t, "weight", " weight %.6f", mb->weight);
		status_array(t, "splits");
		for (uint32_t k = 0; k < SPLIT_COUNT; k++) {
			if (!src->splits[k].present)
				continue;
			status_object(t, NULL);
			status_field(t, "split", " %s", split_name(k));
			status_field(t, "samples", " samples %" PRIu64, mb->src.splits[k].n_samples);
			status_field(t, "taken", " taken %" PRIu64, src->blend[k].taken[m]);
			status_close(t);
		}
		status_close(t);
		status_printf(t, "\n");
		status_close(t);
	}
	status_close(t);
}

/* The members' identities and normalised weights, blend_samples. */
static void blend_identify(const struct source *s, struct source_id *x)
{
	for (uint32_t m = 0; m < s->n_members; m++) {
		const struct source_member *mb = &s->members[m];
		uint64_t w;
		memcpy(&w, &mb->weight, sizeof(w)); /* normalised the same way each start */
		source_id_u64(x, mb->src.data_id);
		source_id_u64(x, w);
	}
	source_id_u64(x, s->cfg->blend_samples);
}

/* The members' lists and entries; the blend keeps its table (the
 * scheduler's). */
static void blend_fill_arena(struct source *src, uint32_t entry, const uint64_t *index_at,
			     struct arena *arena)
{
	for (uint32_t m = 0; m < src->n_members; m++) {
		struct source_member *mb = &src->members[m];
		if (mb->src.ops->fill_arena)
			mb->src.ops->fill_arena(&mb->src, mb->arena_index, index_at, arena);
		else
			*arena_pipeline(arena, mb->arena_index) = mb->src.desc;
	}
	log_info("pipeline \"%s\": a blend of %u sources, %" PRIu64 " samples an epoch (train)",
		 src->cfg->name, src->n_members, src->n_samples);
	*arena_pipeline(arena, entry) = src->desc;
}

const struct source_ops source_blend = {
	.open = blend_open,
	.identify = blend_identify,
	.fill_arena = blend_fill_arena,
	.locate = blend_locate,
	.where = blend_where,
	.batch_error = source_where_error,
	.describe = blend_describe,
	.close = blend_close,
};
