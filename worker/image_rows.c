/* SPDX-License-Identifier: Apache-2.0 */
/*
 * image_rows: a worker's image rows (reader_impl.h). Each row's JPEG is
 * read whole (a file under an imagefolder's root, or a member of a tar
 * shard at its offset), decoded into the slot and labelled; a bad image is
 * replaced (on_error = substitute) by a deterministic other sample of the
 * same shard (imagefolder: of the whole list), or fails the item.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/confine.h"
#include "common/regfile.h"
#include "worker/reader_impl.h"
#include "worker/worker.h"

#define IMAGE_ATTEMPTS 8 /* on_error = substitute: replacements tried per bad image */

/* The tar shard table inside the arena: every shard's path a string of
 * the paths, its samples a range of the index. */
static int image_shards_check(struct arena *arena, const struct arena_pipeline *p,
			      struct reader_pipeline *out)
{
	const struct arena_image_params *ip = &p->image;
	const struct arena_shard *sh = arena_range(arena, ip->shards_offset,
						   (uint64_t)ip->n_shards * sizeof(*sh));
	if (!sh)
		return -EINVAL;
	for (uint32_t i = 0; i < ip->n_shards; i++)
		if (sh[i].path_offset >= ip->paths_bytes || sh[i].first_sample > p->n_samples ||
		    sh[i].n_samples > p->n_samples - sh[i].first_sample)
			return -EINVAL;
	out->shard_fds = malloc((size_t)ip->n_shards * sizeof(int));
	if (!out->shard_fds)
		return -ENOMEM;
	for (uint32_t i = 0; i < ip->n_shards; i++)
		out->shard_fds[i] = -1;
	out->shards = sh;
	out->n_shards = ip->n_shards;
	return 0;
}

/* An imagefolder's directory table inside the arena: each directory's
 * path and names inside the paths, their sample ranges back to back from
 * 0 to n_samples, none empty (arena_folder_dir_of's promise). */
static int image_dirs_check(struct arena *arena, const struct arena_pipeline *p,
			    struct reader_pipeline *out)
{
	const struct arena_image_params *ip = &p->image;
	const struct arena_folder_dir *d = arena_range(arena, ip->shards_offset,
						       (uint64_t)ip->n_dirs * sizeof(*d));
	if (!d || ip->n_dirs == 0)
		return -EINVAL;
	uint64_t next = 0;
	for (uint32_t i = 0; i < ip->n_dirs; i++) {
		if (d[i].path_offset >= ip->paths_bytes || d[i].names_offset >= ip->paths_bytes ||
		    d[i].first_sample != next || d[i].n_samples == 0 ||
		    d[i].n_samples > p->n_samples - next)
			return -EINVAL;
		next += d[i].n_samples;
	}
	if (next != p->n_samples)
		return -EINVAL;
	out->dirs = d;
	out->n_dirs = ip->n_dirs;
	out->files = (const struct arena_folder_file *)(arena->base + ip->index_offset);
	return 0;
}

int image_pipeline_check(struct arena *arena, uint64_t slot_bytes, const struct arena_pipeline *p,
			 struct reader_pipeline *out)
{
	const struct arena_image_params *ip = &p->image;
	uint64_t index_bytes, row_bytes = 0;
	size_t entry_bytes = ip->n_shards > 0 ? sizeof(struct arena_image) :
			     sizeof(struct arena_folder_file);
	if (p->n_tensors != 2 || p->n_samples == 0 ||
	    __builtin_mul_overflow(p->n_samples, entry_bytes, &index_bytes) ||
	    !arena_range(arena, ip->index_offset, index_bytes) || ip->paths_bytes == 0 ||
	    !arena_range(arena, ip->paths_offset, ip->paths_bytes) ||
	    arena->base[ip->paths_offset + ip->paths_bytes - 1] != '\0' ||
	    p->path[0] == '\0' || memchr(p->path, '\0', sizeof(p->path)) == NULL)
		return -EINVAL;
	struct image_sampler *img = calloc(1, sizeof(*img));
	if (!img)
		return -ENOMEM;
	int err = image_sampler_init(img, ip, &row_bytes);
	if (err == 0 && (p->tensor_row_bytes[0] != row_bytes || p->tensor_row_bytes[1] != 8 ||
			 p->tensor_offset[0] > slot_bytes || p->tensor_offset[1] > slot_bytes ||
			 row_bytes > slot_bytes || p->tensor_offset[1] % 8 != 0))
		err = -EINVAL;
	if (err == 0 && ip->n_shards > 0)
		err = image_shards_check(arena, p, out);
	if (err == 0 && ip->n_shards == 0)
		err = image_dirs_check(arena, p, out);
	if (err < 0) {
		image_sampler_free(img);
		free(img);
		return err;
	}
	out->kind = ARENA_SOURCE_IMAGES;
	out->n_samples = p->n_samples;
	out->index = ip->n_shards > 0 ? (const struct arena_image *)(arena->base + ip->index_offset) :
		     NULL;
	out->paths = (const char *)arena->base + ip->paths_offset;
	out->paths_bytes = ip->paths_bytes;
	out->tensor_offset = p->tensor_offset[0];
	out->row_bytes = row_bytes;
	out->out_row_bytes = row_bytes;
	out->label_offset = p->tensor_offset[1];
	out->img = img;
	if (ip->gpu_desc_offset) { /* each row's places are checked in image_plan */
		if (ip->gpu_data_stride == 0 || ip->gpu_data_stride > ARENA_IMAGE_FILE_MAX ||
		    ip->gpu_check > ARENA_GPU_CHECK_ENTROPY)
			return -EINVAL;
		out->gpu_desc_offset = ip->gpu_desc_offset;
		out->gpu_data_offset = ip->gpu_data_offset;
		out->gpu_data_stride = ip->gpu_data_stride;
	}
	return 0;
}

