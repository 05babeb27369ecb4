/* SPDX-License-Identifier: Apache-2.0 */
/* docorder: the block shuffle of an epoch's documents (docorder.h). */
#include "common/docorder.h"

#include <endian.h>
#include <string.h>

/* Where the short last block sits in the epoch's order: its position, or
 * the number of blocks when every block is full. */
static uint64_t docorder_short_at(const struct docorder_shape *sh, uint64_t epoch, uint64_t nb)
{
	if (sh->n_docs % sh->block == 0)
		return nb;
	return sh->shuffle ? sampler_unpermute(nb, sh->key, epoch, nb - 1) : nb - 1;
}

uint64_t docorder_block_at(const struct docorder_shape *sh, uint64_t epoch, uint64_t q)
{
	return sh->shuffle ? sampler_permute(docorder_blocks(sh), sh->key, epoch, q) : q;
}

uint64_t docorder_block_start(const struct docorder_shape *sh, uint64_t epoch, uint64_t q)
{
	uint64_t nb = docorder_blocks(sh);
	uint64_t p = docorder_short_at(sh, epoch, nb);
	if (q <= p)
		return q * sh->block;
	return (q - 1) * sh->block + sh->n_docs % sh->block; /* past the short block */
}

/* The cursor's block: the one at position q, whose first document is at
 * position first. */
static void docorder_cursor_block(struct docorder_cursor *c, uint64_t q, uint64_t first)
{
	const struct docorder_shape *sh = c->sh;
	uint64_t b = sh->shuffle ? sampler_permute(docorder_blocks(sh), sh->key, c->epoch, q) : q;
	c->q = q;
	c->first = first;
	c->size = docorder_block_docs(sh, b);
	c->base = b * sh->block;
	c->inner = hash_sample(sh->key, DOCORDER_BLOCK_SALT, c->epoch, b);
}

void docorder_cursor_at(const struct docorder_shape *sh, uint64_t epoch, uint64_t k,
			struct docorder_cursor *c)
{
	*c = (struct docorder_cursor){.sh = sh, .epoch = epoch, .k = k};
	uint64_t nb = docorder_blocks(sh);
	uint64_t p = docorder_short_at(sh, epoch, nb);
	uint64_t rest = sh->n_docs % sh->block; /* the short block's documents, or 0 */
	uint64_t q;                             /* k's block position */
	if (k < p * sh->block)
		q = k / sh->block;
	else if (k < p * sh->block + rest)
		q = p;
	else
		q = (k - rest) / sh->block + (rest != 0);
	docorder_cursor_block(c, q, docorder_block_start(sh, epoch, q));
}

uint64_t docorder_cursor_doc(const struct docorder_cursor *c)
{
	uint64_t j = c->k - c->first;
	if (!c->sh->shuffle)
		return c->base + j;
	return c->base + sampler_permute(c->size, c->inner, 0, j);
}

bool docorder_cursor_next(struct docorder_cursor *c)
{
	if (c->k + 1 >= c->sh->n_docs)
		return false;
	c->k++;
	if (c->k == c->first + c->size)
		docorder_cursor_block(c, c->q + 1, c->k);
	return true;
}

uint64_t docorder_doc(const struct docorder_shape *sh, uint64_t epoch, uint64_t k)
{
	if (!sh->shuffle)
		return k;
	struct docorder_cursor c;
	docorder_cursor_at(sh, epoch, k, &c);
	return docorder_cursor_doc(&c);
}

/* The little-endian uint64 at byte `at` of the mapping (any alignment). */
static uint64_t docorder_le64(const uint8_t *map, uint64_t at)
{
	uint64_t v;
	memcpy(&v, map + at, sizeof(v));
	return le64toh(v);
}

/* The first token of sequence q (<= n_sequences). */
static bool docorder_seq_token(const struct docorder_index *ix, uint64_t q, uint64_t *token)
{
	if (q == ix->n_sequences) {
		*token = ix->n_tokens;
		return true;
	}
	if (q > ix->n_sequences)
		return false;
	uint64_t ptr = docorder_le64(ix->map, ix->pointers_at + q * 8);
	if (ptr > INT64_MAX)
		return false;
	*token = ptr >> ix->token_shift;
	return true;
}

bool docorder_index_start(const struct docorder_index *ix, const struct docorder_span *sp,
			  uint64_t j, uint64_t *token)
{
	if (j >= sp->n_docs) {
		*token = sp->end_token;
		return j == sp->n_docs;
	}
	if (sp->cut_seq != DOCORDER_NO_CUT) {
		if (j == 0)
			return docorder_seq_token(ix, sp->cut_seq, token);
		j--;
	}
	uint64_t d = sp->first_doc + j;
	if (d >= ix->n_entries)
		return false;
	return docorder_seq_token(ix, docorder_le64(ix->map, ix->doc_indices_at + d * 8), token);
}
