/* pinner: the pinning thread and every CUDA call of the daemon (pinner.h). */
#include "daemon/pinner.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpu_uuid.h"
#include "common/log.h"
#include "daemon/copyteam.h"
#include "daemon/status.h"

#define PINNER_DEVICES_MAX 16
#define RING_ALIGN (2u << 20)              /* device rings are rounded up to 2 MiB */
#define DEVICE_RESERVE_BYTES (256ull << 20) /* left free on a GPU for its users */
#define TEXT_MAX 512

_Static_assert(sizeof(cudaIpcMemHandle_t) == PROTO_IPC_HANDLE_BYTES, "IPC handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == PROTO_IPC_HANDLE_BYTES, "IPC event size");

struct gpu {
	char uuid[GPU_UUID_TEXT_MAX];
	uint8_t uuid_bytes[PROTO_UUID_BYTES];
	char name[256];
	cudaStream_t aux;         /* for unblocking records at retire; lazily created */
	atomic_uint clients;
	atomic_uint_least64_t device_bytes;
};

struct pinner_client {
	void *tag;
	int dev;
	char uuid[GPU_UUID_TEXT_MAX]; /* set before the attach answer: the loop may read it */
	uint32_t slots;
	uint64_t slot_bytes, ring_bytes;
	uint8_t *ring;
	cudaStream_t stream;
	cudaEvent_t ready[PROTO_DEVICE_SLOTS_MAX];
	cudaEvent_t released[PROTO_DEVICE_SLOTS_MAX];
	bool failed, retiring;
	atomic_uint stream_depth;        /* copies issued, not yet complete */
	atomic_uint_least64_t bytes_moved;
};

enum msg_kind {
	/* loop -> thread */
	M_ATTACH, M_COPY, M_RETIRE,
	/* CUDA host callbacks -> thread */
	M_SLOT_FREE,    /* copy mode: released[d] has fired, the pinned copy may start */
	M_COPY_DONE,    /* the H2D copy of a batch has completed */
	M_DRAINED,      /* a retiring client's stream has run dry */
	/* thread -> loop */
	R_STARTED, R_ATTACHED, R_ISSUED, R_STAGING_FREE, R_FAILED, R_RETIRED,
};

/* One message, reused along a batch's way (M_COPY -> M_SLOT_FREE -> ...). */
struct msg {
	struct msg *next;
	struct pinner *owner; /* for the CUDA host callback: whose queue */
	enum msg_kind kind;
	void *tag;
	struct pinner_client *pc;
	uint32_t d, slot, generation, slots;
	int pinned;  /* copy mode: pinned buffer index, -1 none */
	int rc;
	uint64_t bytes;
	uint8_t uuid[PROTO_UUID_BYTES];
	struct proto_device dev;
	char text[TEXT_MAX];
};

struct queue {
	struct msg *head, *tail;
};

struct pinner {
	uv_loop_t *loop;
	const struct config *cfg;
	struct arena *arena;
	struct pinner_ops ops;
	uv_async_t async;
	pthread_t thread;
	bool thread_started;
	bool loop_started, loop_ok; /* the loop thread's copy of the start-up result */
	char loop_summary[TEXT_MAX];

	/* loop and callbacks -> thread: `in`, under mu, signalled by cv */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct queue in;
	bool stop;
	/* thread -> loop: `out`, under out_mu, signalled by uv_async_send */
	pthread_mutex_t out_mu;
	struct queue out;

	/* everything below: the pinning thread only, except the atomics and
	 * what is set before `started` is posted (read by status afterwards) */
	int n_gpus;
	struct gpu gpus[PINNER_DEVICES_MAX];
	bool ok; /* start-up succeeded */
	char summary[TEXT_MAX];
	uint8_t *registered;      /* pin = register: the staging slots' range */
	size_t registered_bytes;
	uint8_t **pinned;         /* pin = copy */
	uint32_t n_pinned;
	uint64_t pinned_bytes;
	int *pinned_free;         /* stack of free buffer indexes */
	atomic_uint pinned_free_count;
	struct queue copy_wait;   /* M_SLOT_FREE waiting for a pinned buffer */
	struct team team;
	struct pinner_client **clients; /* live ones, for cleanup at stop */
	uint32_t n_clients, cap_clients;
};

static void queue_push(struct queue *q, struct msg *m)
{
	m->next = NULL;
	if (q->tail)
		q->tail->next = m;
	else
		q->head = m;
	q->tail = m;
}

static struct msg *queue_take_all(struct queue *q)
{
	struct msg *m = q->head;
	q->head = q->tail = NULL;
	return m;
}

static void msgs_free(struct msg *m)
{
	while (m) {
		struct msg *next = m->next;
		free(m);
		m = next;
	}
}

static struct msg *msg_new(enum msg_kind kind)
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

static void post_in(struct pinner *p, struct msg *m)
{
	pthread_mutex_lock(&p->mu);
	queue_push(&p->in, m);
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void post_out(struct pinner *p, struct msg *m)
{
	pthread_mutex_lock(&p->out_mu);
	queue_push(&p->out, m);
	pthread_mutex_unlock(&p->out_mu);
	uv_async_send(&p->async);
}

/* CUDA errors become text in exactly one place. */
static bool cuda_failed(cudaError_t e, char *text, size_t cap, const char *what)
{
	if (e == cudaSuccess)
		return false;
	snprintf(text, cap, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
	return true;
}

static int cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

/* ---- start-up (pinning thread) ---- */

static int find_gpus(struct pinner *p, char *text, size_t cap)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (cuda_failed(e, text, cap, "no usable GPU: cudaGetDeviceCount"))
		return cuda_errno(e);
	if (n > PINNER_DEVICES_MAX)
		n = PINNER_DEVICES_MAX;
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp prop;
		e = cudaGetDeviceProperties(&prop, i);
		if (cuda_failed(e, text, cap, "cudaGetDeviceProperties"))
			return cuda_errno(e);
		struct gpu *g = &p->gpus[i];
		memcpy(g->uuid_bytes, prop.uuid.bytes, PROTO_UUID_BYTES);
		gpu_uuid_format(g->uuid_bytes, g->uuid);
		snprintf(g->name, sizeof(g->name), "%s", prop.name);
	}
	p->n_gpus = n;
	return 0;
}

static int pin_memory(struct pinner *p, char *text, size_t cap)
{
	const struct arena *a = p->arena;
	uint64_t slot_bytes = a->hdr->slot_bytes;
	cudaError_t e;
	if (p->cfg->pin == PIN_REGISTER) {
		p->registered = a->base + arena_slot_offset(a, 0);
		p->registered_bytes = (size_t)slot_bytes * a->hdr->n_slots;
		e = cudaHostRegister(p->registered, p->registered_bytes, cudaHostRegisterPortable);
		if (e != cudaSuccess) {
			snprintf(text, cap, "pin = register: cudaHostRegister of the %u staging slots "
				 "(%zu bytes of shared memory): %s (is LimitMEMLOCK high enough?)",
				 a->hdr->n_slots, p->registered_bytes, cudaGetErrorString(e));
			p->registered = NULL;
			return cuda_errno(e);
		}
		snprintf(p->summary, sizeof(p->summary), "pin register, %u staging slots of %" PRIu64
			 " bytes", a->hdr->n_slots, slot_bytes);
		return 0;
	}
	uint32_t n = p->cfg->pinned_slots;
	p->pinned = calloc(n, sizeof(*p->pinned));
	p->pinned_free = calloc(n, sizeof(*p->pinned_free));
	if (!p->pinned || !p->pinned_free) {
		snprintf(text, cap, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		void *buf;
		e = cudaHostAlloc(&buf, slot_bytes, cudaHostAllocPortable);
		if (e != cudaSuccess) {
			snprintf(text, cap, "pin = copy: cudaHostAlloc of pinned buffer %u of %u (%" PRIu64
				 " bytes each; pinned_slots x the largest batch): %s", i + 1, n, slot_bytes,
				 cudaGetErrorString(e));
			return cuda_errno(e);
		}
		p->pinned[i] = buf;
		p->pinned_free[p->n_pinned++] = (int)i;
	}
	atomic_store(&p->pinned_free_count, n);
	p->pinned_bytes = slot_bytes;
	int rc = team_start(&p->team, p->cfg->pin_threads);
	if (rc < 0) {
		snprintf(text, cap, "out of memory");
		return rc;
	}
	snprintf(p->summary, sizeof(p->summary), "pin copy, %u pinned buffers of %" PRIu64
		 " bytes, %u copy threads", n, slot_bytes, p->team.n + 1);
	return 0;
}

/* ---- per client (pinning thread) ---- */

static void client_free(struct pinner *p, struct pinner_client *pc)
{
	cudaSetDevice(pc->dev);
	for (uint32_t d = 0; d < pc->slots; d++) {
		if (pc->ready[d])
			cudaEventDestroy(pc->ready[d]);
		if (pc->released[d])
			cudaEventDestroy(pc->released[d]);
	}
	if (pc->stream)
		cudaStreamDestroy(pc->stream);
	if (pc->ring) {
		cudaFree(pc->ring);
		atomic_fetch_sub(&p->gpus[pc->dev].clients, 1);
		atomic_fetch_sub(&p->gpus[pc->dev].device_bytes, pc->ring_bytes);
	}
	for (uint32_t i = 0; i < p->n_clients; i++) {
		if (p->clients[i] == pc) {
			p->clients[i] = p->clients[--p->n_clients];
			break;
		}
	}
	free(pc);
}

static struct pinner_client *do_attach(struct pinner *p, struct msg *m)
{
	char uuid[GPU_UUID_TEXT_MAX];
	gpu_uuid_format(m->uuid, uuid);
	if (!p->ok) {
		m->rc = -EOPNOTSUPP;
		snprintf(m->text, sizeof(m->text), "GPU delivery is not available: %.400s", p->summary);
		return NULL;
	}
	int dev = -1;
	for (int i = 0; i < p->n_gpus; i++)
		if (memcmp(p->gpus[i].uuid_bytes, m->uuid, PROTO_UUID_BYTES) == 0)
			dev = i;
	if (dev < 0) {
		int len = snprintf(m->text, sizeof(m->text), "no GPU with UUID %s is visible to loaderd "
				   "(it sees", uuid);
		for (int i = 0; i < p->n_gpus && len < (int)sizeof(m->text); i++)
			len += snprintf(m->text + len, sizeof(m->text) - (size_t)len, " %s", p->gpus[i].uuid);
		if (len < (int)sizeof(m->text))
			snprintf(m->text + len, sizeof(m->text) - (size_t)len, "%s)",
				 p->n_gpus ? "" : " none");
		m->rc = -ENODEV;
		return NULL;
	}
	struct pinner_client *pc = calloc(1, sizeof(*pc));
	struct pinner_client **grown = p->n_clients < p->cap_clients ? p->clients :
		realloc(p->clients, (p->cap_clients * 2 + 8) * sizeof(*grown));
	if (!pc || !grown) {
		free(pc);
		m->rc = -ENOMEM;
		snprintf(m->text, sizeof(m->text), "out of memory");
		return NULL;
	}
	if (grown != p->clients) {
		p->clients = grown;
		p->cap_clients = p->cap_clients * 2 + 8;
	}
	p->clients[p->n_clients++] = pc;
	pc->tag = m->tag;
	pc->dev = dev;
	memcpy(pc->uuid, p->gpus[dev].uuid, sizeof(pc->uuid));
	pc->slots = m->slots;
	pc->slot_bytes = m->bytes;
	pc->ring_bytes = (m->slots * m->bytes + RING_ALIGN - 1) & ~(uint64_t)(RING_ALIGN - 1);
	char what[160];
	cudaError_t e = cudaSetDevice(dev);
	size_t free_bytes = 0, total_bytes = 0;
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&free_bytes, &total_bytes);
	if (cuda_failed(e, m->text, sizeof(m->text), "cudaMemGetInfo"))
		goto fail;
	if (pc->ring_bytes + DEVICE_RESERVE_BYTES > free_bytes) {
		e = cudaErrorMemoryAllocation;
		snprintf(m->text, sizeof(m->text), "not enough free device memory on GPU %s: a ring of "
			 "%u slots x %" PRIu64 " bytes needs %" PRIu64 " bytes (plus %llu MiB kept free), "
			 "%zu bytes are free", uuid, pc->slots, pc->slot_bytes, pc->ring_bytes,
			 DEVICE_RESERVE_BYTES >> 20, free_bytes);
		goto fail;
	}
	e = cudaMalloc((void **)&pc->ring, pc->ring_bytes);
	snprintf(what, sizeof(what), "cudaMalloc of a %" PRIu64 " byte ring on GPU %s", pc->ring_bytes, uuid);
	if (cuda_failed(e, m->text, sizeof(m->text), what)) {
		pc->ring = NULL;
		goto fail;
	}
	atomic_fetch_add(&p->gpus[dev].clients, 1);
	atomic_fetch_add(&p->gpus[dev].device_bytes, pc->ring_bytes);
	struct proto_device *x = &m->dev;
	memset(x, 0, sizeof(*x));
	x->slots = pc->slots;
	x->slot_bytes = pc->slot_bytes;
	x->ring_bytes = pc->ring_bytes;
	e = cudaIpcGetMemHandle((cudaIpcMemHandle_t *)x->mem_handle, pc->ring);
	if (cuda_failed(e, m->text, sizeof(m->text), "cudaIpcGetMemHandle"))
		goto fail;
	e = cudaStreamCreateWithFlags(&pc->stream, cudaStreamNonBlocking);
	if (cuda_failed(e, m->text, sizeof(m->text), "cudaStreamCreateWithFlags"))
		goto fail;
	for (uint32_t d = 0; d < pc->slots; d++) {
		unsigned flags = cudaEventInterprocess | cudaEventDisableTiming;
		e = cudaEventCreateWithFlags(&pc->ready[d], flags);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&pc->released[d], flags);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle((cudaIpcEventHandle_t *)x->ready[d], pc->ready[d]);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle((cudaIpcEventHandle_t *)x->released[d], pc->released[d]);
		if (cuda_failed(e, m->text, sizeof(m->text), "creating and exporting the ring's events"))
			goto fail;
	}
	m->rc = 0;
	return pc;
fail:
	m->rc = cuda_errno(e);
	client_free(p, pc);
	return NULL;
}

