/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_check: what a single key's parser cannot check, because it
 * involves several keys: at the end of a pipeline's section (required
 * keys, keys of another source kind, mean/std against dtype, token
 * widths), and at the end of the file (max_workers against workers,
 * max_decode_ms against worker_timeout_ms, default_depth against
 * max_depth). Each check reports every key at fault, and leaves out a
 * key whose own value was refused (its field holds the default, not what
 * the file says). Also the questions asked of a loaded config: a pipeline
 * by name, the line a key was set on, and what differs between two of
 * them (a reload).
 */
#include "daemon/config/config_impl.h"

#include <string.h>

#include "common/listenaddr.h"

/* config_token_types[] entry of a dtype set from token_output; the dtype is valid. */
static const struct config_token_name *config_token_of(uint32_t dtype)
{
	size_t i = 0;
	while (i < CONFIG_TOKEN_TYPES_COUNT - 1 && config_token_types[i].dtype != dtype)
		i++;
	return &config_token_types[i];
}

/* A token pipeline's outputs: "tokens" and any of "positions",
 * "loss_mask", "cu_seqlens", separated by spaces or commas, into
 * pl->outputs; the ones past tokens need eod_token. false after a
 * config_fail on the line of the key at fault. */
static bool config_outputs(struct config_parse *p, struct pipeline_cfg *pl, const int *line)
{
	static const struct { const char *name; uint32_t bit; } names[] = {
		{"tokens", 0}, {"positions", CONFIG_OUTPUT_POSITIONS},
		{"loss_mask", CONFIG_OUTPUT_LOSS_MASK}, {"cu_seqlens", CONFIG_OUTPUT_CU_SEQLENS},
	};
	pl->outputs = 0;
	bool tokens = !line[CONFIG_PK_OUTPUTS];
	const char *s = pl->outputs_text;
	while (*s) {
		size_t n = strcspn(s, " ,\t");
		if (n == 0) {
			s++;
			continue;
		}
		size_t k = 0;
		while (k < sizeof(names) / sizeof(names[0]) &&
		       (strlen(names[k].name) != n || strncmp(s, names[k].name, n) != 0))
			k++;
		if (k == sizeof(names) / sizeof(names[0])) {
			config_fail(p, line[CONFIG_PK_OUTPUTS], "%s outputs: \"%.*s\" is not tokens, "
				    "positions, loss_mask or cu_seqlens", p->label, (int)n, s);
			return false;
		}
		tokens |= names[k].bit == 0;
		pl->outputs |= names[k].bit;
		s += n;
	}
	if (!tokens) {
		config_fail(p, line[CONFIG_PK_OUTPUTS], "%s outputs: \"%s\" must name tokens (the "
			    "others are computed from them)", p->label, pl->outputs_text);
		return false;
	}
	if (pl->outputs && pl->direct) {
		config_fail(p, line[CONFIG_PK_DIRECT], "%s direct: on delivers the file's tokens as they "
			    "are; outputs %s are computed by the workers", p->label, pl->outputs_text);
		return false;
	}
	if (pl->outputs && !line[CONFIG_PK_EOD_TOKEN]) {
		config_fail(p, line[CONFIG_PK_OUTPUTS], "%s outputs %s need eod_token (where "
			    "documents end)", p->label, pl->outputs_text);
		return false;
	}
	return true;
}

/* What a missing required key's line could look like. */
static const char *config_required_example(size_t key)
{
	switch (key) {
	case CONFIG_PK_SOURCE: return "source = imagefolder:/data/train (or raw:, tokens:, tar:, "
				      "megatron:, llmc:)";
	case CONFIG_PK_BATCH_SIZE: return "batch_size = 256";
	case CONFIG_PK_RECORD_BYTES: return "record_bytes = BYTES (the size of one record)";
	case CONFIG_PK_TOKEN_DTYPE: return "token_dtype = uint16 (or uint32)";
	case CONFIG_PK_SEQ_LEN: return "seq_len = 2048";
	case CONFIG_PK_TRANSFORM: return "transform = random_resized_crop(224) hflip(0.5)";
	}
	return "...";
}

/* A required key left out; not when an unknown key of the section was
 * taken for it (its message says "did you mean" already). */
static void config_missing(struct config_parse *p, size_t key, const char *of)
{
	if (p->suggested >> key & 1u)
		return;
	config_fail(p, p->pipeline->line, "%s missing required key \"%s\"%s: add \"%s\"", p->label,
		    config_pipeline_keys[key].name, of, config_required_example(key));
}

