/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_impl.h: what the configuration parser's files share, and nothing
 * else includes. The files, each calling only those below it:
 *  - config.c: reading the file line by line through inih, the sections,
 *    and config_load;
 *  - config_check.c: the checks that need a whole section (a blend's too)
 *    or the whole file, and the questions asked of a loaded config
 *    (config_pipeline, config_key_line, config_diff);
 *  - config_values.c: the parser of each value type, config_set_value;
 *  - config_source.c: the `source` key's value, one source or a blend;
 *  - config_keys.c: the table of every key (type, field, limits), the
 *    defaults, the names of source kinds and token types;
 *  - config_fail.c: the list of problems every other file records its
 *    errors through, and the close matches they suggest.
 */
#ifndef LDR_DAEMON_CONFIG_IMPL_H
#define LDR_DAEMON_CONFIG_IMPL_H

#include <stdio.h>

#include "daemon/config/config.h"

/* Longest physical line accepted: room for "source = tokens:" and a path
 * of ARENA_PATH_MAX - 1 bytes, with spaces and a comment. */
#define CONFIG_LINE_MAX (ARENA_PATH_MAX + 256)

enum config_value_type {
	CONFIG_VALUE_UINT,         /* decimal integer in min..max, into a uint32_t or uint64_t */
	CONFIG_VALUE_BOOL,
	CONFIG_VALUE_SIZE,         /* config_parse_size, in min..max */
	CONFIG_VALUE_MODE,         /* octal, 0..0777 */
	CONFIG_VALUE_STRING,       /* at most max bytes; "" = the default */
	CONFIG_VALUE_LOG_LEVEL,
	CONFIG_VALUE_SOURCE,       /* KIND:PATH, KIND as config_source_name spells it */
	CONFIG_VALUE_TOKEN_STORED, /* uint16|uint32 -> token_bytes 2|4 */
	CONFIG_VALUE_TOKEN_OUTPUT, /* uint16|uint32|int32|int64 -> enum proto_dtype */
	CONFIG_VALUE_CHOICE,       /* one of config_key.choices -> its index, into a uint32_t */
	CONFIG_VALUE_TRANSFORM,    /* a transform chain (image/transform.h), kept as text */
	CONFIG_VALUE_RGB,          /* three decimal numbers "R,G,B", into a double[3] */
	CONFIG_VALUE_SPLIT,        /* "A,B,C" split weights (common/split.h), into a double[3] */
	CONFIG_VALUE_UINT_AUTO,    /* "auto" (stored as 0) or a decimal integer in min..max */
	CONFIG_VALUE_CPU_BUDGET,   /* cores ("12", "7.5") or a percent of the online cores
				    * ("75%"), into a struct config_cpu_budget */
	CONFIG_VALUE_TYPES,
};

/* Pipeline keys: the source kinds a key applies to, and whether one of
 * those kinds requires it. */
#define CONFIG_KEY_RAW 0x1u
#define CONFIG_KEY_TOKENS 0x2u
#define CONFIG_KEY_IMAGE 0x8u
#define CONFIG_KEY_MEGATRON 0x10u
#define CONFIG_KEY_LLMC 0x20u
#define CONFIG_KEY_BLEND 0x40u /* a blend's own keys (config_source.c, config_check.c) */
#define CONFIG_KEY_REQUIRED 0x4u
#define CONFIG_KEY_ANY_KIND (CONFIG_KEY_RAW | CONFIG_KEY_TOKENS | CONFIG_KEY_IMAGE | CONFIG_KEY_MEGATRON | \
			     CONFIG_KEY_LLMC)

struct config_key {
	const char *name;
	enum config_value_type type;
	size_t offset; /* of the field in struct config or struct pipeline_cfg */
	size_t size;   /* of that field */
	uint64_t min, max;
	unsigned flags; /* CONFIG_KEY_* */
	const char *const *choices; /* CONFIG_VALUE_CHOICE: the names, NULL-terminated */
};