static void client_fail(struct pinner *p, struct pinner_client *pc, const char *text)
{
	if (pc->failed)
		return;
	pc->failed = true;
	struct msg *r = msg_new(R_FAILED);
	r->tag = pc->tag;
	snprintf(r->text, sizeof(r->text), "GPU %s: %s", p->gpus[pc->dev].uuid, text);
	post_out(p, r);
}

/* Runs on a CUDA thread: only queues (no CUDA call is allowed here). */
static void CUDART_CB on_stream_point(void *arg)
{
	struct msg *m = arg;
	post_in(m->owner, m);
}

/* Queues a host callback at this point of pc's stream, reporting `kind`
 * with m. */
static cudaError_t stream_point(struct pinner *p, struct pinner_client *pc, struct msg *m,
				enum msg_kind kind)
{
	m->kind = kind;
	m->pc = pc;
	m->tag = pc->tag;
	m->owner = p;
	return cudaLaunchHostFunc(pc->stream, on_stream_point, m);
}

static void staging_free(struct pinner *p, struct msg *m)
{
	struct msg *r = msg_new(R_STAGING_FREE);
	r->slot = m->slot;
	r->generation = m->generation;
	post_out(p, r);
}

static void issued(struct pinner *p, struct msg *m)
{
	struct msg *r = msg_new(R_ISSUED);
	r->tag = m->pc->tag;
	r->d = m->d;
	post_out(p, r);
}

