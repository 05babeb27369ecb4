/*
 * config_keys: every key loaderd's config file accepts (config_impl.h's
 * tables: type, field, limits), the defaults of the keys left out, and the
 * parser of each value type. docs/config.md documents each key, its limits
 * and its default; the page and these tables change together.
 *
 * A value parser either stores the value in its field or records the
 * error (config_fail) and leaves the field as it was. Most errors read
 * "[SECTION] KEY: "VALUE" is not ..." (config_bad_value).
 */
#include "daemon/config/config_impl.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/errtext.h"
#include "daemon/source/tarshard.h"
#include "image/transform.h"

#define BATCH_SIZE_MAX 65536
#define STAGING_SLOTS_MAX 1024
#define DEPTH_MAX 1024
#define CLIENTS_MAX 4096
#define HANDSHAKES_MAX 4096
#define HANDSHAKE_TIMEOUT_MS_MIN 100
#define HANDSHAKE_TIMEOUT_MS_MAX 600000
#define GROUP_TIMEOUT_MS_MAX 86400000 /* a day */
#define RECORD_BYTES_MAX (1ull << 30)
#define SEQ_LEN_MAX (1ull << 24)
#define PINNED_SLOTS_MAX 64
#define PIN_THREADS_MAX 32

/* Names in the order of the enums they set (config.h). */
static const char *const gpu_choices[] = {"auto", "off", "required", NULL};
static const char *const pin_choices[] = {"register", "copy", NULL};
static const char *const gpu_decode_helpers_choices[] = {"threads", "processes", "auto", NULL};
static const char *const layout_choices[] = {"nchw", "nhwc", NULL};
static const char *const dtype_choices[] = {"uint8", "float16", "float32", NULL};
static const char *const on_error_choices[] = {"substitute", "fail", NULL};
static const char *const decode_choices[] = {"auto", "cpu", "gpu", NULL};
static const char *const gpu_decode_check_choices[] = {"structure", "entropy", NULL};
static const char *const decode_scale_choices[] = {"fast", "full", NULL};

_Static_assert(sizeof(enum log_level) == sizeof(uint32_t), "config_store stores it as uint32_t");
_Static_assert(sizeof(enum gpu_mode) == sizeof(uint32_t) && sizeof(enum pin_mode) == sizeof(uint32_t),
	       "config_store stores CONFIG_VALUE_CHOICE as uint32_t");

#define FIELD(type, member) offsetof(type, member), sizeof(((type *)0)->member)
#define DAEMON(member) FIELD(struct config, member)
#define PIPELINE(member) FIELD(struct pipeline_cfg, member)

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define GROUP_NAME_MAX (sizeof(((struct config *)0)->socket_group) - 1)

