/* SPDX-License-Identifier: Apache-2.0 */
/* decode: the client's own GPU JPEG decoding (decode.h). */
#include "decode.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errtext.h"

#if LOADERD_HAVE_GPUDECODE_BATCH

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "common/cudaerr.h"
#include "gpudecode/gpudecode.h"
#include "image/image_sample.h"
#include "shm/layout.h"

#define DECODE_TEXT_MAX 1024

enum job_state { JOB_FREE, JOB_QUEUED, JOB_DONE };

struct job {
	enum job_state state;
	uint64_t seq;
	uint64_t order;     /* its place among the batches queued (not every batch has rows
			     * to decode: seqs have gaps) */
	uint32_t slot, rows;
	uint8_t *dst;
	uint64_t staging_offset;
	struct decoder_result res;
	char text[DECODE_TEXT_MAX];
};

struct decoder {
	struct decoder_config cfg;
	const struct arena_pipeline *pl;   /* in the arena: read-only, checked at open */
	struct arena_image_params params;  /* a checked copy */
	struct image_sampler cpu;          /* the CPU path, as the workers' */
	bool cpu_ok;
	struct gd *gd;
	cudaStream_t stream;
	cudaEvent_t *decoded;              /* per device slot */
	bool registered;                   /* the staging slots are page-locked */
	const uint8_t *reg_base;
	struct gd_image *imgs;
	uint32_t *rows_of, *bad_rows;

	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;                 /* a job queued, done, or stop */
	bool stop;
	int open_rc;                       /* the thread's open: 1 pending, then 0 or -errno */
	char open_err[DECODE_TEXT_MAX];
	struct job *jobs;                  /* cfg.slots of them, job seq % slots */
	uint64_t queued;                   /* jobs queued so far */
	uint64_t next_run;                 /* the order of the job the thread takes next */
	clockid_t thread_clock;
	bool have_clock;

	/* counts, under mu */
	uint64_t batches, n_gpu, n_cpu, n_bad, submit_ns;
};

bool decoder_available(char *why, size_t cap)
{
	const char *off = getenv("LOADERD_CLIENT_DECODE");
	if (off && strcmp(off, "0") == 0) {
		errtext(why, cap, 0, "LOADERD_CLIENT_DECODE=0: the daemon decodes");
		return false;
	}
	char text[512];
	int rc = nvjd_load(getenv("LOADERD_NVJPEG_LIBRARY"), text, sizeof(text));
	if (rc < 0) {
		errtext(why, cap, 0, "nvJPEG cannot be loaded in this process: %s", text);
		return false;
	}
	return true;
}

/* The pipeline's entry in the arena, checked as far as this module reads
 * it: 0, or -EPROTO with why. */
static int check_pipeline(struct decoder *d, char *err, size_t cap)
{
	const struct decoder_config *c = &d->cfg;
	const struct arena_header *h = (const void *)c->arena;
	uint64_t end;
	if (c->arena_bytes < sizeof(*h) || h->magic != ARENA_MAGIC || h->version != ARENA_VERSION ||
	    c->pipeline >= h->n_pipelines ||
	    __builtin_mul_overflow((uint64_t)c->pipeline + 1, sizeof(struct arena_pipeline), &end) ||
	    __builtin_add_overflow(end, h->pipelines_offset, &end) || end > c->arena_bytes)
		return errtext(err, cap, -EPROTO, "the arena's header does not hold pipeline %u of "
			       "an arena of version %d", c->pipeline, ARENA_VERSION);
	d->pl = (const void *)(c->arena + h->pipelines_offset +
			       (uint64_t)c->pipeline * sizeof(struct arena_pipeline));
	d->params = d->pl->image;
	const struct arena_image_params *ip = &d->params;
	uint64_t desc_end, data_end;
	if (d->pl->kind != ARENA_SOURCE_IMAGES || ip->gpu_desc_offset == 0 ||
	    __builtin_mul_overflow((uint64_t)c->batch_size, sizeof(struct arena_gpu_image), &desc_end) ||
	    __builtin_add_overflow(desc_end, ip->gpu_desc_offset, &desc_end) ||
	    desc_end > c->staging_bytes || ip->gpu_data_stride == 0 ||
	    __builtin_mul_overflow((uint64_t)c->batch_size, ip->gpu_data_stride, &data_end) ||
	    __builtin_add_overflow(data_end, ip->gpu_data_offset, &data_end) ||
	    data_end > c->staging_bytes || c->n_tensors < 1 ||
	    c->tensor_offset[0] + (uint64_t)c->batch_size * c->tensor_row_bytes[0] > c->slot_bytes ||
	    ip->index_offset > c->arena_bytes || ip->paths_offset > c->arena_bytes ||
	    ip->paths_bytes > c->arena_bytes - ip->paths_offset ||
	    d->pl->n_samples > (c->arena_bytes - ip->index_offset) /
			       (ip->n_shards ? sizeof(struct arena_image) :
				sizeof(struct arena_folder_file)) ||
	    (ip->n_shards == 0 && (ip->n_dirs == 0 || ip->shards_offset > c->arena_bytes ||
				   ip->n_dirs > (c->arena_bytes - ip->shards_offset) /
						sizeof(struct arena_folder_dir))))
		return errtext(err, cap, -EPROTO, "pipeline %u of the arena is not an image pipeline "
			       "whose GPU decodes, laid out as its WELCOME says", c->pipeline);
	return 0;
}

/* "ROOT/PATH" or "SHARD: MEMBER" of a sample, for a bad image's message. */
static void sample_name(const struct decoder *d, uint64_t sample, char *buf, size_t cap)
{
	const struct arena_image_params *ip = &d->params;
	const uint8_t *base = d->cfg.arena;
	if (sample >= d->pl->n_samples) {
		snprintf(buf, cap, "sample %" PRIu64, sample);
		return;
	}
	const char *paths = (const char *)base + ip->paths_offset;
	if (ip->n_shards == 0) { /* imagefolder: its directory's path and its name */
		const struct arena_folder_dir *dirs = (const void *)(base + ip->shards_offset);
		const struct arena_folder_file *f = (const void *)(base + ip->index_offset);
		struct arena_folder_dir dir = *arena_folder_dir_of(dirs, ip->n_dirs, sample);
		uint32_t at = f[sample].name_offset;
		bool ok = dir.path_offset < ip->paths_bytes && dir.names_offset < ip->paths_bytes &&
			  at < ip->paths_bytes - dir.names_offset &&
			  memchr(paths + dir.path_offset, 0, ip->paths_bytes - dir.path_offset) &&
			  memchr(paths + dir.names_offset + at, 0, ip->paths_bytes - dir.names_offset - at);
		snprintf(buf, cap, "%.*s/%s/%s", (int)sizeof(d->pl->path), d->pl->path,
			 ok ? paths + dir.path_offset : "?", ok ? paths + dir.names_offset + at : "?");
		return;
	}
	const struct arena_image *im = (const void *)(base + ip->index_offset) + sample;
	const char *name = im->path_offset < ip->paths_bytes &&
			   memchr(paths + im->path_offset, 0, ip->paths_bytes - im->path_offset) ?
			   paths + im->path_offset : "?";
	const struct arena_shard *sh = (const void *)(base + ip->shards_offset);
	const char *shard = "?";
	if (im->shard < ip->n_shards && ip->shards_offset + (uint64_t)(im->shard + 1) *
	    sizeof(*sh) <= d->cfg.arena_bytes && sh[im->shard].path_offset < ip->paths_bytes &&
	    memchr(paths + sh[im->shard].path_offset, 0, ip->paths_bytes - sh[im->shard].path_offset))
		shard = paths + sh[im->shard].path_offset;
	snprintf(buf, cap, "%s: %s", shard, name);
}

/* The rows of job j that the workers left to the GPU, as the library's
 * images: their number, or -EPROTO (text) for a bad descriptor. */