/* Copy done or abandoned: the staging slot goes back (register mode) and
 * the message is finished. */
static void batch_end(struct pinner *p, struct msg *m)
{
	staging_free(p, m);
	free(m);
}

/* Enqueues H2D into device slot d from src, records ready[d] and a
 * completion callback, then reports the batch issued. On failure the
 * client is failed and the message is the caller's again. */
static bool enqueue_copy(struct pinner *p, struct msg *m, const void *src)
{
	struct pinner_client *pc = m->pc;
	char text[TEXT_MAX];
	const char *what = "cudaMemcpyAsync into the device ring";
	cudaError_t e = cudaMemcpyAsync(pc->ring + (uint64_t)m->d * pc->slot_bytes, src, m->bytes,
					cudaMemcpyHostToDevice, pc->stream);
	if (e == cudaSuccess) {
		what = "cudaEventRecord of the ready event";
		e = cudaEventRecord(pc->ready[m->d], pc->stream);
	}
	if (e == cudaSuccess) {
		atomic_fetch_add(&pc->stream_depth, 1);
		issued(p, m);
		what = "cudaLaunchHostFunc";
		e = stream_point(p, pc, m, M_COPY_DONE);
		if (e == cudaSuccess)
			return true;
		atomic_fetch_sub(&pc->stream_depth, 1);
	}
	cuda_failed(e, text, sizeof(text), what);
	client_fail(p, pc, text);
	cudaStreamSynchronize(pc->stream); /* nothing may still read the source */
	return false;
}

