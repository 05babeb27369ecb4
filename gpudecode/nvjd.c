/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd: decoders on the GPU's hardware JPEG engines (nvjd.h): open, the
 * checks of each image, batched submission and the search for the bad
 * images of a failed batch. nvJPEG is called only through the table `nvjd_lib`
 * that nvjd_load fills (nvjd_lib.c). nvJPEG statuses become an errno at
 * each call, their text through nvjd_status_name; CUDA errors through
 * common/cudaerr.h.
 */
#include "gpudecode/nvjd.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errtext.h"
#include "common/cudaerr.h"
#include "gpudecode/nvjd_impl.h"
#include "image/jpeghdr.h"

struct nvjd; /* nvjd_impl.h */

/* Failures of the library or the GPU rather than of one image. */
static bool nvj_status_is_decoder(nvjpegStatus_t s)
{
	return s == NVJPEG_STATUS_NOT_INITIALIZED || s == NVJPEG_STATUS_ALLOCATOR_FAILURE ||
	       s == NVJPEG_STATUS_ARCH_MISMATCH;
}

static int nvj_decoder_errno(nvjpegStatus_t s)
{
	return s == NVJPEG_STATUS_ALLOCATOR_FAILURE ? -ENOMEM : -EIO;
}

/* ---- the current device ---------------------------------------------------- */

struct device_guard {
	int prev;
	bool switched;
};

/* 0 for cudaSuccess, else -errno with "GPU N: CALL: DESCRIPTION (NAME)" in why. */
static int cuda_check(cudaError_t e, int device, const char *call, char *why, size_t cap)
{
	if (e == cudaSuccess)
		return 0;
	char text[256];
	return errtext(why, cap, cudaerr_errno(e), "GPU %d: %s: %s", device, call,
		       cudaerr_text(e, text, sizeof text));
}

static int device_enter(int device, struct device_guard *g, char *why, size_t cap)
{
	g->switched = false;
	int rc = cuda_check(cudaGetDevice(&g->prev), device, "cudaGetDevice", why, cap);
	if (rc == 0 && g->prev != device) {
		rc = cuda_check(cudaSetDevice(device), device, "cudaSetDevice", why, cap);
		g->switched = rc == 0;
	}
	return rc;
}

static void device_leave(const struct device_guard *g)
{
	if (g->switched)
		cudaSetDevice(g->prev);
}

/* ---- handles ---------------------------------------------------------------- */

/*
 * The decoders of one GPU and one set of flags share an nvJPEG handle,
 * as nvJPEG's model has it (a handle per process and GPU may serve several
 * threads, each with its own state), unless opened with
 * NVJD_PRIVATE_HANDLE. On an H200 the two gave the same rates from 1 to 8
 * submitting threads (loaderd-nvjd-bench, bench/RESULTS.md); shared, a
 * GPU's decoders hold nvJPEG's handle resources once.
 */
#define SHARED_HANDLES_MAX 64

struct shared_handle {
	int device;
	unsigned nv_flags;
	unsigned refs; /* 0: the slot is free */
	nvjpegHandle_t handle;
};

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared_handle shared_handles[SHARED_HANDLES_MAX];

/* d->handle: the shared one for its device and nv_flags, made on first use
 * (on the current device, d's), or its own; nvjpegCreateEx's status. */
static nvjpegStatus_t handle_get(struct nvjd *d, unsigned nv_flags)
{
	if (d->flags & NVJD_PRIVATE_HANDLE)
		return nvjd_lib.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, nv_flags,
					       &d->handle);
	pthread_mutex_lock(&shared_mu);
	struct shared_handle *free_slot = NULL;
	nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
	for (size_t i = 0; i < SHARED_HANDLES_MAX && !d->shared; i++) {
		struct shared_handle *h = &shared_handles[i];
		if (h->refs && h->device == d->device && h->nv_flags == nv_flags)
			d->shared = h;
		else if (!h->refs && !free_slot)
			free_slot = h;
	}
	if (!d->shared && free_slot) {
		s = nvjd_lib.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, nv_flags,
					    &free_slot->handle);
		if (s == NVJPEG_STATUS_SUCCESS) {
			*free_slot = (struct shared_handle){.device = d->device, .nv_flags = nv_flags,
							    .handle = free_slot->handle};
			d->shared = free_slot;
		}
	}
	if (d->shared) {
		d->shared->refs++;
		d->handle = d->shared->handle;
	}
	pthread_mutex_unlock(&shared_mu);
	if (!d->shared && s == NVJPEG_STATUS_SUCCESS) /* every slot taken: its own */
		s = nvjd_lib.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, nv_flags,
					    &d->handle);
	return s;
}

