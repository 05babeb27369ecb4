/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_image: the image sources, `source = imagefolder:ROOT` (the tree
 * scanned by imagefolder.c) and `source = tar:PATTERN` (WebDataset shards
 * scanned by tarshard.c): one JPEG a sample, decoded by the workers (or
 * the GPU) through the pipeline's transform into tensors "image" and
 * "label"; the sample list goes into the arena's index area, from which
 * samples are named in messages (struct source_ops, source.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/regfile.h"
#include "daemon/source/source_impl.h"
#include "daemon/source/tarshard.h"
#include "image/jpeg.h"
#include "image/transform.h"
#include "worker/worker.h"

/* Images per work item: decoding dominates, so small items spread a batch
 * over every worker. */
#define SOURCE_IMAGE_CHUNK 2u

static const uint32_t image_dtypes[] = {
	[IMAGE_UINT8] = PROTO_DTYPE_UINT8, [IMAGE_FLOAT16] = PROTO_DTYPE_FLOAT16,
	[IMAGE_FLOAT32] = PROTO_DTYPE_FLOAT32,
};

/* source_set_listing's: written before the scans that read them start */
static char listing_cache_dir[PATH_MAX];
static uint32_t listing_threads;

void source_set_listing(const char *cache_dir, uint32_t scan_threads)
{
	snprintf(listing_cache_dir, sizeof(listing_cache_dir), "%s", cache_dir ? cache_dir : "");
	listing_threads = scan_threads;
}

/* imagefolder and tar: the sample list, tensors "image" and "label", and what the
 * workers need. The index's place in the arena is filled in by the caller
 * that copies it there. */
static int open_images(const struct pipeline_cfg *cfg, struct source *out, bool tar, char *err,
		       size_t err_cap)
{
	char reason[1024];
	struct tf_chain chain;
	if (tf_parse(cfg->transform, &chain, reason, sizeof(reason)) < 0)
		return source_fail(err, err_cap, cfg, -EINVAL, reason);
	struct imagefolder_opts o = {.pipeline = cfg->name, .roots = cfg->roots,
				     .cache_dir = listing_cache_dir, .threads = listing_threads};
	int rc = tar ? tar_scan(cfg->path, &out->index, reason, sizeof(reason)) :
		 imagefolder_scan(cfg->path, &o, &out->index, reason, sizeof(reason));
	if (rc < 0)
		return source_fail(err, err_cap, cfg, rc, reason);
	out->n_samples = out->index.n;
	/* the whole list is its one split */
	out->splits[SPLIT_TRAIN] = (struct source_split){.present = true,
							 .n_samples = out->n_samples};
	out->chunk = SOURCE_IMAGE_CHUNK; /* unless the config sets chunk */
	uint64_t dims[3] = {3, chain.out_h, chain.out_w};
	if (cfg->layout == IMAGE_NHWC)
		dims[0] = chain.out_h, dims[1] = chain.out_w, dims[2] = 3;
	source_add_tensor_dims(out, "image", image_dtypes[cfg->dtype], dims, 3);
	source_add_tensor_dims(out, "label", PROTO_DTYPE_INT64, NULL, 0);
	struct arena_pipeline *d = &out->desc;
	d->kind = ARENA_SOURCE_IMAGES;
	struct arena_image_params *ip = &d->image;
	ip->seed = cfg->seed;
	ip->max_pixels = cfg->max_image_pixels;
	ip->max_decode_ms = cfg->max_decode_ms;
	ip->out_h = chain.out_h;
	ip->out_w = chain.out_w;
	ip->layout = cfg->layout;
	ip->dtype = image_dtypes[cfg->dtype];
	ip->on_error = cfg->on_error;
	ip->decode_scale = cfg->decode_scale == DECODE_SCALE_FULL ? JD_SCALE_FULL : JD_SCALE_FAST;
	ip->n_shards = out->index.n_shards;
	if (cfg->decode != DECODE_CPU) {
		/* After the tensors, a descriptor per row; each row's JPEG in the
		 * row itself, or, when max_image_bytes is more than a row holds,
		 * after the descriptors. */
		ip->gpu_check = cfg->gpu_decode_check == GPU_CHECK_ENTROPY ?
					ARENA_GPU_CHECK_ENTROPY : ARENA_GPU_CHECK_STRUCTURE;
		ip->gpu_desc_offset = out->batch_bytes;
		uint64_t end = source_align_tensor(ip->gpu_desc_offset + (uint64_t)cfg->batch_size *
					    sizeof(struct arena_gpu_image));
		ip->gpu_data_offset = out->tensors[0].offset;
		ip->gpu_data_stride = out->row_bytes[0];
		if (cfg->max_image_bytes > out->row_bytes[0]) {
			ip->gpu_data_offset = end;
			ip->gpu_data_stride = cfg->max_image_bytes;
			end += (uint64_t)cfg->batch_size * cfg->max_image_bytes;
		}
		out->slot_bytes = end;
	}
	for (int c = 0; c < 3; c++) {
		ip->mean[c] = (float)cfg->mean[c];
		ip->std[c] = (float)cfg->std[c];
	}
	snprintf(ip->transform, sizeof(ip->transform), "%s", cfg->transform);
	return 0;
}

static int imagefolder_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
			    size_t err_cap)
{
	return open_images(cfg, out, false, err, err_cap);
}