/* The end-of-section checks of a blend: those of one source, over the
 * kinds of all its members. */
static void config_blend_end(struct config_parse *p)
{
	const struct config_key *keys = config_pipeline_keys;
	struct pipeline_cfg *pl = p->pipeline;
	const int *line = p->pipeline_key_line;
	unsigned kinds = CONFIG_KEY_BLEND;
	for (uint32_t m = 0; m < pl->n_members; m++)
		kinds |= config_member_flag(pl->members[m].kind);
	unsigned before = config_problem_count(p);
	for (size_t k = 0; k < CONFIG_PK_COUNT; k++)
		if (!line[k] && (keys[k].flags & CONFIG_KEY_REQUIRED) &&
		    (keys[k].flags & kinds & ~(unsigned)CONFIG_KEY_BLEND))
			config_missing(p, k, keys[k].flags & kinds & CONFIG_KEY_TOKENS ?
				       " (of its tokens member)" : keys[k].flags & kinds & CONFIG_KEY_MEGATRON ?
				       " (of its megatron member)" : " (of its llmc member)");
	for (size_t k = 0; k < CONFIG_PK_COUNT; k++)
		if (line[k] && !(keys[k].flags & kinds))
			config_fail(p, line[k], "%s %s does not apply to a blend of %s sources: remove it",
				    p->label, keys[k].name, kinds & CONFIG_KEY_MEGATRON ? "megatron" :
				    kinds & CONFIG_KEY_LLMC ? "llmc" : "tokens");
	if (config_problem_count(p) != before)
		return;
	if (pl->direct) {
		config_fail(p, line[CONFIG_PK_DIRECT], "%s direct: on reads one file range per sample; a "
			    "blend reads each sample from one of its members' files", p->label);
		return;
	}
	if (!config_key_bad(p->bad, CONFIG_PK_OUTPUTS) && !config_outputs(p, pl, line))
		return;
	if (!line[CONFIG_PK_DOCUMENT_SHUFFLE])
		pl->document_shuffle = pl->shuffle;
	/* The stored token types: token_dtype for tokens members, uint16 for
	 * llm.c's, the index's for megatron's; token_output, when not given,
	 * stays unset ("as stored"), and the members must then store the same
	 * type (checked at start, where the megatron indexes are read). */
	if (kinds & CONFIG_KEY_LLMC && !(kinds & CONFIG_KEY_TOKENS))
		pl->token_bytes = 2;
	if (!line[CONFIG_PK_TOKEN_OUTPUT] || config_key_bad(p->bad, CONFIG_PK_TOKEN_OUTPUT) ||
	    config_key_bad(p->bad, CONFIG_PK_TOKEN_DTYPE))
		return;
	const struct config_token_name *out = NULL;
	for (size_t t = 0; t < CONFIG_TOKEN_TYPES_COUNT; t++)
		if (config_token_types[t].dtype == pl->token_out_dtype)
			out = &config_token_types[t];
	uint32_t widest = kinds & CONFIG_KEY_TOKENS ? pl->token_bytes : kinds & CONFIG_KEY_LLMC ? 2 : 0;
	if (out && out->bytes < widest)
		config_fail(p, line[CONFIG_PK_TOKEN_OUTPUT], "%s token_output: \"%s\" is narrower than "
			    "the %u-byte tokens of a %s member", p->label, out->name, widest,
			    kinds & CONFIG_KEY_TOKENS ? "tokens" : "llmc");
}

/* Every missing required key (at the header's line), every key of
 * another source kind, then mean/std or the width of token_output. With
 * no valid source, only the keys every kind requires are checked. */
