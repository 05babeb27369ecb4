/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpudecode: JPEG decoding on the GPU, a library of its own. The daemon's
 * GPU threads link it (daemon/gpu/pinner_decode.c) and so can the client
 * library, so that the hardware decode and the crop/resize kernel can run
 * in the training's own process; nothing here knows of the daemon.
 *
 * What it holds, each module with its own header:
 *   nvjd.h       nvJPEG loaded at run time (nvjd_load), and batches of
 *                JPEGs decoded on the GPU's hardware engines with a status
 *                per image (nvjd_open, nvjd_decode)
 *   imgkernel.h  the crop/resize/flip/store kernel and the shrink (block
 *                means) that stands in for the workers' reduced DCT scale
 *   this header  one batch the whole way (gd_open, gd_decode_batch): its
 *                JPEGs decoded on the engines into buffers of the decoder,
 *                shrunk as the workers' DCT scale would, resized into the
 *                caller's device memory; the images the engines refuse
 *                decoded on the CPU exactly as a worker would
 *                (image/image_sample.h), each with its status
 * It needs image/ (header rules: jd_pick_scale, jd_fast_scale, jh_parse;
 * the CPU path), common/, proto/ (dtypes) and CUDA.
 *
 * Owns: per decoder (struct gd), its buffer sets on one GPU: device memory
 * for decoded images and the kernel's scratch, an nvJPEG decoder, a CUDA
 * stream and an event per set, and a page-locked row for the CPU path.
 * The caller owns the JPEG bytes, the destination, the stream it passes
 * and the CPU path's image_sampler.
 *
 * Threads: one decoder is used by one thread at a time (its calls are
 * synchronous on that thread); decoders are independent. Other threads may
 * decode shares of a batch through struct gd_share (below), each with
 * nvJPEG decoders of its own; the library only hands them the shares and
 * waits for them. Nothing here logs: messages never name a file; the
 * caller, which knows the path, says what it decides.
 *
 * Streams: gd_decode_batch writes the caller's destination only with work
 * ordered after what the caller queued on `stream` before the call (each
 * set's stream waits for an event recorded there), and work the caller
 * queues on `stream` after the call sees every image. Images decoded on
 * the CPU are copied on `stream` itself, synchronously.
 *
 * The hazard: nvJPEG's hardware batched decode writes its output when it is
 * called, not in stream order (seen on H100: before work queued earlier on
 * the same stream has run), so a buffer must be known free on the host
 * before a hardware decode writes into it; a cudaStreamWaitEvent does not
 * protect it. This API makes that the library's own business: nvJPEG
 * writes only into the decoder's buffer sets, never into the caller's
 * memory, and before a set takes a part the library waits on the host
 * (cudaEventSynchronize) for the event behind that set's last readers (the
 * shrink, the resize and the zeroing that follows them). The caller's
 * destination is written only by kernels and copies in stream order, so
 * ordinary stream ordering protects it. A struct gd_share that decodes a
 * share must write only where it is told (the set's buffer, handed over
 * free); whoever calls nvjd_decode directly must keep the rule itself
 * (nvjd.h).
 */
#ifndef LDR_GPUDECODE_GPUDECODE_H
#define LDR_GPUDECODE_GPUDECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "gpudecode/nvjd.h"

struct image_sampler; /* image/image_sample.h */

/* Buffer sets per decoder: one per GD_SET_BYTES of memory_bytes, at least
 * GD_SETS_MIN and at most GD_SETS_MAX. */
#define GD_SETS_MIN 2u
#define GD_SETS_MAX 4u
#define GD_SET_BYTES (512ull << 20)

struct gd;

struct gd_options {
	int device;            /* CUDA device */
	uint32_t max_batch;    /* images of one part, 1..NVJD_MAX_BATCH */
	uint64_t memory_bytes; /* device memory of the sets: a third of each for
				* decoded images, the rest the kernel's scratch */
	uint64_t reserve_bytes; /* to be left free on the GPU besides */
	const char *memory_what; /* names memory_bytes in messages (a config key) */
	bool high_priority;    /* the sets' streams at the device's highest
				* priority: for a decoder inside a training's
				* process, whose kernels would otherwise queue
				* behind the training's (client/decode.h) */
};

/*
 * Opens a decoder on o->device, with smooth chroma upsampling where nvJPEG
 * has it (NVJD_SMOOTH_UPSAMPLING): nvjd_load must have succeeded.
 * Synchronous. 0 and *out, or -errno with why (cap bytes): nvjd_open's
 * codes, -ENOMEM when memory_bytes plus reserve_bytes is more than the
 * GPU has free or an allocation failed, -EIO for another CUDA failure.
 */
int gd_open(const struct gd_options *o, struct gd **out, char *why, size_t cap);

/* Waits for the parts in flight, then frees everything. NULL is fine. A
 * struct gd_share's threads must be stopped first. */
void gd_close(struct gd *g);

struct gd_info {
	struct nvjd_info nvjd;  /* the engines, nvJPEG's version, the flags opened with */
	uint32_t n_sets;
	uint32_t max_batch;
	uint64_t buf_bytes;     /* each set's buffer for decoded images */
	uint64_t scratch_bytes; /* each set's scratch */
	uint64_t device_bytes;  /* allocated in all */
	uint8_t *set_buf[GD_SETS_MAX]; /* the sets' buffers (device), for shares */
};
void gd_info(const struct gd *g, struct gd_info *out);

