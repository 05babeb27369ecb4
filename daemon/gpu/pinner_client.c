/* SPDX-License-Identifier: Apache-2.0 */
/* pinner_client: a device client's resources on its GPU's thread: its
 * ring, streams and interprocess events, made and exported at attach,
 * freed at retire once its stream has drained (pinner.h). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "daemon/gpu/pinner_impl.h"

void pinner_client_free(struct lane *l, struct pinner_client *pc)
{
	struct pinner *p = l->p;
	pinner_drop_waiting(l, pc);
	for (uint32_t d = 0; d < pc->slots; d++) {
		if (pc->ready[d])
			cudaEventDestroy(pc->ready[d]);
		if (pc->released[d])
			cudaEventDestroy(pc->released[d]);
		if (pc->copied[d])
			cudaEventDestroy(pc->copied[d]);
	}
	if (pc->stream)
		cudaStreamDestroy(pc->stream);
	if (pc->done)
		cudaStreamDestroy(pc->done);
	if (pc->tail)
		cudaEventDestroy(pc->tail);
	if (pc->ring) {
		cudaFree(pc->ring);
		atomic_fetch_sub(&p->gpus[pc->dev].clients, 1);
		atomic_fetch_sub(&p->gpus[pc->dev].device_bytes, pc->ring_bytes);
	}
	for (uint32_t i = 0; i < l->n_clients; i++) {
		if (l->clients[i] == pc) {
			l->clients[i] = l->clients[--l->n_clients];
			atomic_fetch_sub(&l->attached, 1);
			break;
		}
	}
	free(pc);
}

struct lane *pinner_attach_lane(struct pinner *p, struct msg *m)
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
	/* A decoding client: the GPU's decoding lane; another: the least busy
	 * of the others. */
	bool decoding = m->pipeline < p->n_sources && p->lanes_per_gpu > p->gpu_threads &&
			!m->client_decodes && pinner_decodes(&p->sources[m->pipeline]);
	int first = decoding ? p->gpu_threads : 0, end = decoding ? p->lanes_per_gpu : p->gpu_threads;
	struct lane *best = NULL;
	for (int k = first; k < end; k++) {
		struct lane *l = &p->lanes[dev * p->lanes_per_gpu + k];
		if (l->running && (!best || atomic_load(&l->attached) < atomic_load(&best->attached)))
			best = l;
	}
	if (!best) {
		m->rc = -EAGAIN;
		snprintf(m->text, sizeof(m->text), "GPU %s has no running thread in loaderd (see its "
			 "log)", uuid);
	}
	return best;
}

struct pinner_client *pinner_client_attach(struct lane *l, struct msg *m)
{
	struct pinner *p = l->p;
	int dev = l->dev;
	char uuid[GPU_UUID_TEXT_MAX];
	gpu_uuid_format(m->uuid, uuid);
	struct pinner_client *pc = calloc(1, sizeof(*pc));
	struct pinner_client **grown = l->n_clients < l->cap_clients ? l->clients :
		realloc(l->clients, (l->cap_clients * 2 + 8) * sizeof(*grown));
	if (!pc || !grown) {
		free(pc);
		m->rc = -ENOMEM;
		snprintf(m->text, sizeof(m->text), "out of memory");
		return NULL;
	}
	if (grown != l->clients) {
		l->clients = grown;
		l->cap_clients = l->cap_clients * 2 + 8;
	}
	l->clients[l->n_clients++] = pc;
	atomic_fetch_add(&l->attached, 1);
	pc->tag = m->tag;
	pc->lane = l;
	pc->dev = dev;
	pc->pipeline = m->pipeline;
	if (p->direct && m->pipeline < p->n_sources && p->direct[m->pipeline].ok &&
	    !p->sources[m->pipeline].added) /* an entry a reload filled again */
		pc->direct = &p->direct[m->pipeline];
	memcpy(pc->uuid, p->gpus[dev].uuid, sizeof(pc->uuid));
	pc->slots = m->slots;
	pc->slot_bytes = m->bytes;
	pc->ring_bytes = (m->slots * m->bytes + RING_ALIGN - 1) & ~(uint64_t)(RING_ALIGN - 1);
	char what[160];
	size_t free_bytes = 0, total_bytes = 0;
	cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
	if (cudaerr_failed(e, m->text, sizeof(m->text), "cudaMemGetInfo"))
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
	if (cudaerr_failed(e, m->text, sizeof(m->text), what)) {
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
	if (cudaerr_failed(e, m->text, sizeof(m->text), "cudaIpcGetMemHandle"))
		goto fail;
	e = cudaStreamCreateWithFlags(&pc->stream, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&pc->done, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&pc->tail, cudaEventDisableTiming);
	if (cudaerr_failed(e, m->text, sizeof(m->text), "creating the client's streams"))
		goto fail;
	for (uint32_t d = 0; d < pc->slots; d++) {
		unsigned flags = cudaEventInterprocess | cudaEventDisableTiming;
		e = cudaEventCreateWithFlags(&pc->ready[d], flags);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&pc->released[d], flags);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&pc->copied[d], cudaEventDisableTiming);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle((cudaIpcEventHandle_t *)x->ready[d], pc->ready[d]);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle((cudaIpcEventHandle_t *)x->released[d], pc->released[d]);
		if (cudaerr_failed(e, m->text, sizeof(m->text), "creating and exporting the ring's events"))
			goto fail;
	}
	if (!m->client_decodes && !pinner_decode_attach(l, pc, m)) {
		pinner_client_free(l, pc);
		return NULL;
	}
	m->rc = 0;
	return pc;
fail:
	m->rc = cudaerr_errno(e);
	pinner_client_free(l, pc);
	return NULL;
}

/* A client that died between recording released[d] and that record
 * running leaves our stream waiting for it forever. Recording each
 * released event again, on the device's spare stream (made on first use,
 * with nothing queued), completes them: a wait is satisfied by the
 * completion of a later record. */
cudaError_t pinner_client_unblock(struct lane *l, struct pinner_client *pc)
{
	cudaError_t e = l->aux ? cudaSuccess : cudaStreamCreateWithFlags(&l->aux,
									 cudaStreamNonBlocking);
	for (uint32_t d = 0; d < pc->slots && e == cudaSuccess; d++)
		e = cudaEventRecord(pc->released[d], l->aux);
	return e;
}

void pinner_client_retire(struct lane *l, struct msg *m)
{
	struct pinner_client *pc = m->pc;
	char text[TEXT_MAX];
	pc->retiring = true;
	struct gpu *g = &l->p->gpus[pc->dev];
	cudaError_t e = pinner_client_unblock(l, pc);
	if (e == cudaSuccess)
		e = cudaEventRecord(pc->tail, pc->stream);
	if (e == cudaSuccess)
		e = pinner_stream_point(l, pc, m, M_DRAINED, pc->tail);
	if (cudaerr_failed(e, text, sizeof(text), "retiring a client's ring")) {
		/* Without the callback, wait here: the stream must be empty before
		 * its ring is freed. */
		log_warning("GPU %s: %s; synchronising its streams", g->uuid, text);
		pinner_client_sync(pc);
		m->kind = M_DRAINED;
		m->tag = pc->tag;
		post_in(l, m);
	}
}

void pinner_client_drained(struct lane *l, struct msg *m)
{
	struct sched_client *tag = m->pc->tag;
	pinner_client_free(l, m->pc);
	m->kind = R_RETIRED;
	m->tag = tag;
	m->pc = NULL;
	post_out(l->p, m);
}

