/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_llmc: `source = llmc:PATTERN`, llm.c token shards (each header
 * checked by llmc.c), read as one stream of uint16 tokens cut into
 * windows of seq_len + 1 within each shard; the shard table goes into the
 * arena's index area, where workers find a window's shard (struct
 * source_ops, source.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "daemon/source/llmc.h"
#include "daemon/source/source_impl.h"

static int llmc_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
		     size_t err_cap)
{
	char reason[1024];
	int rc = llmc_scan(cfg->path, cfg->seq_len, &out->index, &out->n_samples, reason,
			   sizeof(reason));
	if (rc < 0)
		return source_fail(err, err_cap, cfg, rc, reason);
	out->splits[SPLIT_TRAIN] = (struct source_split){.present = true,
							 .n_samples = out->n_samples};
	out->desc.split_samples[SPLIT_TRAIN] = out->n_samples;
	out->desc.shards.n_shards = out->index.n_shards;
	out->desc.shards.header_bytes = LLMC_HEADER_BYTES;
	source_token_layout(cfg, out, LLMC_TOKEN_BYTES, cfg->token_out_dtype);
	return 0;
}

static void llmc_identify(const struct source *s, struct source_id *x)
{
	source_id_file(x, s);
	source_id_u64(x, s->cfg->seq_len);
	source_id_shards(x, &s->index);
}

static uint64_t llmc_index_bytes(const struct source *s)
{
	return source_image_index_bytes(&s->index);
}

/* The shards and their paths into the index area (desc.shards). */
static void llmc_fill_arena(struct source *s, uint32_t entry, const uint64_t *index_at,
			    struct arena *arena)
{
	struct arena_shard_params *sp = &s->desc.shards;
	const struct image_index *ix = &s->index;
	sp->shards_offset = arena_indexes_offset(arena) + index_at[entry];
	sp->paths_offset = sp->shards_offset + arena_align(ix->n_shards * sizeof(struct arena_shard));
	sp->paths_bytes = ix->paths_bytes;
	memcpy(arena->base + sp->shards_offset, ix->shards,
	       ix->n_shards * sizeof(struct arena_shard));
	memcpy(arena->base + sp->paths_offset, ix->paths, ix->paths_bytes);
	log_info("pipeline \"%s\": %" PRIu64 " windows of %" PRIu64 " tokens in %u llm.c "
		 "shards (%s)", s->cfg->name, s->n_samples, s->cfg->seq_len + 1,
		 ix->n_shards, s->cfg->path);
	source_close(s); /* the arena holds the list from here on */
	*arena_pipeline(arena, entry) = s->desc;
}

/* An llm.c pipeline's window `index`: its shard (from the arena's
 * table), the window in it and its bytes. */
static const char *llmc_where(const struct source *s, const struct arena *arena, uint32_t pipeline,
			      uint32_t split, uint64_t index, char *buf, size_t cap)
{
	(void)s, (void)split;
	const struct arena_pipeline *p = arena_pipeline(arena, pipeline);
	const struct arena_shard_params *sp = &p->shards;
	const struct arena_shard *sh = arena_range(arena, sp->shards_offset,
						   (uint64_t)sp->n_shards * sizeof(*sh));
	uint32_t lo = 0, hi = sp->n_shards; /* the last shard starting at or before index */
	while (sh && hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (sh[mid].first_sample <= index)
			lo = mid;
		else
			hi = mid;
	}
	if (!sh || sh[lo].path_offset >= sp->paths_bytes) {
		snprintf(buf, cap, "%.1000s: sample %" PRIu64, p->path, index);
		return buf;
	}
	uint64_t at = sp->header_bytes + (index - sh[lo].first_sample) * p->sample_stride;
	snprintf(buf, cap, "%.1000s window %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64 ")",
		 (const char *)arena->base + sp->paths_offset + sh[lo].path_offset,
		 index - sh[lo].first_sample, at, at + p->sample_read_bytes);
	return buf;
}

const struct source_ops source_llmc = {
	.open = llmc_open,
	.identify = llmc_identify,
	.index_bytes = llmc_index_bytes,
	.fill_arena = llmc_fill_arena,
	.where = llmc_where,
	.batch_error = source_where_error,
};
