/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinner_decode: GPU decoding of image batches, on the GPU thread of the
 * batch's client (pinner.h). The workers left the images the GPU takes as
 * JPEG bytes in the staging slot, each with its transform plan (struct
 * arena_gpu_image, worker/image_rows.c); here they become a job of the
 * GPU decoding library (gpudecode/gpudecode.h, gd_decode_batch), which
 * does what follows, behind the copy of the batch's tensors into the
 * client's device slot and on the client's stream; this file keeps what
 * is the daemon's: the lane's decoder opened from the config, the job
 * made from the staging slot, the counts in status, the log, on_error.
 * The helpers are pinner_dechelp.c's (dechelp.h).
 *
 *   the GPU's hardware JPEG engines decode the images (gpudecode/nvjd.h,
 *   whole images: a region of interest was no faster on the engines, and
 *   nvJPEG 13.0 decodes one differently from a whole image at the image's
 *   right and bottom edges) into a buffer set of the lane -> images the
 *   workers would have decoded at a reduced DCT scale (jd_pick_scale) are
 *   made as small by block means (imgk_shrink_launch; not under
 *   decode_scale = full), so that both paths resample nearly the same
 *   pixels -> one imgkernel launch per batch
 *   (gpudecode/imgkernel.h) crops, resizes, flips and converts them into their
 *   rows of the device slot, as the workers would have -> the client's
 *   stream waits for that work, then the batch's ready event, as for any
 *   batch.
 *
 * Submission: each image goes to nvJPEG with the size the worker's
 * header reader found (nvjd.h, given_w), so nvJPEG's host work per image
 * is its submission alone, about 40 us: one thread feeds the engines
 * alone on the GPU (beside training under MPS each submission takes
 * several times as long, and nvJPEG takes one process's one at a time).
 * A batch's images may be split over gpu_decode_threads host threads: the
 * lane's own and helpers, each with its own nvJPEG state and stream per
 * set; the set's stream waits (on the GPU) for the helpers' streams
 * before the resize. The time the lane spends queueing a part (with its
 * helpers) and waiting for a set is counted per pipeline and GPU
 * (submit_us and wait_us in status).
 *
 * Memory: per lane, gpu_decode_memory of device memory in sets (one per
 * 512 MiB, 2 to 4), each a third for the decoded images and the rest for
 * the kernel's scratch, allocated with the lane's decoder at the first
 * decoding client. A batch's images are decoded in parts, as many as fit
 * one set, and the parts take the sets in turn.
 *
 * Several sets, so that the host's submission of a part (about 40 us an
 * image, above) overlaps the engines' work on the one before: nvJPEG's
 * hardware path may write its output before work queued earlier on the
 * stream has run (nvjd.h), so before a part reuses a set's buffer the lane
 * waits on the host for the kernel of the part that used it last; with one
 * set, that wait came between every two parts. Every thread has a decoder
 * (nvJPEG state) per set, since a decoder takes a new batch only once its
 * last one is done.
 *
 * Streams: each set has its own. A part's decode, shrink and resize are
 * queued on its set's stream, which first waits (on the GPU) for the
 * batch's copy into the device slot, since the resize writes rows of it;
 * the client's stream then waits for every set the batch used before its
 * ready event. So the parts of one batch, and the batches of one client,
 * run on the GPU side by side, as many as there are sets: beside a
 * training process, whose kernels take turns with the daemon's on the
 * GPU, each turn advances all of them, where on the client's one stream
 * a batch's GPU work waited for the whole of the one before. Measured
 * beside training, that shortened a batch's GPU work but did not raise
 * the client's rate (bench/RESULTS.md, "a CUDA stream per buffer set"):
 * there, queueing a part of 128 images (nvJPEG's checks and submission)
 * takes the lane about 15 ms, with 1 to 16 threads alike, so it is not
 * the checks' CPU time, while it waits for a set only microseconds
 * ("submit_us beside training"). The cause, measured: nvJPEG's
 * submission waits on the GPU several times a batch, and without MPS
 * each such wait beside a busy training process lasts one of its time
 * slices (2.4 ms on an H100, against 7 us alone); under MPS the waits
 * are short, but one process's submissions still go one at a time
 * (more threads do not help, more processes do: "GPU decoding beside
 * training", bench/RESULTS.md). Status shows whether a GPU is under MPS
 * (`mps` on its line), and the log says so when a decoder opens without.
 *
 * Decoder processes (gpu_decode_helpers = processes, or auto on a GPU
 * under MPS, where gpu_decode_threads' default of 0 gives 2 threads: one
 * helper): each helper thread then hands its share to a loaderd-decoder
 * process of its own (daemon/gpu/decoder_proto.h) and waits for its answer,
 * instead of calling nvjd: the process decodes into the set's buffer
 * (opened by CUDA IPC) and records an interprocess event behind its work,
 * which the set's stream waits for as for a helper thread's. A process
 * that fails or does not answer within worker_timeout_ms is killed; the
 * images it held get -EIO and so are decoded on this thread's CPU like any
 * the engines refused, the share of the next parts goes to the helpers
 * left, and the helper's thread starts another process once its wait has
 * passed (proc_schedule). One that cannot be set up at the lane's start is
 * not retried: that is the program or the GPU, said once in the log.
 *
 * An image the engines refuse or fail (nvjd's per-image status) is decoded
 * here on the CPU from the same bytes, as a worker would have, and copied
 * into its row. The workers check every image they leave to the GPU
 * (header, structure of the scan) and decode on the CPU whatever fails,
 * with on_error, so one that the CPU decoder refuses here too is a file
 * whose damage neither check saw (a bad Huffman code, say). on_error
 * applies to it here: with `fail` the client's batch fails naming the
 * file; with `substitute` its row (every tensor's) becomes a copy of
 * another row of the same batch, chosen from (seed, epoch, sample) among
 * the rows that are not bad, so the batch stays full and deterministic.
 * Such an image is counted (images_bad in status) and logged once.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "daemon/core/stagestats.h"
#include "daemon/gpu/pinner_impl.h"

#if LOADERD_HAVE_GPUDECODE_BATCH

#include "daemon/gpu/dechelp.h"
#include "image/image_sample.h"

static void decode_free(struct lane_decode *dc)
{
	dechelp_stop(dc);
	gd_close(dc->gd); /* waits for the parts in flight */
	free(dc->bad_rows);
	free(dc->job);
	free(dc->job_rows);
	for (size_t i = 0; i < ARENA_PIPELINES_MAX; i++)
		if (dc->samplers[i]) {
			image_sampler_free(dc->samplers[i]);
			free(dc->samplers[i]);
		}
	free(dc);
}

/* The lane's decoder and buffers; 0, or -errno with why. */
static int decode_open(struct lane *l, char *why, size_t cap)
{
	struct pinner *p = l->p;
	if (l->decode)
		return 0;
	if (!p->nvjd_loaded) {
		snprintf(why, cap, "%s", p->nvjd_why);
		return -ENOTSUP;
	}
	struct lane_decode *dc = calloc(1, sizeof(*dc));
	if (!dc) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	uint32_t max_batch = 1;
	for (size_t i = 0; i < p->n_sources; i++)
		if (p->sources[i].cfg->decode != DECODE_CPU && p->sources[i].cfg->batch_size > max_batch)
			max_batch = p->sources[i].cfg->batch_size;
	dc->max_rows = max_batch;
	uint64_t budget = p->cfg->gpu_decode_memory;
	struct gd_options o = {.device = l->dev,
			       .max_batch = max_batch < NVJD_MAX_BATCH ? max_batch : NVJD_MAX_BATCH,
			       .memory_bytes = budget, .reserve_bytes = DEVICE_RESERVE_BYTES,
			       .memory_what = "gpu_decode_memory"};
	int rc = gd_open(&o, &dc->gd, why, cap);
	if (rc < 0) {
		decode_free(dc);
		return rc;
	}
	gd_info(dc->gd, &dc->info);
	dc->job = calloc(dc->max_rows, sizeof(*dc->job));
	dc->job_rows = calloc(dc->max_rows, sizeof(*dc->job_rows));
	dc->bad_rows = calloc(dc->max_rows, sizeof(*dc->bad_rows));
	if (!dc->job || !dc->job_rows || !dc->bad_rows) {
		snprintf(why, cap, "out of memory");
		decode_free(dc);
		return -ENOMEM;
	}
	const struct nvjd_info info = dc->info.nvjd;
	/* The defaults follow MPS: beside a training process under MPS one
	 * process's submissions go one at a time, and a second process doubles
	 * them (bench/RESULTS.md); alone, one thread feeds the engines. */
	const bool mps = p->gpus[l->dev].mps;
	const struct config *cfg = p->cfg;
	dc->threads = cfg->gpu_decode_threads > 0 ? cfg->gpu_decode_threads : mps ? 2 : 1;
	dc->procs = cfg->gpu_decode_helpers == GPU_DECODE_HELPERS_PROCESSES ||
		    (cfg->gpu_decode_helpers == GPU_DECODE_HELPERS_AUTO && mps);
	dechelp_start(l, dc, info.flags);
	atomic_fetch_add(&p->gpus[l->dev].decode_bytes, dc->info.device_bytes);
	log_notice("GPU %s: JPEG decoding on %u hardware engines (nvJPEG %d.%d.%d%s), %" PRIu64
		   " bytes of device memory in %u sets, parts of up to %u images, thread %s and %u "
		   "helper%s%s", p->gpus[l->dev].uuid, info.engines, info.version[0], info.version[1],
		   info.version[2], info.flags & NVJD_SMOOTH_UPSAMPLING ? ", smooth upsampling" : "",
		   budget, dc->info.n_sets, dc->info.max_batch, l->name, dc->n_helpers,
		   dc->n_helpers == 1 ? "" : "s",
		   dc->n_helpers == 0 ? "" : dc->procs ? " (decoder processes)" : " (threads)");
	if (!p->gpus[l->dev].mps)
		log_notice("GPU %s: not under MPS: beside a training process on this GPU, the "
			   "daemon's GPU work and the training's take turns in time slices, which "
			   "slows JPEG decoding; run loaderd and the training processes under one MPS "
			   "control daemon (docs/config.md, \"GPU decoding beside training: MPS\")",
			   p->gpus[l->dev].uuid);
	atomic_store(&p->gpus[l->dev].decode_engines, info.engines);
	l->decode = dc;
	return 0;
}

bool pinner_decode_attach(struct lane *l, struct pinner_client *pc, struct msg *m)
{
	struct pinner *p = l->p;
	const struct pipeline_cfg *cfg = p->sources[pc->pipeline].cfg;
	if (!pinner_decodes(&p->sources[pc->pipeline]))
		return true;
	char why[TEXT_MAX];
	int rc = decode_open(l, why, sizeof(why));
	if (rc == 0) {
		pc->decode = true;
		return true;
	}
	struct gpu *g = &p->gpus[l->dev];
	if (cfg->decode == DECODE_GPU) {
		m->rc = -ENOTSUP;
		snprintf(m->text, sizeof(m->text), "decode = gpu, but GPU %s cannot decode JPEGs: "
			 "%.400s", g->uuid, why);
		return false;
	}
	/* auto: the workers decode; said once per GPU thread */
	if (!l->decode_refused) {
		l->decode_refused = true;
		log_notice("GPU %s: JPEGs of its clients (pipeline \"%s\", decode = auto) are decoded "
			   "by the workers: %s", g->uuid, cfg->name, why);
		pthread_mutex_lock(&p->lanes_mu);
		snprintf(g->decode_why, sizeof(g->decode_why), "%s", why);
		pthread_mutex_unlock(&p->lanes_mu);
	}
	return true;
}

/* Logs a bad image at most once per sample of its pipeline. */
static void bad_log_once(struct pinner *p, uint32_t pipeline, uint64_t sample, const char *text)
{
	const struct source *src = &p->sources[pipeline];
	bool first = sample >= src->n_samples; /* no such sample: logged, not remembered */
	pthread_mutex_lock(&p->lanes_mu);
	uint8_t **seen = &p->decode_bad_seen[pipeline];
	if (!first && !*seen)
		*seen = calloc(src->n_samples / 8 + 1, 1);
	if (!first && *seen && !((*seen)[sample / 8] & (1u << (sample % 8)))) {
		(*seen)[sample / 8] |= (uint8_t)(1u << (sample % 8));
		first = true;
	}
	pthread_mutex_unlock(&p->lanes_mu);
	if (first)
		log_warning("%s", text);
}

/* The CPU path's sampler for the pipeline (made at its first batch): NULL,
 * with text, when it cannot be set up. */
static struct image_sampler *decode_sampler(struct lane *l, uint32_t pipeline, char *text,
					    size_t cap)
{
	struct image_sampler **s = &l->decode->samplers[pipeline];
	uint64_t row_bytes = 0;
	if (!*s) {
		*s = calloc(1, sizeof(**s));
		if (!*s || image_sampler_init(*s, &arena_pipeline(l->p->arena, pipeline)->image,
					      &row_bytes) < 0) {
			free(*s);
			*s = NULL;
			snprintf(text, cap, "pipeline \"%s\": the CPU decoder of the images the GPU does "
				 "not decode could not be set up", l->p->sources[pipeline].cfg->name);
		}
	}
	return *s;
}

/* What became of the job's image i (row r): counted, logged, and, when
 * both decoders refused it, text naming the file and on_error; a bad row
 * recorded for substitute_bad. */
static void decode_report(struct lane *l, struct msg *m, const struct gd_image *im, uint32_t r,
			  char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	struct decode_count *count = &p->decode_counts[pc->pipeline][l->dev];
	if (im->status != GD_CPU && im->status != GD_BAD)
		return;
	char where[1200];
	source_sample_where(src, p->arena, pc->pipeline, SPLIT_TRAIN, im->sample, where,
			    sizeof(where));
	if (im->status == GD_CPU) {
		atomic_fetch_add(&count->fallback, 1);
		log_info("%s: decoded on the CPU for GPU %s: %s", where, p->gpus[l->dev].uuid, im->err);
		return;
	}
	bool fail = src->cfg->on_error == ON_ERROR_FAIL;
	snprintf(text, cap, "pipeline \"%s\": %.600s: bad image: the GPU's decoder refused it "
		 "(%.160s), and so did the CPU's (%s)%s", src->cfg->name, where, im->err,
		 source_image_why(im->cpu_rc), fail ? " (on_error = fail)" :
		 "; replaced by another image of its batch (on_error = substitute)");
	atomic_fetch_add(&count->bad, 1);
	bad_log_once(p, pc->pipeline, im->sample, text);
	if (!fail)
		dc->bad_rows[dc->n_bad++] = r;
}

/* The images of m's batch that the workers left to the GPU, as the
 * library's job: false (text) for a row whose descriptor is bad. */
static bool decode_job(struct lane *l, struct msg *m, const uint8_t *slot, uint32_t *n_out,
		       char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	const struct arena_image_params *ip = &arena_pipeline(p->arena, pc->pipeline)->image;
	const struct arena_gpu_image *desc = (const void *)(slot + ip->gpu_desc_offset);
	uint32_t n = 0, cpu = 0;
	for (uint32_t r = 0; r < m->rows; r++) {
		struct arena_gpu_image g = desc[r];
		if (g.route != ARENA_ROUTE_GPU) {
			cpu += g.route == ARENA_ROUTE_CPU;
			continue;
		}
		if (g.len == 0 || g.len > ip->gpu_data_stride || g.width == 0 || g.height == 0) {
			snprintf(text, cap, "row %u of a batch of pipeline \"%s\" has a bad GPU decoding "
				 "descriptor", r, src->cfg->name);
			return false;
		}
		dc->job_rows[n] = r;
		dc->job[n++] = (struct gd_image){
			.jpeg = slot + ip->gpu_data_offset + (uint64_t)r * ip->gpu_data_stride,
			.len = g.len, .width = g.width, .height = g.height, .x = g.x, .y = g.y,
			.w = g.w, .h = g.h, .flip = g.flip != 0, .epoch = g.epoch, .sample = g.sample,
			.dst_offset = src->tensors[0].offset + (uint64_t)r * src->row_bytes[0],
			.luma_h = g.luma_h, .luma_v = g.luma_v};
	}
	atomic_fetch_add(&p->decode_counts[pc->pipeline][l->dev].cpu, cpu);
	*n_out = n;
	return true;
}


/* on_error = substitute: each bad row of the batch becomes a copy of a row
 * that is not bad, chosen from (seed, epoch, sample), on the client's
 * stream behind every part. */
static bool substitute_bad(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	const struct arena_image_params *ip = &arena_pipeline(p->arena, pc->pipeline)->image;
	const uint8_t *slot = p->arena->base + arena_slot_offset(p->arena, m->slot);
	const struct arena_gpu_image *desc = (const void *)(slot + ip->gpu_desc_offset);
	for (uint32_t b = 0; b < dc->n_bad; b++) {
		uint32_t r = dc->bad_rows[b];
		uint32_t from = gd_substitute_row(ip->seed, desc[r].epoch, desc[r].sample, r, m->rows,
						  dc->bad_rows, dc->n_bad);
		if (from == r) {
			char where[1200];
			source_sample_where(src, p->arena, pc->pipeline, SPLIT_TRAIN, desc[r].sample,
					    where, sizeof(where));
			snprintf(text, cap, "pipeline \"%s\": %.600s: bad image: neither the GPU's decoder "
				 "nor the CPU's took it (on_error = substitute, and none of the rows of its "
				 "batch tried could replace it: %u of %u are bad)", src->cfg->name, where,
				 dc->n_bad, m->rows);
			return false;
		}
		for (uint32_t t = 0; t < src->n_tensors; t++) {
			uint64_t row = src->row_bytes[t], at = src->tensors[t].offset;
			cudaError_t e = cudaMemcpyAsync(dst + at + (uint64_t)r * row,
							dst + at + (uint64_t)from * row, row,
							cudaMemcpyDeviceToDevice, pc->stream);
			if (cudaerr_failed(e, text, cap, "copying a replacement row"))
				return false;
		}
	}
	return true;
}

bool pinner_decode_batch(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	const uint8_t *slot = p->arena->base + arena_slot_offset(p->arena, m->slot);
	dc->n_bad = 0;
	uint32_t n = 0;
	struct image_sampler *cpu = decode_sampler(l, pc->pipeline, text, cap);
	if (!cpu || !decode_job(l, m, slot, &n, text, cap))
		return false;
	struct gd_batch b = {.imgs = dc->job, .n = n, .cpu = cpu, .dst = dst,
			     .dst_bytes = pc->slot_bytes, .row_bytes = src->row_bytes[0],
			     .stream = pc->stream, .stop_at_bad = src->cfg->on_error == ON_ERROR_FAIL,
			     .share = &dc->share};
	uint64_t t0 = pinner_now_ns();
	int rc = gd_decode_batch(dc->gd, &b, text, cap);
	if (rc == 0)
		stagestats_add(pc->pipeline, PSTAGE_GPU_DECODE, pinner_now_ns() - t0);
	struct decode_count *count = &p->decode_counts[pc->pipeline][l->dev];
	atomic_fetch_add(&count->gpu, b.stats.gpu);
	atomic_fetch_add(&count->parts, b.stats.parts);
	atomic_fetch_add(&count->submit_ns, b.stats.submit_ns);
	atomic_fetch_add(&count->wait_ns, b.stats.wait_ns);
	char other[TEXT_MAX]; /* a failed batch's text stays the failure's */
	for (uint32_t i = 0; i < n; i++)
		if (!(rc == -EBADMSG && i == b.fail_at))
			decode_report(l, m, &dc->job[i], dc->job_rows[i], rc == 0 ? text : other,
				      rc == 0 ? cap : sizeof(other));
	if (rc == -EBADMSG) /* on_error = fail: that image's text, last */
		decode_report(l, m, &dc->job[b.fail_at], dc->job_rows[b.fail_at], text, cap);
	else if (rc == -EINVAL)
		snprintf(text, cap, "row %u of a batch of pipeline \"%s\" has a bad GPU decoding "
			 "descriptor", dc->job_rows[b.fail_at], src->cfg->name);
	bool ok = rc == 0;
	if (ok && dc->n_bad > 0)
		ok = substitute_bad(l, m, dst, text, cap);
	if (!ok && rc == 0) /* nothing may read the batch's source once the caller returns */
		gd_abandon(dc->gd, &dc->share);
	return ok;
}

void pinner_decode_close(struct lane *l)
{
	if (l->decode) {
		atomic_fetch_sub(&l->p->gpus[l->dev].decode_bytes, l->decode->info.device_bytes);
		decode_free(l->decode); /* waits for the parts in flight */
		l->decode = NULL;
	}
}

#else /* no nvJPEG header or no CUDA compiler at build time */

bool pinner_decode_attach(struct lane *l, struct pinner_client *pc, struct msg *m)
{
	struct pinner *p = l->p;
	const struct pipeline_cfg *cfg = p->sources[pc->pipeline].cfg;
	if (p->sources[pc->pipeline].desc.kind != ARENA_SOURCE_IMAGES || cfg->decode != DECODE_GPU)
		return true;
	m->rc = -ENOTSUP;
	snprintf(m->text, sizeof(m->text), "decode = gpu, but this loaderd was built without GPU JPEG "
		 "decoding (no nvjpeg.h or no CUDA compiler)");
	return false;
}

bool pinner_decode_batch(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	snprintf(text, cap, "GPU JPEG decoding is not built in");
	return false;
}

void pinner_decode_close(struct lane *l)
{
}

#endif
