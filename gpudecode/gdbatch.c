/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gdbatch: one batch's decode on the GPU (gpudecode.h). The images go to
 * the hardware engines (nvjd.h, whole images: a region of interest was no
 * faster on the engines, and nvJPEG 13.0 decodes one differently from a
 * whole image at the image's right and bottom edges) into a buffer set ->
 * images the workers would have decoded at a reduced DCT scale
 * (jd_pick_scale) are made as small by block means (imgk_shrink_launch;
 * not under decode_scale = full), so that both paths resample nearly the
 * same pixels -> one imgkernel launch per part (imgkernel.h) crops,
 * resizes, flips and converts them into their rows of the destination, as
 * the workers would have -> the caller's stream waits for that work.
 *
 * A batch's images are decoded in parts, as many as fit one set, and the
 * parts take the sets in turn, so that the host's submission of a part
 * (about 40 us an image) overlaps the engines' work on the one before:
 * before a part reuses a set's buffer the thread waits on the host for
 * the kernel of the part that used it last (the hazard, gpudecode.h);
 * with one set, that wait came between every two parts. Every submitter
 * has an nvJPEG decoder per set, since a decoder takes a new batch only
 * once its last one is done.
 *
 * Streams: each set has its own. A part's decode, shrink and resize are
 * queued on its set's stream, which first waits (on the GPU) for what the
 * caller queued on its stream before the call, since the resize writes
 * the caller's memory; the caller's stream then waits for every set the
 * batch used. So the parts of one batch, and successive batches, run on
 * the GPU side by side, as many as there are sets.
 *
 * An image the engines refuse or fail (nvjd's per-image status) is decoded
 * here on the CPU from the same bytes, as a worker would have
 * (image_sample), and copied into its row.
 */
#include "gpudecode/gpudecode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/cudaerr.h"
#include "common/hash.h"
#include "gpudecode/imgkernel.h"
#include "image/image_sample.h"
#include "image/jpeg.h"

#define DECODE_ALIGN 256u /* each decoded image's start in the buffer */

/* What one part in flight uses; free again once `done` has passed. */
struct gd_set {
	struct nvjd *nvjd;        /* the calling thread's decoder for this set */
	uint8_t *buf;             /* decoded images, device, buf_bytes */
	uint8_t *scratch;         /* the kernel's, device, scratch_bytes */
	struct imgk_item *items;  /* page-locked, max_batch */
	struct imgk_item *items_dev;
	struct imgk_shrink *shrink; /* page-locked, max_batch */
	struct imgk_shrink *shrink_dev;
	cudaStream_t stream;      /* the part's decode, shrink and resize */
	cudaEvent_t done;         /* behind all of the part's work on stream */
	bool pending;             /* done recorded and not yet waited for */
};

struct gd {
	struct gd_set sets[GD_SETS_MAX];
	uint32_t n_sets;
	uint32_t cur;             /* the set the next part takes */
	uint32_t used;            /* the sets the batch being decoded used, a bit each */
	cudaEvent_t copied;       /* on the caller's stream, at the batch's start */
	uint32_t max_batch;
	uint64_t device_bytes;    /* allocated in all */
	uint64_t buf_bytes;       /* of each set */
	uint64_t scratch_bytes;   /* of each set */
	struct nvjd_info info;
	char memory_what[64];     /* gd_options' */
	/* the part being gathered, [max_batch] each */
	struct nvjd_image *imgs;
	uint32_t *index;          /* each of imgs' place in the batch */
	uint32_t *factor;         /* each of imgs' shrink factor, 1 for none */
	uint32_t *chroma;         /* each of imgs' chroma subsampling when factor > 1:
				   * across | down << 16, each 1 or 2 */
	uint8_t **small;          /* each of imgs' shrunk image in buf, when factor > 1 */
	uint8_t *row_host;        /* the CPU path's row, page-locked */
	uint64_t row_host_bytes;
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

void gd_close(struct gd *g)
{
	if (!g)
		return;
	for (uint32_t s = 0; s < GD_SETS_MAX; s++) {
		struct gd_set *set = &g->sets[s];
		if (set->pending)
			cudaEventSynchronize(set->done);
		nvjd_close(set->nvjd);
		cudaFree(set->buf);
		cudaFree(set->scratch);
		cudaFree(set->items_dev);
		cudaFreeHost(set->items);
		cudaFree(set->shrink_dev);
		cudaFreeHost(set->shrink);
		if (set->done)
			cudaEventDestroy(set->done);
		if (set->stream)
			cudaStreamDestroy(set->stream);
	}
	if (g->copied)
		cudaEventDestroy(g->copied);
	free(g->factor);
	free(g->chroma);
	free(g->small);
	cudaFreeHost(g->row_host);
	free(g->imgs);
	free(g->index);
	free(g);
}

int gd_open(const struct gd_options *o, struct gd **out, char *why, size_t cap)
{
	if (!o || !out || o->max_batch == 0 || o->max_batch > NVJD_MAX_BATCH) {
		snprintf(why, cap, "gd_open: bad options");
		return -EINVAL;
	}
	struct gd *dc = calloc(1, sizeof(*dc));
	if (!dc) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	dc->max_batch = o->max_batch;
	snprintf(dc->memory_what, sizeof(dc->memory_what), "%s",
		 o->memory_what ? o->memory_what : "the decoder's memory");
	struct gd_set *set0 = &dc->sets[0];
	int rc = nvjd_open(o->device, dc->max_batch, NVJD_SMOOTH_UPSAMPLING, &set0->nvjd, why, cap);
	if (rc == -ENOTSUP && strstr(why, "upsampling"))
		rc = nvjd_open(o->device, dc->max_batch, 0, &set0->nvjd, why, cap);
	if (rc == 0)
		nvjd_info(set0->nvjd, &dc->info);
	uint64_t budget = o->memory_bytes;
	dc->n_sets = (uint32_t)(budget / GD_SET_BYTES);
	if (dc->n_sets < GD_SETS_MIN)
		dc->n_sets = GD_SETS_MIN;
	if (dc->n_sets > GD_SETS_MAX)
		dc->n_sets = GD_SETS_MAX;
	for (uint32_t s = 1; s < dc->n_sets && rc == 0; s++)
		rc = nvjd_open(o->device, dc->max_batch, dc->info.flags, &dc->sets[s].nvjd, why, cap);
	if (rc < 0) {
		gd_close(dc);
		return rc;
	}
	size_t free_bytes = 0, total_bytes = 0;
	cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
	if (e == cudaSuccess && budget + o->reserve_bytes > free_bytes) {
		snprintf(why, cap, "%s (%" PRIu64 " bytes, plus %llu MiB kept free) is "
			 "more than the %zu bytes free on the GPU",
			 dc->memory_what, budget,
			 (unsigned long long)(o->reserve_bytes >> 20), free_bytes);
		gd_close(dc);
		return -ENOMEM;
	}
	uint64_t per_set = budget / dc->n_sets;
	dc->buf_bytes = align_up(per_set / 3, DECODE_ALIGN);
	dc->scratch_bytes = align_up(per_set - dc->buf_bytes, DECODE_ALIGN) - DECODE_ALIGN;
	int priority = 0, lowest = 0;
	if (e == cudaSuccess && o->high_priority)
		e = cudaDeviceGetStreamPriorityRange(&lowest, &priority);
	for (uint32_t s = 0; s < dc->n_sets && e == cudaSuccess; s++) {
		struct gd_set *set = &dc->sets[s];
		e = cudaMalloc((void **)&set->buf, dc->buf_bytes);
		if (e == cudaSuccess)
			e = cudaMemset(set->buf, 0, dc->buf_bytes); /* and after every part */
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&set->scratch, dc->scratch_bytes);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&set->items_dev, sizeof(*set->items_dev) * dc->max_batch);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&set->items, sizeof(*set->items) * dc->max_batch, 0);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&set->shrink_dev,
				       sizeof(*set->shrink_dev) * dc->max_batch);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&set->shrink, sizeof(*set->shrink) * dc->max_batch, 0);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&set->done, cudaEventDisableTiming);
		if (e == cudaSuccess)
			e = cudaStreamCreateWithPriority(&set->stream, cudaStreamNonBlocking, priority);
	}
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&dc->copied, cudaEventDisableTiming);
	dc->imgs = calloc(dc->max_batch, sizeof(*dc->imgs));
	dc->index = calloc(dc->max_batch, sizeof(*dc->index));
	dc->factor = calloc(dc->max_batch, sizeof(*dc->factor));
	dc->chroma = calloc(dc->max_batch, sizeof(*dc->chroma));
	dc->small = calloc(dc->max_batch, sizeof(*dc->small));
	if (cudaerr_failed(e, why, cap, "allocating the GPU decoder's buffers") || !dc->imgs ||
	    !dc->index || !dc->factor || !dc->chroma || !dc->small) {
		if (e == cudaSuccess)
			snprintf(why, cap, "out of memory");
		gd_close(dc);
		return e != cudaSuccess ? cudaerr_errno(e) : -ENOMEM;
	}
	dc->device_bytes = dc->n_sets * (dc->buf_bytes + dc->scratch_bytes);
	*out = dc;
	return 0;
}