/* The keys of [daemon], indexes into config_daemon_keys and config's key_line. */
enum config_daemon_key {
	CONFIG_DK_SOCKET, CONFIG_DK_WORKERS, CONFIG_DK_SHM_BYTES, CONFIG_DK_STAGING_SLOTS,
	CONFIG_DK_DEFAULT_DEPTH, CONFIG_DK_MAX_DEPTH, CONFIG_DK_MAX_CLIENTS, CONFIG_DK_SOCKET_GROUP,
	CONFIG_DK_SOCKET_MODE, CONFIG_DK_WORKER_PROGRAM, CONFIG_DK_LOG_LEVEL, CONFIG_DK_GPU,
	CONFIG_DK_PIN, CONFIG_DK_PINNED_SLOTS, CONFIG_DK_PIN_THREADS, CONFIG_DK_DEVICE_SLOTS,
	CONFIG_DK_MAX_WORKERS, CONFIG_DK_WORKER_TIMEOUT_MS, CONFIG_DK_HANDSHAKE_TIMEOUT_MS,
	CONFIG_DK_MAX_HANDSHAKES, CONFIG_DK_GPU_THREADS, CONFIG_DK_NVJPEG_LIBRARY,
	CONFIG_DK_GPU_DECODE_MEMORY, CONFIG_DK_GPU_DECODE_THREADS, CONFIG_DK_GPU_DECODE_HELPERS,
	CONFIG_DK_GROUP_TIMEOUT_MS, CONFIG_DK_WORKER_NICE, CONFIG_DK_RUNTIME_INDEX_BYTES,
	CONFIG_DK_STAGING_SLOT_BYTES, CONFIG_DK_JOB_ROOTS, CONFIG_DK_MAX_JOB_PIPELINES,
	CONFIG_DK_JOB_INDEX_BYTES, CONFIG_DK_JOB_BATCH_BYTES, CONFIG_DK_JOB_LINGER_MS, CONFIG_DK_MIN_WORKERS,
	CONFIG_DK_WORKER_CPU_BUDGET, CONFIG_DK_METRICS_LISTEN, CONFIG_DK_STAGE_TIMING, CONFIG_DK_CACHE_DIR,
	CONFIG_DK_SCAN_THREADS, CONFIG_DK_COUNT,
};
_Static_assert(CONFIG_DK_COUNT <= CONFIG_KEYS_MAX, "struct config's key_line holds every daemon key");
_Static_assert(CONFIG_KEYS_MAX <= 64, "config_parse's masks hold a bit per key");

/* The keys of [pipeline.NAME], indexes into config_pipeline_keys and a
 * pipeline's key_line. */
enum config_pipeline_key {
	CONFIG_PK_SOURCE, CONFIG_PK_BATCH_SIZE, CONFIG_PK_SHUFFLE, CONFIG_PK_SEED,
	CONFIG_PK_DROP_LAST, CONFIG_PK_CHUNK, CONFIG_PK_RECORD_BYTES, CONFIG_PK_TOKEN_DTYPE,
	CONFIG_PK_SEQ_LEN, CONFIG_PK_TOKEN_OUTPUT, CONFIG_PK_DIRECT, CONFIG_PK_TRANSFORM,
	CONFIG_PK_LAYOUT, CONFIG_PK_DTYPE, CONFIG_PK_MEAN, CONFIG_PK_STD, CONFIG_PK_ON_ERROR,
	CONFIG_PK_MAX_IMAGE_PIXELS, CONFIG_PK_MAX_DECODE_MS, CONFIG_PK_DECODE,
	CONFIG_PK_GPU_DECODE_PERCENT, CONFIG_PK_MAX_IMAGE_BYTES, CONFIG_PK_OUTPUTS,
	CONFIG_PK_EOD_TOKEN, CONFIG_PK_EOD_MASK_LOSS, CONFIG_PK_MAX_DOCUMENTS, CONFIG_PK_SPLIT,
	CONFIG_PK_DOCUMENT_SHUFFLE, CONFIG_PK_BLEND_SAMPLES, CONFIG_PK_GPU_DECODE_CHECK,
	CONFIG_PK_DECODE_SCALE, CONFIG_PK_DOCUMENT_SHUFFLE_BLOCK,
	CONFIG_PK_COUNT,
};
_Static_assert(CONFIG_PK_COUNT <= CONFIG_KEYS_MAX, "struct pipeline_cfg's key_line holds every key");

/* config_keys.c: the tables of every key */
extern const struct config_key config_daemon_keys[CONFIG_DK_COUNT];
extern const struct config_key config_pipeline_keys[CONFIG_PK_COUNT];

/* token_dtype / token_output names: the storable ones first. */
enum config_token_type {
	CONFIG_TOKEN_UINT16, CONFIG_TOKEN_UINT32, CONFIG_TOKEN_INT32, CONFIG_TOKEN_INT64,
	CONFIG_TOKEN_TYPES_COUNT,
	CONFIG_TOKEN_TYPES_STORED = CONFIG_TOKEN_INT32, /* how many token_dtype takes */
};

struct config_token_name {
	const char *name;
	uint32_t dtype; /* enum proto_dtype */
	uint32_t bytes;
};
extern const struct config_token_name config_token_types[CONFIG_TOKEN_TYPES_COUNT];

/* CONFIG_SECTION_SKIP: after a header that is no section (an unknown or
 * repeated one, a broken line): its keys are not checked, so that one
 * mistake is reported once. */
