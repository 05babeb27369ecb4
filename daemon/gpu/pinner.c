/* SPDX-License-Identifier: Apache-2.0 */
/* pinner: the GPU threads and every CUDA call of the daemon (pinner.h). */
#include "daemon/gpu/pinner.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "daemon/gpu/pinner_impl.h"
#include "daemon/core/status.h"

/* ---- start-up (the first GPU thread, before it serves GPU 0) ---- */

static int find_gpus(struct pinner *p, char *text, size_t cap)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (cudaerr_failed(e, text, cap, "no usable GPU: cudaGetDeviceCount"))
		return cudaerr_errno(e);
	if (n > PINNER_DEVICES_MAX)
		n = PINNER_DEVICES_MAX;
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp prop;
		e = cudaGetDeviceProperties(&prop, i);
		if (cudaerr_failed(e, text, cap, "cudaGetDeviceProperties"))
			return cudaerr_errno(e);
		struct gpu *g = &p->gpus[i];
		memcpy(g->uuid_bytes, prop.uuid.bytes, PROTO_UUID_BYTES);
		gpu_uuid_format(g->uuid_bytes, g->uuid);
		snprintf(g->name, sizeof(g->name), "%s", prop.name);
		int mps = 0;
		g->mps = cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, i) == cudaSuccess && mps;
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
			char why[256];
			snprintf(text, cap, "pin = register: cudaHostRegister of the %u staging slots "
				 "(%zu bytes of shared memory): %s (is LimitMEMLOCK high enough?)",
				 a->hdr->n_slots, p->registered_bytes, cudaerr_text(e, why, sizeof(why)));
			p->registered = NULL;
			return cudaerr_errno(e);
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
			char why[256];
			snprintf(text, cap, "pin = copy: cudaHostAlloc of pinned buffer %u of %u (%" PRIu64
				 " bytes each; pinned_slots x the largest batch): %s", i + 1, n, slot_bytes,
				 cudaerr_text(e, why, sizeof(why)));
			return cudaerr_errno(e);
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

/* Registers the file of every pipeline with direct = on. A refusal is
 * logged, and that pipeline's device clients go through staging. */
static void register_direct(struct pinner *p)
{
	p->direct = calloc(p->n_sources, sizeof(*p->direct));
	for (size_t i = 0; p->direct && i < p->n_sources; i++) {
		const struct source *src = &p->sources[i];
		if (!src->cfg->direct)
			continue;
		if (direct_register(&p->direct[i], src))
			log_notice("pipeline \"%s\": direct device delivery from %s (%" PRIu64 " bytes "
				   "locked in memory)", src->cfg->name, src->cfg->path, p->direct[i].bytes);
		else
			log_warning("%s; its device clients go through staging", p->direct[i].why);
	}
}

/* Loads nvJPEG when a pipeline may decode on the GPU. Without it, those
 * pipelines' images are decoded by the workers (decode = auto) or their
 * device clients refused (decode = gpu), with this reason. */
static void load_nvjpeg(struct pinner *p)
{
	if (p->lanes_per_gpu == p->gpu_threads) /* no pipeline decodes on the GPU */
		return;
	const char *path = p->cfg->nvjpeg_library[0] ? p->cfg->nvjpeg_library : NULL;
	char why[TEXT_MAX];
	int rc = nvjd_load(path, why, sizeof(why));
	if (rc == 0) {
		p->nvjd_loaded = true;
		return;
	}
	snprintf(p->nvjd_why, sizeof(p->nvjd_why), "nvJPEG unavailable: %.400s", why);
	log_warning("GPU JPEG decoding is unavailable (%s): image pipelines decode on the CPU "
		    "(decode = auto) or refuse device clients (decode = gpu)", why);
}

/* ---- a lane: one GPU's thread ---- */

static void attach(struct lane *l, struct msg *m)
{
	struct lane *to = pinner_attach_lane(l->p, m);
	if (to && to != l) { /* arrived during start-up: the GPU's own lane makes it */
		post_in(to, m);
		return;
	}
	m->pc = to ? pinner_client_attach(l, m) : NULL;
	m->direct = m->pc && m->pc->direct;
	m->decode = m->pc && m->pc->decode;
	m->kind = R_ATTACHED;
	post_out(l->p, m);
}

static void handle(struct lane *l, struct msg *m)
{
	switch (m->kind) {
	case M_ATTACH:
		attach(l, m);
		return;
	case M_COPY:
	case M_COPY_DIRECT:
		pinner_do_copy(l, m);
		return;
	case M_SLOT_FREE:
		pinner_slot_free(l, m);
		return;
	case M_RETIRE:
		pinner_client_retire(l, m);
		return;
	case M_DRAINED:
		pinner_client_drained(l, m);
		return;
	default:
		msg_free(m);
		return;
	}
}

/* Serves the lane's requests until it is stopped. While copies are in
 * flight or batches deferred it wakes every poll_ns to look at them. */
static void lane_run(struct lane *l)
{
	for (;;) {
		pthread_mutex_lock(&l->mu);
		bool idle = !l->in.head && !l->stop && !l->pinned_back;
		if ((l->n_deferring > 0 || l->n_copying > 0) && idle) {
			uint64_t until = pinner_now_ns() + l->poll_ns;
			struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
					      .tv_nsec = (long)(until % 1000000000u)};
			pthread_cond_timedwait(&l->cv, &l->mu, &ts);
		}
		while (l->n_deferring == 0 && l->n_copying == 0 && !l->in.head && !l->stop &&
		       !l->pinned_back)
			pthread_cond_wait(&l->cv, &l->mu);
		struct msg *m = msgq_take_all(&l->in);
		bool stop = l->stop, pinned_back = l->pinned_back;
		l->pinned_back = false;
		pthread_mutex_unlock(&l->mu);
		while (m) {
			struct msg *next = m->next;
			handle(l, m);
			m = next;
		}
		if (pinned_back)
			pinner_run_copies(l);
		if (l->n_copying > 0)
			pinner_poll_copies(l);
		uint64_t poll_ns = COPY_POLL_NS;
		if (l->n_deferring > 0) {
			uint64_t deferred_ns = pinner_poll_deferred(l);
			/* the shorter interval while both wait */
			if (l->n_copying == 0 || deferred_ns < poll_ns)
				poll_ns = deferred_ns;
		}
		l->poll_ns = poll_ns;
		if (stop)
			break;
	}
}

/* Frees every CUDA resource of the lane's clients. */
static void lane_shutdown(struct lane *l)
{
	while (l->n_clients > 0) {
		struct pinner_client *pc = l->clients[0];
		pinner_client_unblock(l, pc);
		pinner_client_sync(pc);
		pinner_client_free(l, pc);
	}
	/* Callbacks that ran during the synchronisations queued messages. */
	pthread_mutex_lock(&l->mu);
	msgs_free(msgq_take_all(&l->in));
	pthread_mutex_unlock(&l->mu);
	msgs_free(msgq_take_all(&l->copy_wait));
	if (l->aux)
		cudaStreamDestroy(l->aux);
	direct_scratch_free(&l->scratch);
	pinner_decode_close(l);
}

static void *lane_main(void *arg)
{
	struct lane *l = arg;
	/* Its timed waits (COPY_POLL_NS, 10 us) must not be stretched by the
	 * default 50 us of timer slack. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	cudaSetDevice(l->dev);
	lane_run(l);
	lane_shutdown(l);
	return NULL;
}

/* Starts every lane but the first (the start-up thread), unless the
 * pinner is stopping. */
static void start_lanes(struct pinner *p)
{
	pthread_mutex_lock(&p->lanes_mu);
	for (int i = 1; i < p->n_gpus * p->lanes_per_gpu && !p->stop; i++) {
		struct lane *l = &p->lanes[i];
		l->running = true;
		int rc = pthread_create(&l->thread, NULL, lane_main, l);
		if (rc != 0) {
			/* Attaches go to the GPU's other lanes, or are refused
			 * (pinner_attach_lane). */
			l->running = false;
			log_error("GPU %s: cannot start thread %s: %s", p->gpus[l->dev].uuid, l->name,
				  strerror(rc));
			continue;
		}
		pthread_setname_np(l->thread, l->name);
		l->thread_started = true;
		p->n_lanes_started = i + 1;
	}
	pthread_mutex_unlock(&p->lanes_mu);
}

static void shutdown_shared(struct pinner *p)
{
	if (p->registered)
		cudaHostUnregister(p->registered);
	for (size_t i = 0; p->direct && i < p->n_sources; i++)
		direct_unregister(&p->direct[i]);
	for (uint32_t i = 0; p->pinned && i < p->cfg->pinned_slots; i++)
		if (p->pinned[i])
			cudaFreeHost(p->pinned[i]);
	if (p->cfg->pin == PIN_COPY && p->ok)
		team_stop(&p->team);
}

/* The first GPU thread: finds the GPUs, pins memory, starts the other
 * lanes, then serves GPU 0 (or, with no GPU, answers attaches with why). */
static void *pinner_main(void *arg)
{
	struct pinner *p = arg;
	struct lane *l0 = &p->lanes[0];
	prctl(PR_SET_TIMERSLACK, 1000UL);
	struct msg *r = msg_new(R_STARTED);
	r->rc = find_gpus(p, r->text, sizeof(r->text));
	if (r->rc == 0 && p->n_gpus == 0) {
		r->rc = -ENODEV;
		snprintf(r->text, sizeof(r->text), "no GPU is visible (CUDA_VISIBLE_DEVICES?)");
	}
	if (r->rc == 0)
		r->rc = pin_memory(p, r->text, sizeof(r->text));
	if (r->rc == 0) {
		register_direct(p);
		load_nvjpeg(p);
	}
	p->ok = r->rc == 0;
	l0->running = true;
	if (p->ok) {
		snprintf(r->text, sizeof(r->text), "%s", p->summary);
		cudaSetDevice(0);
		start_lanes(p);
	} else {
		snprintf(p->summary, sizeof(p->summary), "%s", r->text);
	}
	post_out(p, r);

	lane_run(l0);
	lane_shutdown(l0);
	for (int i = 1; i < PINNER_LANES_MAX; i++)
		if (p->lanes[i].thread_started)
			pthread_join(p->lanes[i].thread, NULL);
	shutdown_shared(p);
	return NULL;
}

/* ---- loop side ---- */

static void on_async(uv_async_t *h)
{
	struct pinner *p = h->data;
	pthread_mutex_lock(&p->out_mu);
	struct msg *m = msgq_take_all(&p->out);
	pthread_mutex_unlock(&p->out_mu);
	while (m) {
		struct msg *next = m->next;
		const struct gpu_answers *a = &p->answers;
		switch (m->kind) {
		case R_STARTED:
			p->loop_started = true;
			p->loop_ok = m->rc == 0;
			snprintf(p->loop_summary, sizeof(p->loop_summary), "%s", m->text);
			p->started(p->started_ctx, m->rc, m->text);
			break;
		case R_ATTACHED:
			a->attached(a->sched, m->tag, m->pc, m->rc, m->text, &m->dev, m->direct,
				    m->decode);
			break;
		case R_LANDED: a->landed(a->sched, m->tag, m->d); break;
		case R_STAGING_FREE: a->staging_free(a->sched, m->slot, m->generation); break;
		case R_FAILED: a->failed(a->sched, m->tag, m->text); break;
		case R_RETIRED: a->retired(a->sched, m->tag); break;
		default: assert(!"a message the loop does not take"); break;
		}
		free(m);
		m = next;
	}
}

int pinner_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
		 const struct source *sources, size_t n_sources, const struct gpu_answers *answers,
		 void (*started)(void *ctx, int rc, const char *text), void *ctx,
		 struct pinner **out)
{
	struct pinner *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = cfg;
	p->arena = arena;
	p->sources = sources;
	p->n_sources = n_sources;
	p->answers = *answers;
	p->started = started;
	p->started_ctx = ctx;
	pthread_condattr_t ca; /* timed waits (copies, deferred batches) on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	p->gpu_threads = (int)cfg->gpu_threads;
	p->lanes_per_gpu = p->gpu_threads;
	for (size_t i = 0; i < n_sources; i++)
		if (pinner_decodes(&sources[i]))
			p->lanes_per_gpu = p->gpu_threads + 1;
	for (int i = 0; i < PINNER_LANES_MAX; i++) {
		struct lane *l = &p->lanes[i];
		int k = i % p->lanes_per_gpu;
		l->p = p;
		l->index = i;
		l->dev = i / p->lanes_per_gpu;
		l->poll_ns = COPY_POLL_NS;
		if (k == p->gpu_threads)
			snprintf(l->name, sizeof(l->name), "loaderd-dec%d", l->dev);
		else if (k == 0)
			snprintf(l->name, sizeof(l->name), "loaderd-gpu%d", l->dev);
		else
			snprintf(l->name, sizeof(l->name), "loaderd-gpu%d.%d", l->dev, k);
		pthread_mutex_init(&l->mu, NULL);
		pthread_cond_init(&l->cv, &ca);
	}
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&p->out_mu, NULL);
	pthread_mutex_init(&p->lanes_mu, NULL);
	pthread_mutex_init(&p->pinned_mu, NULL);
	pthread_mutex_init(&p->team_mu, NULL);
	p->n_lanes_started = 1;
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
	pthread_setname_np(p->thread, p->lanes[0].name);
	p->thread_started = true;
	*out = p;
	return 0;
}

static void pinner_attach(struct pinner *p, struct sched_client *tag,
			  const uint8_t uuid[PROTO_UUID_BYTES], uint32_t pipeline, uint32_t slots,
			  uint64_t slot_bytes, bool client_decodes)
{
	struct msg *m = msg_new(M_ATTACH);
	m->tag = tag;
	m->pipeline = pipeline;
	m->client_decodes = client_decodes;
	memcpy(m->uuid, uuid, PROTO_UUID_BYTES);
	m->slots = slots;
	m->bytes = slot_bytes;
	/* The GPU's lane, when the GPUs are known; else the first, which
	 * passes it on once they are. */
	struct lane *l = &p->lanes[0];
	for (int i = 0; p->loop_ok && i < p->n_gpus; i++)
		if (memcmp(p->gpus[i].uuid_bytes, uuid, PROTO_UUID_BYTES) == 0)
			l = &p->lanes[i * p->lanes_per_gpu];
	post_in(l, m);
}