/* pin = copy: runs the batches whose device slot is free, while pinned
 * buffers last, in arrival order. */
static void run_copies(struct pinner *p)
{
	while (p->copy_wait.head && p->n_pinned > 0) {
		struct msg *m = p->copy_wait.head;
		p->copy_wait.head = m->next;
		if (!p->copy_wait.head)
			p->copy_wait.tail = NULL;
		struct pinner_client *pc = m->pc;
		if (pc->failed || pc->retiring) {
			batch_end(p, m);
			continue;
		}
		int k = p->pinned_free[--p->n_pinned];
		atomic_fetch_sub(&p->pinned_free_count, 1);
		m->pinned = k;
		team_copy(&p->team, p->pinned[k], p->arena->base + arena_slot_offset(p->arena, m->slot),
			  m->bytes);
		staging_free(p, m);
		if (!enqueue_copy(p, m, p->pinned[k])) {
			p->pinned_free[p->n_pinned++] = k;
			atomic_fetch_add(&p->pinned_free_count, 1);
			free(m);
		}
	}
}

static void do_copy(struct pinner *p, struct msg *m)
{
	struct pinner_client *pc = m->pc;
	char text[TEXT_MAX];
	if (pc->failed) {
		batch_end(p, m);
		return;
	}
	cudaSetDevice(pc->dev);
	cudaError_t e = cudaStreamWaitEvent(pc->stream, pc->released[m->d], 0);
	if (cuda_failed(e, text, sizeof(text), "cudaStreamWaitEvent on the released event")) {
		client_fail(p, pc, text);
		batch_end(p, m);
		return;
	}
	if (p->cfg->pin == PIN_COPY) {
		e = stream_point(p, pc, m, M_SLOT_FREE);
		if (cuda_failed(e, text, sizeof(text), "cudaLaunchHostFunc")) {
			client_fail(p, pc, text);
			batch_end(p, m);
		}
		return;
	}
	if (!enqueue_copy(p, m, p->arena->base + arena_slot_offset(p->arena, m->slot)))
		batch_end(p, m);
}

