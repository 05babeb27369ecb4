/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config: loaderd's INI configuration (inih), with embedded defaults for
 * every daemon key; pipelines exist only when the file defines them.
 *
 *   [daemon]                 daemon keys (all optional)
 *   [pipeline.NAME]          one pipeline; NAME is [A-Za-z0-9_.-]{1,63}
 *
 * The reference for every key, its default and meaning is docs/config.md;
 * this parser and that page change together.
 *
 * config_load checks syntax and values (types, ranges, enums, required
 * keys, duplicates, unknown sections and keys), and reports every problem
 * of the file, not only the first, each as "FILE:LINE: message" with a
 * close match for a misspelt name (common/suggest.h). It does not open
 * data files: the daemon's source module checks those at start (and
 * --check-config runs both).
 */
#ifndef LDR_DAEMON_CONFIG_H
#define LDR_DAEMON_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"
#include "proto/proto.h"
#include "shm/layout.h"

enum source_kind {
	SOURCE_RAW = 1,         /* source = raw:PATH */
	SOURCE_TOKENS = 2,      /* source = tokens:PATH */
	SOURCE_IMAGEFOLDER = 3, /* source = imagefolder:ROOT (ROOT/CLASS/...jpg) */
	SOURCE_TAR = 4,         /* source = tar:PATTERN (WebDataset shards, daemon/source/tarshard.h) */
	SOURCE_MEGATRON = 5,    /* source = megatron:PREFIX (PREFIX.idx, PREFIX.bin: daemon/source/megatron.h) */
	SOURCE_LLMC = 6,        /* source = llmc:PATTERN (llm.c token shards, daemon/source/llmc.h) */
};

/* Image pipelines: names in config_keys.c's choice lists, in this order. */
enum image_layout { IMAGE_NCHW = 0, IMAGE_NHWC = 1 };
/* Where an image pipeline's JPEGs are decoded for device clients (host
 * clients: always the workers). */
enum decode_mode {
	DECODE_AUTO = 0, /* the GPU's hardware decoder where there is one, with the workers */
	DECODE_CPU = 1,  /* the workers */
	DECODE_GPU = 2,  /* the GPU's hardware decoder; no decoder is an error at attach */
};
#define GPU_DECODE_PERCENT_DEFAULT 100 /* up to all: the share follows the client's wait */
/* What the workers check of a JPEG before they leave it to the GPU. */
enum gpu_decode_check {
	GPU_CHECK_STRUCTURE = 0, /* header and the scan's markers (image/jpeghdr.h) */
	GPU_CHECK_ENTROPY = 1,   /* and all of its entropy-coded data (jd_check_entropy) */
};
/* The DCT scale the CPU decodes an image pipeline's JPEGs at. */
enum decode_scale {
	DECODE_SCALE_FAST = 0, /* the smallest that gives the output enough pixels */
	DECODE_SCALE_FULL = 1, /* always full size, as torchvision decodes */
};
enum image_dtype { IMAGE_UINT8 = 0, IMAGE_FLOAT16 = 1, IMAGE_FLOAT32 = 2 };
enum on_error {
	ON_ERROR_SUBSTITUTE = 0, /* a bad image is replaced by another sample, deterministically */
	ON_ERROR_FAIL = 1,       /* the client gets an error naming the file */
};

#define CONFIG_TRANSFORM_MAX 512
#define WORKER_NICE_DEFAULT 10 /* below the GPU threads and the training's */
#define CONFIG_KEYS_MAX 48
#define CONFIG_GPU_THREADS_MAX 4 /* gpu_threads */
#define CONFIG_GPU_DECODE_THREADS_MAX 8 /* gpu_decode_threads */
#define CONFIG_OUTPUTS_TEXT_MAX 128
#define CONFIG_MAX_DOCUMENTS_DEFAULT 32
#define CONFIG_MAX_DOCUMENTS_MAX 4096
/* outputs of a token pipeline */
#define CONFIG_OUTPUT_POSITIONS 0x1u
#define CONFIG_OUTPUT_LOSS_MASK 0x2u
#define CONFIG_OUTPUT_CU_SEQLENS 0x4u /* room for the line of every key of a section */
#define IMAGE_PIXELS_DEFAULT 89478485ull /* PIL's decompression-bomb limit */
/* CPU time one image's decode may take before the image counts as bad:
 * far beyond what a max_image_pixels image takes (about a second). */