void image_pipeline_free(struct reader_pipeline *p)
{
	for (uint32_t i = 0; p->shard_fds && i < p->n_shards; i++)
		if (p->shard_fds[i] >= 0)
			close(p->shard_fds[i]);
	free(p->shard_fds);
	p->shard_fds = NULL;
	if (p->img) {
		image_sampler_free(p->img);
		free(p->img);
		p->img = NULL;
	}
}

int image_plan(struct arena *arena, uint64_t slot_bytes, struct reader_item *it,
	       const struct work_cmd *cmd, uint32_t k, struct reader_read *rd)
{
	const struct reader_pipeline *p = it->pipe;
	uint64_t sample = cmd->sample_index[k];
	uint64_t row = (uint64_t)cmd->first_row + k;
	uint64_t start, end, label_start;
	if (sample >= p->n_samples || __builtin_mul_overflow(row, p->row_bytes, &start) ||
	    __builtin_add_overflow(start, p->tensor_offset, &start) ||
	    __builtin_add_overflow(start, p->row_bytes, &end) || end > slot_bytes ||
	    __builtin_mul_overflow(row, 8, &label_start) ||
	    __builtin_add_overflow(label_start, p->label_offset, &label_start) ||
	    label_start + 8 > slot_bytes)
		return -EINVAL;
	uint8_t *dst = arena_range(arena, cmd->slot_offset + start, p->row_bytes);
	uint8_t *label = arena_range(arena, cmd->slot_offset + label_start, 8);
	if (dst == NULL || label == NULL)
		return -EINVAL;
	*rd = (struct reader_read){.item = it, .dst = dst, .label = label, .fd = -1,
				   .sample = sample, .asked = sample, .row = (uint32_t)row};
	if (it->gpu_decode && it->gpu_share > WORK_GPU_SHARE_ONE)
		return -EINVAL;
	if (it->gpu_decode && p->gpu_desc_offset) {
		uint64_t desc, data;
		if (__builtin_mul_overflow(row, sizeof(struct arena_gpu_image), &desc) ||
		    __builtin_add_overflow(desc, p->gpu_desc_offset, &desc) ||
		    desc + sizeof(struct arena_gpu_image) > slot_bytes ||
		    __builtin_mul_overflow(row, p->gpu_data_stride, &data) ||
		    __builtin_add_overflow(data, p->gpu_data_offset, &data) ||
		    data + p->gpu_data_stride > slot_bytes)
			return -EINVAL;
		rd->gpu_desc = arena_range(arena, cmd->slot_offset + desc, sizeof(*rd->gpu_desc));
		rd->gpu_data = arena_range(arena, cmd->slot_offset + data, p->gpu_data_stride);
		if (!rd->gpu_desc || !rd->gpu_data)
			return -EINVAL;
	}
	return 0;
}

void image_release(struct reader_read *rd)
{
	const struct reader_pipeline *p = rd->item->pipe;
	if (p->kind != ARENA_SOURCE_IMAGES)
		return;
	if (rd->fd >= 0 && p->n_shards == 0)
		close(rd->fd);
	rd->fd = -1;
	free(rd->buf);
	rd->buf = NULL;
}

