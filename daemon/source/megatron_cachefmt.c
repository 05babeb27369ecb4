/* SPDX-License-Identifier: Apache-2.0 */
/*
 * megatron_cachefmt: the decoder of a megatron index cache file (the
 * format: megatron_cache.h). The file is read from disk, so it is
 * untrusted: every count is checked against the bytes that could hold it,
 * every figure against what an index can hold (an integer dtype, shapes
 * within the documents, each shape's sums adding up to no more than the
 * index's tokens). Pure: no I/O, no logging, no allocation; fuzzed by
 * fuzz/fuzz_idxcache.c.
 */
#include "daemon/source/megatron_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define SHAPE_BYTES 40u /* first_doc, n_docs, cut_seq, end_token, block */

struct reader {
	const uint8_t *p;
	size_t left;
};

static bool take(struct reader *r, void *dst, size_t n)
{
	return cachefile_take(&r->p, &r->left, dst, n);
}

static bool take_file(struct reader *r, struct mg_file *f)
{
	return take(r, &f->stamp.dev, 8) && take(r, &f->stamp.ino, 8) && take(r, &f->bytes, 8) &&
	       take(r, &f->stamp.mtime_ns, 8) && take(r, &f->stamp.ctime_ns, 8);
}

/* Shape k's fields and sums, checked against the index's figures. */
static int decode_shape(struct reader *r, const struct mgcache *c, uint32_t k,
			struct mgcache_shape *sh, char *why, size_t cap)
{
	if (!take(r, &sh->first_doc, 8) || !take(r, &sh->n_docs, 8) || !take(r, &sh->cut_seq, 8) ||
	    !take(r, &sh->end_token, 8) || !take(r, &sh->block, 8))
		return cachefile_bad(why, cap, "truncated in shape %" PRIu32, k);
	const uint64_t docs = c->figures.n_documents;
	/* a cut split holds the document before first_doc too */
	if (sh->block == 0 || sh->first_doc > docs || sh->n_docs > docs - sh->first_doc + 1 ||
	    sh->end_token > c->figures.n_tokens)
		return cachefile_bad(why, cap, "shape %" PRIu32 " is not one of the index's", k);
	sh->n_blocks = sh->n_docs / sh->block + (sh->n_docs % sh->block != 0);
	if (sh->n_blocks > r->left / 8)
		return cachefile_bad(why, cap, "shape %" PRIu32 ": %" PRIu64 " blocks do not fit its bytes", k,
			   sh->n_blocks);
	sh->sums = r->p;
	uint64_t total = 0;
	for (uint64_t b = 0; b < sh->n_blocks; b++) {
		uint64_t v;
		memcpy(&v, r->p + b * 8, 8);
		if (v > c->figures.n_tokens - total)
			return cachefile_bad(why, cap, "shape %" PRIu32 ": its blocks hold more tokens than the "
				   "index", k);
		total += v;
	}
	r->p += sh->n_blocks * 8;
	r->left -= sh->n_blocks * 8;
	return 0;
}

int mgcache_decode(const uint8_t *buf, size_t len, struct mgcache *out,
		   cachefile_release_fn release, void *ctx, char *why, size_t why_cap)
{
	memset(out, 0, sizeof(*out));
	struct cachefile_header h;
	if (cachefile_check(buf, len, MGCACHE_MAGIC, MGCACHE_VERSION, "index cache", &h, release,
			    ctx, why, why_cap) < 0)
		return -EINVAL;
	struct reader r = {.p = buf + sizeof(h), .left = len - sizeof(h)};
	uint32_t path_len, dtype, zero, n_shapes, zero2;
	if (!take(&r, &path_len, 4) || path_len == 0 || path_len >= sizeof(out->idx_path) ||
	    path_len > r.left)
		return cachefile_bad(why, why_cap, "truncated in the index's path");
	memcpy(out->idx_path, r.p, path_len);
	out->idx_path[path_len] = '\0';
	r.p += path_len;
	r.left -= path_len;
	if (out->idx_path[0] != '/' || strlen(out->idx_path) != path_len)
		return cachefile_bad(why, why_cap, "a bad path of the index");
	struct mg_index *f = &out->figures;
	if (!take_file(&r, &out->idx) || !take_file(&r, &out->bin) || !take(&r, &dtype, 4) ||
	    !take(&r, &zero, 4) || !take(&r, &f->n_sequences, 8) || !take(&r, &f->n_documents, 8) ||
	    !take(&r, &f->n_tokens, 8) || !take(&r, &out->checked_ns, 8) ||
	    !take(&r, &n_shapes, 4) || !take(&r, &zero2, 4))
		return cachefile_bad(why, why_cap, "truncated in the index's figures");
	if (dtype < MG_UINT8 || dtype > MG_UINT16 || dtype == MG_FLOAT32 || dtype == MG_FLOAT64 ||
	    zero != 0 || zero2 != 0)
		return cachefile_bad(why, why_cap, "figures no index has (dtype code %" PRIu32 ")", dtype);
	f->dtype_code = (uint8_t)dtype;
	if (n_shapes > MGCACHE_SHAPES_MAX || n_shapes > r.left / SHAPE_BYTES)
		return cachefile_bad(why, why_cap, "counts that do not fit its bytes (%" PRIu32 " shapes)",
			   n_shapes);
	uint64_t blocks = 0;
	for (uint32_t k = 0; k < n_shapes; k++) {
		int rc = decode_shape(&r, out, k, &out->shapes[k], why, why_cap);
		if (rc < 0)
			return rc;
		blocks += out->shapes[k].n_blocks;
	}
	out->n_shapes = n_shapes;
	if (blocks != h.count)
		return cachefile_bad(why, why_cap, "%" PRIu64 " blocks, the header says %" PRIu64, blocks, h.count);
	if (r.left != 0)
		return cachefile_bad(why, why_cap, "%zu bytes after the last shape", r.left);
	return 0;
}
