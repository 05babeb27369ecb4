/*
 * config: reads loaderd's INI file into struct config (config.h). Every key
 * accepted here is documented in docs/config.md; the two change together.
 *
 * inih splits "key = value" lines and strips comments; the rest is done
 * here, because inih's own bookkeeping is too coarse for the errors we
 * promise ("FILE:LINE: message" for the first bad line):
 *  - config_read_line() is the reader given to ini_parse_stream. It returns
 *    exactly one physical line per call, so inih's line count and ours
 *    agree. It strips leading whitespace, so inih never sees a continuation
 *    line (indentation is free, multi-line values do not exist). It handles
 *    section headers itself: inih calls the handler only for keys, so an
 *    empty or misspelt section would pass unnoticed, and it truncates
 *    section names to 49 bytes. A key line longer than inih's fixed line
 *    buffer (200 bytes, too short for a data path) reaches inih without its
 *    value; the value travels in struct config_parse instead.
 *  - config_on_key() is the handler: one key, looked up in its section's
 *    table, parsed and range-checked.
 *  - checks that involve several keys (required keys, keys of the other
 *    source kind, token widths, default_depth <= max_depth) run when a
 *    section or the file ends.
 * The first error recorded ends the parse.
 */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/regfile.h"
#include "daemon/tarshard.h"
#include "image/transform.h"

/* Longest physical line accepted: room for "source = tokens:" and a path
 * of ARENA_PATH_MAX - 1 bytes, with spaces and a comment. */
#define CONFIG_LINE_MAX (ARENA_PATH_MAX + 256)

#define BATCH_SIZE_MAX 65536
#define STAGING_SLOTS_MAX 1024
#define DEPTH_MAX 1024
#define CLIENTS_MAX 4096
#define HANDSHAKES_MAX 4096
#define HANDSHAKE_TIMEOUT_MS_MIN 100
#define HANDSHAKE_TIMEOUT_MS_MAX 600000
#define RECORD_BYTES_MAX (1ull << 30)
#define SEQ_LEN_MAX (1ull << 24)
#define PIPELINE_NAME_MAX (PROTO_NAME_MAX - 1)
#define PINNED_SLOTS_MAX 64
#define PIN_THREADS_MAX 32

enum value_type {
	VALUE_UINT,         /* decimal integer in min..max, into a uint32_t or uint64_t */
	VALUE_BOOL,
	VALUE_SIZE,         /* config_parse_size, in min..max */
	VALUE_MODE,         /* octal, 0..0777 */
	VALUE_STRING,       /* at most max bytes; "" = the default */
	VALUE_LOG_LEVEL,
	VALUE_SOURCE,       /* raw:PATH | tokens:PATH */
	VALUE_TOKEN_STORED, /* uint16|uint32 -> token_bytes 2|4 */
	VALUE_TOKEN_OUTPUT, /* uint16|uint32|int32|int64 -> enum proto_dtype */
	VALUE_CHOICE,       /* one of key_spec.choices -> its index, into a uint32_t */
	VALUE_TRANSFORM,    /* a transform chain (image/transform.h), kept as text */
	VALUE_RGB,          /* three decimal numbers "R,G,B", into a double[3] */
};

/* Pipeline keys: the source kinds a key applies to, and whether one of
 * those kinds requires it. */
#define KEY_RAW 0x1u
#define KEY_TOKENS 0x2u
#define KEY_IMAGE 0x8u
#define KEY_REQUIRED 0x4u

struct key_spec {
	const char *name;
	enum value_type type;
	size_t offset; /* of the field in struct config or struct pipeline_cfg */
	size_t size;   /* of that field */
	uint64_t min, max;
	unsigned flags; /* KEY_* */
	const char *const *choices; /* VALUE_CHOICE: the names, NULL-terminated */
};

/* Names in the order of the enums they set (config.h). */
static const char *const gpu_choices[] = {"auto", "off", "required", NULL};
static const char *const pin_choices[] = {"register", "copy", NULL};
static const char *const layout_choices[] = {"nchw", "nhwc", NULL};
static const char *const dtype_choices[] = {"uint8", "float16", "float32", NULL};
static const char *const on_error_choices[] = {"substitute", "fail", NULL};

_Static_assert(sizeof(enum log_level) == sizeof(uint32_t), "set_value stores it as uint32_t");
_Static_assert(sizeof(enum gpu_mode) == sizeof(uint32_t) && sizeof(enum pin_mode) == sizeof(uint32_t),
	       "set_value stores VALUE_CHOICE as uint32_t");

#define FIELD(type, member) offsetof(type, member), sizeof(((type *)0)->member)
#define DAEMON(member) FIELD(struct config, member)
#define PIPELINE(member) FIELD(struct pipeline_cfg, member)

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define GROUP_NAME_MAX (sizeof(((struct config *)0)->socket_group) - 1)

enum daemon_key {
	DK_SOCKET, DK_WORKERS, DK_SHM_BYTES, DK_STAGING_SLOTS, DK_DEFAULT_DEPTH,
	DK_MAX_DEPTH, DK_MAX_CLIENTS, DK_SOCKET_GROUP, DK_SOCKET_MODE,
	DK_WORKER_PROGRAM, DK_LOG_LEVEL, DK_GPU, DK_PIN, DK_PINNED_SLOTS, DK_PIN_THREADS,
	DK_DEVICE_SLOTS, DK_MAX_WORKERS, DK_WORKER_TIMEOUT_MS, DK_HANDSHAKE_TIMEOUT_MS,
	DK_MAX_HANDSHAKES, DK_COUNT,
};
_Static_assert(DK_COUNT <= CONFIG_KEYS_MAX, "struct config's key_line holds every daemon key");