static int job_images(struct decoder *d, const struct job *j, char *text, size_t cap)
{
	const struct arena_image_params *ip = &d->params;
	const uint8_t *slot = d->cfg.arena + j->staging_offset;
	const struct arena_gpu_image *desc = (const void *)(slot + ip->gpu_desc_offset);
	uint32_t n = 0;
	for (uint32_t r = 0; r < j->rows; r++) {
		struct arena_gpu_image g;
		memcpy(&g, &desc[r], sizeof(g)); /* once: the daemon's memory */
		if (g.route != ARENA_ROUTE_GPU)
			continue;
		if (g.len == 0 || g.len > ip->gpu_data_stride || g.width == 0 || g.height == 0)
			return errtext(text, cap, -EPROTO, "row %u of batch %" PRIu64 " has a bad GPU "
				       "decoding descriptor", r, j->seq);
		d->rows_of[n] = r;
		d->imgs[n++] = (struct gd_image){
			.jpeg = slot + ip->gpu_data_offset + (uint64_t)r * ip->gpu_data_stride,
			.len = g.len, .width = g.width, .height = g.height, .x = g.x, .y = g.y,
			.w = g.w, .h = g.h, .flip = g.flip != 0, .epoch = g.epoch, .sample = g.sample,
			.dst_offset = d->cfg.tensor_offset[0] + (uint64_t)r * d->cfg.tensor_row_bytes[0],
			.luma_h = g.luma_h, .luma_v = g.luma_v};
	}
	return (int)n;
}

/* on_error = substitute: every tensor's row of each bad row becomes a copy
 * of a good row's (gd_substitute_row, as the daemon chooses), behind the
 * decoding on the stream. */
static int substitute_bad(struct decoder *d, struct job *j, uint32_t n, uint32_t n_bad)
{
	for (uint32_t b = 0; b < n_bad; b++) {
		uint32_t r = d->bad_rows[b];
		const struct gd_image *im = &d->imgs[0];
		for (uint32_t i = 0; i < n; i++)
			if (d->rows_of[i] == r)
				im = &d->imgs[i];
		uint32_t from = gd_substitute_row(d->params.seed, im->epoch, im->sample, r, j->rows,
						  d->bad_rows, n_bad);
		if (from == r) {
			char name[2 * ARENA_PATH_MAX + 8];
			sample_name(d, im->sample, name, sizeof(name));
			return errtext(j->text, sizeof(j->text), -EBADMSG, "pipeline \"%.64s\": %.600s: bad "
				       "image: neither the GPU's decoder nor the CPU's took it (on_error = "
				       "substitute, and none of the rows of its batch tried could replace "
				       "it: %u of %u are bad)", d->pl->name, name, n_bad, j->rows);
		}
		for (unsigned t = 0; t < d->cfg.n_tensors; t++) {
			uint64_t row = d->cfg.tensor_row_bytes[t], at = d->cfg.tensor_offset[t];
			cudaError_t e = cudaMemcpyAsync(j->dst + at + (uint64_t)r * row,
							j->dst + at + (uint64_t)from * row, row,
							cudaMemcpyDeviceToDevice, d->stream);
			if (cudaerr_failed(e, j->text, sizeof(j->text), "copying a replacement row"))
				return cudaerr_errno(e);
		}
	}
	return 0;
}

