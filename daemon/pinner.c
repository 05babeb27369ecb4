/* pinner: the pinning thread and every CUDA call of the daemon (pinner.h). */
#include "daemon/pinner.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "daemon/pinner_impl.h"
#include "daemon/status.h"

/* ---- start-up (pinning thread) ---- */

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

static void handle(struct pinner *p, struct msg *m)
{
	switch (m->kind) {
	case M_ATTACH:
		m->pc = pinner_client_attach(p, m);
		m->direct = m->pc && m->pc->direct;
		m->kind = R_ATTACHED;
		post_out(p, m);
		return;
	case M_COPY:
	case M_COPY_DIRECT:
		pinner_do_copy(p, m);
		return;
	case M_SLOT_FREE:
		pinner_slot_free(p, m);
		return;
	case M_RETIRE:
		pinner_client_retire(p, m);
		return;
	case M_DRAINED:
		pinner_client_drained(p, m);
		return;
	default:
		msg_free(m);
		return;
	}
}

static void shutdown_gpu(struct pinner *p)
{
	while (p->n_clients > 0) {
		struct pinner_client *pc = p->clients[0];
		cudaSetDevice(pc->dev);
		pinner_client_unblock(p, pc);
		pinner_client_sync(pc);
		pinner_client_free(p, pc);
	}
	/* Callbacks that ran during the synchronisations queued messages. */
	pthread_mutex_lock(&p->mu);
	msgs_free(msgq_take_all(&p->in));
	pthread_mutex_unlock(&p->mu);
	msgs_free(msgq_take_all(&p->copy_wait));
	for (int i = 0; i < p->n_gpus; i++)
		if (p->gpus[i].aux) {
			cudaSetDevice(i);
			cudaStreamDestroy(p->gpus[i].aux);
		}
	if (p->registered)
		cudaHostUnregister(p->registered);
	for (size_t i = 0; p->direct && i < p->n_sources; i++)
		direct_unregister(&p->direct[i]);
	direct_scratch_free(&p->scratch);
	for (uint32_t i = 0; p->pinned && i < p->cfg->pinned_slots; i++)
		if (p->pinned[i])
			cudaFreeHost(p->pinned[i]);
	if (p->cfg->pin == PIN_COPY && p->ok)
		team_stop(&p->team);
}

static void *pinner_main(void *arg)
{
	struct pinner *p = arg;
	/* Its timed waits (COPY_POLL_NS, 10 us) must not be stretched by the
	 * default 50 us of timer slack. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	struct msg *r = msg_new(R_STARTED);
	r->rc = find_gpus(p, r->text, sizeof(r->text));
	if (r->rc == 0 && p->n_gpus == 0) {
		r->rc = -ENODEV;
		snprintf(r->text, sizeof(r->text), "no GPU is visible (CUDA_VISIBLE_DEVICES?)");
	}
	if (r->rc == 0)
		r->rc = pin_memory(p, r->text, sizeof(r->text));
	if (r->rc == 0)
		register_direct(p);
	p->ok = r->rc == 0;
	if (p->ok)
		snprintf(r->text, sizeof(r->text), "%s", p->summary);
	else
		snprintf(p->summary, sizeof(p->summary), "%s", r->text);
	post_out(p, r);

	for (;;) {
		pthread_mutex_lock(&p->mu);
		if ((p->n_deferring > 0 || p->n_copying > 0) && !p->in.head && !p->stop) {
			uint64_t until = pinner_now_ns() + p->poll_ns;
			struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
					      .tv_nsec = (long)(until % 1000000000u)};
			pthread_cond_timedwait(&p->cv, &p->mu, &ts);
		}
		while (p->n_deferring == 0 && p->n_copying == 0 && !p->in.head && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		struct msg *m = msgq_take_all(&p->in);
		bool stop = p->stop;
		pthread_mutex_unlock(&p->mu);
		while (m) {
			struct msg *next = m->next;
			handle(p, m);
			m = next;
		}
		p->poll_ns = COPY_POLL_NS;
		if (p->n_copying > 0)
			pinner_poll_copies(p);
		if (p->n_deferring > 0)
			p->poll_ns = pinner_poll_deferred(p);
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
			a->attached(a->sched, m->tag, m->pc, m->rc, m->text, &m->dev, m->direct);
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
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_t ca; /* timed waits (deferred batches) on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
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

static void pinner_attach(struct pinner *p, struct sched_client *tag,
			  const uint8_t uuid[PROTO_UUID_BYTES], uint32_t pipeline, uint32_t slots,
			  uint64_t slot_bytes)
{
	struct msg *m = msg_new(M_ATTACH);
	m->tag = tag;
	m->pipeline = pipeline;
	memcpy(m->uuid, uuid, PROTO_UUID_BYTES);
	m->slots = slots;
	m->bytes = slot_bytes;
	post_in(p, m);
}

static void pinner_copy(struct pinner *p, struct pinner_client *pc, uint32_t d,
			uint32_t staging_slot, uint32_t staging_generation, uint64_t bytes)
{
	struct msg *m = msg_new(M_COPY);
	m->t_request = pinner_now_ns();
	m->pc = pc;
	m->tag = pc->tag;
	m->d = d;
	m->slot = staging_slot;
	m->generation = staging_generation;
	m->bytes = bytes;
	post_in(p, m);
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
	post_in(p, m);
}

static void pinner_retire(struct pinner *p, struct pinner_client *pc)
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
	msgs_free(msgq_take_all(&p->out));
	pthread_mutex_unlock(&p->out_mu);
	uv_close((uv_handle_t *)&p->async, NULL);
}

void pinner_free(struct pinner *p)
{
	if (!p)
		return;
	msgs_free(msgq_take_all(&p->in)); /* posted after the thread stopped */
	free(p->pinned);
	free(p->pinned_free);
	free(p->direct);
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

/* Mean of sum over n, in us; 0 for none. */
static double mean_us(const atomic_uint_least64_t *sum_ns, const atomic_uint_least64_t *n)
{
	uint64_t count = atomic_load(n);
	return count ? (double)atomic_load(sum_ns) / (double)count / 1e3 : 0.0;
}

static void pinner_describe_client(struct pinner_client *pc, struct status_text *t)
{
	status_printf(t, " gpu %s stream_depth %u bytes_moved %" PRIu64 " path %s queue_us %.1f "
		      "copy_us %.1f", pc->uuid, atomic_load(&pc->stream_depth),
		      (uint64_t)atomic_load(&pc->bytes_moved), pc->direct ? "direct" : "staging",
		      mean_us(&pc->queue_ns, &pc->n_issued), mean_us(&pc->copy_ns, &pc->n_copied));
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
