/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_tokens: `source = tokens:PATH`, a flat file of uint16 or uint32
 * tokens (token_dtype); sample i is the window of seq_len + 1 tokens
 * from token i * seq_len (struct source_ops, source.h).
 */
#include "daemon/source/source_impl.h"

static int tokens_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
		       size_t err_cap)
{
	int rc = source_data_file(cfg, out, err, err_cap);
	if (rc < 0)
		return rc;
	return source_token_file(cfg, out, cfg->token_bytes, cfg->token_out_dtype, err, err_cap);
}

static void tokens_identify(const struct source *s, struct source_id *x)
{
	source_id_file(x, s);
	source_id_u64(x, s->file_bytes);
	source_id_u64(x, s->cfg->token_bytes);
	source_id_u64(x, s->cfg->seq_len);
}

const struct source_ops source_tokens = {
	.open = tokens_open,
	.identify = tokens_identify,
	.locate = source_file_locate,
	.where = source_file_where,
};