static int tar_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
		    size_t err_cap)
{
	return open_images(cfg, out, true, err, err_cap);
}

static void image_identify(const struct source *s, struct source_id *x)
{
	source_id_file(x, s);
	source_id_images(x, &s->index);
	source_id_shards(x, &s->index);
}

static uint64_t image_index_bytes(const struct source *s)
{
	return source_image_index_bytes(&s->index);
}

/* The start-up lines of an image pipeline's sample list. */
static void log_image_index(const struct source *src, bool tar)
{
	const struct image_index *ix = &src->index;
	const char *name = src->cfg->name, *path = src->cfg->path;
	if (tar) {
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
	uint64_t bytes = source_image_index_bytes(ix);
	log_info("pipeline \"%s\": %" PRIu64 " images in %u classes under %s (an index of %" PRIu64
		 " bytes in the arena, %.1f a file)", name, ix->n, ix->n_classes, path, bytes,
		 ix->n ? (double)bytes / (double)ix->n : 0.0);
}

/* bytes of *block moved to dst, from its end, the block shrunk as they
 * go: a large block is a mapping of its own, whose tail realloc gives
 * back, so that the list is never held twice over. *block is freed. */
static void move_shrinking(uint8_t *dst, void **block, uint64_t bytes)
{
	const uint64_t step = 64ull << 20;
	while (bytes > 0) {
		uint64_t k = bytes > step ? step : bytes;
		memcpy(dst + bytes - k, (const uint8_t *)*block + bytes - k, k);
		bytes -= k;
		void *shrunk = bytes ? realloc(*block, bytes) : NULL;
		if (shrunk)
			*block = shrunk;
	}
	free(*block);
	*block = NULL;
}

/* The list (tar: entries, shards, paths; imagefolder: files, directories,
 * paths) into the index area (desc.image). */
static void fill_images(struct source *src, uint32_t entry, const uint64_t *index_at,
			struct arena *arena, bool tar)
{
	struct arena_image_params *ip = &src->desc.image;
	const struct image_index *ix = &src->index;
	ip->index_offset = arena_indexes_offset(arena) + index_at[entry];
	ip->paths_bytes = ix->paths_bytes;
	log_image_index(src, tar);
	if (!tar) { /* files, directories, paths */
		uint64_t dirs_at, paths_at;
		source_folder_layout(ix, &dirs_at, &paths_at);
		ip->n_dirs = ix->n_dirs;
		ip->shards_offset = ip->index_offset + dirs_at;
		ip->paths_offset = ip->index_offset + paths_at;
		move_shrinking(arena->base + ip->index_offset, (void **)&src->index.files,
			       ix->n * sizeof(struct arena_folder_file));
		memcpy(arena->base + ip->shards_offset, ix->dirs,
		       (size_t)ix->n_dirs * sizeof(struct arena_folder_dir));
	} else {
		ip->shards_offset = ip->index_offset + arena_align(ix->n * sizeof(struct arena_image));
		ip->paths_offset = ip->shards_offset +
				   arena_align(ix->n_shards * sizeof(struct arena_shard));
		move_shrinking(arena->base + ip->index_offset, (void **)&src->index.entries,
			       ix->n * sizeof(struct arena_image));
	}
	if (ix->n_shards)
		memcpy(arena->base + ip->shards_offset, ix->shards,
		       ix->n_shards * sizeof(struct arena_shard));
	move_shrinking(arena->base + ip->paths_offset, (void **)&src->index.paths, ip->paths_bytes);
	source_close(src); /* the arena holds the list from here on */
	*arena_pipeline(arena, entry) = src->desc;
}

static void imagefolder_fill_arena(struct source *s, uint32_t entry, const uint64_t *index_at,
				   struct arena *arena)
{
	fill_images(s, entry, index_at, arena, false);
}

static void tar_fill_arena(struct source *s, uint32_t entry, const uint64_t *index_at,
			   struct arena *arena)
{
	fill_images(s, entry, index_at, arena, true);
}

/* An imagefolder's sample `index` in the arena: its directory's path and
 * its name, or false. */
static bool folder_sample(const struct arena *arena, const struct arena_image_params *ip,
			  uint64_t n_samples, uint64_t index, const char **dir, const char **name)
{
	const struct arena_folder_dir *dirs = arena_range(arena, ip->shards_offset,
							  (uint64_t)ip->n_dirs * sizeof(*dirs));
	const struct arena_folder_file *f = arena_range(arena, ip->index_offset +
							index * sizeof(*f), sizeof(*f));
	if (!dirs || !f || ip->n_dirs == 0 || index >= n_samples)
		return false;
	const struct arena_folder_dir *d = arena_folder_dir_of(dirs, ip->n_dirs, index);
	if (d->path_offset >= ip->paths_bytes || d->names_offset >= ip->paths_bytes ||
	    f->name_offset >= ip->paths_bytes - d->names_offset)
		return false;
	const char *paths = (const char *)arena->base + ip->paths_offset;
	*dir = paths + d->path_offset;
	*name = paths + d->names_offset + f->name_offset;
	return true;
}

/* Entry `index` of a tar pipeline's list in the arena, or NULL. */
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

/* An image sample: its file under the root, or its tar shard, member and
 * the member's data offset, from the arena's list. */
static const char *image_where(const struct source *s, const struct arena *arena,
			       uint32_t pipeline, uint32_t split, uint64_t index, char *buf,
			       size_t cap)
{
	(void)s, (void)split;
	const struct arena_pipeline *p = arena_pipeline(arena, pipeline);
	const struct arena_image_params *ip = &p->image;
	const char *paths = (const char *)arena->base + ip->paths_offset;
	const char *dir, *name;
	if (ip->n_shards == 0) {
		if (folder_sample(arena, ip, p->n_samples, index, &dir, &name))
			snprintf(buf, cap, "%.1000s/%.1000s/%.500s", p->path, dir, name);
		else
			snprintf(buf, cap, "%.1000s: sample %" PRIu64, p->path, index);
		return buf;
	}
	const struct arena_image *e = image_entry(arena, ip, index);
	if (!e) {
		snprintf(buf, cap, "%.1000s: sample %" PRIu64, p->path, index);
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

/* The tar shard of image sample `index`: its path into buf and its sample
 * count; false for an imagefolder or a sample the list does not hold. */
static bool image_shard_of(const struct arena *arena, uint32_t pipeline, uint64_t index, char *buf,
			size_t cap, uint64_t *n_samples)
{
	const struct arena_image_params *ip = &arena_pipeline(arena, pipeline)->image;
	if (ip->n_shards == 0)
		return false;
	const struct arena_image *e = image_entry(arena, ip, index);
	const struct arena_shard *sh = e ? image_shard(arena, ip, e) : NULL;
	if (!sh)
		return false;
	snprintf(buf, cap, "%s", (const char *)arena->base + ip->paths_offset + sh->path_offset);
	*n_samples = sh->n_samples;
	return true;
}

/* Why a failed image row was not replaced: the pipeline's on_error, and
 * under substitute what stopped it. detail is the worker's:
 * WORKER_DETAIL_IMAGE | the replacements it tried (worker/reader.h). */
static void image_policy(const struct source *src, const struct arena *arena, uint32_t pipeline,
			 uint64_t index, int status, uint64_t detail, char *buf, size_t cap)
{
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
	if (!image_shard_of(arena, pipeline, index, shard, sizeof(shard), &shard_samples))
		snprintf(buf, cap, "on_error = substitute, and none of the %u other samples tried "
			 "could replace it", tried);
	else if (shard_samples >= 2)
		snprintf(buf, cap, "on_error = substitute, and none of the %u other samples of shard "
			 "%.180s tried could replace it", tried, shard);
	else
		snprintf(buf, cap, "on_error = substitute, and none of the %u samples of other shards "
			 "tried (its shard has no other) could replace it", tried);
}

/* The ERROR text of an image batch whose item failed: the file, why the
 * image is bad and the on_error policy. */
static int image_batch_error(const struct source *src, const struct arena *arena,
			     const struct source_failure *f, char *text, size_t cap)
{
	if (!(f->detail & WORKER_DETAIL_IMAGE)) { /* no image was read */
		snprintf(text, cap, "pipeline \"%s\": %.800s: %s (a worker could not use the "
			 "pipeline's data, so no sample could be read or replaced)", src->cfg->name,
			 src->cfg->path, strerror(-f->error));
		return f->error == -EBADMSG ? EBADMSG : EIO;
	}
	char where[2200], policy[400];
	image_policy(src, arena, f->entry, f->index, f->error, f->detail, policy, sizeof(policy));
	snprintf(text, cap, "pipeline \"%s\": %.500s: sample %" PRIu64 ": %s (%.300s)",
		 src->cfg->name,
		 source_sample_where(src, arena, f->entry, SPLIT_TRAIN, f->index, where,
				     sizeof(where)),
		 f->index, source_image_why(f->error), policy);
	return f->error == -EBADMSG ? EBADMSG : EIO;
}

const struct source_ops source_imagefolder = {
	.open = imagefolder_open,
	.identify = image_identify,
	.index_bytes = image_index_bytes,
	.fill_arena = imagefolder_fill_arena,
	.where = image_where,
	.batch_error = image_batch_error,
};

const struct source_ops source_tar = {
	.open = tar_open,
	.identify = image_identify,
	.index_bytes = image_index_bytes,
	.fill_arena = tar_fill_arena,
	.where = image_where,
	.batch_error = image_batch_error,
};
