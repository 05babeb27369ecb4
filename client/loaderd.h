/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd.h: the loaderd client library, the one header a training process
 * (or the Python package, through ctypes) needs.
 *
 * A client connects to the daemon's Unix socket, attaches to a pipeline by
 * name with its rank and world size, then loops: ldr_next() gives the next
 * batch as named tensors that point into the daemon's shared memory (mapped
 * read-only, or copy-on-write with LDR_ATTACH_WRITABLE), ldr_release() hands
 * the batch's slot back. Batches arrive
 * strictly in order; the daemon keeps up to `depth` of them prepared ahead.
 *
 *     struct ldr_client *c;
 *     struct ldr_attach_opts o = { .pipeline = "train" };
 *     if (ldr_connect(NULL, &c) < 0 || ldr_attach(c, &o) < 0) { ...ldr_error(c)... }
 *     struct ldr_batch b;
 *     while (ldr_next(c, &b, -1) == 0) {
 *             use(b.tensors[0].data, b.rows);
 *             ldr_release(c, &b);
 *     }
 *     ldr_close(c);
 *
 * Device delivery: set ldr_attach_opts.device ("0", or "GPU-<uuid>") and
 * batches arrive already copied to that GPU; tensors[i].data are device
 * pointers into a ring the daemon allocated on the GPU and exported once
 * (CUDA IPC). Nothing blocks the host: ldr_next returns a batch once the
 * daemon's copy has landed, and ldr_stream_wait() orders a stream after
 * that copy all the same (a host query of the event when, as with this
 * daemon, it has completed); when
 * the work that reads the batch is enqueued, ldr_release_stream() marks
 * the slot free on that stream and tells the daemon, whose next copy into
 * the slot waits (on the GPU) for that mark.
 *
 *     struct ldr_attach_opts o = { .pipeline = "train", .device = "0" };
 *     ...
 *     while (ldr_next(c, &b, -1) == 0) {
 *             ldr_stream_wait(c, &b, stream);
 *             my_kernel<<<g, t, 0, stream>>>(b.tensors[0].data, b.rows);
 *             ldr_release_stream(c, &b, stream);
 *     }
 *
 * The library reaches CUDA through the driver API (libcuda.so.1, loaded
 * when a device is first asked for): it links no CUDA library, shares the
 * device's primary context with the CUDA runtime and frameworks, and host
 * delivery works on machines without CUDA. A cudaStream_t is passed as
 * void * (it is the same handle as the driver's CUstream).
 *
 * Errors: every call that can fail returns 0 or a negative errno; the text
 * of the last failure (the daemon's own message when it sent one, which
 * names the pipeline, file or limit involved) is ldr_error().
 *
 * Thread-safety: a client handle is used by one thread at a time (calls on
 * one handle must be serialised by the caller); distinct handles are
 * independent. ldr_status() uses no handle and is safe from any thread, as
 * are ldr_position_parse() and ldr_position_format().
 *
 * Lifetime: tensor pointers of a batch are valid until that batch is
 * released or the client is closed; after that the slot is refilled.
 */
#ifndef LOADERD_CLIENT_H
#define LOADERD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LDR_TENSORS_MAX 8
#define LDR_NDIM_MAX 4
#define LDR_POSITION_MAX 192 /* bytes a position token needs, with its NUL */

enum ldr_dtype { /* the same values as the wire format's */
	LDR_UINT8 = 1,
	LDR_UINT16 = 2,
	LDR_UINT32 = 3,
	LDR_INT32 = 4,
	LDR_INT64 = 5,
	LDR_FLOAT16 = 6,
	LDR_FLOAT32 = 7,
};

struct ldr_client; /* opaque */

/* ldr_attach_opts.flags */
/* Host delivery: map the arena private and writable (MAP_PRIVATE, copy on
 * write) instead of shared and read-only. A write into a batch's tensors
 * lands in pages of this process alone (the daemon and other clients never
 * see it) instead of killing the process with SIGSEGV, and ldr_release
 * drops those pages (madvise MADV_DONTNEED over the runs of the slot's
 * pages this process wrote, found in /proc/self/pagemap; over the whole
 * slot where that cannot be read), so the next batch in the slot shows the
 * daemon's data again. For bindings whose tensors cannot be read-only
 * (torch). It costs each release a read of the slot's pagemap entries, and
 * the written pages their faults when read again (bench/RESULTS.md,
 * "Python batch lifetime"). Ignored with device delivery. */
#define LDR_ATTACH_WRITABLE 0x1u

struct ldr_attach_opts {
	/* A pipeline defined in the daemon's config, or NULL when the client
	 * declares its own (declaration): exactly one of the two. */
	const char *pipeline;
	unsigned rank;           /* default 0 */
	unsigned world;          /* default (0) means 1 */
	unsigned depth;          /* batches prepared ahead; 0 = the daemon's default */
	const char *resume;      /* position token from ldr_position(), or NULL */
	const char *client_name; /* shown by `loaderctl status`, or NULL */
	/* NULL or "": host delivery. Else the GPU to deliver to: a CUDA device
	 * ordinal as this process sees it ("0", after CUDA_VISIBLE_DEVICES),
	 * or a UUID ("GPU-8d7f...", as nvidia-smi -L prints). The device's
	 * depth is capped by the daemon's device_slots. */
	const char *device;
	/* NULL or "": "train". A megatron pipeline with `split =` (docs/config.md)
	 * also has "valid" and "test": each split is a dataset of its own, with
	 * its own size, epochs and position tokens. Another name, or a split
	 * the pipeline does not have, is refused at attach. */
	const char *split;
	/* A group of clients that must all see the same batches, e.g. the
	 * tensor-parallel ranks of one data-parallel rank: group is a key the
	 * members share (a word of at most 63 bytes, unique to the job and the
	 * group, e.g. "job42-dp3"), group_size how many members it has (at most
	 * 64). rank and world are then the data-parallel rank and world: the
	 * group takes one share of the data, read once and delivered to every
	 * member. Members must agree on pipeline, split, rank, world, depth,
	 * delivery and resume token. group_size 0 or 1 means no group (group is
	 * then ignored). Delivery starts once all members have attached; when
	 * one leaves, the others get an error (docs/clients.md,
	 * "Tensor-parallel groups"). */
	const char *group;
	unsigned group_size;
	unsigned flags;          /* LDR_ATTACH_* bits; another bit is -EINVAL */
	/* A pipeline of the job's own instead of a configured one
	 * (docs/clients.md, "Declaring a pipeline"): the lines of a
	 * [pipeline.NAME] section, "key = value\n" each (the same keys and
	 * values as the daemon's config file), at most 4095 bytes. The daemon
	 * must allow it (job_roots). */
	const char *declaration;
	/* The job the declared pipeline is for: every rank of one job that
	 * declares the same pipeline shares it (and its sampler); another job
	 * gets its own. NULL: $TORCHELASTIC_RUN_ID, else $SLURM_JOB_ID
	 * (with $SLURM_STEP_ID), else, when world is 1, a key unique to this
	 * process; with world > 1 and none of these, ldr_attach refuses
	 * (EINVAL), asking for job. A word of at most 127 bytes. */
	const char *job;
};

struct ldr_tensor {
	char name[32];
	enum ldr_dtype dtype;
	unsigned ndim;
	int64_t shape[LDR_NDIM_MAX]; /* shape[0] == the batch's rows */
	const void *data;            /* read-only (unless LDR_ATTACH_WRITABLE); valid until
				      * the batch is released.
				      * A device pointer when the batch's on_device is set. */
	size_t bytes;                /* rows * bytes per row */
};

struct ldr_batch {
	uint64_t seq;     /* 0, 1, 2, ... since attach */
	uint64_t epoch;
	uint64_t index;   /* batch index within the epoch (since the resume point) */
	unsigned rows;    /* samples in this batch */
	int last_in_epoch;
	int on_device;    /* tensors are on the attached GPU (device delivery) */
	unsigned n_tensors;
	struct ldr_tensor tensors[LDR_TENSORS_MAX];
	/* private: identify the slot to the daemon */
	uint64_t priv_first;
	uint64_t priv_epoch_offset;
	uint32_t priv_slot;
	uint32_t priv_generation;
};

/* Connects to the daemon. socket_path NULL means $LOADERD_SOCKET, else the
 * daemon's default path. On failure *out is still a handle (for ldr_error)
 * unless -ENOMEM; close it with ldr_close. */
int ldr_connect(const char *socket_path, struct ldr_client **out);

/* How long ldr_attach waits for the daemon's answer: timeout_ms, or
 * (0) the default, 60 s, or (< 0) forever. A daemon still starting holds
 * a HELLO until it is up (docs/operations.md, "Start-up"): when the time
 * runs out first, ldr_attach fails with -ETIMEDOUT and ldr_error() says
 * what the daemon is doing ("daemon is starting: pipeline train: listing
 * /data/train: 1,200,000 files so far, 12.0 s; ..."). 0, or -EINVAL for
 * no handle. */
int ldr_set_attach_timeout(struct ldr_client *c, int timeout_ms);

/* Attaches to a pipeline (once per handle). -ENOENT unknown pipeline,
 * -EINVAL bad rank/world/token, -EPROTO protocol trouble; ldr_error() has
 * the daemon's reason. */
int ldr_attach(struct ldr_client *c, const struct ldr_attach_opts *opts);

/* Pipeline facts known after attach. */
uint64_t ldr_dataset_size(const struct ldr_client *c);
unsigned ldr_batch_size(const struct ldr_client *c);
/* Batches this rank receives in the epoch the stream is in now (the first
 * epoch after a mid-epoch resume is shorter). */
uint64_t ldr_batches_in_epoch(const struct ldr_client *c, uint64_t epoch);

/* Waits up to timeout_ms (-1 forever) for the next batch. 0, -ETIMEDOUT,
 * -EINTR (a signal arrived while waiting; nothing was consumed, call again),
 * -ECONNRESET (daemon gone), or the daemon's error (ldr_error() says why;
 * one with the code ETIMEDOUT or EINTR is -ECONNABORTED, since those two
 * mean "call again" here). The
 * client may hold at most `depth` unreleased batches; asking for one more
 * is -EBUSY. */
int ldr_next(struct ldr_client *c, struct ldr_batch *b, int timeout_ms);

/* Gives the batch's slot back. Releasing twice is -EINVAL. With
 * LDR_ATTACH_WRITABLE, what was written into the batch is dropped. With device
 * delivery this is ldr_release_stream(c, b, NULL): the slot is free once
 * the work enqueued on the legacy default stream before the call is done. */
int ldr_release(struct ldr_client *c, const struct ldr_batch *b);

/*
 * Device delivery only (-EINVAL otherwise). cuda_stream is a cudaStream_t
 * (CUstream) of the attached device's primary context; NULL is the legacy
 * default stream. Neither call blocks the host.
 *
 * ldr_stream_wait: work enqueued on cuda_stream after the call runs after
 * the daemon's copy of batch b has landed. Call it for every stream that
 * reads the batch: it costs a host query of the ready event, which has
 * completed by the time the daemon sends READY, and enqueues a GPU-side
 * wait only when it has not.
 *
 * ldr_release_stream: the slot of batch b becomes free for the daemon's
 * next copy once the work enqueued on cuda_stream before the call is done
 * (it records the slot's "released" event there, then sends RELEASE; with
 * that work already done, the stream idle, it sends RELEASE alone).
 * Work on other streams that reads the batch must be ordered before it
 * (e.g. with an event the caller records and makes cuda_stream wait on).
 */
int ldr_stream_wait(struct ldr_client *c, const struct ldr_batch *b, void *cuda_stream);
int ldr_release_stream(struct ldr_client *c, const struct ldr_batch *b, void *cuda_stream);

/* ldr_release_stream for a batch read on several streams (n >= 1): the
 * slot becomes free once the work enqueued on every one of them before the
 * call is done. Host delivery ignores the streams. */
int ldr_release_streams(struct ldr_client *c, const struct ldr_batch *b, void *const *cuda_streams,
			unsigned n);

/*
 * Copies tensor `tensor` of batch b (tensors[tensor].bytes bytes) into dst
 * in host memory and returns when the copy is done: for tools and tests
 * (loaderctl consume --dump), not for a training loop. Works in both
 * deliveries (a memcpy from shared memory in host delivery).
 */
int ldr_copy_to_host(struct ldr_client *c, const struct ldr_batch *b, unsigned tensor, void *dst);

/* Device delivery: blocks until the work ordered before every release so
 * far is done (e.g. to time a run). 0 at once for host delivery. */
int ldr_synchronize(struct ldr_client *c);

/* The UUID of the GPU batches are delivered to ("GPU-..."), or "" for host
 * delivery. */
const char *ldr_device_uuid(const struct ldr_client *c);

/* Dataset index of row `row` of batch b. */
uint64_t ldr_sample_index(const struct ldr_client *c, const struct ldr_batch *b, unsigned row);

/* The position after the last released batch, as a token for
 * ldr_attach_opts.resume. 0 or -ENOSPC. */
int ldr_position(const struct ldr_client *c, char *buf, size_t cap);

/* The position once held batch b (and every batch before it) is consumed,
 * whether or not it was released yet: what a checkpoint taken while b is
 * in use saves, so that resuming starts at the batch after b. 0, -EINVAL
 * (b not held), -ENOSPC. */
int ldr_position_after(struct ldr_client *c, const struct ldr_batch *b, char *buf, size_t cap);

/* A position token's fields. The token
 * ("ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET", and ":valid" or ":test" after
 * it for those splits) is what ldr_position() writes and
 * ldr_attach_opts.resume takes; a binding or tool that needs its fields
 * (the epoch a stream is in, a token for the start of another epoch)
 * reads and writes them with the two calls below instead of parsing the
 * text itself. PIPELINE and DATA name the stream: the daemon resumes a
 * token only on the pipeline of that name whose data identity (WELCOME's
 * `data`, proto/PROTOCOL.md 6.5) is still DATA. */
struct ldr_position {
	uint64_t seed;      /* the pipeline's seed: a token resumes only its own stream */
	uint64_t n_samples; /* the dataset's size when saved: a changed dataset is refused */
	uint64_t epoch;     /* below 2^32 in a well-formed token */
	uint64_t offset;    /* samples of `epoch` consumed by all ranks together, <= n_samples */
	uint32_t split;     /* 0 train, 1 valid, 2 test: the split of the stream */
	uint32_t reserved;  /* 0 */
	uint64_t data;      /* the pipeline's data identity when saved */
	char pipeline[64];  /* the pipeline's name, NUL-terminated */
};

/* Parses a token: 0, or -EINVAL for anything that is not exactly one
 * (PIPELINE a pipeline name, DATA 16 lower-case hex digits, every other
 * field decimal without sign or leading zero, EPOCH below 2^32, OFFSET at
 * most N, SPLIT, when there is one, "valid" or "test"), or
 * -EPROTONOSUPPORT for a token of the older format ("ldr1:...", which names
 * no pipeline); *out left alone and err (when not NULL) saying which field
 * is at fault and why, e.g. `EPOCH "x" is not a decimal number`. */
int ldr_position_parse(const char *token, struct ldr_position *out, char *err, size_t err_cap);

/* Writes p as a token into buf (LDR_POSITION_MAX bytes always suffice): 0,
 * -ENOSPC, or -EINVAL for a split other than 0, 1, 2 or a pipeline that is
 * not a pipeline name (buf then holds ""). The fields are written as they
 * are: whether the daemon resumes at the token is its call at attach. */
int ldr_position_format(const struct ldr_position *p, char *buf, size_t cap);

/* What a client has done so far: its data wait, and, when it decodes its
 * GPU's JPEGs itself (device delivery of an image pipeline whose GPU takes
 * JPEGs, with nvJPEG loadable here: docs/gpu-decoding.md), what that cost
 * this process. */
struct ldr_stats {
	uint64_t batches;        /* batches ldr_next handed out */
	uint64_t wait_ns;        /* time ldr_next waited, no batch being ready: the data wait */
	int decoding;            /* 1: this client decodes its GPU's JPEGs itself */
	char decode_why_not[256]; /* decoding 0 with device delivery: why not ("" otherwise) */
	uint64_t decoded_batches; /* batches with rows it decoded */
	uint64_t images_gpu;     /* images decoded on the GPU's hardware engines */
	uint64_t images_cpu;     /* refused by the engines: decoded on this process's CPU */
	uint64_t images_bad;     /* refused by both (on_error applied) */
	uint64_t submit_ns;      /* the decoding thread's host time submitting to nvJPEG */
	uint64_t thread_cpu_ns;  /* CPU time of the decoding thread (never the caller's) */
	/* Of wait_ns, the time ldr_next waited for this process's own
	 * decoding of a batch already sent by the daemon: */
	uint64_t decode_wait_ns; /* read by an earlier call: the engines behind */
	uint64_t decode_late_ns; /* sent while the caller was away and read at
				  * the call's start: its decoding began only
				  * then (the rest of wait_ns: the workers behind) */
};

/* Fills *out. 0, or -EINVAL when c is not attached. */
int ldr_get_stats(const struct ldr_client *c, struct ldr_stats *out);

/* sizeof(struct ldr_stats) as this library was built, for the binding's check. */
size_t ldr_sizeof_stats(void);

/* sizeof(struct ldr_batch) as this library was built: a binding that lays
 * the struct out itself (the Python package, through ctypes) checks its
 * layout against it. */
size_t ldr_sizeof_batch(void);

/* sizeof(struct ldr_position) as this library was built, for the same check. */
size_t ldr_sizeof_position(void);

/* Text of the last failure on this handle ("" if none). */
const char *ldr_error(const struct ldr_client *c);

/* Unmaps and closes (a group's member: waits, at most 5 s, until the
 * daemon has taken it out of its group, so that attaching again at once
 * joins a new group of the same key; device delivery: waits until the work the client
 * enqueued before releasing its batches is done, then closes the IPC
 * handles), then sends BYE and closes the connection. Batches still held
 * must not be in use on the GPU. Accepts NULL. */
void ldr_close(struct ldr_client *c);

/* Asks the daemon at socket_path (NULL: default) for its status text.
 * On success *text is malloc'ed and NUL-terminated; the caller frees it.
 * On failure, err (if not NULL) receives the reason. */
int ldr_status(const char *socket_path, char **text, char *err, size_t err_cap);

/* The same status as one JSON document (schema "loaderd.status/1",
 * docs/operations.md, "Status as JSON"), with every worker, pipeline and
 * client (the text cuts long lists; the JSON does not). *json is
 * malloc'ed and NUL-terminated; the caller frees it. A daemon older than
 * the JSON status refuses the request (err says so). */
int ldr_status_json(const char *socket_path, char **json, char *err, size_t err_cap);

/* Asks the daemon at socket_path (NULL: default) to reload its
 * configuration file (only root and the daemon's own user may). On
 * success *text (malloc'ed, the caller frees it) says what changed; on
 * failure, err receives why nothing did (the file's FILE:LINE error, or the
 * keys that take a restart) and the return value is -errno. */
int ldr_reload(const char *socket_path, char **text, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif
