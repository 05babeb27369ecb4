/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_idxcache: libFuzzer harness for the decoder of a megatron index
 * cache (daemon/source/megatron_cachefmt.c), which reads a file from disk
 * at every start of a megatron pipeline with cache_dir set. Any input may
 * be refused, but a refusal must say why and carry -EINVAL; an accepted
 * cache must be one an index could have: an absolute path, an integer
 * dtype, at most MGCACHE_SHAPES_MAX shapes, each with a block, within the
 * documents (one more for a cut split), ceil(n_docs / block) sums that lie
 * inside the input and add up to no more than the index's tokens, the
 * shapes' sums back to back to the input's end. Any breach aborts
 * (ASan/UBSan catch the rest).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/source/megatron_cache.h"
#include "fuzz/fuzz_cachefile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_cache(const struct mgcache *c, const uint8_t *buf, size_t size)
{
	const struct mg_index *f = &c->figures;
	if (c->idx_path[0] != '/' || f->dtype_code < MG_UINT8 || f->dtype_code > MG_UINT16 ||
	    f->dtype_code == MG_FLOAT32 || f->dtype_code == MG_FLOAT64 ||
	    c->n_shapes > MGCACHE_SHAPES_MAX)
		abort();
	const uint8_t *end = buf + size;
	for (uint32_t k = 0; k < c->n_shapes; k++) {
		const struct mgcache_shape *sh = &c->shapes[k];
		if (sh->block == 0 || sh->first_doc > f->n_documents ||
		    sh->n_docs > f->n_documents - sh->first_doc + 1 || sh->end_token > f->n_tokens ||
		    sh->n_blocks != sh->n_docs / sh->block + (sh->n_docs % sh->block != 0))
			abort();
		if (sh->sums < buf || sh->sums > end || (size_t)(end - sh->sums) / 8 < sh->n_blocks)
			abort();
		uint64_t total = 0;
		for (uint64_t b = 0; b < sh->n_blocks; b++) {
			uint64_t v;
			memcpy(&v, sh->sums + b * 8, 8);
			if (v > f->n_tokens - total)
				abort();
			total += v;
		}
		if (k + 1 == c->n_shapes && sh->sums + sh->n_blocks * 8 != end)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = fuzz_cachefile_copy(data, size, MGCACHE_MAGIC);
	if (!buf)
		return 0;
	struct mgcache *c = malloc(sizeof(*c));
	char why[512] = "";
	int rc = c ? mgcache_decode(buf, size, c, NULL, NULL, why, sizeof(why)) : 0;
	if (c && rc < 0 && (why[0] == '\0' || rc != -EINVAL))
		abort();
	if (c && rc == 0)
		check_cache(c, buf, size);
	free(c);
	free(buf);
	return 0;
}
