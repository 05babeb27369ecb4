/* SPDX-License-Identifier: Apache-2.0 */
/* docorder: the block shuffle of an epoch's documents (docorder.h). */
#include "common/docorder.h"

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

uint64_t docorder_doc(const struct docorder_shape *sh, uint64_t epoch, uint64_t k)
{
	if (!sh->shuffle)
		return k;
	uint64_t nb = docorder_blocks(sh);
	uint64_t p = docorder_short_at(sh, epoch, nb);
	uint64_t rest = sh->n_docs % sh->block; /* the short block's documents, or 0 */
	uint64_t q, j;                          /* k's block position, and k's place in it */
	if (k < p * sh->block) {
		q = k / sh->block;
		j = k % sh->block;
	} else if (k < p * sh->block + rest) {
		q = p;
		j = k - p * sh->block;
	} else {
		q = (k - rest) / sh->block + (rest != 0);
		j = (k - rest) % sh->block;
	}
	uint64_t b = sampler_permute(nb, sh->key, epoch, q);
	uint64_t inner = hash_sample(sh->key, DOCORDER_BLOCK_SALT, epoch, b);
	return b * sh->block + sampler_permute(docorder_block_docs(sh, b), inner, 0, j);
}