const struct config_key config_daemon_keys[CONFIG_DK_COUNT] = {
	[CONFIG_DK_SOCKET] = {"socket", CONFIG_VALUE_STRING, DAEMON(socket), 0, SUN_PATH_MAX, 0, NULL},
	[CONFIG_DK_WORKERS] = {"workers", CONFIG_VALUE_UINT, DAEMON(workers), 1, ARENA_WORKERS_MAX, 0,
			       NULL},
	[CONFIG_DK_SHM_BYTES] = {"shm_bytes", CONFIG_VALUE_SIZE, DAEMON(shm_bytes), 1, INT64_MAX, 0, NULL},
	[CONFIG_DK_STAGING_SLOTS] = {"staging_slots", CONFIG_VALUE_UINT, DAEMON(staging_slots), 1,
				     STAGING_SLOTS_MAX, 0, NULL},
	/* also <= max_depth, checked at the end of the file */
	[CONFIG_DK_DEFAULT_DEPTH] = {"default_depth", CONFIG_VALUE_UINT, DAEMON(default_depth), 1,
				     DEPTH_MAX, 0, NULL},
	[CONFIG_DK_MAX_DEPTH] = {"max_depth", CONFIG_VALUE_UINT, DAEMON(max_depth), 1, DEPTH_MAX, 0, NULL},
	[CONFIG_DK_MAX_CLIENTS] = {"max_clients", CONFIG_VALUE_UINT, DAEMON(max_clients), 1,
				   CLIENTS_MAX, 0, NULL},
	[CONFIG_DK_SOCKET_GROUP] = {"socket_group", CONFIG_VALUE_STRING, DAEMON(socket_group), 0,
				    GROUP_NAME_MAX, 0, NULL},
	[CONFIG_DK_SOCKET_MODE] = {"socket_mode", CONFIG_VALUE_MODE, DAEMON(socket_mode), 0, 0777, 0,
				   NULL},
	[CONFIG_DK_WORKER_PROGRAM] = {"worker_program", CONFIG_VALUE_STRING, DAEMON(worker_program),
				      0, PATH_MAX - 1, 0, NULL},
	[CONFIG_DK_LOG_LEVEL] = {"log_level", CONFIG_VALUE_LOG_LEVEL, DAEMON(log_level), 0, 0, 0, NULL},
	[CONFIG_DK_GPU] = {"gpu", CONFIG_VALUE_CHOICE, DAEMON(gpu), 0, 0, 0, gpu_choices},
	[CONFIG_DK_PIN] = {"pin", CONFIG_VALUE_CHOICE, DAEMON(pin), 0, 0, 0, pin_choices},
	[CONFIG_DK_PINNED_SLOTS] = {"pinned_slots", CONFIG_VALUE_UINT, DAEMON(pinned_slots), 1,
				    PINNED_SLOTS_MAX, 0, NULL},
	[CONFIG_DK_PIN_THREADS] = {"pin_threads", CONFIG_VALUE_UINT, DAEMON(pin_threads), 1,
				   PIN_THREADS_MAX, 0, NULL},
	[CONFIG_DK_GPU_THREADS] = {"gpu_threads", CONFIG_VALUE_UINT, DAEMON(gpu_threads), 1,
				   CONFIG_GPU_THREADS_MAX, 0, NULL},
	[CONFIG_DK_NVJPEG_LIBRARY] = {"nvjpeg_library", CONFIG_VALUE_STRING, DAEMON(nvjpeg_library), 0,
				      PATH_MAX - 1, 0, NULL},
	[CONFIG_DK_GPU_DECODE_MEMORY] = {"gpu_decode_memory", CONFIG_VALUE_SIZE,
					 DAEMON(gpu_decode_memory), 16ull << 20, 1ull << 40, 0, NULL},
	[CONFIG_DK_GPU_DECODE_THREADS] = {"gpu_decode_threads", CONFIG_VALUE_UINT,
					  DAEMON(gpu_decode_threads), 0, CONFIG_GPU_DECODE_THREADS_MAX,
					  0, NULL},
	[CONFIG_DK_GPU_DECODE_HELPERS] = {"gpu_decode_helpers", CONFIG_VALUE_CHOICE,
					  DAEMON(gpu_decode_helpers), 0, 0, 0,
					  gpu_decode_helpers_choices},
	[CONFIG_DK_DEVICE_SLOTS] = {"device_slots", CONFIG_VALUE_UINT, DAEMON(device_slots), 1,
				    PROTO_DEVICE_SLOTS_MAX, 0, NULL},
	/* also >= workers, checked at the end of the file */
	[CONFIG_DK_MAX_WORKERS] = {"max_workers", CONFIG_VALUE_UINT, DAEMON(max_workers), 1,
				   ARENA_WORKERS_MAX, 0, NULL},
	/* also over every image pipeline's max_decode_ms, checked at the end of the file */
	[CONFIG_DK_WORKER_TIMEOUT_MS] = {"worker_timeout_ms", CONFIG_VALUE_UINT,
					 DAEMON(worker_timeout_ms), WORKER_TIMEOUT_MS_MIN,
					 WORKER_TIMEOUT_MS_MAX, 0, NULL},
	[CONFIG_DK_HANDSHAKE_TIMEOUT_MS] = {"handshake_timeout_ms", CONFIG_VALUE_UINT,
					    DAEMON(handshake_timeout_ms), HANDSHAKE_TIMEOUT_MS_MIN,
					    HANDSHAKE_TIMEOUT_MS_MAX, 0, NULL},
	[CONFIG_DK_MAX_HANDSHAKES] = {"max_handshakes", CONFIG_VALUE_UINT, DAEMON(max_handshakes), 1,
				      HANDSHAKES_MAX, 0, NULL},
	[CONFIG_DK_GROUP_TIMEOUT_MS] = {"group_timeout_ms", CONFIG_VALUE_UINT, DAEMON(group_timeout_ms),
					0, GROUP_TIMEOUT_MS_MAX, 0, NULL},
};