void config_pipeline_end(struct config_parse *p)
{
	const struct config_key *keys = config_pipeline_keys;
	struct pipeline_cfg *pl = p->pipeline;
	const int *line = p->pipeline_key_line;
	if (pl->n_members) {
		config_blend_end(p);
		return;
	}
	bool known = line[CONFIG_PK_SOURCE] && !config_key_bad(p->bad, CONFIG_PK_SOURCE);
	unsigned kind = !known ? CONFIG_KEY_ANY_KIND :
			pl->kind == SOURCE_RAW ? CONFIG_KEY_RAW :
			pl->kind == SOURCE_TOKENS ? CONFIG_KEY_TOKENS :
			pl->kind == SOURCE_MEGATRON ? CONFIG_KEY_MEGATRON :
			pl->kind == SOURCE_LLMC ? CONFIG_KEY_LLMC : CONFIG_KEY_IMAGE;
	unsigned before = config_problem_count(p);
	for (size_t k = 0; k < CONFIG_PK_COUNT; k++)
		if (!line[k] && (keys[k].flags & CONFIG_KEY_REQUIRED) &&
		    (known ? keys[k].flags & kind : (keys[k].flags & kind) == kind))
			config_missing(p, k, "");
	if (!known)
		return;
	for (size_t k = 0; k < CONFIG_PK_COUNT; k++)
		if (line[k] && !(keys[k].flags & kind))
			config_fail(p, line[k], "%s %s does not apply to a%s source: remove it", p->label,
				    keys[k].name, kind == CONFIG_KEY_RAW ? " raw" : kind == CONFIG_KEY_TOKENS ?
				    " tokens" : kind == CONFIG_KEY_MEGATRON ? " megatron" :
				    kind == CONFIG_KEY_LLMC ? "n llmc" :
				    pl->kind == SOURCE_TAR ? " tar" : "n imagefolder");
	if (config_problem_count(p) != before)
		return;
	if (kind == CONFIG_KEY_IMAGE) {
		static const size_t norm[] = {CONFIG_PK_MEAN, CONFIG_PK_STD};
		for (size_t i = 0; i < 2; i++)
			if (line[norm[i]] && pl->dtype == IMAGE_UINT8 &&
			    !config_key_bad(p->bad, CONFIG_PK_DTYPE))
				config_fail(p, line[norm[i]], "%s %s needs dtype float16 or float32 (uint8 "
					    "images are not normalised): add \"dtype = float32\"", p->label,
					    keys[norm[i]].name);
		return;
	}
	if (kind == CONFIG_KEY_RAW)
		return;
	if (!config_key_bad(p->bad, CONFIG_PK_OUTPUTS) && !config_outputs(p, pl, line))
		return;
	/* megatron: the stored token type is the index's, checked at start
	 * (daemon/source/source.c); token_output stays unset for "as stored". */
	if (kind == CONFIG_KEY_MEGATRON) {
		if (!line[CONFIG_PK_DOCUMENT_SHUFFLE])
			pl->document_shuffle = pl->shuffle;
		if (pl->direct && pl->document_shuffle)
			config_fail(p, line[CONFIG_PK_DIRECT], "%s direct: on reads each sample as one "
				    "range of the file, but document_shuffle%s makes a sample of several "
				    "documents in the epoch's order: set document_shuffle = off", p->label,
				    line[CONFIG_PK_DOCUMENT_SHUFFLE] ? " = on" : " (on, as shuffle is)");
		return;
	}
	/* llmc: uint16 tokens, as llm.c writes them (daemon/source/llmc.h) */
	if (kind == CONFIG_KEY_LLMC)
		pl->token_bytes = 2;
	if (config_key_bad(p->bad, CONFIG_PK_TOKEN_OUTPUT) ||
	    config_key_bad(p->bad, CONFIG_PK_TOKEN_DTYPE))
		return;
	const struct config_token_name *stored =
		&config_token_types[pl->token_bytes == 2 ? CONFIG_TOKEN_UINT16 : CONFIG_TOKEN_UINT32];
	const struct config_token_name *out = config_token_of(pl->token_out_dtype);
	if (!line[CONFIG_PK_TOKEN_OUTPUT])
		pl->token_out_dtype = stored->dtype;
	else if (out->bytes < pl->token_bytes)
		config_fail(p, line[CONFIG_PK_TOKEN_OUTPUT],
			    "%s token_output: \"%s\" is narrower than token_dtype %s", p->label,
			    out->name, stored->name);
	else if (pl->direct && out->bytes != pl->token_bytes)
		config_fail(p, line[CONFIG_PK_DIRECT], "%s direct: on needs tokens delivered as stored, "
			    "but token_output %s widens token_dtype %s on the CPU", p->label,
			    out->name, stored->name);
}

