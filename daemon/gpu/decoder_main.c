/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-decoder: a decoder process of the daemon's GPU JPEG decoding
 * (gpu_decode_helpers = processes): it decodes the share of a batch's
 * JPEGs the daemon's decoding thread hands it, on the GPU's hardware
 * engines, into the daemon's buffer set, as a helper thread would, from a
 * CUDA context of its own process. Started by the daemon only
 * (daemon/gpu/pinner_decode.c); daemon/gpu/decoder_proto.h is the conversation.
 *
 *   loaderd-decoder --device N --max-batch B --flags F [--lib LIBNVJPEG]
 *
 * with the socket on descriptor 3 and the arena, read-only, on 4. It exits
 * 0 when the daemon closes the socket, 1 on any failure (said on stderr,
 * which is the daemon's log).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "daemon/gpu/decoder_proto.h"
#include "gpudecode/nvjd.h"
#include "shm/arena.h"

static int die(const char *what)
{
	fprintf(stderr, "loaderd-decoder[%d]: %s\n", (int)getpid(), what);
	return 1;
}

struct decoder {
	struct arena arena;
	int dev;
	uint32_t sets, max_batch;
	uint64_t buf_bytes;
	uint8_t *buf[DECODER_SETS_MAX];
	struct nvjd *nvjd[DECODER_SETS_MAX];
	cudaStream_t stream[DECODER_SETS_MAX];
	cudaEvent_t event[DECODER_SETS_MAX];
	struct nvjd_image *imgs;
	uint8_t *msg;   /* a job in, a done out */
	size_t msg_cap;
};

/* Opens what setup names; the ready message says how it went. */
static void set_up(struct decoder *d, const struct decoder_setup *s, unsigned flags,
		   const char *lib, struct decoder_ready *r)
{
	r->magic = DECODER_MAGIC;
	r->rc = -EINVAL;
	if (s->magic != DECODER_MAGIC || s->sets == 0 || s->sets > DECODER_SETS_MAX) {
		snprintf(r->why, sizeof(r->why), "a bad setup message");
		return;
	}
	d->sets = s->sets;
	d->buf_bytes = s->buf_bytes;
	r->rc = nvjd_load(lib, r->why, sizeof(r->why));
	if (r->rc)
		return;
	const struct arena_header *h = d->arena.hdr;
	/* The staging slots page-locked for this process's DMA too; without,
	 * nvJPEG copies from pageable memory, slower but right. */
	if (cudaHostRegister(d->arena.base + arena_slot_offset(&d->arena, 0),
			     (size_t)h->slot_bytes * h->n_slots,
			     cudaHostRegisterReadOnly | cudaHostRegisterPortable) != cudaSuccess)
		cudaGetLastError();
	for (uint32_t k = 0; k < d->sets; k++) {
		cudaError_t e = cudaIpcOpenMemHandle((void **)&d->buf[k], s->buf[k],
						     cudaIpcMemLazyEnablePeerAccess);
		if (e == cudaSuccess)
			e = cudaStreamCreateWithFlags(&d->stream[k], cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&d->event[k],
						     cudaEventDisableTiming | cudaEventInterprocess);
		if (e == cudaSuccess)
			e = cudaIpcGetEventHandle(&r->event[k], d->event[k]);
		if (e != cudaSuccess) {
			r->rc = -EIO;
			snprintf(r->why, sizeof(r->why), "GPU %d: a buffer set or event: %s", d->dev,
				 cudaGetErrorString(e));
			return;
		}
		r->rc = nvjd_open(d->dev, d->max_batch, flags, &d->nvjd[k], r->why, sizeof(r->why));
		if (r->rc)
			return;
	}
	struct nvjd_info info;
	nvjd_info(d->nvjd[0], &info);
	r->engines = info.engines;
}

/* One job: len bytes in d->msg. Writes the done message there; its size. */
static size_t run_job(struct decoder *d, size_t len)
{
	struct decoder_job job;
	const struct decoder_image *in = (const void *)(d->msg + sizeof(job));
	struct decoder_done done = {.magic = DECODER_MAGIC, .rc = -EINVAL};
	bool ok = decoder_job_check(d->msg, len, d->sets, d->max_batch, d->arena.bytes, d->buf_bytes,
				    &job) == NULL;
	for (uint32_t i = 0; ok && i < job.n; i++) {
		const struct decoder_image *x = &in[i];
		d->imgs[i] = (struct nvjd_image){
			.data = d->arena.base + x->data_offset, .len = x->len,
			.scan_checked = x->scan_checked != 0, .given_w = x->given_w,
			.given_h = x->given_h, .roi_x = x->roi_x, .roi_y = x->roi_y,
			.roi_w = x->roi_w, .roi_h = x->roi_h, .dst = d->buf[job.set] + x->dst_offset,
			.pitch = x->pitch, .dst_bytes = x->dst_bytes};
	}
	if (ok) {
		done.rc = nvjd_decode(d->nvjd[job.set], d->imgs, job.n, d->stream[job.set]);
		if (cudaEventRecord(d->event[job.set], d->stream[job.set]) != cudaSuccess && !done.rc)
			done.rc = -EIO;
		done.n = job.n;
	}
	struct decoder_result *res = (void *)(d->msg + sizeof(done));
	struct decoder_err *err = (void *)(res + done.n);
	for (uint32_t i = 0; i < done.n; i++) {
		const struct nvjd_image *im = &d->imgs[i];
		res[i] = (struct decoder_result){.status = im->status, .width = im->width,
						 .height = im->height, .out_w = im->out_w,
						 .out_h = im->out_h, .has_err = im->status != 0};
		if (im->status != 0) {
			err[done.n_err].index = i;
			snprintf(err[done.n_err].text, sizeof(err->text), "%s", im->err);
			done.n_err++;
		}
	}
	memcpy(d->msg, &done, sizeof(done));
	return sizeof(done) + done.n * sizeof(*res) + done.n_err * sizeof(*err);
}

int main(int argc, char **argv)
{
	struct decoder d = {.dev = -1};
	unsigned long flags = 0;
	const char *lib = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--device") == 0)
			d.dev = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--max-batch") == 0)
			d.max_batch = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--flags") == 0)
			flags = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--lib") == 0)
			lib = argv[i + 1];
		else
			return die("usage: loaderd-decoder --device N --max-batch B --flags F [--lib L]");
	}
	if (d.dev < 0 || d.max_batch == 0 || d.max_batch > DECODER_JOB_MAX)
		return die("usage: loaderd-decoder --device N --max-batch B --flags F [--lib L]");
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the daemon */
	signal(SIGPIPE, SIG_IGN);
	if (arena_attach(DECODER_FD_ARENA, false, &d.arena) != 0)
		return die("the arena descriptor is not a loaderd arena");
	d.msg_cap = sizeof(struct decoder_done) +
		    d.max_batch * (sizeof(struct decoder_result) + sizeof(struct decoder_err));
	if (d.msg_cap < sizeof(struct decoder_job) + d.max_batch * sizeof(struct decoder_image))
		d.msg_cap = sizeof(struct decoder_job) + d.max_batch * sizeof(struct decoder_image);
	d.msg = malloc(d.msg_cap);
	d.imgs = calloc(d.max_batch, sizeof(*d.imgs));
	if (!d.msg || !d.imgs || cudaSetDevice(d.dev) != cudaSuccess)
		return die("out of memory, or no such GPU");
	struct decoder_setup setup;
	if (recv(DECODER_FD_SOCKET, &setup, sizeof(setup), 0) != (ssize_t)sizeof(setup))
		return die("no setup message");
	struct decoder_ready ready = {0};
	set_up(&d, &setup, (unsigned)flags, lib, &ready);
	if (send(DECODER_FD_SOCKET, &ready, sizeof(ready), MSG_NOSIGNAL) != (ssize_t)sizeof(ready) ||
	    ready.rc != 0)
		return ready.rc ? die(ready.why) : die("the daemon went away");
	for (;;) {
		ssize_t n = recv(DECODER_FD_SOCKET, d.msg, d.msg_cap, MSG_TRUNC);
		if (n == 0)
			return 0; /* the daemon closed its end */
		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)sizeof(struct decoder_job) || (size_t)n > d.msg_cap)
			return die(n < 0 ? "recv failed" : "a job of a bad size");
		size_t out = run_job(&d, (size_t)n);
		ssize_t sent = send(DECODER_FD_SOCKET, d.msg, out, MSG_NOSIGNAL);
		if (sent < 0 && errno == EMSGSIZE) { /* again without the images' messages */
			struct decoder_done *done = (void *)d.msg;
			out -= done->n_err * sizeof(struct decoder_err);
			done->n_err = 0;
			sent = send(DECODER_FD_SOCKET, d.msg, out, MSG_NOSIGNAL);
		}
		if (sent != (ssize_t)out)
			return die("the daemon went away");
	}
}