const struct config_key config_pipeline_keys[CONFIG_PK_COUNT] = {
	[CONFIG_PK_SOURCE] = {"source", CONFIG_VALUE_SOURCE, PIPELINE(path), 0, 0,
			      CONFIG_KEY_ANY_KIND | CONFIG_KEY_REQUIRED, NULL},
	[CONFIG_PK_BATCH_SIZE] = {"batch_size", CONFIG_VALUE_UINT, PIPELINE(batch_size), 1,
				  BATCH_SIZE_MAX, CONFIG_KEY_ANY_KIND | CONFIG_KEY_REQUIRED, NULL},
	[CONFIG_PK_SHUFFLE] = {"shuffle", CONFIG_VALUE_BOOL, PIPELINE(shuffle), 0, 0,
			       CONFIG_KEY_ANY_KIND, NULL},
	[CONFIG_PK_SEED] = {"seed", CONFIG_VALUE_UINT, PIPELINE(seed), 0, UINT64_MAX,
			    CONFIG_KEY_ANY_KIND, NULL},
	[CONFIG_PK_DROP_LAST] = {"drop_last", CONFIG_VALUE_BOOL, PIPELINE(drop_last), 0, 0,
				 CONFIG_KEY_ANY_KIND, NULL},
	[CONFIG_PK_CHUNK] = {"chunk", CONFIG_VALUE_UINT, PIPELINE(chunk), 0, WORK_CHUNK_MAX,
			     CONFIG_KEY_ANY_KIND, NULL},
	[CONFIG_PK_RECORD_BYTES] = {"record_bytes", CONFIG_VALUE_UINT, PIPELINE(record_bytes), 1,
				    RECORD_BYTES_MAX, CONFIG_KEY_RAW | CONFIG_KEY_REQUIRED, NULL},
	[CONFIG_PK_TOKEN_DTYPE] = {"token_dtype", CONFIG_VALUE_TOKEN_STORED, PIPELINE(token_bytes),
				   0, 0, CONFIG_KEY_TOKENS | CONFIG_KEY_REQUIRED, NULL},
	[CONFIG_PK_SEQ_LEN] = {"seq_len", CONFIG_VALUE_UINT, PIPELINE(seq_len), 1, SEQ_LEN_MAX,
			       CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON |
				 CONFIG_KEY_LLMC | CONFIG_KEY_REQUIRED, NULL},
	/* also not narrower than token_dtype, checked at the end of the section */
	[CONFIG_PK_TOKEN_OUTPUT] = {"token_output", CONFIG_VALUE_TOKEN_OUTPUT,
				    PIPELINE(token_out_dtype), 0, 0, CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON |
				 CONFIG_KEY_LLMC,
				    NULL},
	/* tokens: also only when delivered as stored, checked at the end of the section */
	[CONFIG_PK_DIRECT] = {"direct", CONFIG_VALUE_BOOL, PIPELINE(direct), 0, 0,
			      CONFIG_KEY_RAW | CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON, NULL},
	[CONFIG_PK_TRANSFORM] = {"transform", CONFIG_VALUE_TRANSFORM, PIPELINE(transform), 0, 0,
				 CONFIG_KEY_IMAGE | CONFIG_KEY_REQUIRED, NULL},
	[CONFIG_PK_LAYOUT] = {"layout", CONFIG_VALUE_CHOICE, PIPELINE(layout), 0, 0,
			      CONFIG_KEY_IMAGE, layout_choices},
	/* mean and std also need a float dtype, checked at the end of the section */
	[CONFIG_PK_DTYPE] = {"dtype", CONFIG_VALUE_CHOICE, PIPELINE(dtype), 0, 0, CONFIG_KEY_IMAGE,
			     dtype_choices},
	[CONFIG_PK_MEAN] = {"mean", CONFIG_VALUE_RGB, PIPELINE(mean), 0, 0, CONFIG_KEY_IMAGE, NULL},
	[CONFIG_PK_STD] = {"std", CONFIG_VALUE_RGB, PIPELINE(std), 1, 0, CONFIG_KEY_IMAGE, NULL},
	[CONFIG_PK_ON_ERROR] = {"on_error", CONFIG_VALUE_CHOICE, PIPELINE(on_error), 0, 0,
				CONFIG_KEY_IMAGE, on_error_choices},
	[CONFIG_PK_MAX_IMAGE_PIXELS] = {"max_image_pixels", CONFIG_VALUE_UINT,
					PIPELINE(max_image_pixels), 1, 1ull << 32, CONFIG_KEY_IMAGE, NULL},
	[CONFIG_PK_MAX_DECODE_MS] = {"max_decode_ms", CONFIG_VALUE_UINT, PIPELINE(max_decode_ms), 1,
				     WORKER_TIMEOUT_MS_MAX - 1, CONFIG_KEY_IMAGE, NULL},
	[CONFIG_PK_DECODE] = {"decode", CONFIG_VALUE_CHOICE, PIPELINE(decode), 0, 0, CONFIG_KEY_IMAGE,
			      decode_choices},
	[CONFIG_PK_GPU_DECODE_PERCENT] = {"gpu_decode_percent", CONFIG_VALUE_UINT,
					  PIPELINE(gpu_decode_percent), 0, 100, CONFIG_KEY_IMAGE, NULL},
	[CONFIG_PK_GPU_DECODE_CHECK] = {"gpu_decode_check", CONFIG_VALUE_CHOICE,
					PIPELINE(gpu_decode_check), 0, 0, CONFIG_KEY_IMAGE,
					gpu_decode_check_choices},
	[CONFIG_PK_DECODE_SCALE] = {"decode_scale", CONFIG_VALUE_CHOICE, PIPELINE(decode_scale), 0, 0,
				    CONFIG_KEY_IMAGE, decode_scale_choices},
	/* outputs: names checked, and eod_token required by them, at the end of the section */
	[CONFIG_PK_OUTPUTS] = {"outputs", CONFIG_VALUE_STRING, PIPELINE(outputs_text), 0,
			       CONFIG_OUTPUTS_TEXT_MAX - 1, CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON |
				 CONFIG_KEY_LLMC, NULL},
	[CONFIG_PK_EOD_TOKEN] = {"eod_token", CONFIG_VALUE_UINT, PIPELINE(eod_token), 0, UINT32_MAX,
				 CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON |
				 CONFIG_KEY_LLMC, NULL},
	[CONFIG_PK_EOD_MASK_LOSS] = {"eod_mask_loss", CONFIG_VALUE_BOOL, PIPELINE(eod_mask_loss), 0, 0,
				     CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON |
				 CONFIG_KEY_LLMC, NULL},
	[CONFIG_PK_MAX_DOCUMENTS] = {"max_documents", CONFIG_VALUE_UINT, PIPELINE(max_documents), 1,
				     CONFIG_MAX_DOCUMENTS_MAX, CONFIG_KEY_TOKENS | CONFIG_KEY_MEGATRON |
				 CONFIG_KEY_LLMC,
				     NULL},
	[CONFIG_PK_SPLIT] = {"split", CONFIG_VALUE_SPLIT, PIPELINE(split), 0, 0, CONFIG_KEY_MEGATRON,
			     NULL},
	/* default: shuffle's value, set at the end of the section */
	[CONFIG_PK_DOCUMENT_SHUFFLE] = {"document_shuffle", CONFIG_VALUE_BOOL,
					PIPELINE(document_shuffle), 0, 0, CONFIG_KEY_MEGATRON, NULL},
	[CONFIG_PK_BLEND_SAMPLES] = {"blend_samples", CONFIG_VALUE_UINT, PIPELINE(blend_samples), 1,
				     (uint64_t)1 << 40, CONFIG_KEY_BLEND, NULL},
	[CONFIG_PK_MAX_IMAGE_BYTES] = {"max_image_bytes", CONFIG_VALUE_SIZE, PIPELINE(max_image_bytes),
				       0, ARENA_IMAGE_FILE_MAX, CONFIG_KEY_IMAGE, NULL},
};

