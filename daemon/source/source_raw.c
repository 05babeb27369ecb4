/* SPDX-License-Identifier: Apache-2.0 */
/*
 * source_raw: `source = raw:PATH`, a file of fixed-size records
 * (record_bytes each), one record a sample, delivered as tensor "data"
 * (struct source_ops, source.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "daemon/source/source_impl.h"

static int raw_open(const struct pipeline_cfg *cfg, struct source *out, char *err,
		    size_t err_cap)
{
	int rc = source_data_file(cfg, out, err, err_cap);
	if (rc < 0)
		return rc;
	if (out->file_bytes % cfg->record_bytes != 0) {
		char reason[160];
		snprintf(reason, sizeof(reason),
			 "size %" PRIu64 " is not a multiple of record_bytes %" PRIu64,
			 out->file_bytes, cfg->record_bytes);
		return source_fail(err, err_cap, cfg, -EINVAL, reason);
	}
	struct arena_pipeline *d = &out->desc;
	out->n_samples = out->file_bytes / cfg->record_bytes;
	out->splits[SPLIT_TRAIN] = (struct source_split){.present = true,
							 .n_samples = out->n_samples};
	d->split_samples[SPLIT_TRAIN] = out->n_samples;
	source_add_tensor(out, "data", PROTO_DTYPE_UINT8, cfg->record_bytes);
	d->kind = ARENA_SOURCE_RAW;
	d->sample_read_bytes = cfg->record_bytes;
	d->sample_stride = cfg->record_bytes;
	d->in_elem_bytes = 1;
	d->out_elem_bytes = 1;
	return 0;
}

static void raw_identify(const struct source *s, struct source_id *x)
{
	source_id_file(x, s);
	source_id_u64(x, s->file_bytes);
	source_id_u64(x, s->cfg->record_bytes);
}

const struct source_ops source_raw = {
	.open = raw_open,
	.identify = raw_identify,
	.locate = source_file_locate,
	.where = source_file_where,
};