/* Lets go of d->handle, destroying it if no decoder has it any more; on
 * d's device, current. */
static void handle_put(struct nvjd *d)
{
	if (!d->shared) {
		nvjd_lib.nvjpegDestroy(d->handle);
		return;
	}
	pthread_mutex_lock(&shared_mu);
	if (--d->shared->refs == 0) {
		nvjd_lib.nvjpegDestroy(d->shared->handle);
		d->shared->handle = NULL;
	}
	pthread_mutex_unlock(&shared_mu);
	d->shared = NULL;
}

/* ---- open and close ------------------------------------------------------- */

void nvjd_close(struct nvjd *d)
{
	if (!d)
		return;
	struct device_guard g;
	bool current = device_enter(d->device, &g, NULL, 0) == 0;
	if (d->done) {
		if (d->in_flight)
			cudaEventSynchronize(d->done);
		cudaEventDestroy(d->done);
	}
	if (d->params)
		for (uint32_t i = 0; i < 2 * d->max_batch && d->params[i]; i++)
			nvjd_lib.nvjpegDecodeParamsDestroy(d->params[i]);
	if (d->parsed)
		nvjd_lib.nvjpegJpegStreamDestroy(d->parsed);
	if (d->state)
		nvjd_lib.nvjpegJpegStateDestroy(d->state);
	if (d->handle)
		handle_put(d);
	if (current)
		device_leave(&g);
	free(d->params);
	free(d->queue);
	free(d->data);
	free(d->lens);
	free(d->dst);
	free(d->batch_params);
	free(d);
}

static nvjpegOutputFormat_t output_format(const struct nvjd *d)
{
	return d->flags & NVJD_OUTPUT_YUV ? NVJPEG_OUTPUT_YUV : NVJPEG_OUTPUT_RGBI;
}

/* The nvJPEG objects of an opened decoder; -errno with why. */
static int open_nvjpeg(struct nvjd *d, char *why, size_t cap)
{
	unsigned nv_flags =
		d->flags & NVJD_SMOOTH_UPSAMPLING ? NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION : 0;
	nvjpegStatus_t s = handle_get(d, nv_flags);
	if (s != NVJPEG_STATUS_SUCCESS) {
		d->handle = NULL;
		if (s == NVJPEG_STATUS_ALLOCATOR_FAILURE)
			return errtext(why, cap, -ENOMEM, "GPU %d: nvjpegCreateEx: %s", d->device,
				       nvjd_status_name(s));
		if (s == NVJPEG_STATUS_INTERNAL_ERROR || s == NVJPEG_STATUS_EXECUTION_FAILED)
			return errtext(why, cap, -EIO, "GPU %d: nvjpegCreateEx: %s", d->device,
				       nvjd_status_name(s));
		if (s == NVJPEG_STATUS_INVALID_PARAMETER && nv_flags)
			return errtext(
				why, cap, -ENOTSUP,
				"GPU %d: nvJPEG's hardware decoder refuses smooth upsampling "
				"(nvjpegCreateEx: %s)",
				d->device, nvjd_status_name(s));
		return errtext(why, cap, -ENOTSUP,
			       "GPU %d has no hardware JPEG decoder (nvjpegCreateEx: %s)",
			       d->device, nvjd_status_name(s));
	}
	s = nvjd_lib.nvjpegGetHardwareDecoderInfo(d->handle, &d->engines, &d->cores_per_engine);
	if (s != NVJPEG_STATUS_SUCCESS || d->engines == 0)
		return errtext(why, cap, -ENOTSUP, "GPU %d has no hardware JPEG decoder (%s)",
			       d->device,
			       s != NVJPEG_STATUS_SUCCESS ? nvjd_status_name(s) : "0 engines");
	const char *call = "nvjpegJpegStateCreate";
	s = nvjd_lib.nvjpegJpegStateCreate(d->handle, &d->state);
	/* The state's device buffers from nvJPEG's pool, which keeps what it
	 * has grown to, rather than allocated and freed as batches change
	 * (a free waits for the daemon's work on the GPU). A 1 x 1 hint
	 * reserves nothing up front. Beside a training process it did not
	 * change the host time of a submission (bench/RESULTS.md). */
	if (s == NVJPEG_STATUS_SUCCESS) {
		call = "nvjpegDecodeBatchedPreAllocate";
		s = nvjd_lib.nvjpegDecodeBatchedPreAllocate(d->handle, d->state, (int)d->max_batch,
							    1, 1, NVJPEG_CSS_444, output_format(d));
	}
	if (s == NVJPEG_STATUS_SUCCESS) {
		call = "nvjpegJpegStreamCreate";
		s = nvjd_lib.nvjpegJpegStreamCreate(d->handle, &d->parsed);
	}
	for (uint32_t i = 0; i < 2 * d->max_batch && s == NVJPEG_STATUS_SUCCESS; i++) {
		call = "nvjpegDecodeParamsCreate";
		s = nvjd_lib.nvjpegDecodeParamsCreate(d->handle, &d->params[i]);
		if (s != NVJPEG_STATUS_SUCCESS) {
			d->params[i] = NULL;
			break;
		}
		call = "nvjpegDecodeParamsSetOutputFormat";
		s = nvjd_lib.nvjpegDecodeParamsSetOutputFormat(d->params[i], output_format(d));
	}
	if (s != NVJPEG_STATUS_SUCCESS)
		return errtext(why, cap, nvj_decoder_errno(s), "GPU %d: %s: %s", d->device, call,
			       nvjd_status_name(s));
	return 0;
}