int reader_shard_fd(struct reader_pipeline *p, uint32_t i)
{
	if (p->shard_fds[i] >= 0)
		return p->shard_fds[i];
	const char *path = p->paths + p->shards[i].path_offset;
	int fd = regfile_open(AT_FDCWD, path, NULL);
	if (fd == -EMFILE || fd == -ENFILE) {
		for (uint32_t k = 0; k < p->n_shards; k++)
			if (p->shard_fds[k] >= 0) {
				close(p->shard_fds[k]);
				p->shard_fds[k] = -1;
			}
		fd = regfile_open(AT_FDCWD, path, NULL);
	}
	if (fd < 0)
		return fd;
	int confined = p->roots ? confine_fd(fd, p->roots) : 0;
	if (confined < 0) { /* a declared pipeline's shard that leads out */
		close(fd);
		return confined;
	}
	p->shard_fds[i] = fd;
	return fd;
}

/* Sample `sample` of an imagefolder: its path under the root into path
 * (PATH_MAX bytes) and its size. 0, or -EINVAL. */
static int folder_file(const struct reader_pipeline *p, uint64_t sample, char *path,
		       uint64_t *file_bytes)
{
	const struct arena_folder_dir *d = arena_folder_dir_of(p->dirs, p->n_dirs, sample);
	const struct arena_folder_file *f = &p->files[sample];
	if (f->name_offset >= p->paths_bytes - d->names_offset ||
	    snprintf(path, PATH_MAX, "%s/%s", p->paths + d->path_offset,
		     p->paths + d->names_offset + f->name_offset) >= PATH_MAX)
		return -EINVAL;
	*file_bytes = f->file_bytes;
	return 0;
}

/* The label of sample `sample`. */
static int64_t image_label(const struct reader_pipeline *p, uint64_t sample)
{
	if (p->index)
		return p->index[sample].label;
	return arena_folder_dir_of(p->dirs, p->n_dirs, sample)->label;
}

/* Opens rd->sample's file (or finds its shard) and sizes its buffer: 0, or
 * the -errno that makes this sample bad. */
static int image_arm(struct reader_read *rd)
{
	struct reader_pipeline *p = rd->item->pipe;
	image_release(rd);
	rd->len = rd->done_bytes = rd->offset = 0;
	rd->retries = 0;
	char path[PATH_MAX];
	uint64_t file_bytes, data_offset = 0;
	int fd;
	if (p->n_shards > 0) {
		const struct arena_image *e = &p->index[rd->sample];
		if (e->path_offset >= p->paths_bytes || e->shard >= p->n_shards)
			return -EINVAL;
		file_bytes = e->file_bytes;
		data_offset = e->data_offset;
	} else if (folder_file(p, rd->sample, path, &file_bytes) < 0) {
		return -EINVAL;
	}
	if (file_bytes == 0)
		return -ENODATA;
	if (file_bytes > ARENA_IMAGE_FILE_MAX)
		return -EFBIG;
	fd = p->n_shards > 0 ? reader_shard_fd(p, p->index[rd->sample].shard) :
	     regfile_open(p->fd, path, NULL);
	if (fd < 0)
		return fd;
	/* a declared pipeline's image swapped for a symlink that leads out
	 * since it was listed: bad, as a file that cannot be read */
	int confined = p->roots && p->n_shards == 0 ? confine_fd(fd, p->roots) : 0;
	if (confined < 0) {
		close(fd);
		return confined;
	}
	rd->buf = malloc(file_bytes);
	if (!rd->buf) {
		if (p->n_shards == 0)
			close(fd);
		return -ENOMEM;
	}
	rd->fd = fd;
	rd->len = file_bytes;
	rd->offset = data_offset;
	return 0;
}

/* The replacement for attempt: another sample of the asked one's shard
 * (imagefolder: of the whole list; a shard of one sample: the whole list). */
static uint64_t image_replacement(const struct reader_pipeline *p, uint64_t epoch,
				  uint64_t asked, uint32_t attempt)
{
	uint64_t first = 0, n = p->n_samples;
	if (p->n_shards > 0) {
		const struct arena_shard *sh = &p->shards[p->index[asked].shard];
		if (sh->n_samples >= 2 && asked >= sh->first_sample &&
		    asked - sh->first_sample < sh->n_samples) {
			first = sh->first_sample;
			n = sh->n_samples;
		}
	}
	return first + image_substitute(p->img, epoch, asked - first, attempt, n);
}