void gd_info(const struct gd *g, struct gd_info *out)
{
	*out = (struct gd_info){.nvjd = g->info, .n_sets = g->n_sets, .max_batch = g->max_batch,
				.buf_bytes = g->buf_bytes, .scratch_bytes = g->scratch_bytes,
				.device_bytes = g->device_bytes};
	for (uint32_t s = 0; s < g->n_sets; s++)
		out->set_buf[s] = g->sets[s].buf;
}

/* b->imgs[i] decoded here on the CPU, as a worker would, into its row of
 * dst: 0 (GD_CPU, or GD_BAD when the CPU path refuses it too and the
 * batch goes on); -EBADMSG (GD_BAD, stop_at_bad) or another -errno with
 * text, the batch failed. */
static int decode_on_cpu(struct gd *dc, struct gd_batch *b, uint32_t i, const char *gpu_err,
			 char *text, size_t cap)
{
	struct gd_image *im = &b->imgs[i];
	snprintf(im->err, sizeof(im->err), "%s", gpu_err);
	uint64_t row_bytes = b->row_bytes;
	if (dc->row_host_bytes < row_bytes) {
		cudaFreeHost(dc->row_host);
		dc->row_host_bytes = 0;
		if (cudaHostAlloc((void **)&dc->row_host, row_bytes, 0) != cudaSuccess) {
			dc->row_host = NULL;
			snprintf(text, cap, "out of page-locked memory for an image's CPU decode");
			return -ENOMEM;
		}
		dc->row_host_bytes = row_bytes;
	}
	int rc = image_sample(b->cpu, im->jpeg, im->len, im->epoch, im->sample, dc->row_host);
	if (rc < 0) {
		im->status = GD_BAD;
		im->cpu_rc = rc;
		if (!b->stop_at_bad)
			return 0;
		b->fail_at = i;
		snprintf(text, cap, "a bad image: the GPU's decoder refused it (%.160s), and so did the "
			 "CPU's", gpu_err);
		return -EBADMSG;
	}
	cudaError_t e = cudaMemcpyAsync(b->dst + im->dst_offset, dc->row_host, row_bytes,
					cudaMemcpyHostToDevice, b->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(b->stream); /* row_host is reused */
	if (cudaerr_failed(e, text, cap, "copying a CPU-decoded image"))
		return cudaerr_errno(e);
	im->status = GD_CPU;
	return 0;
}

/* Decodes the n images gathered in dc (imgs, index) into the current set
 * and resizes them into dst; the failed ones on the CPU. The next part
 * takes the next set. */
static int decode_part(struct gd *dc, struct gd_batch *b, uint32_t n, uint64_t buf_used,
		       const struct imgk_format *fmt, char *text, size_t cap)
{
	struct gd_set *set = &dc->sets[dc->cur];
	uint64_t t0 = clock_mono_ns();
	dc->cur = (dc->cur + 1) % dc->n_sets;
	/* imgs split over the shares and this thread, which takes the last */
	uint32_t given = b->share ? b->share->give(b->share->ctx, dc->imgs, n,
						   (uint32_t)(set - dc->sets)) : 0;
	dc->used |= 1u << (set - dc->sets);
	int rc = nvjd_decode(set->nvjd, dc->imgs + given, n - given, set->stream);
	const char *err = dc->imgs[given].err;
	if (b->share)
		b->share->join(b->share->ctx, set->stream, &rc, &err);
	b->stats.parts++;
	b->stats.submit_ns += clock_mono_ns() - t0;
	if (rc < 0) {
		snprintf(text, cap, "JPEG decoding on the GPU failed: %s", err);
		return rc;
	}
	uint32_t k = 0, n_shrink = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct nvjd_image *im = &dc->imgs[i];
		const struct gd_image *g = &b->imgs[dc->index[i]];
		if (im->status != 0)
			continue;
		uint32_t f = dc->factor[i];
		uint32_t w = (im->out_w + f - 1) / f, h = (im->out_h + f - 1) / f;
		if (f > 1)
			set->shrink[n_shrink++] = (struct imgk_shrink){
				.src = im->dst, .src_pitch = im->pitch, .src_w = im->out_w,
				.src_h = im->out_h, .dst = dc->small[i], .dst_pitch = (uint64_t)w * 3, .f = f,
				.sh = (uint16_t)(dc->chroma[i] & 0xffff), .sv = (uint16_t)(dc->chroma[i] >> 16)};
		set->items[k++] = (struct imgk_item){
			.src = f > 1 ? dc->small[i] : im->dst, .src_pitch = f > 1 ? (uint64_t)w * 3 : im->pitch,
			.src_w = w, .src_h = h, .img_w = w, .img_h = h, .sx = 1.0 / f, .sy = 1.0 / f,
			.x = g->x, .y = g->y, .w = g->w, .h = g->h, .flip = g->flip,
			.dst_offset = g->dst_offset};
	}
	uint64_t scratch = 0;
	/* The resize writes the caller's memory: after what it queued first */
	cudaError_t e = cudaStreamWaitEvent(set->stream, dc->copied, 0);
	if (k > 0 && e == cudaSuccess) {
		if (imgk_plan(set->items, k, fmt, b->dst_bytes, &scratch) < 0 ||
		    scratch > dc->scratch_bytes) {
			snprintf(text, cap, "the GPU resize refused a batch's images");
			return -EIO;
		}
		e = cudaMemcpyAsync(set->items_dev, set->items, sizeof(*set->items) * k,
				    cudaMemcpyHostToDevice, set->stream);
		if (e == cudaSuccess && n_shrink > 0)
			e = cudaMemcpyAsync(set->shrink_dev, set->shrink,
					    sizeof(*set->shrink) * n_shrink, cudaMemcpyHostToDevice,
					    set->stream);
		if (e == cudaSuccess && n_shrink > 0 &&
		    imgk_shrink_launch(set->shrink_dev, n_shrink, set->stream, &e) < 0 && e == cudaSuccess)
			e = cudaErrorInvalidValue;
		if (e == cudaSuccess &&
		    imgk_launch(set->items_dev, k, fmt, set->scratch, dc->scratch_bytes, b->dst,
				b->dst_bytes, set->stream, &e) < 0 && e == cudaSuccess)
			e = cudaErrorInvalidValue;
	}
	/* The buffer zeroed again behind the resize, for the next part: an
	 * image the engines decode "successfully" from damaged data that runs
	 * out leaves the rest of its pixels unwritten, and those must not be
	 * what an earlier part left there. (Not before the next decode: the
	 * hardware path may write before work queued ahead of it has run.) */
	if (e == cudaSuccess)
		e = cudaMemsetAsync(set->buf, 0, buf_used, set->stream);
	/* Recorded even when the engines decoded nothing: the caller's stream
	 * waits for it, and with it for whatever the part queued. */
	if (e == cudaSuccess)
		e = cudaEventRecord(set->done, set->stream);
	if (cudaerr_failed(e, text, cap, "the GPU resize of decoded images"))
		return cudaerr_errno(e);
	set->pending = true;
	for (uint32_t i = 0; i < n; i++)
		if (dc->imgs[i].status == 0)
			b->imgs[dc->index[i]].status = GD_GPU;
	b->stats.gpu += k;
	for (uint32_t i = 0; i < n; i++) {
		const struct nvjd_image *im = &dc->imgs[i];
		if (im->status != 0) {
			rc = decode_on_cpu(dc, b, dc->index[i], im->err, text, cap);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Waits for the kernel of the part that used the current set last: its
 * buffers are free again. */
static int decode_wait(struct gd *dc, struct gd_batch *b, char *text, size_t cap)
{
	struct gd_set *set = &dc->sets[dc->cur];
	if (!set->pending)
		return 0;
	set->pending = false;
	uint64_t t0 = clock_mono_ns();
	cudaError_t e = cudaEventSynchronize(set->done);
	b->stats.wait_ns += clock_mono_ns() - t0;
	return cudaerr_failed(e, text, cap, "waiting for the GPU resize") ? cudaerr_errno(e) : 0;
}

/*
 * The factor the workers' fast decode would shrink the image of *g by
 * (8 / jd_fast_scale, from the sampling its header gave: 4:2:2 and 4:4:0
 * one DCT scale up), and into *chroma the subsampling the shrink kernel
 * models (imgk_shrink's sh, sv) as across | down << 16.
 */
static uint32_t shrink_factor(const struct gd_image *g, const struct arena_image_params *ip,
			      uint32_t *chroma)
{
	const uint32_t hs = g->luma_h == 2 ? 2 : 1, vs = g->luma_v == 2 ? 2 : 1;
	*chroma = hs | vs << 16;
	int m0 = jd_pick_scale(g->w, g->h, ip->out_w, ip->out_h);
	return m0 == 8 ? 1 : 8 / (uint32_t)jd_fast_scale(m0, hs, vs);
}

/* The batch's images into its parts, each decoded and resized on its set's
 * stream; the images the GPU cannot take on the CPU. */
static int decode_parts(struct gd *dc, struct gd_batch *b, char *text, size_t cap)
{
	const struct arena_image_params *ip = &b->cpu->params;
	struct imgk_format fmt = {.out_w = ip->out_w, .out_h = ip->out_h, .layout = ip->layout,
				  .dtype = ip->dtype};
	memcpy(fmt.mean, ip->mean, sizeof(fmt.mean));
	memcpy(fmt.std, ip->std, sizeof(fmt.std));
	/* a lone image's plan checks its description (unit mean and std: any
	 * dtype plans alike) */
	struct imgk_format one_fmt = {.out_w = ip->out_w, .out_h = ip->out_h, .layout = ip->layout,
				      .dtype = ip->dtype, .mean = {0, 0, 0}, .std = {1, 1, 1}};
	uint32_t n = 0;
	uint64_t buf_used = 0, scratch_used = 0;
	int rc;
	for (uint32_t i = 0; i < b->n; i++) {
		struct gd_image *g = &b->imgs[i];
		/* The workers' DCT scale for this box: the image shrunk as much
		 * (none under decode_scale = full) */
		uint32_t chroma = 0;
		uint32_t f = ip->decode_scale == JD_SCALE_FULL ? 1 : shrink_factor(g, ip, &chroma);
		uint32_t sw = (g->width + f - 1) / f, sh = (g->height + f - 1) / f;
		uint64_t full = align_up((uint64_t)g->width * g->height * 3, DECODE_ALIGN);
		uint64_t bytes = full + (f > 1 ? align_up((uint64_t)sw * sh * 3, DECODE_ALIGN) : 0);
		uint8_t *buf = dc->sets[dc->cur].buf;
		struct imgk_item one = {.src = buf, .src_pitch = (uint64_t)sw * 3,
					.src_w = sw, .src_h = sh, .img_w = sw, .img_h = sh,
					.sx = 1.0 / f, .sy = 1.0 / f, .x = g->x, .y = g->y,
					.w = g->w, .h = g->h, .dst_offset = 0};
		uint64_t scratch = 0;
		if (g->len == 0 || g->width == 0 || g->height == 0 ||
		    imgk_plan(&one, 1, &one_fmt, b->row_bytes, &scratch) < 0) {
			b->fail_at = i;
			snprintf(text, cap, "an image of the batch has a bad description");
			return -EINVAL;
		}
		if (bytes > dc->buf_bytes || scratch > dc->scratch_bytes) { /* too big for the GPU */
			char why[sizeof(dc->memory_what) + 32];
			snprintf(why, sizeof(why), "larger than %s allows", dc->memory_what);
			rc = decode_on_cpu(dc, b, i, why, text, cap);
			if (rc < 0)
				return rc;
			continue;
		}
		if (n == dc->max_batch || buf_used + bytes > dc->buf_bytes ||
		    scratch_used + scratch > dc->scratch_bytes) {
			if ((rc = decode_part(dc, b, n, buf_used, &fmt, text, cap)) < 0)
				return rc;
			n = 0;
			buf_used = scratch_used = 0;
		}
		if (n == 0 && (rc = decode_wait(dc, b, text, cap)) < 0)
			return rc;
		buf = dc->sets[dc->cur].buf; /* decode_part may have moved on */
		dc->index[n] = i;
		dc->factor[n] = f;
		dc->chroma[n] = chroma;
		dc->small[n] = buf + buf_used + full;
		dc->imgs[n] = (struct nvjd_image){.data = g->jpeg, .len = g->len, .scan_checked = true,
						  .given_w = g->width, .given_h = g->height,
						  .dst = buf + buf_used, .pitch = (size_t)g->width * 3,
						  .dst_bytes = (size_t)g->width * g->height * 3};
		n++;
		buf_used += bytes;
		scratch_used += align_up(scratch, DECODE_ALIGN);
	}
	return n == 0 ? 0 : decode_part(dc, b, n, buf_used, &fmt, text, cap);
}

void gd_abandon(struct gd *dc, const struct gd_share *share)
{
	if (share)
		share->quiesce(share->ctx);
	for (uint32_t i = 0; i < dc->n_sets; i++) {
		struct gd_set *set = &dc->sets[i];
		if (!(dc->used & (1u << i)))
			continue;
		cudaStreamSynchronize(set->stream);
		cudaMemset(set->buf, 0, dc->buf_bytes); /* a failed part may not have */
		set->pending = false;
	}
}

int gd_decode_batch(struct gd *dc, struct gd_batch *b, char *text, size_t cap)
{
	dc->used = 0;
	for (uint32_t i = 0; i < b->n; i++) {
		b->imgs[i].status = GD_UNDONE;
		b->imgs[i].cpu_rc = 0;
		b->imgs[i].err[0] = '\0';
	}
	cudaError_t e = cudaEventRecord(dc->copied, b->stream);
	if (cudaerr_failed(e, text, cap, "cudaEventRecord behind the batch's copy"))
		return cudaerr_errno(e);
	int rc = decode_parts(dc, b, text, cap);
	/* The caller's stream after every part */
	for (uint32_t i = 0; i < dc->n_sets && rc == 0; i++) {
		if (!(dc->used & (1u << i)))
			continue;
		e = cudaStreamWaitEvent(b->stream, dc->sets[i].done, 0);
		if (cudaerr_failed(e, text, cap, "cudaStreamWaitEvent on a decoding set's stream"))
			rc = cudaerr_errno(e);
	}
	if (rc < 0)
		gd_abandon(dc, b->share);
	return rc;
}

/* Rows tried as a bad row's replacement, per row of the batch */
#define SUBSTITUTE_ATTEMPTS 8

uint32_t gd_substitute_row(uint64_t seed, uint64_t epoch, uint64_t sample, uint32_t row,
			   uint32_t rows, const uint32_t *bad, uint32_t n_bad)
{
	uint32_t from = row;
	for (uint32_t a = 0; a < SUBSTITUTE_ATTEMPTS * rows && from == row; a++) {
		uint32_t c = (uint32_t)(hash_mix64(hash_sample(seed, 0x5b57ull, epoch, sample) ^ a) %
					rows);
		bool is_bad = false;
		for (uint32_t k = 0; k < n_bad && !is_bad; k++)
			is_bad = bad[k] == c;
		if (!is_bad)
			from = c;
	}
	return from;
}