static const struct key_spec daemon_keys[DK_COUNT] = {
	[DK_SOCKET] = {"socket", VALUE_STRING, DAEMON(socket), 0, SUN_PATH_MAX, 0},
	[DK_WORKERS] = {"workers", VALUE_UINT, DAEMON(workers), 1, ARENA_WORKERS_MAX, 0},
	[DK_SHM_BYTES] = {"shm_bytes", VALUE_SIZE, DAEMON(shm_bytes), 1, INT64_MAX, 0},
	[DK_STAGING_SLOTS] = {"staging_slots", VALUE_UINT, DAEMON(staging_slots), 1,
			      STAGING_SLOTS_MAX, 0},
	/* also <= max_depth, checked at the end of the file */
	[DK_DEFAULT_DEPTH] = {"default_depth", VALUE_UINT, DAEMON(default_depth), 1, DEPTH_MAX, 0},
	[DK_MAX_DEPTH] = {"max_depth", VALUE_UINT, DAEMON(max_depth), 1, DEPTH_MAX, 0},
	[DK_MAX_CLIENTS] = {"max_clients", VALUE_UINT, DAEMON(max_clients), 1, CLIENTS_MAX, 0},
	[DK_SOCKET_GROUP] = {"socket_group", VALUE_STRING, DAEMON(socket_group), 0,
			     GROUP_NAME_MAX, 0},
	[DK_SOCKET_MODE] = {"socket_mode", VALUE_MODE, DAEMON(socket_mode), 0, 0777, 0},
	[DK_WORKER_PROGRAM] = {"worker_program", VALUE_STRING, DAEMON(worker_program), 0,
			       PATH_MAX - 1, 0},
	[DK_LOG_LEVEL] = {"log_level", VALUE_LOG_LEVEL, DAEMON(log_level), 0, 0, 0},
	[DK_GPU] = {"gpu", VALUE_CHOICE, DAEMON(gpu), 0, 0, 0, gpu_choices},
	[DK_PIN] = {"pin", VALUE_CHOICE, DAEMON(pin), 0, 0, 0, pin_choices},
	[DK_PINNED_SLOTS] = {"pinned_slots", VALUE_UINT, DAEMON(pinned_slots), 1, PINNED_SLOTS_MAX, 0},
	[DK_PIN_THREADS] = {"pin_threads", VALUE_UINT, DAEMON(pin_threads), 1, PIN_THREADS_MAX, 0},
	[DK_DEVICE_SLOTS] = {"device_slots", VALUE_UINT, DAEMON(device_slots), 1,
			     PROTO_DEVICE_SLOTS_MAX, 0},
	/* also >= workers, checked at the end of the file */
	[DK_MAX_WORKERS] = {"max_workers", VALUE_UINT, DAEMON(max_workers), 1, ARENA_WORKERS_MAX, 0},
	/* also over every image pipeline's max_decode_ms, checked at the end of the file */
	[DK_WORKER_TIMEOUT_MS] = {"worker_timeout_ms", VALUE_UINT, DAEMON(worker_timeout_ms),
				  WORKER_TIMEOUT_MS_MIN, WORKER_TIMEOUT_MS_MAX, 0},
	[DK_HANDSHAKE_TIMEOUT_MS] = {"handshake_timeout_ms", VALUE_UINT, DAEMON(handshake_timeout_ms),
				     HANDSHAKE_TIMEOUT_MS_MIN, HANDSHAKE_TIMEOUT_MS_MAX, 0},
	[DK_MAX_HANDSHAKES] = {"max_handshakes", VALUE_UINT, DAEMON(max_handshakes), 1,
			       HANDSHAKES_MAX, 0},
};

enum pipeline_key {
	PK_SOURCE, PK_BATCH_SIZE, PK_SHUFFLE, PK_SEED, PK_DROP_LAST, PK_CHUNK,
	PK_RECORD_BYTES, PK_TOKEN_DTYPE, PK_SEQ_LEN, PK_TOKEN_OUTPUT, PK_DIRECT, PK_TRANSFORM,
	PK_LAYOUT, PK_DTYPE, PK_MEAN, PK_STD, PK_ON_ERROR, PK_MAX_IMAGE_PIXELS, PK_MAX_DECODE_MS,
	PK_COUNT,
};
_Static_assert(PK_COUNT <= CONFIG_KEYS_MAX, "struct pipeline_cfg's key_line holds every key");