bool image_retry(struct reader_read *rd, int status)
{
	struct reader_item *it = rd->item;
	const struct reader_pipeline *p = it->pipe;
	for (;;) {
		if (it->bad_status == 0) {
			it->bad_status = status;
			it->bad_index = rd->sample;
		}
		if (rd->attempt == 0)
			rd->asked_status = status;
		image_release(rd);
		if (p->img->params.on_error != 0 || rd->attempt >= IMAGE_ATTEMPTS ||
		    status == -ENOMEM || p->n_samples < 2) {
			/* The row names the sample asked for: its own reason,
			 * and how many replacements were tried (reader.h). */
			rd->len = 0;
			reader_item_fail(it, rd->row, rd->asked_status,
					 WORKER_DETAIL_IMAGE | rd->attempt);
			return false;
		}
		it->n_bad++;
		rd->attempt++;
		rd->sample = image_replacement(p, it->epoch, rd->asked, rd->attempt);
		status = image_arm(rd);
		if (status == 0)
			return true;
	}
}

bool image_start(struct reader_read *rd)
{
	int status = image_arm(rd);
	return status == 0 || image_retry(rd, status);
}

/* GPU decoding: whether the GPU decodes rd's image, a function of the
 * image (its header, its bytes' structure, its size), of the sample and
 * of the item's share (work_cmd.gpu_share, which the scheduler sets from
 * the client's data wait); if so, its JPEG and its plan are left in the
 * row's places for the daemon's GPU thread. Which sample is in the row,
 * its label, crop and flip never depend on it. */
static bool image_to_gpu(struct reader_read *rd)
{
	const struct reader_pipeline *p = rd->item->pipe;
	const struct arena_image_params *ip = &p->img->params;
	uint32_t share = rd->item->gpu_share;
	/* The share by sample: a sample whose hash is below share * 2^48 is a
	 * candidate, so a larger share keeps every candidate of a smaller one
	 * (and one of WORK_GPU_SHARE_ONE takes every sample). */
	if (!rd->gpu_desc || rd->len > p->gpu_data_stride ||
	    (share < WORK_GPU_SHARE_ONE &&
	     hash_sample(ip->seed, 0x6770756465636f64ull /* "gpudecod" */, 0, rd->sample) >=
	     (uint64_t)share << 48))
		return false;
	struct jh_info info;
	if (!image_gpu_takes(ip, rd->buf, rd->len, p->gpu_data_stride, &info))
		return false; /* the workers' decoder takes it, or finds it bad */
	struct tf_plan plan;
	tf_plan_sample(&p->img->chain, ip->seed, rd->item->epoch, rd->sample, info.width,
		       info.height, &plan);
	memcpy(rd->gpu_data, rd->buf, rd->len);
	*rd->gpu_desc = (struct arena_gpu_image){
		.route = ARENA_ROUTE_GPU, .flip = plan.flip, .sample = rd->sample,
		.epoch = rd->item->epoch, .len = rd->len, .width = info.width, .height = info.height,
		.x = plan.x, .y = plan.y, .w = plan.w, .h = plan.h,
		.luma_h = info.components == 3 ? info.h[0] : 1,
		.luma_v = info.components == 3 ? info.v[0] : 1};
	return true;
}

bool image_finish(struct reader_read *rd)
{
	const struct reader_pipeline *p = rd->item->pipe;
	if (image_to_gpu(rd)) {
		reader_beat(rd);
		int64_t label = image_label(p, rd->sample);
		memcpy(rd->label, &label, sizeof(label));
		image_release(rd);
		return false;
	}
	if (rd->gpu_desc)
		*rd->gpu_desc = (struct arena_gpu_image){.route = ARENA_ROUTE_CPU, .sample = rd->sample,
							 .epoch = rd->item->epoch};
	struct image_times times;
	struct hist_atomic *hist = rd->item->hist;
	int status = image_sample_timed(p->img, rd->buf, rd->len, rd->item->epoch, rd->sample, rd->dst,
					hist ? &times : NULL);
	reader_beat(rd); /* decoded (or found bad): progress */
	if (status < 0)
		return image_retry(rd, status);
	if (hist) {
		hist_atomic_add_own(&hist[PSTAGE_DECODE], times.decode_ns);
		hist_atomic_add_own(&hist[PSTAGE_TRANSFORM], times.transform_ns);
	}
	int64_t label = image_label(p, rd->sample);
	memcpy(rd->label, &label, sizeof(label));
	image_release(rd);
	return false;
}
