/* SPDX-License-Identifier: Apache-2.0 */
/*
 * megatron_cache: a megatron index's check and block sums, read back from
 * and written to cache_dir (megatron_cache.h; the file's machinery is
 * cachefile.h's, its decoder megatron_cachefmt.c).
 */
#include "daemon/source/megatron_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/log.h"

/* What differs between a file as it is (now) and as it was checked
 * (then), into what ("mtime, ctime"); false when nothing does. */
static bool file_changed(const struct mg_file *now, const struct mg_file *then, char *what,
			 size_t cap)
{
	what[0] = '\0';
	size_t n = 0;
	const struct {
		bool differs;
		const char *name;
	} fields[] = {
		{now->stamp.dev != then->stamp.dev, "device"},
		{now->stamp.ino != then->stamp.ino, "inode"},
		{now->bytes != then->bytes, "size"},
		{now->stamp.mtime_ns != then->stamp.mtime_ns, "mtime"},
		{now->stamp.ctime_ns != then->stamp.ctime_ns, "ctime"},
	};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (fields[i].differs && n < cap)
			n += (size_t)snprintf(what + n, cap - n, "%s%s", n ? ", " : "", fields[i].name);
	return n > 0;
}

/* The decoded cache against the files: 0, or -ESTALE with why. */
static int check_files(const struct mgcache_use *u, const char *idx_path,
		       const struct mg_index *ix, char *why, size_t cap)
{
	char what[64];
	if (strcmp(u->c.idx_path, u->real_idx) != 0) {
		snprintf(why, cap, "made for another index, %s", u->c.idx_path);
		return -EINVAL;
	}
	if (file_changed(&ix->idx_file, &u->c.idx, what, sizeof(what))) {
		snprintf(why, cap, "%s changed since it was checked (%s)", idx_path, what);
		return -ESTALE;
	}
	if (file_changed(&ix->bin_file, &u->c.bin, what, sizeof(what))) {
		snprintf(why, cap, "%s changed since it was checked (%s)", u->bin_path, what);
		return -ESTALE;
	}
	return 0;
}

/* The cache of the mapped index ix, when it is true of its files:
 * u->valid; else why not, logged. */
static void mgcache_lookup(struct mgcache_use *u, const char *cache_dir,
			   const struct mg_index *ix)
{
	const char *pipeline = u->pipeline, *idx_path = u->idx_path;
	if (!realpath(idx_path, u->real_idx)) {
		log_warning("pipeline \"%s\": %s: no index cache (its real path: %s)", pipeline,
			    idx_path, strerror(errno));
		return;
	}
	cachefile_path(cache_dir, "megatron", u->real_idx, "idxcache", u->path, sizeof(u->path));
	char why[PATH_MAX + 512], reason[PATH_MAX + 256];
	int rc = cachefile_map(u->path, &u->map, &u->len, why, sizeof(why));
	if (rc == -ENOENT) {
		log_info("pipeline \"%s\": %s: no index cache yet (%s); checking the index in full",
			 pipeline, idx_path, u->path);
		return;
	}
	if (rc < 0) {
		log_warning("pipeline \"%s\": %s: the index cache is not used: %s; checking the index "
			    "in full", pipeline, idx_path, why);
		return;
	}
	rc = mgcache_decode(u->map, u->len, &u->c, cachefile_drop_pages, u->map, reason, sizeof(reason));
	if (rc == 0)
		rc = check_files(u, idx_path, ix, reason, sizeof(reason));
	if (rc < 0) {
		if (rc == -ESTALE)
			log_info("pipeline \"%s\": the index cache %s is out of date: %s; checking the "
				 "index in full", pipeline, u->path, reason);
		else
			log_warning("pipeline \"%s\": %s: the index cache %s is not used: %s; checking "
				    "the index in full", pipeline, idx_path, u->path, reason);
		munmap(u->map, u->len);
		u->map = NULL;
		memset(&u->c, 0, sizeof(u->c));
		return;
	}
	time_t when = (time_t)(u->c.checked_ns / 1000000000ll);
	struct tm tm;
	char date[64] = "at an unknown time";
	if (gmtime_r(&when, &tm))
		strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", &tm);
	log_info("pipeline \"%s\": %s: checked before (index cache %s, written %s); the pass over "
		 "its %" PRIu64 " documents is skipped", pipeline, idx_path, u->path, date,
		 u->c.figures.n_documents);
	u->valid = true;
}

int mgcache_open_index(struct mgcache_use *u, const char *cache_dir, const char *pipeline,
		       const char *prefix, struct mg_index *ix, char *err, size_t cap)
{
	memset(u, 0, sizeof(*u));
	u->pipeline = pipeline;
	snprintf(u->idx_path, sizeof(u->idx_path), "%s.idx", prefix);
	snprintf(u->bin_path, sizeof(u->bin_path), "%s.bin", prefix);
	int rc = mg_index_map(prefix, ix, err, cap);
	if (rc < 0)
		return rc;
	if (cache_dir && cache_dir[0])
		mgcache_lookup(u, cache_dir, ix);
	if (u->valid) {
		rc = mg_index_trust(ix, u->idx_path, &u->c.figures, err, cap);
		if (rc == 0)
			return 0;
		log_warning("pipeline \"%s\": the index cache %s is not used: %s; checking the index "
			    "in full", pipeline, u->path, err);
		munmap(u->map, u->len);
		u->map = NULL;
		u->valid = false;
	}
	rc = mg_index_check(ix, u->idx_path, err, cap);
	u->checked = rc == 0;
	return rc;
}

