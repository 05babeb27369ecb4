/* SPDX-License-Identifier: Apache-2.0 */
/* docorder: the daemon's per-epoch document order sums (docorder.h). */
#include "daemon/source/docorder.h"

#include <errno.h>
#include <stdlib.h>

#include "common/docorder.h"

/* The cached entry of (pipeline, split, epoch), computed into the least
 * recently used one when it is not there; NULL on -ENOMEM. */
static struct docorder_entry *docorder_get(struct docorder_cache *c, uint32_t pipeline,
					   uint32_t split, const struct docorder_split *sp,
					   uint64_t epoch)
{
	struct docorder_entry *victim = &c->entries[0];
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		struct docorder_entry *e = &c->entries[i];
		if (e->prefix && e->pipeline == pipeline && e->split == split && e->epoch == epoch) {
			e->used = ++c->clock;
			return e;
		}
		if (!e->prefix || (victim->prefix && e->used < victim->used))
			victim = e;
	}
	uint64_t *prefix = malloc((sp->n_docs + 1) * sizeof(*prefix));
	if (!prefix)
		return NULL;
	prefix[0] = 0;
	for (uint64_t k = 0; k < sp->n_docs; k++) {
		uint64_t d = sp->first_doc + docorder_doc(sp->n_docs, sp->key, epoch, k, sp->shuffle);
		prefix[k + 1] = prefix[k] + (sp->doc_tokens[d + 1] - sp->doc_tokens[d]);
	}
	free(victim->prefix);
	*victim = (struct docorder_entry){.pipeline = pipeline, .split = split, .epoch = epoch,
					  .prefix = prefix, .n_docs = sp->n_docs, .used = ++c->clock};
	return victim;
}

int docorder_locate(struct docorder_cache *c, uint32_t pipeline, uint32_t split,
		    const struct docorder_split *sp, uint64_t epoch, uint64_t seq_len,
		    uint64_t window, uint64_t *k, uint64_t *skip)
{
	struct docorder_entry *e = docorder_get(c, pipeline, split, sp, epoch);
	if (!e)
		return -ENOMEM;
	uint64_t x = window * seq_len;
	if (sp->n_docs == 0 || x >= e->prefix[sp->n_docs])
		return -ERANGE;
	/* the last position whose document starts at or before x: its
	 * document holds x (a later one starts after x, and empty documents
	 * before it start at x too but hold nothing) */
	uint64_t lo = 0, hi = sp->n_docs; /* prefix[lo] <= x < prefix[hi] */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (e->prefix[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	*k = lo;
	*skip = x - e->prefix[lo];
	return 0;
}

void docorder_cache_free(struct docorder_cache *c)
{
	for (int i = 0; i < DOCORDER_CACHED; i++)
		free(c->entries[i].prefix);
	*c = (struct docorder_cache){0};
}

void docorder_cache_drop(struct docorder_cache *c, uint32_t pipeline)
{
	for (int i = 0; i < DOCORDER_CACHED; i++) {
		struct docorder_entry *e = &c->entries[i];
		if (e->prefix && e->pipeline == pipeline) {
			free(e->prefix);
			*e = (struct docorder_entry){0};
		}
	}
}