#define KEY_ANY_KIND (KEY_RAW | KEY_TOKENS | KEY_IMAGE)
static const struct key_spec pipeline_keys[PK_COUNT] = {
	[PK_SOURCE] = {"source", VALUE_SOURCE, PIPELINE(path), 0, 0, KEY_ANY_KIND | KEY_REQUIRED},
	[PK_BATCH_SIZE] = {"batch_size", VALUE_UINT, PIPELINE(batch_size), 1, BATCH_SIZE_MAX,
			   KEY_ANY_KIND | KEY_REQUIRED},
	[PK_SHUFFLE] = {"shuffle", VALUE_BOOL, PIPELINE(shuffle), 0, 0, KEY_ANY_KIND},
	[PK_SEED] = {"seed", VALUE_UINT, PIPELINE(seed), 0, UINT64_MAX, KEY_ANY_KIND},
	[PK_DROP_LAST] = {"drop_last", VALUE_BOOL, PIPELINE(drop_last), 0, 0, KEY_ANY_KIND},
	[PK_CHUNK] = {"chunk", VALUE_UINT, PIPELINE(chunk), 0, WORK_CHUNK_MAX, KEY_ANY_KIND},
	[PK_RECORD_BYTES] = {"record_bytes", VALUE_UINT, PIPELINE(record_bytes), 1,
			     RECORD_BYTES_MAX, KEY_RAW | KEY_REQUIRED},
	[PK_TOKEN_DTYPE] = {"token_dtype", VALUE_TOKEN_STORED, PIPELINE(token_bytes), 0, 0,
			    KEY_TOKENS | KEY_REQUIRED},
	[PK_SEQ_LEN] = {"seq_len", VALUE_UINT, PIPELINE(seq_len), 1, SEQ_LEN_MAX,
			KEY_TOKENS | KEY_REQUIRED},
	/* also not narrower than token_dtype, checked at the end of the section */
	[PK_TOKEN_OUTPUT] = {"token_output", VALUE_TOKEN_OUTPUT, PIPELINE(token_out_dtype), 0, 0,
			     KEY_TOKENS},
	/* tokens: also only when delivered as stored, checked at the end of the section */
	[PK_DIRECT] = {"direct", VALUE_BOOL, PIPELINE(direct), 0, 0, KEY_RAW | KEY_TOKENS},
	[PK_TRANSFORM] = {"transform", VALUE_TRANSFORM, PIPELINE(transform), 0, 0,
			  KEY_IMAGE | KEY_REQUIRED},
	[PK_LAYOUT] = {"layout", VALUE_CHOICE, PIPELINE(layout), 0, 0, KEY_IMAGE, layout_choices},
	/* mean and std also need a float dtype, checked at the end of the section */
	[PK_DTYPE] = {"dtype", VALUE_CHOICE, PIPELINE(dtype), 0, 0, KEY_IMAGE, dtype_choices},
	[PK_MEAN] = {"mean", VALUE_RGB, PIPELINE(mean), 0, 0, KEY_IMAGE},
	[PK_STD] = {"std", VALUE_RGB, PIPELINE(std), 1, 0, KEY_IMAGE},
	[PK_ON_ERROR] = {"on_error", VALUE_CHOICE, PIPELINE(on_error), 0, 0, KEY_IMAGE,
			 on_error_choices},
	[PK_MAX_IMAGE_PIXELS] = {"max_image_pixels", VALUE_UINT, PIPELINE(max_image_pixels), 1,
				 1ull << 32, KEY_IMAGE},
	[PK_MAX_DECODE_MS] = {"max_decode_ms", VALUE_UINT, PIPELINE(max_decode_ms), 1,
			      WORKER_TIMEOUT_MS_MAX - 1, KEY_IMAGE},
};

/* token_dtype / token_output names; the first two are storable. */
static const struct {
	const char *name;
	uint32_t dtype;
	uint32_t bytes;
} token_types[] = {
	{"uint16", PROTO_DTYPE_UINT16, 2}, {"uint32", PROTO_DTYPE_UINT32, 4},
	{"int32", PROTO_DTYPE_INT32, 4}, {"int64", PROTO_DTYPE_INT64, 8},
};
#define TOKEN_TYPES_STORED 2
#define TOKEN_TYPES_COUNT (sizeof(token_types) / sizeof(token_types[0]))

enum config_section { SECTION_NONE, SECTION_DAEMON, SECTION_PIPELINE };

struct config_parse {
	struct config *c;
	FILE *f;
	char *err;
	size_t err_cap;
	int lineno;                /* physical line last read */
	int read_errno;            /* nonzero: reading the file failed */
	int err_line;              /* line of the first error, 0 = none yet */
	enum config_section section;
	char label[16 + PROTO_NAME_MAX]; /* "[daemon]", "[pipeline.NAME]" */
	const struct key_spec *keys; /* the current section's keys... */
	size_t n_keys;
	int *key_line;             /* ...the line each was set on (0 = unset)... */
	void *base;                /* ...and the struct they are stored in */
	int daemon_line;           /* line of [daemon], 0 = none seen */
	int *daemon_key_line;      /* c->key_line: the line each key was set on, 0 = unset */
	int *pipeline_key_line;    /* the current pipeline's key_line */
	struct pipeline_cfg *pipeline;   /* the current pipeline */
	int long_value_line;       /* the line whose value is in long_value */
	char long_value[CONFIG_LINE_MAX + 1];
	char line[CONFIG_LINE_MAX + 1];
};

static void config_fail(struct config_parse *p, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void config_fail(struct config_parse *p, int line, const char *fmt, ...)
{
	if (p->err_line)
		return;
	p->err_line = line;
	if (p->err_cap == 0)
		return;
	int n = snprintf(p->err, p->err_cap, "%s:%d: ", p->c->file, line);
	if (n < 0 || (size_t)n >= p->err_cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err + n, p->err_cap - (size_t)n, fmt, ap);
	va_end(ap);
}

/* Decimal digits only: no sign, no space, no base prefix. 0, -EINVAL or
 * -ERANGE (more than 64 bits). */
static int parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (*s == '\0')
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int config_parse_size(const char *text, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{"", 0}, {"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20},
		{"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40},
	};
	uint64_t v = 0;
	bool overflow = false;
	const char *s = text;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s, units[i].suffix) != 0)
			continue;
		if (overflow || v > (UINT64_MAX >> units[i].shift))
			return -ERANGE;
		*out = v << units[i].shift;
		return 0;
	}
	return -EINVAL;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const names[] = {"false", "true", "no", "yes", "off", "on", "0", "1"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcasecmp(s, names[i]) == 0) {
			*out = i % 2;
			return 0;
		}
	}
	return -EINVAL;
}

