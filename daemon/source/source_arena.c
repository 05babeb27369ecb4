/* source_arena: a pipeline's sample lists in the arena's index area
 * (image lists, document tables, llm.c shard tables), and samples named
 * for messages from them (source.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/regfile.h"
#include "daemon/source/source.h"

uint64_t source_index_bytes(const struct source *src)
{
	const struct image_index *ix = &src->index;
	if (src->doc_tokens)
		return arena_align((src->n_documents + 1) * sizeof(*src->doc_tokens));
	return arena_align(ix->n * sizeof(struct arena_image)) +
	       arena_align(ix->n_shards * sizeof(struct arena_shard)) + arena_align(ix->paths_bytes);
}

/* The start-up lines of an image pipeline's sample list. */
static void log_image_index(const struct source *src)
{
	const struct image_index *ix = &src->index;
	const char *name = src->cfg->name, *path = src->cfg->path;
	if (src->cfg->kind == SOURCE_TAR) {
		if (ix->other_images)
			log_warning("pipeline \"%s\": %s: %" PRIu64 " samples whose image is not a JPEG "
				    "(.png, .webp, ...) are left out", name, path, ix->other_images);
		log_info("pipeline \"%s\": %" PRIu64 " images with %u distinct labels in %u tar "
			 "shards (%s)", name, ix->n, ix->n_classes, ix->n_shards, path);
		return;
	}
	if (ix->other_images)
		log_warning("pipeline \"%s\": %s: %" PRIu64 " image files that are not JPEG (.png, "
			    ".bmp, ...) are left out; torchvision's ImageFolder would count them, so its "
			    "sample numbers differ", name, path, ix->other_images);
	log_info("pipeline \"%s\": %" PRIu64 " images in %u classes under %s", name, ix->n,
		 ix->n_classes, path);
}

/* Source src's table entry `entry` and its list, at `index_at` in the
 * index area. */
static void fill_one(struct source *src, uint32_t entry, uint64_t index_at, struct arena *arena)
{
	if (src->desc.kind == ARENA_SOURCE_IMAGES) {
		struct arena_image_params *ip = &src->desc.image;
		const struct image_index *ix = &src->index;
		ip->index_offset = arena_indexes_offset(arena) + index_at;
		ip->shards_offset = ip->index_offset + arena_align(ix->n * sizeof(struct arena_image));
		ip->paths_offset = ip->shards_offset +
				   arena_align(ix->n_shards * sizeof(struct arena_shard));
		ip->paths_bytes = ix->paths_bytes;
		memcpy(arena->base + ip->index_offset, ix->entries,
		       ix->n * sizeof(struct arena_image));
		if (ix->n_shards)
			memcpy(arena->base + ip->shards_offset, ix->shards,
			       ix->n_shards * sizeof(struct arena_shard));
		memcpy(arena->base + ip->paths_offset, ix->paths, ip->paths_bytes);
		log_image_index(src);
		source_close(src); /* the arena holds the list from here on */
	} else if (src->desc.shards.n_shards) {
		struct arena_shard_params *sp = &src->desc.shards;
		const struct image_index *ix = &src->index;
		sp->shards_offset = arena_indexes_offset(arena) + index_at;
		sp->paths_offset = sp->shards_offset +
				   arena_align(ix->n_shards * sizeof(struct arena_shard));
		sp->paths_bytes = ix->paths_bytes;
		memcpy(arena->base + sp->shards_offset, ix->shards,
		       ix->n_shards * sizeof(struct arena_shard));
		memcpy(arena->base + sp->paths_offset, ix->paths, ix->paths_bytes);
		log_info("pipeline \"%s\": %" PRIu64 " windows of %" PRIu64 " tokens in %u llm.c "
			 "shards (%s)", src->cfg->name, src->n_samples, src->cfg->seq_len + 1,
			 ix->n_shards, src->cfg->path);
		source_close(src); /* the arena holds the list from here on */
	} else if (src->doc_tokens) {
		src->desc.docs.docs_offset = arena_indexes_offset(arena) + index_at;
		memcpy(arena->base + src->desc.docs.docs_offset, src->doc_tokens,
		       (src->n_documents + 1) * sizeof(*src->doc_tokens));
		source_close(src); /* the arena holds the table from here on */
	}
	*arena_pipeline(arena, entry) = src->desc;
}

void source_fill_arena(struct source *sources, size_t n, const uint64_t *index_at,
		       struct arena *arena)
{
	for (size_t i = 0; i < n; i++) {
		struct source *src = &sources[i];
		/* a blend keeps its table (the scheduler's); its members' lists
		 * go to the arena */
		for (uint32_t m = 0; m < src->n_members; m++) {
			struct source_member *mb = &src->members[m];
			fill_one(&mb->src, mb->arena_index, index_at[mb->arena_index], arena);
		}
		if (src->n_members) {
			log_info("pipeline \"%s\": a blend of %u sources, %" PRIu64 " samples an epoch "
				 "(train)", src->cfg->name, src->n_members, src->n_samples);
			*arena_pipeline(arena, (uint32_t)i) = src->desc;
			continue;
		}
		fill_one(src, (uint32_t)i, index_at[i], arena);
	}
}

