/* SPDX-License-Identifier: Apache-2.0 */
/* source_arena: the sources' sample lists in the arena's index area and
 * their table entries, each through its kind's ops (source.h). */
#include "daemon/source/source.h"

#include "daemon/source/source_impl.h"

/* An imagefolder's parts are packed at this alignment, not a page's: a
 * small tree (a job's) then takes one page, not three. */
#define FOLDER_ALIGN 64u

static uint64_t folder_align(uint64_t v)
{
	return (v + FOLDER_ALIGN - 1) & ~(uint64_t)(FOLDER_ALIGN - 1);
}

uint64_t source_folder_layout(const struct image_index *ix, uint64_t *dirs_at, uint64_t *paths_at)
{
	*dirs_at = folder_align(ix->n * sizeof(struct arena_folder_file));
	*paths_at = *dirs_at + folder_align((uint64_t)ix->n_dirs * sizeof(struct arena_folder_dir));
	return arena_align(*paths_at + ix->paths_bytes);
}

uint64_t source_image_index_bytes(const struct image_index *ix)
{
	uint64_t dirs_at, paths_at;
	if (ix->files) /* imagefolder */
		return source_folder_layout(ix, &dirs_at, &paths_at);
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

void source_place_index(struct source *src, uint32_t entry, const uint64_t *index_at,
			struct arena *arena)
{
	if (src->ops->place_index)
		src->ops->place_index(src, entry, index_at, arena);
	for (uint32_t m = 0; m < src->n_members; m++)
		source_place_index(&src->members[m].src, src->members[m].arena_index, index_at, arena);
}

void source_fill_arena(struct source *sources, size_t n, const uint64_t *index_at,
		       struct arena *arena)
{
	for (size_t i = 0; i < n; i++)
		source_fill_arena_entry(&sources[i], (uint32_t)i, index_at, arena);
}
