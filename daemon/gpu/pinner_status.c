/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinner_status: the GPU lines of the status (pinner.h, status.h): the
 * delivery line, each GPU, each pipeline's GPU decoding, and a device
 * client's copy figures. Reads counters the GPU threads keep (atomics, or
 * under lanes_mu); calls no CUDA.
 */
#include <inttypes.h>
#include <pthread.h>

#include "daemon/core/status.h"
#include "daemon/gpu/pinner.h"
#include "daemon/gpu/pinner_impl.h"

/* Mean of sum over n, in us; 0 for none. */
static double mean_us(const atomic_uint_least64_t *sum_ns, const atomic_uint_least64_t *n)
{
	uint64_t count = atomic_load(n);
	return count ? (double)atomic_load(sum_ns) / (double)count / 1e3 : 0.0;
}

/* "decode:": per pipeline that may decode on the GPU and per GPU, where
 * its device clients' images were decoded, and the decoding thread's time. */
static void describe_decode(struct pinner *p, struct status_text *t)
{
	uint32_t n = 0;
	for (size_t i = 0; i < p->n_sources; i++)
		n += pinner_decodes(&p->sources[i]) ? (uint32_t)p->n_gpus : 0;
	status_object(t, "decode");
	if (n == 0)
		status_printf(t, "decode: 0\n");
	else
	{
		status_printf(t, "decode: %u (", n);
		status_field(t, "library", "%s)\n", p->nvjd_loaded ? "nvJPEG" : p->nvjd_why);
	}
	status_array(t, "pipelines");
	for (size_t i = 0; n && i < p->n_sources; i++) {
		if (!pinner_decodes(&p->sources[i]))
			continue;
		for (int k = 0; k < p->n_gpus; k++) {
			struct gpu *g = &p->gpus[k];
			const struct decode_count *c = &p->decode_counts[i][k];
			status_object(t, NULL);
			status_field(t, "pipeline", "  decode pipeline %s", p->sources[i].cfg->name);
			status_field(t, "gpu", " gpu %d", k);
			status_field(t, "engines", " engines %u", atomic_load(&g->decode_engines));
			status_field(t, "images_gpu", " images_gpu %" PRIu64, (uint64_t)atomic_load(&c->gpu));
			status_field(t, "images_cpu", " images_cpu %" PRIu64, (uint64_t)atomic_load(&c->cpu));
			status_field(t, "images_fallback", " images_fallback %" PRIu64,
				     (uint64_t)atomic_load(&c->fallback));
			status_field(t, "images_bad", " images_bad %" PRIu64, (uint64_t)atomic_load(&c->bad));
			status_field(t, "parts", " parts %" PRIu64, (uint64_t)atomic_load(&c->parts));
			status_field(t, "submit_us", " submit_us %.1f", mean_us(&c->submit_ns, &c->parts));
			status_field(t, "wait_us", " wait_us %.1f", mean_us(&c->wait_ns, &c->parts));
			pthread_mutex_lock(&p->lanes_mu);
			if (g->decode_why[0])
				status_field(t, "unavailable", " unavailable \"%.300s\"", g->decode_why);
			pthread_mutex_unlock(&p->lanes_mu);
			status_printf(t, "\n");
			status_close(t);
		}
	}
	status_close(t);
	status_close(t);
}

void pinner_describe(struct pinner *p, struct status_text *t)
{
	status_object(t, "delivery");
	bool up = p->loop_started && p->loop_ok;
	status_json_bool(t, "device", up);
	if (!up) {
		if (p->loop_started) {
			status_field(t, "gpu", "delivery: host (GPU %s", "unavailable");
			status_field(t, "unavailable", ": %s)\n", p->loop_summary);
		} else {
			status_field(t, "gpu", "delivery: host (GPU %s)\n", "starting");
		}
		status_close(t);
		status_no_gpus(t);
		return;
	}
	status_field(t, "gpu", "delivery: host, device (%s", p->loop_summary);
	if (p->cfg->pin == PIN_COPY)
		status_field(t, "pinned_free", ", %u free", atomic_load(&p->pinned_free_count));
	status_field(t, "gpu_threads", ", %d thread", p->gpu_threads);
	status_printf(t, "%s per GPU)\n", p->gpu_threads == 1 ? "" : "s");
	status_close(t);
	status_printf(t, "gpus: %d\n", p->n_gpus);
	status_array(t, "gpus");
	for (int i = 0; i < p->n_gpus; i++) {
		struct gpu *g = &p->gpus[i];
		status_object(t, NULL);
		status_field(t, "index", "  gpu %d", i);
		status_field(t, "uuid", " uuid %s", g->uuid);
		status_field(t, "name", " name \"%s\"", g->name);
		status_field(t, "clients", " clients %u", atomic_load(&g->clients));
		status_field(t, "device_bytes", " device_bytes %" PRIu64, (uint64_t)atomic_load(&g->device_bytes));
		status_field(t, "decode_bytes", " decode_bytes %" PRIu64, (uint64_t)atomic_load(&g->decode_bytes));
		status_field(t, "mps", " mps %d", g->mps);
		status_field(t, "decoders", " decoders %u\n", atomic_load(&g->decoders));
		status_close(t);
	}
	status_close(t);
	describe_decode(p, t);
}

void pinner_describe_client(struct pinner_client *pc, struct status_text *t)
{
	status_field(t, "gpu", " gpu %s", pc->uuid);
	status_field(t, "thread", " thread %s", pc->lane->name);
	status_field(t, "stream_depth", " stream_depth %u", atomic_load(&pc->stream_depth));
	status_field(t, "bytes_moved", " bytes_moved %" PRIu64, (uint64_t)atomic_load(&pc->bytes_moved));
	status_field(t, "path", " path %s", pc->direct ? "direct" : "staging");
	status_field(t, "queue_us", " queue_us %.1f", mean_us(&pc->queue_ns, &pc->n_issued));
	status_field(t, "copy_us", " copy_us %.1f", mean_us(&pc->copy_ns, &pc->n_copied));
}