static void copy_done(struct pinner *p, struct msg *m)
{
	struct pinner_client *pc = m->pc;
	atomic_fetch_sub(&pc->stream_depth, 1);
	atomic_fetch_add(&pc->bytes_moved, m->bytes);
	if (m->pinned >= 0) {
		p->pinned_free[p->n_pinned++] = m->pinned;
		atomic_fetch_add(&p->pinned_free_count, 1);
		free(m); /* the staging slot went back after the host copy */
		run_copies(p);
		return;
	}
	batch_end(p, m);
}

/* The device's spare stream, made on first use. */
static cudaError_t aux_stream(struct pinner *p, int dev)
{
	struct gpu *g = &p->gpus[dev];
	return g->aux ? cudaSuccess : cudaStreamCreateWithFlags(&g->aux, cudaStreamNonBlocking);
}

static void do_retire(struct pinner *p, struct msg *m)
{
	struct pinner_client *pc = m->pc;
	char text[TEXT_MAX];
	pc->retiring = true;
	cudaSetDevice(pc->dev);
	/* A client that died between recording released[d] and that record
	 * running leaves our stream waiting for it forever. Recording each
	 * released event here, on a stream with nothing queued, completes
	 * them: a wait is satisfied by the completion of a later record. */
	struct gpu *g = &p->gpus[pc->dev];
	cudaError_t e = aux_stream(p, pc->dev);
	for (uint32_t d = 0; d < pc->slots && e == cudaSuccess; d++)
		e = cudaEventRecord(pc->released[d], g->aux);
	if (e == cudaSuccess)
		e = stream_point(p, pc, m, M_DRAINED);
	if (cuda_failed(e, text, sizeof(text), "retiring a client's ring")) {
		/* Without the callback, wait here: the stream must be empty before
		 * its ring is freed. */
		log_warning("GPU %s: %s; synchronising its stream", g->uuid, text);
		cudaStreamSynchronize(pc->stream);
		m->kind = M_DRAINED;
		m->tag = pc->tag;
		post_in(p, m);
	}
}