#define MAX_DECODE_MS_DEFAULT 5000u
/* A worker holding items with no sign of progress this long is stuck. */
#define WORKER_TIMEOUT_MS_DEFAULT 30000u
#define WORKER_TIMEOUT_MS_MIN 100u
#define WORKER_TIMEOUT_MS_MAX 3600000u
/* The index area kept for the sample lists of pipelines added while
 * loaderd runs (daemon/pipetable.h): about 200,000 images' entries and
 * names. */
#define RUNTIME_INDEX_BYTES_DEFAULT (16ull << 20)
/* Pipelines declared by clients (docs/clients.md, "Declaring a pipeline"). */
#define CONFIG_ROOTS_MAX 1024             /* job_roots, as written */
#define JOB_PIPELINES_DEFAULT 16          /* max_job_pipelines */
#define JOB_INDEX_BYTES_DEFAULT (4ull << 20) /* job_index_bytes */
#define JOB_LINGER_MS_DEFAULT 30000u      /* job_linger_ms */
#define SCAN_THREADS_DEFAULT 8            /* scan_threads */
#define CONFIG_JOB_MAX 128                /* a job key, with NUL (PROTO_JOB_MAX) */

/* A blend's members (`source` a list of SOURCE WEIGHT: docs/config.md,
 * "Blending"): each a megatron, llmc or tokens source. */
#define CONFIG_BLEND_MAX 16
#define CONFIG_BLEND_PATHS_MAX (2 * ARENA_PATH_MAX) /* the members' paths together */

struct config_member {
	enum source_kind kind;
	uint32_t path_at;  /* its path: member_paths + path_at */
	double weight;     /* as written, > 0; normalised at start (common/blend.h) */
};