void config_finish(struct config_parse *p)
{
	struct config *c = p->c;
	/* workers = auto starts at min_workers; the pool's count follows the
	 * clients from there (daemon/pool/wtune.h). */
	c->workers_auto = c->workers == 0;
	if (c->workers_auto)
		c->workers = c->min_workers;
	c->max_workers_given = p->daemon_key_line[CONFIG_DK_MAX_WORKERS] != 0;
	if (!c->max_workers_given) { /* default: max(workers, CPUs), at most 256 */
		long cpus = config_cpus();
		c->max_workers = cpus > ARENA_WORKERS_MAX ? ARENA_WORKERS_MAX : cpus < 1 ? 1 : (uint32_t)cpus;
		if (c->max_workers < c->workers)
			c->max_workers = c->workers;
	} else if (c->max_workers < c->workers && !config_key_bad(&p->daemon_bad, CONFIG_DK_WORKERS) &&
		   !config_key_bad(&p->daemon_bad, CONFIG_DK_MAX_WORKERS)) {
		config_fail(p, p->daemon_key_line[CONFIG_DK_MAX_WORKERS],
			    "[daemon] max_workers: \"%u\" is less than workers (%u): raise it, or leave "
			    "it out (it defaults to at least workers)", c->max_workers, c->workers);
	}
	/* job_roots: absolute directories, each a word */
	for (const char *r = c->job_roots; *r;) {
		while (*r == ' ' || *r == '\t')
			r++;
		size_t n = strcspn(r, " \t");
		if (n && (r[0] != '/' ||
			  memmem(r, n, "/../", 4) || (n >= 3 && memcmp(r + n - 3, "/..", 3) == 0))) {
			config_fail(p, p->daemon_key_line[CONFIG_DK_JOB_ROOTS], "[daemon] job_roots: "
				    "\"%.*s\" is not an absolute directory without \"..\" (job_roots is "
				    "a list of them, separated by spaces)", (int)n, r);
			break;
		}
		r += n;
	}
	if (c->cache_dir[0] && c->cache_dir[0] != '/')
		config_fail(p, p->daemon_key_line[CONFIG_DK_CACHE_DIR], "[daemon] cache_dir: \"%s\" is "
			    "not an absolute path", c->cache_dir);
	struct listen_addr metrics;
	char bad_addr[256];
	if (c->metrics_listen[0] && !config_key_bad(&p->daemon_bad, CONFIG_DK_METRICS_LISTEN) &&
	    listen_addr_parse(c->metrics_listen, &metrics, bad_addr, sizeof(bad_addr)) < 0)
		config_fail(p, p->daemon_key_line[CONFIG_DK_METRICS_LISTEN], "[daemon] metrics_listen: "
			    "%s", bad_addr);
	if (c->workers_auto && c->min_workers > c->max_workers &&
	    !config_key_bad(&p->daemon_bad, CONFIG_DK_MIN_WORKERS) &&
	    !config_key_bad(&p->daemon_bad, CONFIG_DK_MAX_WORKERS)) {
		int ml = p->daemon_key_line[CONFIG_DK_MIN_WORKERS];
		config_fail(p, ml ? ml : p->daemon_key_line[CONFIG_DK_MAX_WORKERS],
			    "[daemon] min_workers: \"%u\" is more than max_workers (%u): lower it, or "
			    "raise max_workers", c->min_workers, c->max_workers);
	}
	/* A worker may spend max_decode_ms on one image between two signs of
	 * life: the watchdog must give it longer than that. */
	for (size_t i = 0; i < c->n_pipelines; i++) {
		const struct pipeline_cfg *pl = &c->pipelines[i];
		if ((pl->kind == SOURCE_IMAGEFOLDER || pl->kind == SOURCE_TAR) &&
		    pl->max_decode_ms >= c->worker_timeout_ms &&
		    !config_key_bad(&p->pipeline_bad[i], CONFIG_PK_MAX_DECODE_MS) &&
		    !config_key_bad(&p->daemon_bad, CONFIG_DK_WORKER_TIMEOUT_MS)) {
			int wl = p->daemon_key_line[CONFIG_DK_WORKER_TIMEOUT_MS];
			config_fail(p, wl ? wl : pl->line, "[pipeline.%s] max_decode_ms (%u) must be below "
				    "[daemon] worker_timeout_ms (%u): a worker decoding one image that long "
				    "would be taken for a stuck one", pl->name, pl->max_decode_ms,
				    c->worker_timeout_ms);
		}
	}
	/* GPU decoding needs device delivery, and the staging slots page-locked
	 * (the hardware decoder reads each JPEG from the slot). decode = auto
	 * quietly means the workers without them. */
	for (size_t i = 0; i < c->n_pipelines; i++) {
		struct pipeline_cfg *pl = &c->pipelines[i];
		if (pl->kind != SOURCE_IMAGEFOLDER && pl->kind != SOURCE_TAR)
			continue;
		const char *why = c->gpu == GPU_OFF ? "gpu = off" :
				  c->pin == PIN_COPY ? "pin = copy (the hardware decoder reads each "
				  "JPEG from the page-locked staging slot: pin = register)" : NULL;
		if (why && pl->decode == DECODE_GPU) {
			config_fail(p, pl->key_line[CONFIG_PK_DECODE], "[pipeline.%s] decode = gpu is not "
				    "possible with [daemon] %s: use decode = auto or cpu", pl->name, why);
			continue;
		}
		if (why)
			pl->decode = DECODE_CPU;
	}
	int line = p->daemon_key_line[CONFIG_DK_DEFAULT_DEPTH];
	if (c->default_depth <= c->max_depth || config_key_bad(&p->daemon_bad, CONFIG_DK_MAX_DEPTH) ||
	    config_key_bad(&p->daemon_bad, CONFIG_DK_DEFAULT_DEPTH))
		return;
	if (!line) { /* the default, 4, yields to a smaller max_depth */
		c->default_depth = c->max_depth;
		return;
	}
	config_fail(p, line, "[daemon] default_depth: \"%u\" is not an integer in 1..%u (max_depth)",
		    c->default_depth, c->max_depth);
}

