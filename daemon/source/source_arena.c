/* SPDX-License-Identifier: Apache-2.0 */
/* source_arena: the sources' sample lists in the arena's index area and
 * their table entries, each through its kind's ops (source.h). */
#include "daemon/source/source.h"

#include "daemon/source/source_impl.h"

uint64_t source_image_index_bytes(const struct image_index *ix)
{
	if (ix->files) /* imagefolder */
		return arena_align(ix->n * sizeof(struct arena_folder_file)) +
		       arena_align((uint64_t)ix->n_dirs * sizeof(struct arena_folder_dir)) +
		       arena_align(ix->paths_bytes);
	return arena_align(ix->n * sizeof(struct arena_image)) +
	       arena_align(ix->n_shards * sizeof(struct arena_shard)) + arena_align(ix->paths_bytes);
}

uint64_t source_index_bytes(const struct source *src)
{
	return src->ops->index_bytes ? src->ops->index_bytes(src) : 0;
}

void source_fill_arena_entry(struct source *src, uint32_t entry, const uint64_t *index_at,
			     struct arena *arena)
{
	if (src->ops->fill_arena)
		src->ops->fill_arena(src, entry, index_at, arena);
	else
		*arena_pipeline(arena, entry) = src->desc;
}

void source_fill_arena(struct source *sources, size_t n, const uint64_t *index_at,
		       struct arena *arena)
{
	for (size_t i = 0; i < n; i++)
		source_fill_arena_entry(&sources[i], (uint32_t)i, index_at, arena);
}