/*
 * Other submitters of a batch's images (threads, processes), each with an
 * nvJPEG decoder per set. For each part the library calls give() with
 * the part's images and the set they go to: it hands the front of
 * imgs[0..n) to the others (their dst lie in that set's buffer, which is
 * free) and returns how many it gave, the library decoding the rest on
 * the calling thread. Then join(): waits until every share is queued,
 * makes the set's `stream` wait (cudaStreamWaitEvent) for each share's
 * work, and sets *rc and *err to a share's failure where *rc is still 0;
 * a share's images that a submitter could not decode get a status, as
 * from nvjd_decode, and go to the CPU. quiesce(): after a failed batch,
 * waits until nothing of any share is queued on the GPU.
 */
struct gd_share {
	void *ctx;
	uint32_t (*give)(void *ctx, struct nvjd_image *imgs, uint32_t n, uint32_t set);
	void (*join)(void *ctx, cudaStream_t stream, int *rc, const char **err);
	void (*quiesce)(void *ctx);
};

/* What became of an image of a batch (struct gd_image's status). */
enum gd_status {
	GD_UNDONE = 0, /* not reached: the batch failed first */
	GD_GPU,        /* decoded on the engines and resized on the GPU */
	GD_CPU,        /* the engines refused it (err says why): decoded on the CPU */
	GD_BAD,        /* refused by the CPU path too (cpu_rc): its row is not written */
};

/* One image of a batch: inputs from the header parse and the plan that
 * left it to the GPU (image/image_sample.h's image_gpu_takes, and
 * image/transform.h's plan), outputs filled by gd_decode_batch. */
struct gd_image {
	const uint8_t *jpeg;    /* host memory, page-locked for speed; unchanged until the call returns */
	uint64_t len;
	uint32_t width, height; /* from the header (jh_parse): the engines are held to them */
	double x, y, w, h;      /* the plan's box, source pixels */
	bool flip;
	uint64_t epoch, sample; /* the CPU path plans from them as a worker does */
	uint64_t dst_offset;    /* its row in dst */
	uint8_t luma_h, luma_v; /* the first component's sampling factors from the header (1 or
				 * 2; 1, 1 for gray; the others 1x1, as the engines take them):
				 * the workers' DCT scale for it and the chroma the shrink copies */

	enum gd_status status;  /* out */
	int cpu_rc;             /* out, GD_BAD: image_sample's -errno */
	char err[NVJD_ERR_MAX]; /* out, GD_CPU and GD_BAD: why the engines did not decode it */
};

struct gd_batch_stats {
	uint64_t gpu;       /* images decoded on the engines */
	uint64_t parts;     /* parts submitted */
	uint64_t submit_ns; /* host time queueing parts (with the shares) */
	uint64_t wait_ns;   /* host time waiting for a set to be free */
};

struct gd_batch {
	struct gd_image *imgs;
	uint32_t n;
	/* The output format and the CPU path: rows as image_sample makes them
	 * under cpu's params (size, layout, dtype, mean, std, decode_scale). */
	struct image_sampler *cpu;
	uint8_t *dst;        /* device memory of the decoder's GPU */
	uint64_t dst_bytes;
	uint64_t row_bytes;  /* one image's row at each dst_offset */
	cudaStream_t stream; /* the caller's: see "Streams" above */
	bool stop_at_bad;    /* fail the batch at the first GD_BAD image */
	const struct gd_share *share; /* NULL: the calling thread alone */
	uint32_t fail_at;    /* out, on -EINVAL or -EBADMSG: the image */
	struct gd_batch_stats stats; /* out, added to, also when the call fails */
};

/*
 * Decodes b's images in parts (as many as fit a set and max_batch), each
 * part decoded on the engines into the next set, shrunk where the workers'
 * DCT scale would have shrunk it (not under decode_scale full) and resized
 * into its row of dst on the set's stream; the images the engines refuse,
 * and those too large for a set, on the CPU. Each image gets its status.
 * 0, or:
 *   -EINVAL   imgs[fail_at] cannot be described to the kernel (its size,
 *             box or row), text says so
 *   -EBADMSG  stop_at_bad, and imgs[fail_at] is GD_BAD
 *   -EIO, -ENOMEM  a CUDA or nvJPEG failure, text saying which
 * After a failure nothing of the batch is queued any more (the caller may
 * reuse its memory at once), but dst holds whatever was written.
 */
int gd_decode_batch(struct gd *g, struct gd_batch *b, char *text, size_t cap);

/*
 * on_error = substitute: the row of a batch of `rows` rows whose copy
 * replaces bad row `row` (of sample `sample` of `epoch`), chosen from
 * (seed, epoch, sample) among the rows not in bad[0..n_bad), so that the
 * batch stays full and the same in every run; `row` itself when none of
 * the rows tried is good. The daemon and a client that decodes choose
 * alike.
 */
uint32_t gd_substitute_row(uint64_t seed, uint64_t epoch, uint64_t sample, uint32_t row,
			   uint32_t rows, const uint32_t *bad, uint32_t n_bad);

/* For a batch the caller fails after gd_decode_batch succeeded (or that
 * failed): waits until nothing of it is queued (share's too, when not
 * NULL), and clears the sets it used, so that the caller may reuse the
 * JPEG bytes and the sets start clean. */
void gd_abandon(struct gd *g, const struct gd_share *share);

#endif