/* The config file's directory as an absolute path with no trailing slash
 * ("" for the root directory): the base of relative source paths. */
static int config_dir(const char *file, char *dir, size_t cap)
{
	size_t n = 0;
	if (*file != '/') {
		if (!getcwd(dir, cap))
			return -errno;
		n = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
	}
	dir[n] = '\0';
	const char *slash = strrchr(file, '/');
	if (!slash)
		return 0;
	int m = snprintf(dir + n, cap - n, "%s%.*s", *file == '/' ? "" : "/",
			 (int)(slash - file), file);
	return (m < 0 || (size_t)m >= cap - n) ? -ENAMETOOLONG : 0;
}

const char *config_source_name(enum source_kind kind)
{
	switch (kind) {
	case SOURCE_RAW: return "raw";
	case SOURCE_TOKENS: return "tokens";
	case SOURCE_IMAGEFOLDER: return "imagefolder";
	case SOURCE_TAR: return "tar";
	}
	return "?";
}

/* "raw:PATH", "tokens:PATH", "imagefolder:ROOT" or "tar:PATTERN"; a relative PATH is taken relative to the
 * directory of the config file. */
static void set_source(struct config_parse *p, const char *value)
{
	struct pipeline_cfg *pl = p->pipeline;
	const char *path;
	if (strncmp(value, "raw:", 4) == 0) {
		pl->kind = SOURCE_RAW;
		path = value + 4;
	} else if (strncmp(value, "tokens:", 7) == 0) {
		pl->kind = SOURCE_TOKENS;
		path = value + 7;
	} else if (strncmp(value, "imagefolder:", 12) == 0) {
		pl->kind = SOURCE_IMAGEFOLDER;
		path = value + 12;
	} else if (strncmp(value, "tar:", 4) == 0) {
		pl->kind = SOURCE_TAR;
		path = value + 4;
	} else {
		config_fail(p, p->lineno, "%s source: \"%s\" is not raw:PATH, tokens:PATH, "
			    "imagefolder:ROOT or tar:PATTERN", p->label, value);
		return;
	}
	if (*path == '\0') {
		config_fail(p, p->lineno, "%s source: \"%s\" has an empty path", p->label, value);
		return;
	}
	char dir[PATH_MAX] = "";
	int ret = 0;
	if (*path != '/')
		ret = config_dir(p->c->file, dir, sizeof(dir));
	if (ret != 0) {
		config_fail(p, p->lineno, "%s source: \"%s\": cannot resolve a relative path: %s",
			    p->label, value, strerror(-ret));
		return;
	}
	int n = snprintf(pl->path, sizeof(pl->path), "%s%s%s", dir, *path == '/' ? "" : "/", path);
	if (n < 0 || (size_t)n >= sizeof(pl->path)) {
		config_fail(p, p->lineno, "%s source: \"%s\": the path is too long (at most %d bytes)",
			    p->label, value, ARENA_PATH_MAX - 1);
		return;
	}
	/* A tar pattern's syntax is checked here, where the line is known;
	 * the shards themselves at start (daemon/tarshard.h). */
	char **shards, why[256];
	size_t n_shards;
	if (pl->kind == SOURCE_TAR) {
		int rc = tar_pattern_expand(pl->path, &shards, &n_shards, why, sizeof(why));
		if (rc < 0)
			config_fail(p, p->lineno, "%s source: \"%s\": %s", p->label, value,
				    rc == -ENOMEM ? strerror(ENOMEM) : why);
		else
			tar_pattern_free(shards, n_shards);
	}
}

/* Index of name in token_types[0..n), or -1. */
static int token_type_find(const char *name, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, token_types[i].name) == 0)
			return (int)i;
	return -1;
}

/* token_types[] entry of a dtype set from token_output; the dtype is valid. */
static size_t token_type_of(uint32_t dtype)
{
	size_t i = 0;
	while (i < TOKEN_TYPES_COUNT - 1 && token_types[i].dtype != dtype)
		i++;
	return i;
}

/* Parses value into the field k describes within base (struct config or
 * struct pipeline_cfg); on failure records the error and leaves the field. */