const struct config_token_name config_token_types[CONFIG_TOKEN_TYPES_COUNT] = {
	[CONFIG_TOKEN_UINT16] = {"uint16", PROTO_DTYPE_UINT16, 2},
	[CONFIG_TOKEN_UINT32] = {"uint32", PROTO_DTYPE_UINT32, 4},
	[CONFIG_TOKEN_INT32] = {"int32", PROTO_DTYPE_INT32, 4},
	[CONFIG_TOKEN_INT64] = {"int64", PROTO_DTYPE_INT64, 8},
};

long config_cpus(void)
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
	c->group_timeout_ms = 600000;
	c->log_level = LOG_LEVEL_INFO;
	c->gpu = GPU_AUTO;
	c->pin = PIN_REGISTER;
	c->pinned_slots = 4;
	c->pin_threads = 4;
	c->gpu_threads = 1;
	c->gpu_decode_memory = 512ull << 20;
	c->gpu_decode_threads = 0; /* by MPS, per GPU */
	c->gpu_decode_helpers = GPU_DECODE_HELPERS_AUTO;
	c->device_slots = 4;
	c->worker_timeout_ms = WORKER_TIMEOUT_MS_DEFAULT;
}

void config_pipeline_defaults(struct pipeline_cfg *pl)
{
	pl->shuffle = true;
	pl->max_image_pixels = IMAGE_PIXELS_DEFAULT;
	pl->max_decode_ms = MAX_DECODE_MS_DEFAULT;
	pl->decode = DECODE_AUTO;
	pl->max_documents = CONFIG_MAX_DOCUMENTS_DEFAULT;
	pl->gpu_decode_percent = GPU_DECODE_PERCENT_DEFAULT;
	for (int k = 0; k < 3; k++)
		pl->std[k] = 1.0;
}