/* Gives back the staging slots of pc's batches still waiting for a
 * pinned buffer. */
static void purge_copy_wait(struct pinner *p, struct pinner_client *pc)
{
	struct msg *m = queue_take_all(&p->copy_wait), *next;
	for (; m; m = next) {
		next = m->next;
		if (m->pc == pc)
			batch_end(p, m);
		else
			queue_push(&p->copy_wait, m);
	}
}

static void drained(struct pinner *p, struct msg *m)
{
	void *tag = m->pc->tag;
	purge_copy_wait(p, m->pc);
	client_free(p, m->pc);
	m->kind = R_RETIRED;
	m->tag = tag;
	m->pc = NULL;
	post_out(p, m);
}

static void handle(struct pinner *p, struct msg *m)
{
	switch (m->kind) {
	case M_ATTACH:
		m->pc = do_attach(p, m);
		m->kind = R_ATTACHED;
		post_out(p, m);
		return;
	case M_COPY:
		do_copy(p, m);
		return;
	case M_SLOT_FREE:
		queue_push(&p->copy_wait, m);
		run_copies(p);
		return;
	case M_COPY_DONE:
		copy_done(p, m);
		return;
	case M_RETIRE:
		do_retire(p, m);
		return;
	case M_DRAINED:
		drained(p, m);
		return;
	default:
		free(m);
		return;
	}
}

static void shutdown_gpu(struct pinner *p)
{
	while (p->n_clients > 0) {
		struct pinner_client *pc = p->clients[0];
		cudaSetDevice(pc->dev);
		for (uint32_t d = 0; d < pc->slots && aux_stream(p, pc->dev) == cudaSuccess; d++)
			cudaEventRecord(pc->released[d], p->gpus[pc->dev].aux);
		cudaStreamSynchronize(pc->stream);
		client_free(p, pc);
	}
	/* Callbacks that ran during the synchronisations queued messages. */
	pthread_mutex_lock(&p->mu);
	msgs_free(queue_take_all(&p->in));
	pthread_mutex_unlock(&p->mu);
	msgs_free(queue_take_all(&p->copy_wait));
	for (int i = 0; i < p->n_gpus; i++)
		if (p->gpus[i].aux) {
			cudaSetDevice(i);
			cudaStreamDestroy(p->gpus[i].aux);
		}
	if (p->registered)
		cudaHostUnregister(p->registered);
	for (uint32_t i = 0; p->pinned && i < p->cfg->pinned_slots; i++)
		if (p->pinned[i])
			cudaFreeHost(p->pinned[i]);
	if (p->cfg->pin == PIN_COPY && p->ok)
		team_stop(&p->team);
}