static bool same_shape(const struct mgcache_shape *a, const struct mgcache_shape *b)
{
	return a->first_doc == b->first_doc && a->n_docs == b->n_docs && a->cut_seq == b->cut_seq &&
	       a->end_token == b->end_token && a->block == b->block;
}

bool mgcache_sums(const struct mgcache_use *u, const struct mgcache_shape *sh, uint64_t *sums)
{
	if (!u || !u->valid)
		return false;
	for (uint32_t k = 0; k < u->c.n_shapes; k++) {
		const struct mgcache_shape *c = &u->c.shapes[k];
		if (same_shape(c, sh) && c->n_blocks == sh->n_blocks) {
			memcpy(sums, c->sums, sh->n_blocks * sizeof(*sums));
			return true;
		}
	}
	return false;
}

void mgcache_add(struct mgcache_use *u, const struct mgcache_shape *sh, const uint64_t *sums)
{
	if (!u || !u->path[0] || u->n_new >= MGCACHE_SHAPES_MAX)
		return;
	u->added[u->n_new].shape = *sh;
	u->added[u->n_new].sums = sums;
	u->n_new++;
}

static void put_file(struct cachefile_writer *w, const struct mg_file *f)
{
	cachefile_put(w, &f->stamp.dev, 8);
	cachefile_put(w, &f->stamp.ino, 8);
	cachefile_put(w, &f->bytes, 8);
	cachefile_put(w, &f->stamp.mtime_ns, 8);
	cachefile_put(w, &f->stamp.ctime_ns, 8);
}

static void put_shape(struct cachefile_writer *w, const struct mgcache_shape *sh,
		      const void *sums)
{
	cachefile_put(w, &sh->first_doc, 8);
	cachefile_put(w, &sh->n_docs, 8);
	cachefile_put(w, &sh->cut_seq, 8);
	cachefile_put(w, &sh->end_token, 8);
	cachefile_put(w, &sh->block, 8);
	cachefile_put(w, sums, sh->n_blocks * 8);
}

/* The file's payload: the figures, the shapes added, then the cache's own
 * not added again, up to MGCACHE_SHAPES_MAX; the blocks into *blocks. */
static void put_payload(struct cachefile_writer *w, const struct mgcache_use *u,
			const struct mg_index *ix, uint64_t *blocks)
{
	const struct mgcache_shape *old[MGCACHE_SHAPES_MAX];
	uint32_t n_old = 0;
	for (uint32_t k = 0; u->valid && k < u->c.n_shapes; k++) {
		bool again = false;
		for (uint32_t j = 0; j < u->n_new; j++)
			again |= same_shape(&u->c.shapes[k], &u->added[j].shape);
		if (!again && u->n_new + n_old < MGCACHE_SHAPES_MAX)
			old[n_old++] = &u->c.shapes[k];
	}
	const uint32_t zero = 0, dtype = ix->dtype_code, n_shapes = u->n_new + n_old;
	const int64_t checked_ns = u->valid ? u->c.checked_ns : cachefile_now_ns();
	cachefile_put_str(w, u->real_idx);
	put_file(w, &ix->idx_file);
	put_file(w, &ix->bin_file);
	cachefile_put(w, &dtype, 4);
	cachefile_put(w, &zero, 4);
	cachefile_put(w, &ix->n_sequences, 8);
	cachefile_put(w, &ix->n_documents, 8);
	cachefile_put(w, &ix->n_tokens, 8);
	cachefile_put(w, &checked_ns, 8);
	cachefile_put(w, &n_shapes, 4);
	cachefile_put(w, &zero, 4);
	*blocks = 0;
	for (uint32_t j = 0; j < u->n_new; j++) {
		put_shape(w, &u->added[j].shape, u->added[j].sums);
		*blocks += u->added[j].shape.n_blocks;
	}
	for (uint32_t k = 0; k < n_old; k++) {
		put_shape(w, old[k], old[k]->sums);
		*blocks += old[k]->n_blocks;
	}
}

void mgcache_store(struct mgcache_use *u, const struct mg_index *ix)
{
	const char *idx_path = u->idx_path;
	if (!u->path[0] || (!u->checked && u->n_new == 0))
		return;
	int64_t now = cachefile_now_ns();
	if (cachefile_stamp_racy(&ix->idx_file.stamp, now) ||
	    cachefile_stamp_racy(&ix->bin_file.stamp, now)) {
		log_info("pipeline \"%s\": %s: the index cache is not written: the dataset changed "
			 "within 0.1 s of its check", u->pipeline, idx_path);
		return;
	}
	char why[PATH_MAX + 256];
	struct cachefile_writer *w = malloc(sizeof(*w));
	int rc = -ENOMEM;
	snprintf(why, sizeof(why), "%s", strerror(ENOMEM));
	uint64_t blocks = 0;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", u->path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	if (w && (rc = cachefile_begin(w, dir, u->path, why, sizeof(why))) == 0) {
		put_payload(w, u, ix, &blocks);
		rc = cachefile_commit(w, 0, MGCACHE_MAGIC, MGCACHE_VERSION, blocks, why, sizeof(why));
	}
	free(w);
	if (rc < 0)
		log_warning("pipeline \"%s\": %s: the index cache is not written: %s", u->pipeline,
			    idx_path, why);
	else
		log_info("pipeline \"%s\": %s: %s; the index cache is written (%s, %" PRIu64
			 " blocks)", u->pipeline, idx_path, u->checked ? "checked in full" :
			 "block sums computed", u->path, blocks);
}

void mgcache_use_free(struct mgcache_use *u)
{
	if (!u)
		return;
	if (u->map)
		munmap(u->map, u->len);
	u->map = NULL;
	u->valid = false;
}