static void set_value(struct config_parse *p, const struct key_spec *k, void *base,
		      const char *value)
{
	void *field = (char *)base + k->offset;
	unsigned long long min = k->min, max = k->max;
	char why[128] = "";
	uint64_t v = 0;
	enum log_level level;
	bool b = false;
	int i;
	switch (k->type) {
	case VALUE_UINT:
		if (parse_u64(value, &v) != 0 || v < min || v > max)
			snprintf(why, sizeof(why), "is not an integer in %llu..%llu", min, max);
		break;
	case VALUE_BOOL:
		if (parse_bool(value, &b) != 0)
			snprintf(why, sizeof(why), "is not a boolean (true/false/yes/no/on/off/1/0)");
		v = b;
		break;
	case VALUE_SIZE:
		i = config_parse_size(value, &v);
		if (i == -EINVAL)
			snprintf(why, sizeof(why), "is not a size (bytes, or a number followed by "
				 "K, M, G, T, KiB, MiB, GiB or TiB)");
		else if (i != 0 || v < min || v > max)
			snprintf(why, sizeof(why), "is not a size in %llu..%llu bytes", min, max);
		break;
	case VALUE_MODE: {
		const char *s = value;
		for (; *s >= '0' && *s <= '7' && v <= max; s++)
			v = v * 8 + (uint64_t)(*s - '0');
		if (*value == '\0' || *s != '\0' || v > max)
			snprintf(why, sizeof(why), "is not an octal mode in 0..0%llo", max);
		break;
	}
	case VALUE_STRING:
		if (strlen(value) > max) {
			snprintf(why, sizeof(why), "is too long (%zu bytes, at most %llu)",
				 strlen(value), max);
			break;
		}
		memcpy(field, value, strlen(value) + 1);
		return;
	case VALUE_LOG_LEVEL:
		if (log_level_parse(value, &level) != 0)
			snprintf(why, sizeof(why), "is not one of error|warning|notice|info|debug");
		v = level;
		break;
	case VALUE_SOURCE:
		set_source(p, value);
		return;
	case VALUE_TOKEN_STORED:
	case VALUE_TOKEN_OUTPUT: {
		bool stored = k->type == VALUE_TOKEN_STORED;
		i = token_type_find(value, stored ? TOKEN_TYPES_STORED : TOKEN_TYPES_COUNT);
		if (i < 0)
			snprintf(why, sizeof(why), "is not one of %s",
				 stored ? "uint16|uint32" : "uint16|uint32|int32|int64");
		else
			v = stored ? token_types[i].bytes : token_types[i].dtype;
		break;
	}
	case VALUE_TRANSFORM: {
		struct tf_chain chain;
		char text[256];
		if (strlen(value) >= CONFIG_TRANSFORM_MAX) {
			snprintf(why, sizeof(why), "is too long (at most %d bytes)", CONFIG_TRANSFORM_MAX - 1);
			break;
		}
		if (tf_parse(value, &chain, text, sizeof(text)) < 0) {
			config_fail(p, p->lineno, "%s transform: %s", p->label, text);
			return;
		}
		memcpy(field, value, strlen(value) + 1);
		return;
	}
	case VALUE_RGB: {
		double rgb[3];
		const char *s = value;
		char *end = NULL;
		for (int c = 0; c < 3 && !why[0]; c++) {
			rgb[c] = strtod(s, &end);
			if (end == s || !isfinite(rgb[c]) || (min && rgb[c] <= 0) ||
			    *end != (c < 2 ? ',' : '\0'))
				snprintf(why, sizeof(why), "is not three %snumbers R,G,B",
					 min ? "positive " : "");
			s = end + 1;
		}
		if (!why[0])
			memcpy(field, rgb, sizeof(rgb));
		break;
	}
	case VALUE_CHOICE: {
		size_t n = 0, len = 0;
		while (k->choices[n] && strcmp(k->choices[n], value) != 0)
			n++;
		v = n;
		if (k->choices[n])
			break;
		len = (size_t)snprintf(why, sizeof(why), "is not one of ");
		for (n = 0; k->choices[n] && len < sizeof(why); n++)
			len += (size_t)snprintf(why + len, sizeof(why) - len, "%s%s", n ? "|" : "",
						k->choices[n]);
		break;
	}
	}
	if (why[0])
		config_fail(p, p->lineno, "%s %s: \"%s\" %s", p->label, k->name, value, why);
	else if (k->type == VALUE_RGB)
		return;
	else if (k->size == sizeof(uint64_t))
		*(uint64_t *)field = v;
	else if (k->size == sizeof(uint32_t)) /* also enum log_level */
		*(uint32_t *)field = (uint32_t)v;
	else
		*(bool *)field = v != 0;
}

/* Checks of a pipeline that need all its keys: the first missing required
 * key (at the header's line), then the first key of the other source kind,
 * then the width of token_output. */
static void pipeline_end(struct config_parse *p)
{
	struct pipeline_cfg *pl = p->pipeline;
	const int *line = p->pipeline_key_line;
	unsigned kind = pl->kind == SOURCE_RAW ? KEY_RAW : pl->kind == SOURCE_TOKENS ? KEY_TOKENS : KEY_IMAGE;
	size_t bad = line[PK_SOURCE] ? PK_COUNT : PK_SOURCE;
	for (size_t k = 0; k < PK_COUNT && bad == PK_COUNT; k++)
		if (!line[k] && (pipeline_keys[k].flags & kind) && (pipeline_keys[k].flags & KEY_REQUIRED))
			bad = k;
	if (bad != PK_COUNT) {
		config_fail(p, pl->line, "%s missing required key \"%s\"", p->label,
			    pipeline_keys[bad].name);
		return;
	}
	for (size_t k = 0; k < PK_COUNT; k++)
		if (line[k] && !(pipeline_keys[k].flags & kind) && (bad == PK_COUNT || line[k] < line[bad]))
			bad = k;
	if (bad != PK_COUNT) {
		config_fail(p, line[bad], "%s %s does not apply to a%s source", p->label,
			    pipeline_keys[bad].name, kind == KEY_RAW ? " raw" : kind == KEY_TOKENS ?
			    " tokens" : pl->kind == SOURCE_TAR ? " tar" : "n imagefolder");
		return;
	}
	if (kind == KEY_IMAGE) {
		int at = line[PK_MEAN] ? line[PK_MEAN] : line[PK_STD];
		if (at && pl->dtype == IMAGE_UINT8)
			config_fail(p, at, "%s %s needs dtype float16 or float32 (uint8 images are not "
				    "normalised)", p->label, line[PK_MEAN] ? "mean" : "std");
		return;
	}
	if (kind == KEY_RAW)
		return;
	size_t stored = pl->token_bytes == 2 ? 0 : 1, out = token_type_of(pl->token_out_dtype);
	if (!line[PK_TOKEN_OUTPUT])
		pl->token_out_dtype = token_types[stored].dtype;
	else if (token_types[out].bytes < pl->token_bytes)
		config_fail(p, line[PK_TOKEN_OUTPUT],
			    "%s token_output: \"%s\" is narrower than token_dtype %s", p->label,
			    token_types[out].name, token_types[stored].name);
	else if (pl->direct && token_types[out].bytes != pl->token_bytes)
		config_fail(p, line[PK_DIRECT], "%s direct: on needs tokens delivered as stored, but "
			    "token_output %s widens token_dtype %s on the CPU", p->label,
			    token_types[out].name, token_types[stored].name);
}