struct pipeline_cfg {
	char name[PROTO_NAME_MAX];
	int line;                  /* line of the [pipeline.NAME] header */
	enum source_kind kind;
	char path[ARENA_PATH_MAX]; /* the part of `source` after "kind:" (tar: a pattern);
				    * a blend: its first member's kind and path */
	/* a blend: 2..CONFIG_BLEND_MAX members; 0: one source, kind and path */
	uint32_t n_members;
	struct config_member members[CONFIG_BLEND_MAX];
	char member_paths[CONFIG_BLEND_PATHS_MAX];
	uint64_t blend_samples;    /* a blend's samples per epoch; 0: the members' sum */
	uint32_t batch_size;       /* required, 1..65536 */
	bool shuffle;              /* default true */
	uint64_t seed;             /* default 0 */
	bool drop_last;            /* default false */
	uint32_t chunk;            /* samples per work item, 0 = auto; <= WORK_CHUNK_MAX */
	bool direct;               /* device delivery straight from the file (daemon/gpu/direct.h) */
	/* raw */
	uint64_t record_bytes;     /* required for raw, >= 1 */
	/* tokens */
	uint32_t token_bytes;      /* token_dtype: uint16 -> 2, uint32 -> 4; required */
	uint32_t token_out_dtype;  /* token_output: enum proto_dtype; default = stored */
	uint64_t seq_len;          /* required for tokens, >= 1 */
	/* tokens, megatron: document-aware outputs (shm/layout.h, struct arena_token_params) */
	char outputs_text[CONFIG_OUTPUTS_TEXT_MAX]; /* as written: "tokens positions ..." */
	uint32_t outputs;          /* CONFIG_OUTPUT_* bits, from outputs_text */
	uint64_t eod_token;        /* required by every output but tokens */
	bool eod_mask_loss;        /* loss_mask 0 where the input token is eod_token */
	uint32_t max_documents;    /* cu_seqlens: documents a row holds at most, default 32 */
	/* megatron: train/valid/test weights (common/split.h); all 0 without `split` */
	double split[3];
	/* megatron: documents shuffled per epoch before windows are cut
	 * (common/docorder.h); default: shuffle's value */
	bool document_shuffle;
	/* megatron: documents a block of that order (common/docorder.h),
	 * default DOCORDER_BLOCK_DEFAULT */
	uint32_t document_shuffle_block;
	/* image sources (imagefolder, tar) */
	char transform[CONFIG_TRANSFORM_MAX]; /* required; checked by tf_parse */
	uint32_t layout;           /* enum image_layout, default nchw */
	uint32_t dtype;            /* enum image_dtype, default uint8 */
	uint32_t on_error;         /* enum on_error, default substitute */
	uint64_t max_image_pixels; /* default IMAGE_PIXELS_DEFAULT */
	uint32_t max_decode_ms;    /* CPU time per image decode, default MAX_DECODE_MS_DEFAULT */
	uint32_t decode;           /* enum decode_mode, default auto */
	uint32_t gpu_decode_percent; /* decode = auto: of the images the GPU takes, the most
				      * percent sent to it (the share follows the client's data
				      * wait, daemon/sched/gpushare.h); default
				      * GPU_DECODE_PERCENT_DEFAULT */
	uint32_t gpu_decode_check; /* enum gpu_decode_check, default structure */
	uint32_t decode_scale;     /* enum decode_scale, default fast */
	uint64_t max_image_bytes;  /* GPU decoding: a bigger JPEG is decoded by the workers;
				    * default 0: what an output row holds */
	double mean[3], std[3];    /* float output: (x / 255 - mean) / std; default 0 and 1 */
	int key_line[CONFIG_KEYS_MAX]; /* the line each key was set on, 0 = not in the file
					* (config_key_line) */
	/* a pipeline a client declared (config_declare), not in any file: its
	 * job key, the pid that declared it, and the directories its data
	 * must stay within (job_roots, as written); "" and 0 for the file's */
	char job[CONFIG_JOB_MAX];
	int32_t declared_pid;
	char roots[CONFIG_ROOTS_MAX];
};

enum gpu_mode {
	GPU_AUTO = 0,     /* offer device delivery when a GPU is there, else host only */
	GPU_OFF = 1,      /* never initialise CUDA: host delivery only */
	GPU_REQUIRED = 2, /* no usable GPU is an error at start */
};

enum gpu_decode_helpers {
	GPU_DECODE_HELPERS_THREADS = 0,   /* the decoding thread's helpers are threads of the daemon */
	GPU_DECODE_HELPERS_PROCESSES = 1, /* each helper hands its share to a loaderd-decoder process */
	GPU_DECODE_HELPERS_AUTO = 2,      /* processes on a GPU under MPS, threads elsewhere */
};

enum pin_mode {
	PIN_REGISTER = 0, /* page-lock the arena's staging slots; DMA straight from them */
	PIN_COPY = 1,     /* copy each batch into one of pinned_slots page-locked buffers */
};

/* worker_cpu_budget: one of the two is set (> 0), or neither (the default,
 * online cores - 1, at least 1). */
struct config_cpu_budget {
	double cores;
	double percent; /* of the online cores */
};