static void pinner_copy(struct pinner *p, struct pinner_client *pc, uint32_t d,
			uint32_t staging_slot, uint32_t staging_generation, uint64_t bytes,
			uint32_t rows)
{
	struct msg *m = msg_new(M_COPY);
	m->rows = rows;
	m->t_request = pinner_now_ns();
	m->pc = pc;
	m->tag = pc->tag;
	m->d = d;
	m->slot = staging_slot;
	m->generation = staging_generation;
	m->bytes = bytes;
	post_in(pc->lane, m);
}

static void pinner_copy_direct(struct pinner *p, struct pinner_client *pc, uint32_t d,
			       uint64_t *offsets, uint32_t rows)
{
	struct msg *m = msg_new(M_COPY_DIRECT);
	m->t_request = pinner_now_ns();
	m->pc = pc;
	m->tag = pc->tag;
	m->d = d;
	m->slot = NO_STAGING;
	m->offsets = offsets;
	m->rows = rows;
	m->bytes = (uint64_t)rows * pc->direct->src->row_bytes[0];
	post_in(pc->lane, m);
}

static void pinner_retire(struct pinner *p, struct pinner_client *pc)
{
	struct msg *m = msg_new(M_RETIRE);
	m->pc = pc;
	m->tag = pc->tag;
	post_in(pc->lane, m);
}

void pinner_stop(struct pinner *p)
{
	if (!p || !p->thread_started)
		return;
	pthread_mutex_lock(&p->lanes_mu);
	p->stop = true;
	int n = p->n_lanes_started;
	pthread_mutex_unlock(&p->lanes_mu);
	for (int i = 0; i < n; i++) {
		struct lane *l = &p->lanes[i];
		pthread_mutex_lock(&l->mu);
		l->stop = true;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
	}
	pthread_join(p->thread, NULL); /* it joins the other lanes */
	p->thread_started = false;
	pthread_mutex_lock(&p->out_mu);
	msgs_free(msgq_take_all(&p->out));
	pthread_mutex_unlock(&p->out_mu);
	uv_close((uv_handle_t *)&p->async, NULL);
}

void pinner_free(struct pinner *p)
{
	if (!p)
		return;
	for (int i = 0; i < PINNER_LANES_MAX; i++) {
		struct lane *l = &p->lanes[i];
		msgs_free(msgq_take_all(&l->in)); /* posted after the thread stopped */
		free(l->clients);
		pthread_mutex_destroy(&l->mu);
		pthread_cond_destroy(&l->cv);
	}
	free(p->pinned);
	free(p->pinned_free);
	free(p->direct);
	for (size_t i = 0; i < ARENA_PIPELINES_MAX; i++)
		free(p->decode_bad_seen[i]);
	pthread_mutex_destroy(&p->out_mu);
	pthread_mutex_destroy(&p->lanes_mu);
	pthread_mutex_destroy(&p->pinned_mu);
	pthread_mutex_destroy(&p->team_mu);
	free(p);
}


void pinner_print_system(FILE *out)
{
	int runtime = 0, driver = 0, n = 0;
	cudaRuntimeGetVersion(&runtime);
	cudaError_t e = cudaDriverGetVersion(&driver);
	fprintf(out, "cuda: runtime %d.%d, ", runtime / 1000, runtime % 1000 / 10);
	char why[256];
	if (e != cudaSuccess || driver == 0) {
		fprintf(out, "driver unavailable (%s)\n",
			e != cudaSuccess ? cudaerr_text(e, why, sizeof(why)) : "no CUDA driver is installed");
		fprintf(out, "gpus: 0\n");
		return;
	}
	fprintf(out, "driver %d.%d\n", driver / 1000, driver % 1000 / 10);
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		fprintf(out, "gpus: 0 (%s)\n", cudaerr_text(e, why, sizeof(why)));
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

struct gpu_requests pinner_requests(struct pinner *p)
{
	return (struct gpu_requests){
		.gpu = p, .attach = pinner_attach, .copy = pinner_copy,
		.copy_direct = pinner_copy_direct, .retire = pinner_retire,
		.describe_client = pinner_describe_client,
	};
}