static void section_end(struct config_parse *p)
{
	if (p->section == SECTION_PIPELINE && !p->err_line)
		pipeline_end(p);
	p->section = SECTION_NONE;
	p->pipeline = NULL;
}

static bool pipeline_name_valid(const char *name, size_t len)
{
	if (len < 1 || len > PIPELINE_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = name[i]; /* ASCII only, whatever the locale */
		if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') &&
		    !(ch >= '0' && ch <= '9') && ch != '_' && ch != '.' && ch != '-')
			return false;
	}
	return true;
}

static void pipeline_begin(struct config_parse *p, const char *name, size_t len)
{
	struct config *c = p->c;
	if (!pipeline_name_valid(name, len)) {
		config_fail(p, p->lineno, "invalid pipeline name \"%.*s\" (1 to %d characters "
			    "of A-Z a-z 0-9 _ . -)", (int)len, name, PIPELINE_NAME_MAX);
		return;
	}
	for (size_t i = 0; i < c->n_pipelines; i++) {
		if (strlen(c->pipelines[i].name) == len && memcmp(c->pipelines[i].name, name, len) == 0) {
			config_fail(p, p->lineno, "duplicate pipeline \"%.*s\" (first defined on line %d)",
				    (int)len, name, c->pipelines[i].line);
			return;
		}
	}
	if (c->n_pipelines == ARENA_PIPELINES_MAX) {
		config_fail(p, p->lineno, "too many pipelines (at most %d)", ARENA_PIPELINES_MAX);
		return;
	}
	struct pipeline_cfg *pl = &c->pipelines[c->n_pipelines++];
	memset(pl, 0, sizeof(*pl));
	memcpy(pl->name, name, len);
	pl->line = p->lineno;
	pl->shuffle = true;
	pl->max_image_pixels = IMAGE_PIXELS_DEFAULT;
	pl->max_decode_ms = MAX_DECODE_MS_DEFAULT;
	for (int k = 0; k < 3; k++)
		pl->std[k] = 1.0;
	p->pipeline = pl;
	p->section = SECTION_PIPELINE;
	snprintf(p->label, sizeof(p->label), "[pipeline.%s]", pl->name);
	p->keys = pipeline_keys;
	p->n_keys = PK_COUNT;
	p->pipeline_key_line = pl->key_line; /* zeroed with pl */
	p->key_line = p->pipeline_key_line;
	p->base = pl;
}

/* A "[name]" header on the current line: name is not NUL-terminated. */
static void section_begin(struct config_parse *p, const char *name, size_t len)
{
	section_end(p);
	if (p->err_line)
		return;
	if (len == 6 && memcmp(name, "daemon", 6) == 0) {
		if (p->daemon_line) {
			config_fail(p, p->lineno, "duplicate section [daemon] (first defined on line %d)",
				    p->daemon_line);
			return;
		}
		p->daemon_line = p->lineno;
		p->section = SECTION_DAEMON;
		snprintf(p->label, sizeof(p->label), "[daemon]");
		p->keys = daemon_keys;
		p->n_keys = DK_COUNT;
		p->key_line = p->daemon_key_line;
		p->base = p->c;
	} else if (len >= 9 && memcmp(name, "pipeline.", 9) == 0) {
		pipeline_begin(p, name + 9, len - 9);
	} else {
		config_fail(p, p->lineno, "unknown section [%.*s]", (int)len, name);
	}
}

static int config_on_key(void *user, const char *section, const char *name, const char *value)
{
	struct config_parse *p = user;
	/* section is inih's view, truncated to 49 bytes; the reader tracks the
	 * real one in p->section. */
	if (p->err_line)
		return 0;
	if (p->long_value_line == p->lineno)
		value = p->long_value;
	if (p->section == SECTION_NONE) {
		config_fail(p, p->lineno, "key \"%s\" is outside any section", name);
		return 0;
	}
	size_t key = 0;
	while (key < p->n_keys && strcmp(p->keys[key].name, name) != 0)
		key++;
	if (key == p->n_keys) {
		config_fail(p, p->lineno, "unknown key \"%s\" in %s", name, p->label);
		return 0;
	}
	if (p->key_line[key]) {
		config_fail(p, p->lineno, "duplicate key \"%s\" in %s (first set on line %d)",
			    name, p->label, p->key_line[key]);
		return 0;
	}
	p->key_line[key] = p->lineno;
	set_value(p, &p->keys[key], p->base, value);
	return p->err_line == 0;
}