struct config {
	char file[PATH_MAX];       /* the file read, "" for defaults only */
	char socket[PATH_MAX];     /* "" = resolve at start (common/paths.h) */
	char socket_group[64];     /* group owning the socket, "" = the daemon's */
	uint32_t socket_mode;      /* default 0660 */
	uint32_t workers;          /* default: online cores - 1, at least 1; max ARENA_WORKERS_MAX;
				    * with workers_auto: the count now (min_workers at start) */
	bool workers_auto;         /* workers = auto: the daemon sets the count (daemon/pool/wtune.h) */
	uint32_t min_workers;      /* workers = auto: the fewest, default 1 */
	struct config_cpu_budget worker_cpu_budget; /* workers = auto: the most CPU the workers
						     * may use */
	uint32_t max_workers;      /* ring pairs reserved: a reload may raise workers to this;
				    * default max(workers, online cores) */
	bool max_workers_given;    /* set in the file (else the default above) */
	bool stage_timing;         /* the stages' latency histograms (daemon/core/stagestats.h),
				    * default true; off only to measure what they cost */
	uint64_t shm_bytes;        /* arena size limit, default 1 GiB */
	uint32_t staging_slots;    /* default 16 */
	uint32_t default_depth;    /* prefetch depth for clients asking 0, default 4 */
	uint32_t max_depth;        /* cap on a client's depth, default 16 */
	uint32_t max_clients;      /* default 256 */
	uint32_t handshake_timeout_ms; /* a connection's first frame must come within, default 5000 */
	uint32_t max_handshakes;   /* connections without a first frame at once, default 64 */
	uint32_t group_timeout_ms; /* a group's members must all attach within, 0 = no limit,
				    * default 600000 */
	char worker_program[PATH_MAX]; /* "" = loaderd-worker beside loaderd */
	enum log_level log_level;  /* default info */
	enum gpu_mode gpu;         /* default auto */
	enum pin_mode pin;         /* default register */
	uint32_t pinned_slots;     /* pin = copy: page-locked buffers, default 4 */
	uint32_t pin_threads;      /* pin = copy: threads sharing each copy, default 4 */
	uint32_t gpu_threads;      /* threads issuing each GPU's copies, default 1 */
	char nvjpeg_library[PATH_MAX]; /* "" = libnvjpeg.so.13 from the library path */
	uint64_t gpu_decode_memory; /* device memory per GPU thread for decoding, default 512 MiB */
	uint32_t gpu_decode_threads; /* host threads submitting a GPU thread's JPEGs; 0 (the
				      * default): 2 on a GPU under MPS, 1 elsewhere */
	enum gpu_decode_helpers gpu_decode_helpers; /* default auto */
	uint32_t device_slots;     /* device ring slots per client (its depth cap), default 4 */
	uint32_t worker_timeout_ms; /* a worker holding items with no progress this long is
				     * killed; default WORKER_TIMEOUT_MS_DEFAULT */
	uint32_t worker_nice;      /* the workers' nice value (setpriority), 0..19, default
				    * WORKER_NICE_DEFAULT */
	uint64_t runtime_index_bytes; /* index area for pipelines added while running (sample
				       * lists, document and shard tables), default
				       * RUNTIME_INDEX_BYTES_DEFAULT */
	uint64_t staging_slot_bytes; /* a staging slot's bytes at least, so that a pipeline
				      * added later may have a larger batch than those at
				      * start; 0 (the default): the largest batch at start */
	/* pipelines clients declare (docs/clients.md): the directories their
	 * data may be read from, space-separated absolute paths ("": none, the
	 * default: clients may not declare), how many may exist at once, each
	 * one's share of the runtime index area and of a staging slot, and
	 * how long one stays once its last client has left */
	char job_roots[CONFIG_ROOTS_MAX];
	uint32_t max_job_pipelines;
	uint64_t job_index_bytes;
	uint64_t job_batch_bytes;  /* 0: a whole staging slot */
	uint32_t job_linger_ms;
	/* where GET /metrics is served (daemon/server/metricsd.h): a Unix
	 * socket path or a loopback address; "" (the default): nowhere */
	char metrics_listen[108];
	/* where imagefolder listings are cached (daemon/source/imagefolder.h):
	 * an absolute directory; "": not cached. Default: $CACHE_DIRECTORY
	 * (systemd's CacheDirectory=), else "" */
	char cache_dir[PATH_MAX];
	uint32_t scan_threads;     /* threads listing an imagefolder, default SCAN_THREADS_DEFAULT */
	int key_line[CONFIG_KEYS_MAX]; /* [daemon] keys: see config_key_line */
	size_t n_pipelines;
	struct pipeline_cfg pipelines[ARENA_PIPELINES_MAX];
};

/* Fills in every default. */
void config_defaults(struct config *c);