/* Entry `index` of an image pipeline's list in the arena, or NULL. */
static const struct arena_image *image_entry(const struct arena *arena,
					     const struct arena_image_params *ip, uint64_t index)
{
	const struct arena_image *e = arena_range(arena, ip->index_offset +
						  index * sizeof(struct arena_image), sizeof(*e));
	return e && e->path_offset < ip->paths_bytes ? e : NULL;
}

/* The shard entry e belongs to, or NULL. */
static const struct arena_shard *image_shard(const struct arena *arena,
					     const struct arena_image_params *ip,
					     const struct arena_image *e)
{
	if (ip->n_shards == 0)
		return NULL;
	const struct arena_shard *sh = arena_range(arena, ip->shards_offset +
						   (uint64_t)e->shard * sizeof(*sh), sizeof(*sh));
	return sh && sh->path_offset < ip->paths_bytes ? sh : NULL;
}

/* An llm.c pipeline's window `index`: its shard (from the arena's
 * table), the window in it and its bytes. */
static const char *llmc_where(const struct arena *arena, uint32_t pipeline, uint64_t index,
			      char *buf, size_t cap)
{
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

const char *source_sample_where(const struct source *src, const struct arena *arena,
				uint32_t pipeline, uint32_t split, uint64_t index, char *buf,
				size_t cap)
{
	if (src->n_members)
		return source_blend_where(src, split, index, buf, cap);
	if (src->desc.shards.n_shards)
		return llmc_where(arena, pipeline, index, buf, cap);
	if (src->desc.kind != ARENA_SOURCE_IMAGES) {
		if (split >= SPLIT_COUNT && src->has_splits) {
			snprintf(buf, cap, "%.1000s sample %" PRIu64 " of one of its splits",
				 src->data_path, index);
			return buf;
		}
		uint64_t k = split < SPLIT_COUNT ? split : SPLIT_TRAIN;
		if (src->desc.docs.n_documents) { /* no one range: the epoch's documents */
			snprintf(buf, cap, "%.1000s split %s window %" PRIu64 " (tokens %" PRIu64 "..%"
				 PRIu64 " of the epoch's document order)", src->data_path,
				 split_name((uint32_t)k), index, index * src->cfg->seq_len,
				 (index + 1) * src->cfg->seq_len + 1);
			return buf;
		}
		uint64_t offset = src->desc.split_base[k] + index * src->desc.sample_stride;
		snprintf(buf, cap, "%.1000s%s%s bytes %" PRIu64 "..%" PRIu64, src->data_path,
			 src->has_splits ? " split " : "", src->has_splits ? split_name(split) : "",
			 offset, offset + src->desc.sample_read_bytes);
		return buf;
	}
	const struct arena_pipeline *p = arena_pipeline(arena, pipeline);
	const struct arena_image_params *ip = &p->image;
	const char *paths = (const char *)arena->base + ip->paths_offset;
	const struct arena_image *e = image_entry(arena, ip, index);
	if (!e) {
		snprintf(buf, cap, "%.1000s: sample %" PRIu64, p->path, index);
		return buf;
	}
	if (ip->n_shards == 0) {
		snprintf(buf, cap, "%.1000s/%.1000s", p->path, paths + e->path_offset);
		return buf;
	}
	const struct arena_shard *sh = image_shard(arena, ip, e);
	snprintf(buf, cap, "%.1000s: member %.1000s (data at offset %" PRIu64 ")",
		 sh ? paths + sh->path_offset : p->path, paths + e->path_offset, e->data_offset);
	return buf;
}

const char *source_image_why(int status)
{
	switch (status) {
	case -EBADMSG: return "corrupt, or not a JPEG";
	case -ENODATA: return "empty or truncated";
	case -EFBIG: return "larger than max_image_pixels, or a file over 64 MiB";
	case -ETIME: return "its decode took over max_decode_ms of CPU time";
	case REGFILE_NOT_REGULAR: return "not a regular file (replaced since start)";
	default: return strerror(-status);
	}
}

bool source_image_shard(const struct arena *arena, uint32_t pipeline, uint64_t index, char *buf,
			size_t cap, uint64_t *n_samples)
{
	const struct arena_image_params *ip = &arena_pipeline(arena, pipeline)->image;
	const struct arena_image *e = image_entry(arena, ip, index);
	const struct arena_shard *sh = e ? image_shard(arena, ip, e) : NULL;
	if (!sh)
		return false;
	snprintf(buf, cap, "%s", (const char *)arena->base + ip->paths_offset + sh->path_offset);
	*n_samples = sh->n_samples;
	return true;
}