const char *config_source_name(enum source_kind kind)
{
	switch (kind) {
	case SOURCE_RAW: return "raw";
	case SOURCE_TOKENS: return "tokens";
	case SOURCE_IMAGEFOLDER: return "imagefolder";
	case SOURCE_TAR: return "tar";
	case SOURCE_MEGATRON: return "megatron";
	case SOURCE_LLMC: return "llmc";
	}
	return "?";
}

/* Decimal digits only: no sign, no space, no base prefix. 0, -EINVAL or
 * -ERANGE (more than 64 bits). */
static int config_parse_u64(const char *s, uint64_t *out)
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

/* A value parser: value into field, the member of struct config or struct
 * pipeline_cfg that k describes, or the error recorded and field left. */
typedef void config_value_fn(struct config_parse *p, const struct config_key *k, const char *value,
			     void *field);

/* Records that value is no value for key k:
 * "[SECTION] KEY: "VALUE" " and what fmt says it is not. */
static void config_bad_value(struct config_parse *p, const struct config_key *k, const char *value,
			     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void config_bad_value(struct config_parse *p, const struct config_key *k, const char *value,
			     const char *fmt, ...)
{
	char why[128];
	va_list ap;
	va_start(ap, fmt);
	verrtext(why, sizeof(why), -EINVAL, fmt, ap);
	va_end(ap);
	config_fail(p, p->lineno, "%s %s: \"%s\" %s", p->label, k->name, value, why);
}

/* Stores v in the integer, enum or bool field k describes. */
static void config_store(const struct config_key *k, void *field, uint64_t v)
{
	if (k->size == sizeof(uint64_t))
		*(uint64_t *)field = v;
	else if (k->size == sizeof(uint32_t)) /* also the enums */
		*(uint32_t *)field = (uint32_t)v;
	else
		*(bool *)field = v != 0;
}

/* Stores v when parsed is true and v is in k's min..max, else records that
 * value "is not WHAT in MIN..MAX[UNIT]". */
static void config_store_in_range(struct config_parse *p, const struct config_key *k,
				  const char *value, void *field, bool parsed, uint64_t v,
				  const char *what, const char *unit)
{
	if (parsed && v >= k->min && v <= k->max)
		config_store(k, field, v);
	else
		config_bad_value(p, k, value, "is not %s in %llu..%llu%s", what,
				 (unsigned long long)k->min, (unsigned long long)k->max, unit);
}

static void config_value_uint(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	uint64_t v = 0;
	bool parsed = config_parse_u64(value, &v) == 0;
	config_store_in_range(p, k, value, field, parsed, v, "an integer", "");
}

static void config_value_bool(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	static const char *const names[] = {"false", "true", "no", "yes", "off", "on", "0", "1"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcasecmp(value, names[i]) == 0) {
			config_store(k, field, i % 2);
			return;
		}
	}
	config_bad_value(p, k, value, "is not a boolean (true/false/yes/no/on/off/1/0)");
}