const struct pipeline_cfg *config_pipeline(const struct config *c, const char *name)
{
	for (size_t i = 0; i < c->n_pipelines; i++)
		if (strcmp(c->pipelines[i].name, name) == 0)
			return &c->pipelines[i];
	return NULL;
}

int config_key_line(const struct config *c, const struct pipeline_cfg *pipeline, const char *key)
{
	const struct config_key *keys = pipeline ? config_pipeline_keys : config_daemon_keys;
	size_t n = pipeline ? CONFIG_PK_COUNT : CONFIG_DK_COUNT;
	for (size_t i = 0; i < n; i++)
		if (strcmp(keys[i].name, key) == 0)
			return pipeline ? pipeline->key_line[i] : c->key_line[i];
	return 0;
}

/* Whether key k holds the same value in the structs at a and b. */
static bool config_key_equal(const struct config_key *k, const void *a, const void *b)
{
	const char *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
	switch (k->type) {
	case CONFIG_VALUE_STRING:
	case CONFIG_VALUE_TRANSFORM:
		return strcmp(fa, fb) == 0;
	case CONFIG_VALUE_SOURCE: {
		const struct pipeline_cfg *pa = a, *pb = b;
		if (pa->kind != pb->kind || strcmp(fa, fb) != 0 || pa->n_members != pb->n_members)
			return false;
		for (uint32_t m = 0; m < pa->n_members; m++)
			if (pa->members[m].kind != pb->members[m].kind ||
			    pa->members[m].weight != pb->members[m].weight ||
			    strcmp(pa->member_paths + pa->members[m].path_at,
				   pb->member_paths + pb->members[m].path_at) != 0)
				return false;
		return true;
	}
	default:
		return memcmp(fa, fb, k->size) == 0;
	}
}

void config_diff(const struct config *a, const struct config *b,
		 void (*fn)(void *ctx, const char *pipeline, const char *key), void *ctx)
{
	for (size_t i = 0; i < CONFIG_DK_COUNT; i++)
		if (!config_key_equal(&config_daemon_keys[i], a, b))
			fn(ctx, NULL, config_daemon_keys[i].name);
	for (size_t i = 0; i < a->n_pipelines; i++) {
		const struct pipeline_cfg *pa = &a->pipelines[i];
		const struct pipeline_cfg *pb = config_pipeline(b, pa->name);
		if (!pb) {
			fn(ctx, pa->name, "(removed)");
			continue;
		}
		for (size_t k = 0; k < CONFIG_PK_COUNT; k++)
			if (!config_key_equal(&config_pipeline_keys[k], pa, pb))
				fn(ctx, pa->name, config_pipeline_keys[k].name);
	}
	for (size_t i = 0; i < b->n_pipelines; i++)
		if (!config_pipeline(a, b->pipelines[i].name))
			fn(ctx, b->pipelines[i].name, "(added)");
}
