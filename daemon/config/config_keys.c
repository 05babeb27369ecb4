/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_keys: every key loaderd's config file accepts (config_impl.h's
 * tables: type, field, limits), the defaults of the keys left out, and the
 * names of source kinds and token types. docs/config.md documents each
 * key, its limits and its default; the page and these tables change
 * together. Data and small lookups: nothing here records an error
 * (config_values.c parses each value by the type its entry gives).
 */
#include "daemon/config/config_impl.h"

#include "common/docorder.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

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
#define SCAN_THREADS_MAX 64

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
	[CONFIG_DK_WORKERS] = {"workers", CONFIG_VALUE_UINT_AUTO, DAEMON(workers), 1,
			       ARENA_WORKERS_MAX, 0, NULL},
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
	[CONFIG_DK_WORKER_NICE] = {"worker_nice", CONFIG_VALUE_UINT, DAEMON(worker_nice), 0, 19, 0,
				   NULL},
	[CONFIG_DK_RUNTIME_INDEX_BYTES] = {"runtime_index_bytes", CONFIG_VALUE_SIZE,
					   DAEMON(runtime_index_bytes), 0, 1ull << 40, 0, NULL},
	[CONFIG_DK_STAGING_SLOT_BYTES] = {"staging_slot_bytes", CONFIG_VALUE_SIZE,
					  DAEMON(staging_slot_bytes), 0, 1ull << 40, 0, NULL},
	/* absolute paths, checked at the end of the file */
	[CONFIG_DK_JOB_ROOTS] = {"job_roots", CONFIG_VALUE_STRING, DAEMON(job_roots), 0,
				 CONFIG_ROOTS_MAX - 1, 0, NULL},
	[CONFIG_DK_MAX_JOB_PIPELINES] = {"max_job_pipelines", CONFIG_VALUE_UINT,
					 DAEMON(max_job_pipelines), 0, ARENA_PIPELINES_MAX, 0, NULL},
	[CONFIG_DK_JOB_INDEX_BYTES] = {"job_index_bytes", CONFIG_VALUE_SIZE, DAEMON(job_index_bytes),
				       0, 1ull << 40, 0, NULL},
	[CONFIG_DK_JOB_BATCH_BYTES] = {"job_batch_bytes", CONFIG_VALUE_SIZE, DAEMON(job_batch_bytes),
				       0, 1ull << 40, 0, NULL},
	[CONFIG_DK_JOB_LINGER_MS] = {"job_linger_ms", CONFIG_VALUE_UINT, DAEMON(job_linger_ms), 0,
				     86400000, 0, NULL},
	/* also <= max_workers, checked at the end of the file */
	[CONFIG_DK_MIN_WORKERS] = {"min_workers", CONFIG_VALUE_UINT, DAEMON(min_workers), 1,
				   ARENA_WORKERS_MAX, 0, NULL},
	/* cores in min..max (thousandths), or a percent in 1..100 */
	[CONFIG_DK_WORKER_CPU_BUDGET] = {"worker_cpu_budget", CONFIG_VALUE_CPU_BUDGET,
					 DAEMON(worker_cpu_budget), 1, 4096000, 0, NULL},
	/* a Unix path or a loopback address (common/listenaddr.h), checked at
	 * the end of the file */
	/* an absolute path, checked at the end of the file */
	[CONFIG_DK_CACHE_DIR] = {"cache_dir", CONFIG_VALUE_STRING, DAEMON(cache_dir), 0, PATH_MAX - 1,
				 0, NULL},
	[CONFIG_DK_SCAN_THREADS] = {"scan_threads", CONFIG_VALUE_UINT, DAEMON(scan_threads), 1,
				    SCAN_THREADS_MAX, 0, NULL},
	[CONFIG_DK_METRICS_LISTEN] = {"metrics_listen", CONFIG_VALUE_STRING, DAEMON(metrics_listen), 0,
				      SUN_PATH_MAX, 0, NULL},
	[CONFIG_DK_STAGE_TIMING] = {"stage_timing", CONFIG_VALUE_BOOL, DAEMON(stage_timing), 0, 0, 0,
				    NULL},
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
	[CONFIG_PK_DOCUMENT_SHUFFLE_BLOCK] = {"document_shuffle_block", CONFIG_VALUE_UINT,
					      PIPELINE(document_shuffle_block), 1,
					      DOCORDER_BLOCK_MAX, CONFIG_KEY_MEGATRON, NULL},
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
	c->stage_timing = true;
	c->worker_nice = WORKER_NICE_DEFAULT;
	c->runtime_index_bytes = RUNTIME_INDEX_BYTES_DEFAULT;
	c->max_job_pipelines = JOB_PIPELINES_DEFAULT;
	c->job_index_bytes = JOB_INDEX_BYTES_DEFAULT;
	c->job_linger_ms = JOB_LINGER_MS_DEFAULT;
	c->min_workers = 1;
	c->scan_threads = SCAN_THREADS_DEFAULT;
	/* systemd's CacheDirectory= (the shipped unit's): the first of its
	 * colon-separated directories */
	const char *cache = getenv("CACHE_DIRECTORY");
	if (cache && cache[0] == '/') {
		size_t n = strcspn(cache, ":");
		if (n < sizeof(c->cache_dir))
			snprintf(c->cache_dir, sizeof(c->cache_dir), "%.*s", (int)n, cache);
	}
}

double config_cpu_budget_cores(const struct config *c, long cpus)
{
	if (c->worker_cpu_budget.cores > 0)
		return c->worker_cpu_budget.cores;
	if (c->worker_cpu_budget.percent > 0)
		return (double)cpus * c->worker_cpu_budget.percent / 100.0;
	return cpus > 1 ? (double)(cpus - 1) : 1.0;
}

void config_pipeline_defaults(struct pipeline_cfg *pl)
{
	pl->shuffle = true;
	pl->max_image_pixels = IMAGE_PIXELS_DEFAULT;
	pl->max_decode_ms = MAX_DECODE_MS_DEFAULT;
	pl->decode = DECODE_AUTO;
	pl->max_documents = CONFIG_MAX_DOCUMENTS_DEFAULT;
	pl->document_shuffle_block = DOCORDER_BLOCK_DEFAULT;
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