/* inih's rule for the end of a token: the first of chars (if any), or an
 * inline comment (';' after whitespace), or the end of the string. */
static const char *find_chars_or_comment(const char *s, const char *chars)
{
	bool was_space = false;
	while (*s && !(chars && strchr(chars, *s)) && !(was_space && *s == ';')) {
		was_space = isspace((unsigned char)*s);
		s++;
	}
	return s;
}

/* A line that does not fit inih's buffer: hand inih "KEY=" and keep the
 * value, trimmed the way inih trims values, for config_on_key. */
static char *read_long_pair(struct config_parse *p, const char *s, char *str, int num)
{
	const char *sep = find_chars_or_comment(s, "=:");
	size_t key_len = (size_t)(sep - s);
	if (*sep == '\0' || *sep == ';' || key_len + 3 > (size_t)num) {
		config_fail(p, p->lineno, "syntax error");
		return NULL;
	}
	const char *value = sep + 1;
	const char *end = find_chars_or_comment(value, NULL);
	while (value < end && isspace((unsigned char)*value))
		value++;
	while (end > value && isspace((unsigned char)end[-1]))
		end--;
	memcpy(p->long_value, value, (size_t)(end - value));
	p->long_value[end - value] = '\0';
	p->long_value_line = p->lineno;
	memcpy(str, s, key_len);
	memcpy(str + key_len, "=\n", 3);
	return str;
}

/* The ini_reader: see the top of this file. */
static char *config_read_line(char *str, int num, void *stream)
{
	struct config_parse *p = stream;
	if (p->err_line || num < 3)
		return NULL;
	size_t len = 0;
	bool too_long = false, has_nul = false;
	int ch;
	errno = 0;
	while ((ch = getc(p->f)) != EOF && ch != '\n') {
		if (ch == '\0')
			has_nul = true;
		if (len < CONFIG_LINE_MAX)
			p->line[len++] = (char)ch;
		else
			too_long = true;
	}
	if (ch == EOF && ferror(p->f)) {
		p->read_errno = errno ? errno : EIO;
		return NULL;
	}
	if (ch == EOF && len == 0)
		return NULL;
	p->line[len] = '\0';
	p->lineno++;
	if (too_long || has_nul) {
		if (too_long)
			config_fail(p, p->lineno, "line is longer than %d bytes", CONFIG_LINE_MAX);
		else
			config_fail(p, p->lineno, "line contains a NUL byte");
		return NULL;
	}
	char *s = p->line;
	if (p->lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3; /* UTF-8 byte order mark */
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '\0' || *s == ';' || *s == '#') {
		memcpy(str, "\n", 2);
		return str;
	}
	if (*s == '[') {
		char *close = strchr(s + 1, ']');
		const char *rest = close ? close + 1 : "";
		while (isspace((unsigned char)*rest))
			rest++;
		if (!close || (*rest && *rest != ';' && *rest != '#')) {
			config_fail(p, p->lineno, "syntax error");
			return NULL;
		}
		section_begin(p, s + 1, (size_t)(close - s - 1));
		memcpy(str, "\n", 2);
		return p->err_line ? NULL : str;
	}
	size_t n = strlen(s);
	if (n + 2 > (size_t)num)
		return read_long_pair(p, s, str, num);
	memcpy(str, s, n);
	memcpy(str + n, "\n", 2);
	return str;
}

/* CPUs loaderd may run on: its affinity mask, else the online count. */
static long config_cpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return CPU_COUNT(&set);
	return sysconf(_SC_NPROCESSORS_ONLN);
}

static uint32_t config_default_workers(void)
{
	long cpus = config_cpus();
	if (cpus - 1 > ARENA_WORKERS_MAX)
		return ARENA_WORKERS_MAX;
	return cpus > 1 ? (uint32_t)(cpus - 1) : 1;
}

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	c->socket_mode = 0660;
	c->workers = config_default_workers();
	c->max_workers = c->workers;
	c->shm_bytes = 1ull << 30;
	c->staging_slots = 16;
	c->default_depth = 4;
	c->max_depth = 16;
	c->max_clients = 256;
	c->handshake_timeout_ms = 5000;
	c->max_handshakes = 64;
	c->log_level = LOG_LEVEL_INFO;
	c->gpu = GPU_AUTO;
	c->pin = PIN_REGISTER;
	c->pinned_slots = 4;
	c->pin_threads = 4;
	c->device_slots = 4;
	c->worker_timeout_ms = WORKER_TIMEOUT_MS_DEFAULT;
}