/* Decodes job j into its device slot, on the thread. */
static void job_run(struct decoder *d, struct job *j)
{
	struct decoder_result *res = &j->res;
	*res = (struct decoder_result){.bad_sample = UINT64_MAX};
	j->text[0] = '\0';
	int n = job_images(d, j, j->text, sizeof(j->text));
	if (n < 0) {
		res->rc = n;
		return;
	}
	bool fail = d->params.on_error == 1;
	struct gd_batch b = {.imgs = d->imgs, .n = (uint32_t)n, .cpu = &d->cpu, .dst = j->dst,
			     .dst_bytes = d->cfg.slot_bytes, .row_bytes = d->cfg.tensor_row_bytes[0],
			     .stream = d->stream, .stop_at_bad = fail};
	char text[DECODE_TEXT_MAX];
	int rc = gd_decode_batch(d->gd, &b, text, sizeof(text));
	res->submit_ns = b.stats.submit_ns;
	uint32_t n_bad = 0;
	for (int i = 0; i < n; i++) {
		const struct gd_image *im = &d->imgs[i];
		res->gpu += im->status == GD_GPU;
		res->cpu += im->status == GD_CPU;
		if (im->status == GD_BAD) {
			if (res->bad++ == 0)
				res->bad_sample = im->sample;
			d->bad_rows[n_bad++] = d->rows_of[i];
		}
	}
	if (rc == -EBADMSG) { /* on_error = fail: the image named */
		const struct gd_image *im = &d->imgs[b.fail_at];
		char name[2 * ARENA_PATH_MAX + 8];
		sample_name(d, im->sample, name, sizeof(name));
		rc = errtext(j->text, sizeof(j->text), -EBADMSG, "pipeline \"%.64s\": %.600s: bad image: "
			     "the GPU's decoder refused it (%.160s), and so did the CPU's (%s) "
			     "(on_error = fail)", d->pl->name, name, im->err, strerror(-im->cpu_rc));
	} else if (rc < 0) {
		errtext(j->text, sizeof(j->text), 0, "decoding batch %" PRIu64 " on the GPU: %s",
			j->seq, text);
	}
	if (rc == 0 && n_bad > 0)
		rc = substitute_bad(d, j, (uint32_t)n, n_bad);
	if (rc == 0) {
		cudaError_t e = cudaEventRecord(d->decoded[j->slot], d->stream);
		if (cudaerr_failed(e, j->text, sizeof(j->text), "cudaEventRecord of the decoded event"))
			rc = cudaerr_errno(e);
	}
	if (rc < 0 && rc != -EBADMSG) /* nothing of it may still run */
		cudaStreamSynchronize(d->stream);
	res->rc = rc;
}

/* The thread's half of decoder_open: everything CUDA, on this thread. */
static int thread_open(struct decoder *d, char *err, size_t cap)
{
	const struct decoder_config *c = &d->cfg;
	cudaError_t e = cudaSetDevice(c->device);
	if (cudaerr_failed(e, err, cap, "cudaSetDevice"))
		return cudaerr_errno(e);
	/* This thread's calls neither break nor are refused by a CUDA graph
	 * another thread captures in the global mode (PyTorch's default). */
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
	e = cudaThreadExchangeStreamCaptureMode(&mode);
	if (cudaerr_failed(e, err, cap, "cudaThreadExchangeStreamCaptureMode"))
		return cudaerr_errno(e);
	/* The decoding's kernels and copies at the device's highest stream
	 * priority: the training waits for them (its stream waits for the
	 * decoded event), and at the training's own priority each of them
	 * would queue behind the blocks of the training's kernels already
	 * on the GPU. $LOADERD_CLIENT_DECODE_PRIORITY=0 leaves them at the
	 * default priority (to measure what the priority gives). */
	const char *prio = getenv("LOADERD_CLIENT_DECODE_PRIORITY");
	bool high = !(prio && strcmp(prio, "0") == 0);
	int priority = 0, lowest = 0;
	if (high) {
		e = cudaDeviceGetStreamPriorityRange(&lowest, &priority);
		if (cudaerr_failed(e, err, cap, "cudaDeviceGetStreamPriorityRange"))
			return cudaerr_errno(e);
	}
	struct gd_options o = {.device = c->device, .max_batch = c->batch_size < NVJD_MAX_BATCH ?
			       c->batch_size : NVJD_MAX_BATCH, .memory_bytes = c->memory_bytes,
			       .reserve_bytes = 0, .memory_what = "gpu_decode_memory",
			       .high_priority = high};
	int rc = gd_open(&o, &d->gd, err, cap);
	if (rc < 0)
		return rc;
	e = cudaStreamCreateWithPriority(&d->stream, cudaStreamNonBlocking, priority);
	for (uint32_t s = 0; s < c->slots && e == cudaSuccess; s++)
		e = cudaEventCreateWithFlags(&d->decoded[s], cudaEventDisableTiming);
	if (cudaerr_failed(e, err, cap, "creating the decoder's stream and events"))
		return cudaerr_errno(e);
	/* The staging slots page-locked, read-only, for nvJPEG's copies of the
	 * JPEGs; where the driver refuses, they are copied as they are. */
	const struct arena_header *h = (const void *)c->arena;
	int ro = 0;
	if (cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, c->device) ==
	    cudaSuccess && ro && h->slots_offset < c->arena_bytes) {
		d->reg_base = c->arena + h->slots_offset;
		e = cudaHostRegister((void *)d->reg_base, c->arena_bytes - h->slots_offset,
				     cudaHostRegisterReadOnly | cudaHostRegisterPortable);
		d->registered = e == cudaSuccess;
		if (!d->registered)
			cudaGetLastError(); /* not sticky: cleared */
	}
	if (pthread_getcpuclockid(pthread_self(), &d->thread_clock) == 0)
		d->have_clock = true;
	return 0;
}