enum config_section {
	CONFIG_SECTION_NONE, CONFIG_SECTION_DAEMON, CONFIG_SECTION_PIPELINE, CONFIG_SECTION_SKIP,
};

/* One config_load: the file, where the reader is, and the problems found.
 * The parse goes on after a problem, to the end of the file, so that one
 * run reports them all; a key whose value was refused is marked bad, and
 * the checks involving it are left out rather than reporting what follows
 * from the refusal. */
struct config_parse {
	struct config *c;
	FILE *f;
	struct config_problems *problems;
	int lineno;                /* physical line last read */
	int read_errno;            /* nonzero: reading the file failed */
	enum config_section section;
	char label[16 + PROTO_NAME_MAX]; /* "[daemon]", "[pipeline.NAME]" */
	const struct config_key *keys; /* the current section's keys... */
	size_t n_keys;
	int *key_line;             /* ...the line each was set on (0 = unset)... */
	void *base;                /* ...and the struct they are stored in */
	int daemon_line;           /* line of [daemon], 0 = none seen */
	int *daemon_key_line;      /* c->key_line: the line each key was set on, 0 = unset */
	int *pipeline_key_line;    /* the current pipeline's key_line */
	struct pipeline_cfg *pipeline;   /* the current pipeline */
	uint64_t *bad;             /* the current section's keys refused, a bit per key */
	uint64_t daemon_bad;       /* [daemon]'s */
	uint64_t pipeline_bad[ARENA_PIPELINES_MAX]; /* each pipeline's */
	/* A pipeline section that is not one of the config's (a duplicate, a
	 * bad name, one too many): its keys are checked here all the same. */
	struct pipeline_cfg scratch;
	uint64_t scratch_bad;
	/* The current section's keys an unknown key was taken for ("did you
	 * mean"): not reported again as missing. */
	uint64_t suggested;
	int long_value_line;       /* the line whose value is in long_value */
	bool declaration;          /* a client's declaration (config_declare): no sections */
	char long_value[CONFIG_LINE_MAX + 1];
	char line[CONFIG_LINE_MAX + 1];
};

/* Whether key (an index into the current section's table) was refused. */
static inline bool config_key_bad(const uint64_t *bad, size_t key)
{
	return bad && (*bad >> key) & 1u;
}

/* ---- config_check.c ---- */

/* Checks of the pipeline whose section ends, that need all its keys. */
void config_pipeline_end(struct config_parse *p);
/* Checks that need the whole file, and defaults that follow other keys. */
void config_finish(struct config_parse *p);

/* ---- config_values.c ---- */

/* A value parser: value into field, the member of struct config or struct
 * pipeline_cfg that k describes, or the error recorded and field left. */
typedef void config_value_fn(struct config_parse *p, const struct config_key *k, const char *value,
			     void *field);

/* Parses value into the field k describes within base (struct config or
 * struct pipeline_cfg); on failure records the error and leaves the field. */
void config_set_value(struct config_parse *p, const struct config_key *k, void *base,
		      const char *value);

/* ---- config_source.c ---- */

/* The value parser of `source`: "raw:PATH", ..., "llmc:PATTERN" into the
 * current pipeline's kind and path, or a list "SOURCE WEIGHT, ..." into
 * its members (a blend). */
config_value_fn config_value_source;
/* The key-table flag (CONFIG_KEY_*) of a blend member's kind; 0 for a kind
 * a blend cannot hold. */
unsigned config_member_flag(enum source_kind kind);

/* ---- config_keys.c ---- */

/* A new pipeline's defaults, in pl (zeroed by the caller). */
void config_pipeline_defaults(struct pipeline_cfg *pl);

/* ---- config_fail.c ---- */

/* Records the problem "FILE:LINE: message" (config_problems). */
void config_fail(struct config_parse *p, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Records that value is no value for key k:
 * "[SECTION] KEY: "VALUE" " and what fmt says it is not. */
void config_bad_value(struct config_parse *p, const struct config_key *k, const char *value,
		      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Problems recorded so far. */
static inline unsigned config_problem_count(const struct config_parse *p)
{
	return p->problems->n;
}
/* "; did you mean \"NAME\"?" for the candidate closest to word[0..len)
 * among names (NULL-terminated), or "" when none is close
 * (common/suggest.h); in buf, which it returns. */
const char *config_did_you_mean(const char *word, size_t len, const char *const *names, char *buf,
				size_t cap);
/* The same over a key table's names; the index of the one suggested in
 * *which (n when none). */
const char *config_key_did_you_mean(const char *word, const struct config_key *keys, size_t n,
				    size_t *which, char *buf, size_t cap);

#endif