/* Checks that need the whole file, and defaults that follow other keys. */
static void config_finish(struct config_parse *p)
{
	struct config *c = p->c;
	c->max_workers_given = p->daemon_key_line[DK_MAX_WORKERS] != 0;
	if (!c->max_workers_given) { /* default: max(workers, CPUs), at most 256 */
		long cpus = config_cpus();
		c->max_workers = cpus > ARENA_WORKERS_MAX ? ARENA_WORKERS_MAX : cpus < 1 ? 1 : (uint32_t)cpus;
		if (c->max_workers < c->workers)
			c->max_workers = c->workers;
	} else if (c->max_workers < c->workers) {
		config_fail(p, p->daemon_key_line[DK_MAX_WORKERS],
			    "[daemon] max_workers: \"%u\" is less than workers (%u)", c->max_workers,
			    c->workers);
		return;
	}
	/* A worker may spend max_decode_ms on one image between two signs of
	 * life: the watchdog must give it longer than that. */
	for (size_t i = 0; i < c->n_pipelines; i++) {
		const struct pipeline_cfg *pl = &c->pipelines[i];
		if ((pl->kind == SOURCE_IMAGEFOLDER || pl->kind == SOURCE_TAR) &&
		    pl->max_decode_ms >= c->worker_timeout_ms) {
			int wl = p->daemon_key_line[DK_WORKER_TIMEOUT_MS];
			config_fail(p, wl ? wl : pl->line, "[pipeline.%s] max_decode_ms (%u) must be below "
				    "[daemon] worker_timeout_ms (%u): a worker decoding one image that long "
				    "would be taken for a stuck one", pl->name, pl->max_decode_ms,
				    c->worker_timeout_ms);
			return;
		}
	}
	int line = p->daemon_key_line[DK_DEFAULT_DEPTH];
	if (c->default_depth <= c->max_depth)
		return;
	if (!line) { /* the default, 4, yields to a smaller max_depth */
		c->default_depth = c->max_depth;
		return;
	}
	config_fail(p, line, "[daemon] default_depth: \"%u\" is not an integer in 1..%u (max_depth)",
		    c->default_depth, c->max_depth);
}

int config_load(const char *path, struct config *c, char *err, size_t err_cap)
{
	struct config_parse *p = NULL;
	int ret = 0;
	config_defaults(c);
	if (err_cap)
		err[0] = '\0';
	if (!path || !*path)
		return 0;
	if (strlen(path) >= sizeof(c->file)) {
		ret = -ENAMETOOLONG;
		goto report_errno;
	}
	snprintf(c->file, sizeof(c->file), "%s", path);
	p = calloc(1, sizeof(*p));
	if (!p) {
		ret = -ENOMEM;
		goto report_errno;
	}
	p->c = c;
	p->daemon_key_line = c->key_line;
	p->err = err;
	p->err_cap = err_cap;
	/* A regular file only: fopen of a FIFO would block (at start, and in
	 * the event loop on a reload) until a writer came. */
	struct stat st;
	int fd = regfile_open(AT_FDCWD, path, &st);
	if (fd == REGFILE_NOT_REGULAR) {
		if (err_cap)
			snprintf(err, err_cap, "%s: not a regular file (%s)", path, regfile_kind(st.st_mode));
		ret = -EINVAL;
		goto free_parse;
	}
	if (fd < 0) {
		ret = fd;
		goto free_parse;
	}
	p->f = fdopen(fd, "r");
	if (!p->f) {
		ret = -errno;
		close(fd);
		goto free_parse;
	}
	int bad_line = ini_parse_stream(config_read_line, p, config_on_key, p);
	if (p->read_errno)
		ret = -p->read_errno;
	else if (bad_line < 0) /* inih could not allocate its line buffer */
		ret = -ENOMEM;
	if (ret)
		goto close_file;
	if (bad_line > 0 && (!p->err_line || bad_line < p->err_line)) {
		p->err_line = 0; /* a line inih rejected comes first */
		config_fail(p, bad_line, "syntax error");
	}
	if (!p->err_line) {
		section_end(p);
		config_finish(p);
	}
	if (p->err_line)
		ret = -EINVAL;
close_file:
	fclose(p->f);
free_parse:
	free(p);
	if (ret == 0 || ret == -EINVAL)
		return ret;
report_errno:
	if (err_cap)
		snprintf(err, err_cap, "%s: %s", path, strerror(-ret));
	return ret;
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
	const struct key_spec *keys = pipeline ? pipeline_keys : daemon_keys;
	size_t n = pipeline ? PK_COUNT : DK_COUNT;
	for (size_t i = 0; i < n; i++)
		if (strcmp(keys[i].name, key) == 0)
			return pipeline ? pipeline->key_line[i] : c->key_line[i];
	return 0;
}

/* Whether key k holds the same value in the structs at a and b. */
static bool key_equal(const struct key_spec *k, const void *a, const void *b)
{
	const char *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
	switch (k->type) {
	case VALUE_STRING:
	case VALUE_TRANSFORM:
		return strcmp(fa, fb) == 0;
	case VALUE_SOURCE:
		return ((const struct pipeline_cfg *)a)->kind == ((const struct pipeline_cfg *)b)->kind &&
		       strcmp(fa, fb) == 0;
	default:
		return memcmp(fa, fb, k->size) == 0;
	}
}

void config_diff(const struct config *a, const struct config *b,
		 void (*fn)(void *ctx, const char *pipeline, const char *key), void *ctx)
{
	for (size_t i = 0; i < DK_COUNT; i++)
		if (!key_equal(&daemon_keys[i], a, b))
			fn(ctx, NULL, daemon_keys[i].name);
	for (size_t i = 0; i < a->n_pipelines; i++) {
		const struct pipeline_cfg *pa = &a->pipelines[i];
		const struct pipeline_cfg *pb = config_pipeline(b, pa->name);
		if (!pb) {
			fn(ctx, pa->name, "(removed)");
			continue;
		}
		for (size_t k = 0; k < PK_COUNT; k++)
			if (!key_equal(&pipeline_keys[k], pa, pb))
				fn(ctx, pa->name, pipeline_keys[k].name);
	}
	for (size_t i = 0; i < b->n_pipelines; i++)
		if (!config_pipeline(a, b->pipelines[i].name))
			fn(ctx, b->pipelines[i].name, "(added)");
}