/* CPUs loaderd may run on: its affinity mask, else the online count. */
long config_cpus(void);

/* worker_cpu_budget in cores, for `cpus` online cores. */
double config_cpu_budget_cores(const struct config *c, long cpus);

/* Problems config_load_problems keeps the text of; more are counted. */
#define CONFIG_PROBLEMS_MAX 64

/* Every problem one load of a file found. */
struct config_problems {
	unsigned n;                        /* found (kept ones and the rest) */
	unsigned kept;                     /* in text[], in the order of their lines */
	int line[CONFIG_PROBLEMS_MAX];     /* 0: the file as a whole ("FILE: reason") */
	char *text[CONFIG_PROBLEMS_MAX];   /* "FILE:LINE: message", malloc'd */
	/* Where they are: bit i for config.pipelines[i]'s section, and
	 * [daemon]'s. The sections without one are as the file says, so that
	 * --check-config can check their data too. */
	uint64_t pipelines_with_problems;
	bool daemon_with_problems;
};
_Static_assert(ARENA_PIPELINES_MAX <= 64, "a bit of pipelines_with_problems for each");

/*
 * Defaults, then the file at path, every problem found into *pr
 * (config_problems_free frees it; after a return of 0 it holds none).
 * Returns 0, or -EINVAL when the file has problems (the config is then
 * not to be used), or -ENOENT and friends with one problem "FILE:
 * strerror" when it cannot be read (-EINVAL with "FILE: not a regular
 * file (a FIFO)" for a FIFO, device or directory, which is never opened).
 */
int config_load_problems(const char *path, struct config *c, struct config_problems *pr);
void config_problems_free(struct config_problems *pr);

/* The problems' text in buf: as many as fit whole in cap bytes, separated
 * by sep, then "SEP... and N more" when some did not fit (a first one too
 * long for buf is cut). Returns buf; "" for none. */
const char *config_problems_text(const struct config_problems *pr, const char *sep, char *buf,
				 size_t cap);

/* config_load_problems with every problem in err, one a line
 * (config_problems_text with "\n"); the same returns. */
int config_load(const char *path, struct config *c, char *err, size_t err_cap);

/*
 * A pipeline declared by client pid (HELLO's declaration): text is the
 * lines of a [pipeline.NAME] section ("key = value", one a line, no
 * section header), parsed and checked by the same code and with the same
 * messages as the file's, against running's [daemon] keys. Fills out,
 * named name. 0, or -EINVAL with err "declared by client pid N, line L:
 * message" (the message names the key).
 */
int config_declare(const struct config *running, const char *name, const char *text, int pid,
		   struct pipeline_cfg *out, char *err, size_t err_cap);

/* Parses "64", "4K", "16M", "1G", "2T" (also "KiB" etc., powers of 1024).
 * 0 or -EINVAL / -ERANGE. Exposed for tests and loaderctl. */
int config_parse_size(const char *text, uint64_t *out);

const struct pipeline_cfg *config_pipeline(const struct config *c, const char *name);

/* Calls fn once for every key whose value differs between a and b, with
 * the key's name as the file spells it: daemon keys (pipeline NULL), then
 * each pipeline's keys; a pipeline in only one of them comes as the key
 * "(removed)" (only in a) or "(added)" (only in b). */
void config_diff(const struct config *a, const struct config *b,
		 void (*fn)(void *ctx, const char *pipeline, const char *key), void *ctx);

/* The line of the file that set key (as the file spells it) in [daemon]
 * (pipeline NULL) or in that pipeline's section: 0 when the key was left
 * to its default, or is not a key of that section. For messages about a
 * value that is checked only when loaderd starts (data files, the worker
 * program, socket_group): "FILE:LINE: ...". */
int config_key_line(const struct config *c, const struct pipeline_cfg *pipeline, const char *key);

/* "raw", "tokens", "imagefolder", "tar", "megatron" or "llmc": the kind as
 * `source` spells it. */
const char *config_source_name(enum source_kind kind);

#endif