static void thread_close(struct decoder *d)
{
	if (d->stream)
		cudaStreamSynchronize(d->stream);
	gd_close(d->gd);
	for (uint32_t s = 0; d->decoded && s < d->cfg.slots; s++)
		if (d->decoded[s])
			cudaEventDestroy(d->decoded[s]);
	if (d->stream)
		cudaStreamDestroy(d->stream);
	if (d->registered)
		cudaHostUnregister((void *)d->reg_base);
}

static void *decoder_main(void *arg)
{
	struct decoder *d = arg;
	char err[DECODE_TEXT_MAX] = "";
	int rc = thread_open(d, err, sizeof(err));
	pthread_mutex_lock(&d->mu);
	d->open_rc = rc;
	snprintf(d->open_err, sizeof(d->open_err), "%s", err);
	pthread_cond_broadcast(&d->cv);
	while (rc == 0 && !d->stop) {
		struct job *j = NULL;
		for (uint32_t k = 0; k < d->cfg.slots && !j; k++)
			if (d->jobs[k].state == JOB_QUEUED && d->jobs[k].order == d->next_run)
				j = &d->jobs[k];
		if (!j) {
			pthread_cond_wait(&d->cv, &d->mu);
			continue;
		}
		pthread_mutex_unlock(&d->mu);
		job_run(d, j);
		pthread_mutex_lock(&d->mu);
		j->state = JOB_DONE;
		d->next_run++;
		d->batches++;
		d->n_gpu += j->res.gpu;
		d->n_cpu += j->res.cpu;
		d->n_bad += j->res.bad;
		d->submit_ns += j->res.submit_ns;
		pthread_cond_broadcast(&d->cv);
	}
	pthread_mutex_unlock(&d->mu);
	thread_close(d);
	return NULL;
}

static void decoder_free(struct decoder *d)
{
	if (d->cpu_ok)
		image_sampler_free(&d->cpu);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	free(d->jobs);
	free(d->decoded);
	free(d->imgs);
	free(d->rows_of);
	free(d->bad_rows);
	free(d);
}

