/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched_blend: the batches of a blend (daemon/source/source.h, common/blend.h).
 * The client's sampler shards the blend's order over the ranks as it
 * shards a lone source's samples (never shuffling it: each member is
 * shuffled in its own order); each row's blended sample is traced here to
 * a member's sample, and the work items, rows of one member each, name
 * the member's table entry in the arena, so that workers read them as
 * that lone source's samples.
 *
 * Threads: the scheduler's loop only.
 */
#include "daemon/sched/sched_impl.h"

#include "daemon/source/source.h"

int sched_blend_plan(struct sched *s, struct slot *sl, const struct sched_client *c)
{
	const struct source *src = &s->sources[c->pipeline];
	uint32_t chunk = src->chunk;
	sl->blend = true;
	sl->docs = false;
	sl->n_items = 0;
	for (uint32_t r = 0; r < sl->pos.rows; r++) {
		uint64_t index = sampler_sample(&c->sampler, sl->pos.epoch, sl->pos.g, sl->pos.first + r);
		struct source_place at;
		source_locate(src, c->split, sl->pos.epoch, index, &at);
		uint32_t m = at.member;
		sl->blend_member[r] = m;
		sl->blend_sample[r] = at.sample;
		sl->blend_epoch[r] = at.epoch;
		const struct source_member *mb = &src->members[m];
		if (arena_pipeline(s->arena, mb->arena_index)->docs.n_documents) {
			int rc = sched_doc_locate(s, mb->arena_index, c->split, sl->blend_epoch[r],
						  src->cfg->seq_len, sl->blend_sample[r],
						  &sl->doc_pos[r], &sl->doc_skip[r]);
			if (rc < 0)
				return rc;
		}
		struct item *it = sl->n_items ? &sl->items[sl->n_items - 1] : NULL;
		if (it && it->count < chunk && sl->blend_member[it->first_row] == m &&
		    sl->blend_epoch[it->first_row] == sl->blend_epoch[r]) {
			it->count++;
			continue;
		}
		it = &sl->items[sl->n_items++];
		it->first_row = r;
		it->count = 1;
	}
	return 0;
}

void sched_blend_cmd(const struct sched *s, const struct slot *sl, const struct item *it,
		     struct work_cmd *cmd)
{
	const struct source *src = &s->sources[sl->client->pipeline];
	uint32_t first = it->first_row;
	const struct source_member *mb = &src->members[sl->blend_member[first]];
	bool docs = arena_pipeline(s->arena, mb->arena_index)->docs.n_documents > 0;
	cmd->pipeline = mb->arena_index;
	cmd->epoch = sl->blend_epoch[first];
	for (uint32_t i = 0; i < it->count; i++) {
		cmd->sample_index[i] = sl->blend_sample[first + i];
		cmd->doc_pos[i] = docs ? sl->doc_pos[first + i] : 0;
		cmd->doc_skip[i] = docs ? sl->doc_skip[first + i] : 0;
	}
}