static void *pinner_main(void *arg)
{
	struct pinner *p = arg;
	struct msg *r = msg_new(R_STARTED);
	r->rc = find_gpus(p, r->text, sizeof(r->text));
	if (r->rc == 0 && p->n_gpus == 0) {
		r->rc = -ENODEV;
		snprintf(r->text, sizeof(r->text), "no GPU is visible (CUDA_VISIBLE_DEVICES?)");
	}
	if (r->rc == 0)
		r->rc = pin_memory(p, r->text, sizeof(r->text));
	p->ok = r->rc == 0;
	if (p->ok)
		snprintf(r->text, sizeof(r->text), "%s", p->summary);
	else
		snprintf(p->summary, sizeof(p->summary), "%s", r->text);
	post_out(p, r);

	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->in.head && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		struct msg *m = queue_take_all(&p->in);
		bool stop = p->stop;
		pthread_mutex_unlock(&p->mu);
		while (m) {
			struct msg *next = m->next;
			handle(p, m);
			m = next;
		}
		if (stop)
			break;
	}
	shutdown_gpu(p);
	return NULL;
}

/* ---- loop side ---- */

static void on_async(uv_async_t *h)
{
	struct pinner *p = h->data;
	pthread_mutex_lock(&p->out_mu);
	struct msg *m = queue_take_all(&p->out);
	pthread_mutex_unlock(&p->out_mu);
	while (m) {
		struct msg *next = m->next;
		const struct pinner_ops *o = &p->ops;
		switch (m->kind) {
		case R_STARTED:
			p->loop_started = true;
			p->loop_ok = m->rc == 0;
			snprintf(p->loop_summary, sizeof(p->loop_summary), "%s", m->text);
			o->started(o->ctx, m->rc, m->text);
			break;
		case R_ATTACHED: o->attached(o->ctx, m->tag, m->pc, m->rc, m->text, &m->dev); break;
		case R_ISSUED: o->issued(o->ctx, m->tag, m->d); break;
		case R_STAGING_FREE: o->staging_free(o->ctx, m->slot, m->generation); break;
		case R_FAILED: o->failed(o->ctx, m->tag, m->text); break;
		case R_RETIRED: o->retired(o->ctx, m->tag); break;
		default: break;
		}
		free(m);
		m = next;
	}
}

int pinner_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
		 const struct pinner_ops *ops, struct pinner **out)
{
	struct pinner *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = cfg;
	p->arena = arena;
	p->ops = *ops;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	pthread_mutex_init(&p->out_mu, NULL);
	snprintf(p->summary, sizeof(p->summary), "starting");
	int rc = uv_async_init(loop, &p->async, on_async);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->async.data = p;
	rc = -pthread_create(&p->thread, NULL, pinner_main, p);
	if (rc < 0) {
		uv_close((uv_handle_t *)&p->async, NULL);
		*out = p; /* freed by pinner_free after the close callback */
		return rc;
	}
	pthread_setname_np(p->thread, "loaderd-pinner");
	p->thread_started = true;
	*out = p;
	return 0;
}

void pinner_attach(struct pinner *p, void *tag, const uint8_t uuid[PROTO_UUID_BYTES],
		   uint32_t slots, uint64_t slot_bytes)
{
	struct msg *m = msg_new(M_ATTACH);
	m->tag = tag;
	memcpy(m->uuid, uuid, PROTO_UUID_BYTES);
	m->slots = slots;
	m->bytes = slot_bytes;
	post_in(p, m);
}