int decoder_open(const struct decoder_config *cfg, struct decoder **out, char *err, size_t cap)
{
	struct decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return errtext(err, cap, -ENOMEM, "out of memory");
	d->cfg = *cfg;
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_t ca; /* decoder_take's deadlines are CLOCK_MONOTONIC's */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = check_pipeline(d, err, cap);
	uint64_t row_bytes = 0;
	if (rc == 0 && (cfg->slots == 0 || cfg->batch_size == 0))
		rc = errtext(err, cap, -EINVAL, "no device slots or rows to decode into");
	if (rc == 0 && image_sampler_init(&d->cpu, &d->params, &row_bytes) < 0)
		rc = errtext(err, cap, -EPROTO, "pipeline \"%.64s\": its image parameters in the "
			     "arena are refused by the CPU decoder", d->pl->name);
	d->cpu_ok = rc == 0;
	if (rc == 0 && row_bytes != cfg->tensor_row_bytes[0])
		rc = errtext(err, cap, -EPROTO, "pipeline \"%.64s\": an image row of %" PRIu64 " bytes "
			     "in the arena, %" PRIu64 " in WELCOME", d->pl->name, row_bytes,
			     cfg->tensor_row_bytes[0]);
	if (rc == 0) {
		d->jobs = calloc(cfg->slots, sizeof(*d->jobs));
		d->decoded = calloc(cfg->slots, sizeof(*d->decoded));
		d->imgs = calloc(cfg->batch_size, sizeof(*d->imgs));
		d->rows_of = calloc(cfg->batch_size, sizeof(*d->rows_of));
		d->bad_rows = calloc(cfg->batch_size, sizeof(*d->bad_rows));
		if (!d->jobs || !d->decoded || !d->imgs || !d->rows_of || !d->bad_rows)
			rc = errtext(err, cap, -ENOMEM, "out of memory");
	}
	if (rc < 0) {
		decoder_free(d);
		return rc;
	}
	d->open_rc = 1;
	rc = -pthread_create(&d->thread, NULL, decoder_main, d);
	if (rc < 0) {
		decoder_free(d);
		return errtext(err, cap, rc, "starting the decoding thread: %s", strerror(-rc));
	}
	pthread_setname_np(d->thread, "loaderd-decode");
	d->started = true;
	pthread_mutex_lock(&d->mu);
	while (d->open_rc == 1)
		pthread_cond_wait(&d->cv, &d->mu);
	rc = d->open_rc;
	pthread_mutex_unlock(&d->mu);
	if (rc < 0) {
		errtext(err, cap, 0, "%s", d->open_err);
		pthread_join(d->thread, NULL);
		decoder_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

int decoder_submit(struct decoder *d, uint64_t seq, uint32_t slot, void *dst,
		   uint64_t staging_offset, uint32_t rows, char *err, size_t cap)
{
	uint64_t end;
	if (slot >= d->cfg.slots || rows == 0 || rows > d->cfg.batch_size ||
	    __builtin_add_overflow(staging_offset, d->cfg.staging_bytes, &end) ||
	    end > d->cfg.arena_bytes)
		return errtext(err, cap, -EPROTO, "bad READY: a batch of %u rows to decode into device "
			       "slot %u from a staging slot at %" PRIu64 " of an arena of %zu bytes",
			       rows, slot, staging_offset, d->cfg.arena_bytes);
	pthread_mutex_lock(&d->mu);
	struct job *j = &d->jobs[seq % d->cfg.slots];
	int rc = 0;
	if (j->state != JOB_FREE) {
		rc = errtext(err, cap, -EPROTO, "bad READY: batch %" PRIu64 " to decode while batch %"
			     PRIu64 " is not taken yet", seq, j->seq);
	} else {
		*j = (struct job){.state = JOB_QUEUED, .seq = seq, .order = d->queued++, .slot = slot,
				  .rows = rows, .dst = dst, .staging_offset = staging_offset};
		pthread_cond_broadcast(&d->cv);
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

bool decoder_done(struct decoder *d, uint64_t seq)
{
	pthread_mutex_lock(&d->mu);
	const struct job *j = &d->jobs[seq % d->cfg.slots];
	bool done = j->seq == seq && j->state == JOB_DONE;
	pthread_mutex_unlock(&d->mu);
	return done;
}

int decoder_take(struct decoder *d, uint64_t seq, int timeout_ms, struct decoder_result *res,
		 char *err, size_t cap)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	if (timeout_ms > 0) {
		until.tv_sec += timeout_ms / 1000;
		until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&d->mu);
	struct job *j = &d->jobs[seq % d->cfg.slots];
	int rc = 0;
	if (j->seq != seq || j->state == JOB_FREE) {
		rc = errtext(err, cap, -EINVAL, "batch %" PRIu64 " is not being decoded", seq);
	} else {
		while (j->state != JOB_DONE && rc == 0) {
			if (timeout_ms == 0)
				rc = -ETIMEDOUT;
			else if (timeout_ms < 0)
				pthread_cond_wait(&d->cv, &d->mu);
			else if (pthread_cond_timedwait(&d->cv, &d->mu, &until) == ETIMEDOUT &&
				 j->state != JOB_DONE)
				rc = -ETIMEDOUT;
		}
		if (rc == 0) {
			*res = j->res;
			if (res->rc < 0)
				errtext(err, cap, 0, "%s", j->text);
			j->state = JOB_FREE;
		}
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int decoder_stream_wait(struct decoder *d, uint32_t slot, void *stream, char *err, size_t cap)
{
	if (slot >= d->cfg.slots)
		return errtext(err, cap, -EINVAL, "device slot %u", slot);
	cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, d->decoded[slot], 0);
	return cudaerr_failed(e, err, cap, "cudaStreamWaitEvent on the decoded event") ?
	       cudaerr_errno(e) : 0;
}

int decoder_slot_sync(struct decoder *d, uint32_t slot, char *err, size_t cap)
{
	if (slot >= d->cfg.slots)
		return errtext(err, cap, -EINVAL, "device slot %u", slot);
	cudaError_t e = cudaEventSynchronize(d->decoded[slot]);
	return cudaerr_failed(e, err, cap, "cudaEventSynchronize of the decoded event") ?
	       cudaerr_errno(e) : 0;
}

void decoder_stats(const struct decoder *d, struct ldr_stats *out)
{
	struct decoder *m = (struct decoder *)d; /* the lock only */
	pthread_mutex_lock(&m->mu);
	out->decoded_batches = d->batches;
	out->images_gpu = d->n_gpu;
	out->images_cpu = d->n_cpu;
	out->images_bad = d->n_bad;
	out->submit_ns = d->submit_ns;
	pthread_mutex_unlock(&m->mu);
	struct timespec ts;
	if (d->have_clock && clock_gettime(d->thread_clock, &ts) == 0)
		out->thread_cpu_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void decoder_close(struct decoder *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = true;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	if (d->started)
		pthread_join(d->thread, NULL);
	decoder_free(d);
}

#else /* built without the GPU decoding library */

bool decoder_available(char *why, size_t cap)
{
	errtext(why, cap, 0, "this loaderd client library was built without GPU JPEG decoding "
		"(no CUDA compiler or no nvjpeg.h): the daemon decodes");
	return false;
}

int decoder_open(const struct decoder_config *cfg, struct decoder **out, char *err, size_t cap)
{
	return errtext(err, cap, -ENOTSUP, "built without GPU JPEG decoding");
}

int decoder_submit(struct decoder *d, uint64_t seq, uint32_t slot, void *dst,
		   uint64_t staging_offset, uint32_t rows, char *err, size_t cap)
{
	return errtext(err, cap, -ENOTSUP, "built without GPU JPEG decoding");
}

bool decoder_done(struct decoder *d, uint64_t seq)
{
	return false;
}

int decoder_take(struct decoder *d, uint64_t seq, int timeout_ms, struct decoder_result *res,
		 char *err, size_t cap)
{
	return errtext(err, cap, -ENOTSUP, "built without GPU JPEG decoding");
}

int decoder_stream_wait(struct decoder *d, uint32_t slot, void *stream, char *err, size_t cap)
{
	return errtext(err, cap, -ENOTSUP, "built without GPU JPEG decoding");
}

int decoder_slot_sync(struct decoder *d, uint32_t slot, char *err, size_t cap)
{
	return errtext(err, cap, -ENOTSUP, "built without GPU JPEG decoding");
}

void decoder_stats(const struct decoder *d, struct ldr_stats *out)
{
}

void decoder_close(struct decoder *d)
{
}

#endif
