/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinner_impl.h: the GPU threads' internals, shared by pinner.c (start-up,
 * the threads and the loop side), pinner_client.c (attach, retire),
 * pinner_batch.c (one batch's way to the GPU), pinner_decode.c and
 * pinner_dechelp.c (GPU decoding). Nothing else includes it; README.md
 * says which of them calls which (top to bottom, no circle).
 *
 * struct pinner is what every GPU thread shares: the GPUs found, the
 * page-locked memory, the registered files, the queue of answers to the
 * loop. struct lane is one GPU's thread and everything only it touches:
 * its request queue, its clients, their batches in flight.
 */
#ifndef LDR_DAEMON_PINNER_IMPL_H
#define LDR_DAEMON_PINNER_IMPL_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/gpu_uuid.h"
#include "common/log.h"
#include "daemon/gpu/copyteam.h"
#include "common/cudaerr.h"
#include "daemon/gpu/direct.h"
#include "gpudecode/nvjd.h"
#include "daemon/gpu/pinner.h"

#define PINNER_DEVICES_MAX 16
/* gpu_threads per GPU, and one more for clients whose images it decodes */
#define PINNER_LANES_MAX (PINNER_DEVICES_MAX * (CONFIG_GPU_THREADS_MAX + 1))
#define RING_ALIGN (2u << 20)              /* device rings are rounded up to 2 MiB */
#define DEVICE_RESERVE_BYTES (256ull << 20) /* left free on a GPU for its users */
#define TEXT_MAX 512
#define NO_STAGING UINT32_MAX             /* a direct batch holds no staging slot */
/* How often a GPU thread looks for landed copies while some are in
 * flight: a batch's READY waits at most this long after its copy. */
#define COPY_POLL_NS 10000

_Static_assert(sizeof(cudaIpcMemHandle_t) == PROTO_IPC_HANDLE_BYTES, "IPC handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == PROTO_IPC_HANDLE_BYTES, "IPC event size");

struct lane_decode; /* dechelp.h */

struct gpu {
	char uuid[GPU_UUID_TEXT_MAX];
	uint8_t uuid_bytes[PROTO_UUID_BYTES];
	char name[256];
	bool mps;       /* its contexts are shared through MPS (cudaDevAttrMpsEnabled) */
	atomic_uint clients;
	atomic_uint_least64_t device_bytes; /* the clients' rings */
	atomic_uint_least64_t decode_bytes; /* the JPEG decoder's buffers (gpu_decode_memory) */
	atomic_uint decoders; /* its JPEG decoder processes running (gpu_decode_helpers) */
	/* JPEG decoding: its engines, once a lane opened a decoder; why not,
	 * once one could not (under the pinner's lanes_mu) */
	atomic_uint decode_engines;
	char decode_why[TEXT_MAX];
};

/* Images of one pipeline on one GPU's clients, by where they were decoded. */
struct decode_count {
	atomic_uint_least64_t gpu;      /* on the GPU's engines */
	atomic_uint_least64_t cpu;      /* by the workers (the GPU does not take them) */
	atomic_uint_least64_t fallback; /* on the GPU thread's CPU: the engines refused them */
	atomic_uint_least64_t bad;      /* refused by the CPU decoder too (on_error applied) */
	/* the decoding thread's time (pinner_decode.c): parts submitted, host
	 * time queueing them on the engines, and waiting for a buffer set */
	atomic_uint_least64_t parts, submit_ns, wait_ns;
};

struct msgq {
	struct msg *head, *tail;
};

struct pinner_client {
	struct sched_client *tag; /* the scheduler's client: named in every answer */
	struct lane *lane;        /* its GPU's thread: every request about it goes there */
	int dev;
	uint32_t pipeline;
	bool decode;              /* its GPU decodes its images (pinner_decode.c) */
	char uuid[GPU_UUID_TEXT_MAX]; /* set before the attach answer: the loop may read it */
	uint32_t slots;
	uint64_t slot_bytes, ring_bytes;
	uint8_t *ring;
	cudaStream_t stream;
	/* Host callbacks (copy mode's slot free, retire's drain) run on
	 * `done`, which waits for the event they follow: a host function on
	 * `stream` itself would stall the next copy until it has run (54.5 ->
	 * 42.0 GB/s, loaderd-bus-probe at 16 MiB batches). */
	cudaStream_t done;
	cudaEvent_t tail; /* retire: the end of `stream` */
	cudaEvent_t ready[PROTO_DEVICE_SLOTS_MAX];
	cudaEvent_t released[PROTO_DEVICE_SLOTS_MAX];
	/* Recorded behind each copy, like ready[d], but local to this process:
	 * the GPU thread queries it to learn that the copy has landed (a
	 * host query, where a host callback behind a GPU-side wait on the
	 * interprocess event cost a batch 250 us and more). */
	cudaEvent_t copied[PROTO_DEVICE_SLOTS_MAX];
	struct msgq inflight;            /* copies issued, in order, not yet seen landed */
	const struct direct_source *direct; /* its pipeline's file, when registered */
	bool failed, retiring;
	struct msgq deferred;           /* batches waiting for released[d], in order */
	uint32_t slot_free_pending;      /* copy mode: M_SLOT_FREE callbacks not yet run */
	uint64_t deferred_since;         /* when the head was deferred, ns */
	atomic_uint stream_depth;        /* copies issued, not yet complete */
	atomic_uint_least64_t bytes_moved;
	/* stage figures (status): request -> copy issued, issued -> complete */
	atomic_uint_least64_t queue_ns, copy_ns, n_issued, n_copied;
};

enum msg_kind {
	/* loop -> thread */
	M_ATTACH, M_COPY, M_COPY_DIRECT, M_RETIRE,
	/* CUDA host callbacks -> thread */
	M_SLOT_FREE,    /* copy mode: released[d] has fired, the pinned copy may start */
	M_COPYING,      /* issued, on pc->inflight until seen landed (pinner_poll_copies) */
	M_DRAINED,      /* a retiring client's stream has run dry */
	/* thread -> loop */
	R_STARTED, R_ATTACHED, R_LANDED, R_STAGING_FREE, R_FAILED, R_RETIRED,
};

/* One message, reused along a batch's way (M_COPY -> M_SLOT_FREE -> ...). */
struct msg {
	struct msg *next;
	struct lane *owner; /* for the CUDA host callback: whose queue */
	enum msg_kind kind;
	struct sched_client *tag;
	struct pinner_client *pc;
	uint32_t d, slot, generation, slots;
	uint32_t pipeline;  /* M_ATTACH */
	bool direct;        /* R_ATTACHED: batches come from the registered file */
	bool decode;        /* R_ATTACHED: its GPU decodes images (pinner_decode.c) */
	bool client_decodes; /* M_ATTACH: the client decodes them itself: copies only */
	uint64_t *offsets;  /* M_COPY_DIRECT: each sample's file offset, `rows` of them */
	uint32_t rows;
	uint64_t t_request, t_issue; /* M_COPY, M_COPY_DIRECT: when asked, when issued (ns) */
	int pinned;  /* copy mode: pinned buffer index, -1 none */
	int rc;
	uint64_t bytes;
	uint8_t uuid[PROTO_UUID_BYTES];
	struct proto_device dev;
	char text[TEXT_MAX];
};

/* A GPU thread: it alone calls CUDA for its clients. A GPU has
 * lanes_per_gpu of them (lanes dev * lanes_per_gpu ...): gpu_threads, of
 * which a client is given the one with the fewest clients at attach, and,
 * where a pipeline may decode JPEGs on the GPU, one more for the clients
 * whose images it decodes (a decoding batch holds its thread for
 * milliseconds; raw and token clients must not wait behind it). */
struct lane {
	struct pinner *p;
	int index, dev;
	pthread_t thread;
	bool thread_started; /* lanes after the first: pthread_create succeeded */
	bool running;        /* serving requests (set before the start-up answer) */
	char name[24];       /* the thread's (at most 15 bytes: loaderd-gpu15.3) */
	atomic_uint attached; /* its clients, for the choice at attach */
	/* loop, callbacks and other lanes -> this thread: under mu, signalled by cv */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct msgq in;
	bool stop;
	bool pinned_back; /* pin = copy: a buffer came back while this lane waited for one */
	bool pinned_waiting; /* pin = copy: it found no free buffer (under the pinner's pinned_mu) */

	/* everything below: this lane's thread only */
	cudaStream_t aux;         /* for unblocking records at retire; lazily created */
	struct msgq copy_wait;    /* M_SLOT_FREE waiting for a pinned buffer */
	uint32_t n_deferring;     /* clients with deferred batches */
	uint32_t n_copying;       /* copies issued and not yet seen landed, all clients */
	uint64_t poll_ns;         /* retry interval for them */
	struct direct_scratch scratch;
	struct pinner_client **clients; /* live ones, for polling and cleanup at stop */
	uint32_t n_clients, cap_clients;
	struct lane_decode *decode; /* its JPEG decoder, from the first decoding client */
	bool decode_refused;        /* no decoder: said once */
};

struct pinner {
	uv_loop_t *loop;
	const struct config *cfg;
	struct arena *arena;
	const struct source *sources;
	size_t n_sources;
	struct gpu_answers answers;
	void (*started)(void *ctx, int rc, const char *text);
	void *started_ctx;
	uv_async_t async;
	pthread_t thread;         /* start-up, then lane 0 */
	bool thread_started;
	bool loop_started, loop_ok; /* the loop thread's copy of the start-up result */
	char loop_summary[TEXT_MAX];

	/* thread -> loop: `out`, under out_mu, signalled by uv_async_send */
	pthread_mutex_t out_mu;
	struct msgq out;

	/* lane 0 exists from the start (it takes requests that arrive during
	 * start-up); the others are started once the GPUs are known. Under
	 * lanes_mu: n_lanes_started and stop, so that a stop during start-up
	 * starts no more lanes. */
	pthread_mutex_t lanes_mu;
	bool stop;
	int n_lanes_started;
	int gpu_threads;          /* lanes per GPU for clients whose images it does not decode */
	int lanes_per_gpu;        /* gpu_threads, and one for decoding clients where a pipeline may */
	struct lane lanes[PINNER_LANES_MAX];

	/* set by the start-up thread before `started` is posted, read-only after */
	int n_gpus;
	struct gpu gpus[PINNER_DEVICES_MAX];
	bool ok; /* start-up succeeded */
	char summary[TEXT_MAX];
	uint8_t *registered;      /* pin = register: the staging slots' range */
	size_t registered_bytes;
	struct direct_source *direct; /* one per source; .ok where registered */
	bool nvjd_loaded;         /* nvJPEG (gpudecode/nvjd.h) loaded, for GPU decoding */
	char nvjd_why[TEXT_MAX];  /* why not */
	struct decode_count decode_counts[ARENA_PIPELINES_MAX][PINNER_DEVICES_MAX];
	/* a bit per sample of each pipeline, under lanes_mu: the bad images
	 * the GPU threads have logged (pinner_decode.c) */
	uint8_t *decode_bad_seen[ARENA_PIPELINES_MAX];

	/* pin = copy: the pinned buffers, shared by the lanes, under pinned_mu */
	uint8_t **pinned;
	uint32_t n_pinned;        /* free ones, on pinned_free */
	uint64_t pinned_bytes;
	int *pinned_free;         /* stack of free buffer indexes */
	pthread_mutex_t pinned_mu;
	atomic_uint pinned_free_count;
	struct team team;         /* used by one lane at a time, under team_mu */
	pthread_mutex_t team_mu;
};

static inline void msgq_push(struct msgq *q, struct msg *m)
{
	m->next = NULL;
	if (q->tail)
		q->tail->next = m;
	else
		q->head = m;
	q->tail = m;
}

static inline struct msg *msgq_take_all(struct msgq *q)
{
	struct msg *m = q->head;
	q->head = q->tail = NULL;
	return m;
}

static inline void msg_free(struct msg *m)
{
	free(m->offsets);
	free(m);
}

static inline void msgs_free(struct msg *m)
{
	while (m) {
		struct msg *next = m->next;
		msg_free(m);
		m = next;
	}
}

static inline struct msg *msg_new(enum msg_kind kind)
{
	struct msg *m = calloc(1, sizeof(*m));
	if (!m) {
		log_error("pinner: out of memory");
		abort(); /* a lost message would leak a staging slot or hang a client */
	}
	m->kind = kind;
	m->pinned = -1;
	return m;
}

static inline void post_in(struct lane *l, struct msg *m)
{
	pthread_mutex_lock(&l->mu);
	msgq_push(&l->in, m);
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

static inline void post_out(struct pinner *p, struct msg *m)
{
	pthread_mutex_lock(&p->out_mu);
	msgq_push(&p->out, m);
	pthread_mutex_unlock(&p->out_mu);
	uv_async_send(&p->async);
}

static inline void client_fail(struct pinner *p, struct pinner_client *pc, const char *text)
{
	if (pc->failed)
		return;
	pc->failed = true;
	struct msg *r = msg_new(R_FAILED);
	r->tag = pc->tag;
	snprintf(r->text, sizeof(r->text), "GPU %s: %.440s", p->gpus[pc->dev].uuid, text);
	post_out(p, r);
}

/* ---- a client's resources (pinner_client.c), on its lane's thread ---- */

/* M_ATTACH on the lane of the client's GPU: makes and exports the client's
 * ring, streams and events; NULL (with m->rc and m->text) when that
 * failed. */
struct pinner_client *pinner_client_attach(struct lane *l, struct msg *m);
/* The lane of the GPU with m->uuid; NULL (with m->rc and m->text) when
 * GPU delivery is unavailable or no such GPU is visible. */
struct lane *pinner_attach_lane(struct pinner *p, struct msg *m);
/* M_RETIRE: drains the client's stream, then frees it (M_DRAINED). */
void pinner_client_retire(struct lane *l, struct msg *m);
void pinner_client_drained(struct lane *l, struct msg *m);
/* Frees every resource of pc and pc itself. */
void pinner_client_free(struct lane *l, struct pinner_client *pc);
/* Completes every released event of pc (a dead client may have left one
 * recorded but never run), so nothing on pc's stream waits forever. */
cudaError_t pinner_client_unblock(struct lane *l, struct pinner_client *pc);

/* ---- GPU decoding (pinner_decode.c, through gpudecode/), on the lane's thread ---- */

/* Whether a pipeline's device clients may have their JPEGs decoded on the
 * GPU: its samples are JPEGs (whatever kind of source lists them) and its
 * decode is not cpu. */
static inline bool pinner_decodes(const struct source *src)
{
	/* a pipeline added while running decodes in the workers: the GPU's
	 * decoding was sized at start for the pipelines there were */
	return src->desc.kind == ARENA_SOURCE_IMAGES && !src->added && src->cfg->decode != DECODE_CPU;
}

/* At attach: whether pc's images are decoded on its GPU (pc->decode), the
 * lane's decoder opened on first use. false (m->rc, m->text) when the
 * pipeline has decode = gpu and the GPU cannot. */
bool pinner_decode_attach(struct lane *l, struct pinner_client *pc, struct msg *m);
/* The images of m's batch the workers left to the GPU, decoded into device
 * slot dst on the client's stream, behind what is queued there; false
 * (text) when the client's batch cannot be made. */
bool pinner_decode_batch(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap);
/* Frees the lane's decoder, at shutdown. */
void pinner_decode_close(struct lane *l);

/* ---- the batch path (pinner_batch.c), on the lane's thread ---- */

/* Queues a host callback reporting `kind` with m (pinner_batch.c). */
cudaError_t pinner_stream_point(struct lane *l, struct pinner_client *pc, struct msg *m,
				enum msg_kind kind, cudaEvent_t after);
/* Waits until nothing is queued on either of pc's streams. */
void pinner_client_sync(struct pinner_client *pc);
/* M_COPY, M_COPY_DIRECT: starts the batch, or defers it until its slot is free. */
void pinner_do_copy(struct lane *l, struct msg *m);
/* M_SLOT_FREE: copy mode, the slot is free on the GPU. */
void pinner_slot_free(struct lane *l, struct msg *m);
/* pin = copy: starts the batches waiting for a pinned buffer, while
 * buffers last (another lane gave one back: lane.pinned_back). */
void pinner_run_copies(struct lane *l);
/* Finishes every copy that has landed, in order per client: READY (the
 * batch is on the GPU), the staging slot back. Called while n_copying > 0. */
void pinner_poll_copies(struct lane *l);
/* Retries deferred batches; called while n_deferring > 0, again after the
 * interval (ns) it returns. */
uint64_t pinner_poll_deferred(struct lane *l);
uint64_t pinner_now_ns(void);
/* Retire and shutdown: give back the staging slots of pc's batches that
 * wait for a pinned buffer or for their slot. */
void pinner_drop_waiting(struct lane *l, struct pinner_client *pc);

/* pinner_status.c: a device client's part of its status line (the
 * scheduler's describe_client). */
struct status_text;
void pinner_describe_client(struct pinner_client *pc, struct status_text *t);

#endif