void pinner_copy(struct pinner *p, struct pinner_client *pc, uint32_t d, uint32_t staging_slot,
		 uint32_t staging_generation, uint64_t bytes)
{
	struct msg *m = msg_new(M_COPY);
	m->pc = pc;
	m->tag = pc->tag;
	m->d = d;
	m->slot = staging_slot;
	m->generation = staging_generation;
	m->bytes = bytes;
	post_in(p, m);
}

void pinner_retire(struct pinner *p, struct pinner_client *pc)
{
	struct msg *m = msg_new(M_RETIRE);
	m->pc = pc;
	m->tag = pc->tag;
	post_in(p, m);
}

void pinner_stop(struct pinner *p)
{
	if (!p || !p->thread_started)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	p->thread_started = false;
	pthread_mutex_lock(&p->out_mu);
	msgs_free(queue_take_all(&p->out));
	pthread_mutex_unlock(&p->out_mu);
	uv_close((uv_handle_t *)&p->async, NULL);
}

void pinner_free(struct pinner *p)
{
	if (!p)
		return;
	msgs_free(queue_take_all(&p->in)); /* posted after the thread stopped */
	free(p->pinned);
	free(p->pinned_free);
	free(p->clients);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->out_mu);
	free(p);
}

void pinner_describe(struct pinner *p, struct status_text *t)
{
	if (!p->loop_started || !p->loop_ok) {
		if (p->loop_started)
			status_printf(t, "delivery: host (GPU unavailable: %s)\n", p->loop_summary);
		else
			status_printf(t, "delivery: host (GPU starting)\n");
		status_printf(t, "gpus: 0\n");
		return;
	}
	status_printf(t, "delivery: host, device (%s", p->loop_summary);
	if (p->cfg->pin == PIN_COPY)
		status_printf(t, ", %u free", atomic_load(&p->pinned_free_count));
	status_printf(t, ")\n");
	status_printf(t, "gpus: %d\n", p->n_gpus);
	for (int i = 0; i < p->n_gpus; i++) {
		struct gpu *g = &p->gpus[i];
		status_printf(t, "  gpu %d uuid %s name \"%s\" clients %u device_bytes %" PRIu64 "\n", i,
			      g->uuid, g->name, atomic_load(&g->clients),
			      (uint64_t)atomic_load(&g->device_bytes));
	}
}

void pinner_describe_client(struct pinner_client *pc, struct status_text *t)
{
	status_printf(t, " gpu %s stream_depth %u bytes_moved %" PRIu64, pc->uuid,
		      atomic_load(&pc->stream_depth), (uint64_t)atomic_load(&pc->bytes_moved));
}

void pinner_print_system(FILE *out)
{
	int runtime = 0, driver = 0, n = 0;
	cudaRuntimeGetVersion(&runtime);
	cudaError_t e = cudaDriverGetVersion(&driver);
	fprintf(out, "cuda: runtime %d.%d, ", runtime / 1000, runtime % 1000 / 10);
	if (e != cudaSuccess || driver == 0) {
		fprintf(out, "driver unavailable (%s)\n",
			e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA driver is installed");
		fprintf(out, "gpus: 0\n");
		return;
	}
	fprintf(out, "driver %d.%d\n", driver / 1000, driver % 1000 / 10);
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		fprintf(out, "gpus: 0 (%s)\n", cudaGetErrorString(e));
		return;
	}
	fprintf(out, "gpus: %d\n", n);
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp prop;
		char uuid[GPU_UUID_TEXT_MAX];
		if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
			continue;
		gpu_uuid_format((const uint8_t *)prop.uuid.bytes, uuid);
		fprintf(out, "  gpu %d %s \"%s\" memory %zu compute %d.%d\n", i, uuid, prop.name,
			prop.totalGlobalMem, prop.major, prop.minor);
	}
}