static void config_value_size(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	uint64_t v = 0;
	int rc = config_parse_size(value, &v);
	if (rc == -EINVAL)
		config_bad_value(p, k, value, "is not a size (bytes, or a number followed by "
				 "K, M, G, T, KiB, MiB, GiB or TiB)");
	else
		config_store_in_range(p, k, value, field, rc == 0, v, "a size", " bytes");
}

static void config_value_mode(struct config_parse *p, const struct config_key *k, const char *value,
			      void *field)
{
	uint64_t v = 0;
	const char *s = value;
	for (; *s >= '0' && *s <= '7' && v <= k->max; s++)
		v = v * 8 + (uint64_t)(*s - '0');
	if (*value == '\0' || *s != '\0' || v > k->max)
		config_bad_value(p, k, value, "is not an octal mode in 0..0%llo",
				 (unsigned long long)k->max);
	else
		config_store(k, field, v);
}

static void config_value_string(struct config_parse *p, const struct config_key *k,
				const char *value, void *field)
{
	size_t len = strlen(value);
	if (len > k->max)
		config_bad_value(p, k, value, "is too long (%zu bytes, at most %llu)", len,
				 (unsigned long long)k->max);
	else
		memcpy(field, value, len + 1);
}

static void config_value_log_level(struct config_parse *p, const struct config_key *k,
				   const char *value, void *field)
{
	enum log_level level;
	if (log_level_parse(value, &level) == 0)
		config_store(k, field, level);
	else
		config_bad_value(p, k, value, "is not one of error|warning|notice|info|debug");
}

/* The config file's directory as an absolute path with no trailing slash
 * ("" for the root directory): the base of relative source paths. */
static int config_file_dir(const char *file, char *dir, size_t cap)
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

bool config_source_item(struct config_parse *p, const struct config_key *k, const char *value,
			enum source_kind *kind, char *path_out, size_t cap)
{
	const char *path = NULL;
	for (int kd = SOURCE_RAW; kd <= SOURCE_LLMC && !path; kd++) {
		const char *name = config_source_name((enum source_kind)kd);
		size_t len = strlen(name);
		if (strncmp(value, name, len) == 0 && value[len] == ':') {
			*kind = (enum source_kind)kd;
			path = value + len + 1;
		}
	}
	if (!path) {
		config_bad_value(p, k, value, "is not raw:PATH, tokens:PATH, imagefolder:ROOT, "
				 "tar:PATTERN, megatron:PREFIX or llmc:PATTERN");
		return false;
	}
	if (*path == '\0') {
		config_bad_value(p, k, value, "has an empty path");
		return false;
	}
	char dir[PATH_MAX] = "";
	int ret = 0;
	if (*path != '/')
		ret = config_file_dir(p->c->file, dir, sizeof(dir));
	if (ret != 0) {
		config_fail(p, p->lineno, "%s source: \"%s\": cannot resolve a relative path: %s",
			    p->label, value, strerror(-ret));
		return false;
	}
	size_t room = cap < ARENA_PATH_MAX ? cap : ARENA_PATH_MAX;
	int n = snprintf(path_out, room, "%s%s%s", dir, *path == '/' ? "" : "/", path);
	if (n < 0 || (size_t)n >= room) {
		config_fail(p, p->lineno, "%s source: \"%s\": the path is too long (at most %zu bytes)",
			    p->label, value, room - 1);
		return false;
	}
	/* A tar pattern's syntax is checked here, where the line is known;
	 * the shards themselves at start (daemon/source/tarshard.h). */
	char **shards, why[256];
	size_t n_shards;
	if (*kind == SOURCE_TAR || *kind == SOURCE_LLMC) {
		int rc = tar_pattern_expand(path_out, &shards, &n_shards, why, sizeof(why));
		if (rc < 0) {
			config_fail(p, p->lineno, "%s source: \"%s\": %s", p->label, value,
				    rc == -ENOMEM ? strerror(ENOMEM) : why);
			return false;
		}
		tar_pattern_free(shards, n_shards);
	}
	return true;
}

/* "raw:PATH", "tokens:PATH", "imagefolder:ROOT", "tar:PATTERN",
 * "megatron:PREFIX" or "llmc:PATTERN", into the current pipeline's kind
 * and path; a relative PATH is taken relative to the directory of the
 * config file. A list "SOURCE WEIGHT, SOURCE WEIGHT, ..." is a blend
 * (config_blend.c). */
static void config_value_source(struct config_parse *p, const struct config_key *k,
				const char *value, void *field)
{
	struct pipeline_cfg *pl = p->pipeline; /* field is pl->path */
	if (config_is_blend(value)) {
		config_value_blend(p, k, value);
		return;
	}
	enum source_kind kind;
	char path[ARENA_PATH_MAX];
	if (!config_source_item(p, k, value, &kind, path, sizeof(path)))
		return;
	pl->kind = kind;
	pl->n_members = 0;
	snprintf(field, k->size, "%s", path);
}

/* token_dtype (the storable names, into token_bytes) or token_output (any
 * name, into an enum proto_dtype). */
static void config_value_token(struct config_parse *p, const struct config_key *k,
			       const char *value, void *field)
{
	bool stored = k->type == CONFIG_VALUE_TOKEN_STORED;
	size_t n = stored ? CONFIG_TOKEN_TYPES_STORED : CONFIG_TOKEN_TYPES_COUNT;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(value, config_token_types[i].name) == 0) {
			config_store(k, field, stored ? config_token_types[i].bytes :
				     config_token_types[i].dtype);
			return;
		}
	}
	config_bad_value(p, k, value, "is not one of %s",
			 stored ? "uint16|uint32" : "uint16|uint32|int32|int64");
}

/* A transform chain: checked by tf_parse, whose message is kept. */
static void config_value_transform(struct config_parse *p, const struct config_key *k,
				   const char *value, void *field)
{
	struct tf_chain chain;
	char text[256];
	if (strlen(value) >= CONFIG_TRANSFORM_MAX)
		config_bad_value(p, k, value, "is too long (at most %d bytes)",
				 CONFIG_TRANSFORM_MAX - 1);
	else if (tf_parse(value, &chain, text, sizeof(text)) < 0)
		config_fail(p, p->lineno, "%s transform: %s", p->label, text);
	else
		memcpy(field, value, strlen(value) + 1);
}