int nvjd_open(int device, uint32_t max_batch, unsigned flags, struct nvjd **out, char *why,
	      size_t cap)
{
	if (!out || max_batch == 0 || max_batch > NVJD_MAX_BATCH ||
	    (flags & ~(NVJD_SMOOTH_UPSAMPLING | NVJD_PRIVATE_HANDLE | NVJD_OUTPUT_YUV)))
		return errtext(why, cap, -EINVAL,
			       "nvjd_open: invalid arguments (max_batch %u, flags %#x)", max_batch,
			       flags);
	*out = NULL;
	if (!nvjd_lib_loaded())
		return errtext(why, cap, -ENOSYS, "nvJPEG is not loaded");
	int count = 0;
	if (cuda_check(cudaGetDeviceCount(&count), device, "cudaGetDeviceCount", why, cap))
		return -ENODEV;
	if (device < 0 || device >= count)
		return errtext(why, cap, -ENODEV, "no GPU %d (this process sees %d)", device,
			       count);

	struct nvjd *d = calloc(1, sizeof *d);
	if (!d)
		return errtext(why, cap, -ENOMEM, "GPU %d: out of memory", device);
	d->device = device;
	d->max_batch = max_batch;
	d->flags = flags;
	d->params = calloc(2 * (size_t)max_batch, sizeof *d->params);
	d->queue = calloc(max_batch, sizeof *d->queue);
	d->data = calloc(max_batch, sizeof *d->data);
	d->lens = calloc(max_batch, sizeof *d->lens);
	d->dst = calloc(max_batch, sizeof *d->dst);
	d->batch_params = calloc(max_batch, sizeof *d->batch_params);
	if (!d->params || !d->queue || !d->data || !d->lens || !d->dst || !d->batch_params) {
		nvjd_close(d);
		return errtext(why, cap, -ENOMEM, "GPU %d: out of memory", device);
	}

	struct device_guard g;
	int rc = device_enter(device, &g, why, cap);
	if (rc) {
		nvjd_close(d);
		return rc;
	}
	rc = open_nvjpeg(d, why, cap);
	if (rc == 0) {
		rc = cuda_check(cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming), device,
				"cudaEventCreateWithFlags", why, cap);
		if (rc)
			d->done = NULL;
	}
	device_leave(&g);
	if (rc) {
		nvjd_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

void nvjd_stats(const struct nvjd *d, struct nvjd_stats *out)
{
	*out = d->stats;
}

void nvjd_info(const struct nvjd *d, struct nvjd_info *out)
{
	*out = (struct nvjd_info){
		.device = d->device,
		.engines = d->engines,
		.cores_per_engine = d->cores_per_engine,
		.max_batch = d->max_batch,
		.flags = d->flags,
	};
	nvjd_lib_version(out->version);
}

/* ---- submission ------------------------------------------------------------ */

static int wait_done(struct nvjd *d, char *why, size_t cap)
{
	if (!d->in_flight)
		return 0;
	uint64_t t0 = clock_mono_ns();
	int rc = cuda_check(cudaEventSynchronize(d->done), d->device, "cudaEventSynchronize", why,
			    cap);
	d->stats.wait_ns += clock_mono_ns() - t0;
	if (rc)
		return rc == -ENOMEM ? -ENOMEM : -EIO;
	d->in_flight = false;
	return 0;
}

int nvjd_wait(struct nvjd *d, char *why, size_t cap)
{
	struct device_guard g;
	int rc = device_enter(d->device, &g, why, cap);
	if (rc)
		return rc;
	rc = wait_done(d, why, cap);
	device_leave(&g);
	return rc;
}

/* Queues batch entries [lo, hi) on stream, after the previous submission
 * is done (the state's buffers are reused, and nvjpegDecodeBatchedInitialize
 * wants no batch running). nvJPEG's verdict in *verdict; -errno (with why)
 * when waiting, initialising or recording failed. */
static int submit(struct nvjd *d, uint32_t lo, uint32_t hi, cudaStream_t stream,
		  nvjpegStatus_t *verdict, char *why, size_t cap)
{
	int rc = wait_done(d, why, cap);
	if (rc)
		return rc;
	int size = (int)(hi - lo);
	uint64_t t0 = clock_mono_ns();
	if (d->batch_size != size) {
		nvjpegStatus_t s = nvjd_lib.nvjpegDecodeBatchedInitialize(d->handle, d->state, size,
									  1, output_format(d));
		if (s != NVJPEG_STATUS_SUCCESS) {
			d->batch_size = 0;
			d->stats.submit_ns += clock_mono_ns() - t0;
			return errtext(why, cap, nvj_decoder_errno(s),
				       "GPU %d: nvjpegDecodeBatchedInitialize(%d): %s", d->device,
				       size, nvjd_status_name(s));
		}
		d->batch_size = size;
	}
	*verdict = nvjd_lib.nvjpegDecodeBatchedEx(d->handle, d->state, d->data + lo, d->lens + lo,
						  d->dst + lo, d->batch_params + lo, stream);
	d->stats.submit_ns += clock_mono_ns() - t0;
	if (*verdict != NVJPEG_STATUS_SUCCESS)
		d->batch_size = 0; /* a failed batch leaves the state to be initialised again */
	rc = cuda_check(cudaEventRecord(d->done, stream), d->device, "cudaEventRecord", why, cap);
	if (rc)
		return rc == -ENOMEM ? -ENOMEM : -EIO;
	d->in_flight = true;
	return 0;
}

/* Gives the images of batch entries [lo, hi) the decoder's failure. */
static void fail_entries(struct nvjd *d, struct nvjd_image *imgs, uint32_t lo, uint32_t hi,
			 int code, const char *why)
{
	for (uint32_t j = lo; j < hi; j++)
		nvjd__reject(&imgs[d->queue[j]], code, "%s", why);
}

struct decode_run {
	uint32_t engine_failures; /* single images the engines failed */
	nvjpegStatus_t last;      /* the last of those failures */
	char why[NVJD_ERR_MAX];   /* the decoder's failure, when there is one */
};

/* Decodes batch entries [lo, hi) in one call; when nvJPEG fails the call,
 * each half in turn, down to single images, which then get the verdict.
 * 0, or the decoder's -errno, with run->why, which every entry not queued
 * then has as its status. */
static int decode_range(struct nvjd *d, struct nvjd_image *imgs, uint32_t lo, uint32_t hi,
			cudaStream_t stream, struct decode_run *run)
{
	nvjpegStatus_t verdict = NVJPEG_STATUS_SUCCESS;
	int rc = submit(d, lo, hi, stream, &verdict, run->why, sizeof run->why);
	if (rc == 0 && verdict != NVJPEG_STATUS_SUCCESS) {
		if (nvj_status_is_decoder(verdict))
			rc = errtext(run->why, sizeof run->why, nvj_decoder_errno(verdict),
				     "GPU %d: nvjpegDecodeBatchedEx: %s", d->device,
				     nvjd_status_name(verdict));
		else /* what the failed call queued, if anything, is done before a retry */
			rc = wait_done(d, run->why, sizeof run->why);
	}
	if (rc) {
		fail_entries(d, imgs, lo, hi, rc, run->why);
		return rc;
	}
	if (verdict == NVJPEG_STATUS_SUCCESS)
		return 0;
	if (hi - lo == 1) {
		struct nvjd_image *im = &imgs[d->queue[lo]];
		run->engine_failures++;
		run->last = verdict;
		if (verdict == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
		    verdict == NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED ||
		    verdict == NVJPEG_STATUS_INVALID_PARAMETER)
			nvjd__reject(im, -ENOTSUP,
			       "the hardware decoder refused this image (nvjpegDecodeBatchedEx: "
			       "%s)",
			       nvjd_status_name(verdict));
		else
			nvjd__reject(im, -EBADMSG,
			       "corrupt JPEG data: the hardware decoder failed "
			       "(nvjpegDecodeBatchedEx: %s)",
			       nvjd_status_name(verdict));
		return 0;
	}
	uint32_t mid = lo + (hi - lo) / 2;
	rc = decode_range(d, imgs, lo, mid, stream, run);
	if (rc) {
		fail_entries(d, imgs, mid, hi, rc, run->why);
		return rc;
	}
	return decode_range(d, imgs, mid, hi, stream, run);
}

int nvjd_decode(struct nvjd *d, struct nvjd_image *imgs, uint32_t n, cudaStream_t stream)
{
	if (!d || (!imgs && n) || n > d->max_batch)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		struct nvjd_image *im = &imgs[i];
		im->width = im->height = im->out_w = im->out_h = 0;
		im->status = 0;
		im->err[0] = '\0';
	}
	char why[NVJD_ERR_MAX];
	struct device_guard g;
	int rc = device_enter(d->device, &g, why, sizeof why);
	if (rc) {
		for (uint32_t i = 0; i < n; i++)
			nvjd__reject(&imgs[i], rc, "%s", why);
		return rc;
	}

	/* The checks, on the host, while the previous batch may still run. */
	nvjpegDecodeParams_t *params = d->params + (size_t)d->param_set * d->max_batch;
	d->param_set ^= 1;
	uint32_t k = 0;
	uint64_t t0 = clock_mono_ns();
	for (uint32_t i = 0; i < n; i++)
		if (nvjd__check_image(d, &imgs[i], params[i]) == 0)
			d->queue[k++] = i;
	d->stats.check_ns += clock_mono_ns() - t0;
	d->stats.calls++;
	d->stats.images += n;
	/* nvJPEG is given these arrays once the previous batch is done. */
	rc = wait_done(d, why, sizeof why);
	if (rc) {
		fail_entries(d, imgs, 0, k, rc, why);
		device_leave(&g);
		return rc;
	}
	for (uint32_t j = 0; j < k; j++) {
		const struct nvjd_image *im = &imgs[d->queue[j]];
		d->data[j] = im->data;
		d->lens[j] = im->len;
		d->dst[j] = (nvjpegImage_t){.channel = {im->dst}, .pitch = {im->pitch}};
		if (im->planes != NVJD_PLANES_NONE) {
			uint64_t at[3], pitch[3];
			nvjd_planes_layout(im->planes, im->width, im->height, at, pitch);
			for (int c = 0; c < 3; c++)
				d->dst[j].channel[c] = im->dst + at[c], d->dst[j].pitch[c] = pitch[c];
		}
		d->batch_params[j] = params[d->queue[j]];
	}
	struct decode_run run = {.engine_failures = 0};
	if (k > 0)
		rc = decode_range(d, imgs, 0, k, stream, &run);
	/* Every image of several failing alone says more about the engines
	 * than about the images. */
	if (rc == 0 && k >= 2 && run.engine_failures == k) {
		rc = errtext(why, sizeof why, -EIO,
			     "GPU %d: the hardware decoder failed all %u images (last: %s)",
			     d->device, k, nvjd_status_name(run.last));
		fail_entries(d, imgs, 0, k, rc, why);
	}
	device_leave(&g);
	return rc;
}