/* "R,G,B": three finite numbers (positive ones when k->min is 1). */
static void config_value_rgb(struct config_parse *p, const struct config_key *k, const char *value,
			     void *field)
{
	double rgb[3];
	const char *s = value;
	char *end = NULL;
	for (int c = 0; c < 3; c++) {
		rgb[c] = strtod(s, &end);
		if (end == s || !isfinite(rgb[c]) || (k->min && rgb[c] <= 0) ||
		    *end != (c < 2 ? ',' : '\0')) {
			config_bad_value(p, k, value, "is not three %snumbers R,G,B",
					 k->min ? "positive " : "");
			return;
		}
		s = end + 1;
	}
	memcpy(field, rgb, sizeof(rgb));
}

/* Megatron's --split: "A,B,C" (or "A/B/C"), one to three numbers, each
 * finite and >= 0, their sum > 0; missing ones are 0, as Megatron pads
 * them. Digits with an optional fraction only: no sign, exponent or
 * space, so that the text is what Megatron's float() would read too. */
static void config_value_split(struct config_parse *p, const struct config_key *k,
			       const char *value, void *field)
{
	double w[3] = {0, 0, 0}, sum = 0;
	char sep = strchr(value, '/') && !strchr(value, ',') ? '/' : ',';
	const char *s = value;
	int n = 0;
	for (;;) {
		size_t len = strcspn(s, sep == ',' ? "," : "/");
		size_t digits = strspn(s, "0123456789.");
		const char *dot = memchr(s, '.', len);
		if (len == 0 || digits != len || (dot && memchr(dot + 1, '.', len - (size_t)(dot + 1 - s))) ||
		    (len == 1 && *s == '.')) {
			config_bad_value(p, k, value, "is not one to three numbers A,B,C (the train, valid "
					 "and test weights, as Megatron's --split 969,30,1)");
			return;
		}
		if (n == 3) {
			config_bad_value(p, k, value, "has more than three weights (train, valid, test)");
			return;
		}
		w[n] = strtod(s, NULL);
		if (!isfinite(w[n])) {
			config_bad_value(p, k, value, "has a weight too large to be a number");
			return;
		}
		sum += w[n++];
		if (s[len] == '\0')
			break;
		s += len + 1;
	}
	if (!(sum > 0) || !isfinite(sum)) {
		config_bad_value(p, k, value, "has no weight above 0");
		return;
	}
	memcpy(field, w, sizeof(w));
}

/* One of k->choices, stored as its index. */
static void config_value_choice(struct config_parse *p, const struct config_key *k,
				const char *value, void *field)
{
	size_t n = 0;
	while (k->choices[n] && strcmp(k->choices[n], value) != 0)
		n++;
	if (k->choices[n]) {
		config_store(k, field, n);
		return;
	}
	char names[128];
	size_t len = 0;
	names[0] = '\0';
	for (n = 0; k->choices[n] && len < sizeof(names); n++)
		len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", n ? "|" : "",
					k->choices[n]);
	config_bad_value(p, k, value, "is not one of %s", names);
}

/* The parser of each value type. */
static config_value_fn *const config_value_parsers[CONFIG_VALUE_TYPES] = {
	[CONFIG_VALUE_UINT] = config_value_uint, [CONFIG_VALUE_BOOL] = config_value_bool,
	[CONFIG_VALUE_SIZE] = config_value_size, [CONFIG_VALUE_MODE] = config_value_mode,
	[CONFIG_VALUE_STRING] = config_value_string, [CONFIG_VALUE_RGB] = config_value_rgb,
	[CONFIG_VALUE_SPLIT] = config_value_split,
	[CONFIG_VALUE_LOG_LEVEL] = config_value_log_level, [CONFIG_VALUE_CHOICE] = config_value_choice,
	[CONFIG_VALUE_SOURCE] = config_value_source, [CONFIG_VALUE_TRANSFORM] = config_value_transform,
	[CONFIG_VALUE_TOKEN_STORED] = config_value_token,
	[CONFIG_VALUE_TOKEN_OUTPUT] = config_value_token,
};

void config_set_value(struct config_parse *p, const struct config_key *k, void *base,
		      const char *value)
{
	config_value_parsers[k->type](p, k, value, (char *)base + k->offset);
}
