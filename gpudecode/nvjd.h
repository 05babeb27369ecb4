/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvjd: batches of JPEGs decoded on a GPU's hardware JPEG engines (nvJPEG's
 * NVJPEG_BACKEND_HARDWARE: A100, H100 and later), with a status per image,
 * for the daemon's GPU threads and any program that links gpudecode/.
 *
 * nvJPEG is loaded at run time (nvjd_load: dlopen of libnvjpeg.so.N, N the
 * major version of the nvjpeg.h the build used), never linked, so a daemon
 * built with this module runs where nvJPEG is missing and says why. Built
 * without nvjpeg.h (CMake's LOADERD_HAVE_NVJPEG 0), the same calls exist and
 * nvjd_load fails with -ENOSYS ("built without nvJPEG").
 *
 * One decoder (struct nvjd) per (GPU, host thread): one decoding state,
 * the per-image parameter objects of a batch and one CUDA event, on an
 * nvJPEG handle that the process's decoders of the same GPU and flags
 * share. Calls on one decoder come from one thread at a time; decoders on
 * different threads are independent (nvJPEG's rule: states and parsed
 * streams are per thread, a handle may serve several). Every call that touches the GPU makes the
 * decoder's device current on the calling thread for its duration and puts
 * back the one that was current.
 *
 * Per-image errors are the point: an image the engines cannot take gets
 * -ENOTSUP (route it to the CPU decoder) and a corrupt or truncated one
 * -EBADMSG, each with a message, and neither keeps the other images of its
 * batch from decoding. Every image is checked on the host first
 * (nvjpegJpegStreamParse, jh_check_scan, nvjpegDecodeBatchedSupportedEx
 * with its region; for an image given with its size, the region alone);
 * the rest go to the engines in one nvjpegDecodeBatchedEx
 * call; when that call fails, the batch is split in halves, and halves
 * again, until every good image has its pixels and each bad one its status.
 *
 * What may go unreported: damage inside a scan's entropy-coded data (bytes
 * changed, not cut short) is caught only if the engines report it, which
 * nvJPEG does not promise; an image they decode anyway gets status 0 and
 * wrong pixels. A file cut short inside its scan, or with a marker inside
 * it (what a damaged byte most often makes), is caught here
 * (jh_check_scan): nvJPEG has been seen to decode what is there of a file
 * cut short and report success.
 *
 * Messages never name a file; the caller, which knows the path, prefixes it
 * and logs once. Nothing here logs.
 */
#ifndef LDR_GPUDECODE_NVJD_H
#define LDR_GPUDECODE_NVJD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

/* Images one nvjd_decode call takes at most (nvjd_open's max_batch). */
#define NVJD_MAX_BATCH 4096
/* Bytes of an image's message, with its NUL. */
#define NVJD_ERR_MAX 160

/* nvjd_open flags. */
enum {
	/* Chroma upsampling by interpolation, as libjpeg's "fancy upsampling"
	 * (the CPU path's) does, instead of repeating each chroma sample
	 * (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION). nvJPEG's release notes
	 * for 13.3 fix its handling of a region's boundary with this flag:
	 * before, a region's edge pixels may differ from the whole image's. */
	NVJD_SMOOTH_UPSAMPLING = 1u << 0,
	/* The decoder's own nvJPEG handle, instead of the one the process's
	 * decoders of the same GPU and flags share (for measuring the two). */
	NVJD_PRIVATE_HANDLE = 1u << 1,
	/* Planes of Y, Cb and Cr as the engines make them, at the image's own
	 * chroma subsampling (NVJPEG_OUTPUT_YUV), instead of interleaved RGB:
	 * nvJPEG then runs no kernel of its own (its conversion to RGB is one
	 * kernel launch per image, about 3.5 us of the whole GPU each on an
	 * H100), and the caller converts, upsampling as it needs
	 * (image/yuv.h: libjpeg-turbo's upsampling and conversion; with it,
	 * the planes give libjpeg's pixels exactly, tests/gpu/nvjd_check.c).
	 * The daemon does not use it yet: converted by a kernel of its own,
	 * it cost a training beside it more than nvJPEG's launches
	 * (bench/RESULTS.md, "where a fed training's 2 ms a step go");
	 * loaderd-nvjd-bench --yuv measures the engines this way. Every image
	 * must come with its size and subsampling (given_w, given_h, planes)
	 * and no region. */
	NVJD_OUTPUT_YUV = 1u << 2,
};

/* The planes of an image decoded with NVJD_OUTPUT_YUV: which chroma
 * subsampling, named by luma's sampling factors over chroma's (jh_subsamp
 * of image/jpeghdr.h, for the classes the engines take). 0 is none given. */
enum nvjd_planes {
	NVJD_PLANES_NONE = 0,
	NVJD_PLANES_GRAY, /* Y alone */
	NVJD_PLANES_444,
	NVJD_PLANES_422,  /* chroma half as wide */
	NVJD_PLANES_420,  /* half as wide and half as high */
	NVJD_PLANES_440,  /* half as high */
};

/* Where the planes of a w x h image of class `planes` lie from dst: Y
 * (pitch w), then Cb and Cr (each pitch cw, ch rows, cw x ch the chroma
 * size: w and h divided by the subsampling, rounded up), each plane
 * starting NVJD_PLANE_ALIGN bytes aligned from dst (GRAY has two chroma
 * planes of Y's size too: nvJPEG is always given three, and the
 * conversion reads Y alone).
 * offset[3] and pitch[3] (may be NULL) get each plane's; returns the
 * bytes all planes take from dst, 0 for an unknown class or a zero size,
 * UINT64_MAX for planes larger than 64 bits can count. */
#define NVJD_PLANE_ALIGN 256u
uint64_t nvjd_planes_layout(enum nvjd_planes planes, uint32_t w, uint32_t h, uint64_t offset[3],
			    uint64_t pitch[3]);

struct nvjd_image;
/* Whether out_w x out_h pixels of im fit its destination (dst_bytes, and
 * pitch for interleaved RGB; planes when im->planes is set): NULL, or
 * what is wrong. */
const char *nvjd_fits(const struct nvjd_image *im, uint32_t out_w, uint32_t out_h);

struct nvjd;

/*
 * Loads nvJPEG into the process: dlopen(lib_path, or "libnvjpeg.so.N" from
 * the library search path when lib_path is NULL) and every function this
 * module calls resolved into a table. Until one call succeeds, nvjd_open
 * fails. The first success stays for the life of the process: later calls
 * return 0 at once, whatever their lib_path. A failed call leaves nothing
 * loaded, so another path may be tried.
 *
 * text (cap bytes, may be NULL) gets on success what was loaded
 * ("nvJPEG 13.0.2 (libnvjpeg.so.13)"), on failure why not:
 *   -ENOENT  the library cannot be loaded (dlopen's message, which names it)
 *   -ENOSYS  it lacks a function ("libnvjpeg.so.13 lacks nvjpegDecodeBatchedEx"),
 *            its major version is not the one built against, or the build
 *            had no nvjpeg.h
 * Thread-safe. Loads nothing onto a GPU.
 */
int nvjd_load(const char *lib_path, char *text, size_t cap);

/*
 * Opens a hardware decoder on CUDA device `device` for batches of up to
 * max_batch (1..NVJD_MAX_BATCH) images; flags: NVJD_* above. Synchronous.
 * Returns 0 and *out, or, with why (cap bytes, may be NULL) naming the GPU:
 *   -EINVAL   max_batch out of range, unknown flags, out NULL
 *   -ENOSYS   nvjd_load has not succeeded
 *   -ENODEV   no such device, or no usable CUDA driver
 *   -ENOTSUP  "GPU N has no hardware JPEG decoder" (nvJPEG refuses the
 *             hardware backend there, or reports 0 engines), or it refuses
 *             NVJD_SMOOTH_UPSAMPLING (the message says which)
 *   -ENOMEM   host or device memory
 *   -EIO      another nvJPEG or CUDA failure (its status named)
 * nvJPEG takes the device memory it decodes in as it needs it, growing with
 * the largest batch, and frees it at nvjd_close.
 */
int nvjd_open(int device, uint32_t max_batch, unsigned flags, struct nvjd **out, char *why,
	      size_t cap);

/* What a decoder runs on, for status and benchmarks. */
struct nvjd_info {
	int device;
	unsigned engines;          /* hardware JPEG engines on the GPU */
	unsigned cores_per_engine; /* decode cores per engine */
	int version[3];            /* nvJPEG major, minor, patch */
	uint32_t max_batch;
	unsigned flags;            /* NVJD_* as opened */
};
void nvjd_info(const struct nvjd *d, struct nvjd_info *out);

/* Where a decoder's nvjd_decode calls spent their host time, since open:
 * for finding what bounds a decoding thread (bench/nvjd_bench.c). */
struct nvjd_stats {
	uint64_t calls;     /* nvjd_decode calls */
	uint64_t images;    /* images they were given */
	uint64_t check_ns;  /* the checks of each image, on the host */
	uint64_t wait_ns;   /* waiting for the decoder's previous submission */
	uint64_t submit_ns; /* inside nvjpegDecodeBatchedInitialize and nvjpegDecodeBatchedEx */
};
/* Read by the decoder's own thread (or once it is idle). */
void nvjd_stats(const struct nvjd *d, struct nvjd_stats *out);

/* An image's header as nvJPEG reads it (nvjpegGetImageInfo). */
struct nvjd_header {
	uint32_t width, height; /* of the frame, in pixels */
	int components;         /* 1 (gray), 3 (YCbCr), 4 (CMYK or YCCK), ... */
	const char *subsampling; /* "4:4:4", "4:2:2", "4:2:0", "4:4:0",
				  * "4:1:1", "4:1:0", "4:1:0v", "gray" or
				  * "unknown"; a static string */
};

/*
 * Reads the header of the JPEG in data[0..len) through nvJPEG; host only,
 * synchronous, thread-safe on one decoder. 0 and *out, or, with a message
 * in err (cap bytes, may be NULL):
 *   -EBADMSG  empty, truncated or corrupt header, not a JPEG
 *   -ENOTSUP  a JPEG nvJPEG does not read (e.g. lossless or arithmetic-coded)
 *   -EINVAL   a NULL pointer
 */
int nvjd_image_info(struct nvjd *d, const uint8_t *data, size_t len, struct nvjd_header *out,
		    char *err, size_t cap);

/*
 * One image of a batch. The caller fills the inputs; nvjd_decode fills the
 * outputs of every image it was given.
 */
struct nvjd_image {
	/* in: the compressed bytes, in host memory the caller owns; page-locked
	 * (cudaHostAlloc, cudaHostRegister) for speed, though any host memory
	 * works. They must stay valid and unchanged until the batch is done
	 * (see nvjd_decode). */
	const uint8_t *data;
	size_t len;
	/* in: jh_check_scan has passed these bytes (the worker that left the
	 * image to the GPU ran it): not run again here. */
	bool scan_checked;
	/* in: the image's size as a header parse before this one found it
	 * (jh_parse, in the worker that left the image to the GPU), which also
	 * found that the engines take it (jh_gpu_refusal): nvJPEG's own parse
	 * and support check, half of its host time per image, are skipped, and
	 * the decode is held to a region inside given_w x given_h (the whole
	 * of it when roi_w == 0), so that a header that says otherwise can
	 * never make the engines write beyond dst. An image the engines refuse
	 * after all fails its call, which is split down to it (nvjd_decode).
	 * 0: nvJPEG parses the header. */
	uint32_t given_w, given_h;
	/* in, NVJD_OUTPUT_YUV: the image's chroma subsampling, from the same
	 * header parse as given_w: where its planes lie at dst
	 * (nvjd_planes_layout; pitch is then unused). A header that lied about
	 * it could make the engines write beyond them: it comes from the same
	 * bytes the engines read, parsed by a reader that refuses every frame
	 * it does not know to the end (image/jpeghdr.h). */
	enum nvjd_planes planes;
	/* in: the region to decode, in source pixels; roi_w == 0 decodes the
	 * whole image (roi_x, roi_y, roi_h then ignored). The region must lie
	 * inside the image. */
	uint32_t roi_x, roi_y, roi_w, roi_h;
	/* in: where the pixels go, in device memory of the decoder's GPU that
	 * the caller owns: out_h rows of out_w RGB pixels, 3 bytes each,
	 * interleaved (NVJPEG_OUTPUT_RGBI), rows pitch bytes apart; dst_bytes
	 * is what dst holds, checked against (out_h - 1) * pitch + out_w * 3.
	 * Grayscale becomes R = G = B. With NVJD_OUTPUT_YUV, the planes
	 * (nvjd_planes_layout), dst_bytes checked against all of them. */
	uint8_t *dst;
	size_t pitch;
	size_t dst_bytes;

	/* out: the image's size (0 when its header could not be read), and
	 * the size of what is written at dst (the region, or the whole image). */
	uint32_t width, height;
	uint32_t out_w, out_h;
	/* out: 0 (decode queued), or
	 *   -ENOTSUP  the engines do not take this image (progressive, CMYK,
	 *             4:1:1, 4:1:0, 12-bit, ...): decode it on the CPU
	 *   -EBADMSG  corrupt, truncated, empty, or not a JPEG
	 *   -EINVAL   the caller's description is wrong: data or dst NULL, the
	 *             region outside the image, pitch < out_w * 3, dst too small
	 *   -ENOMEM, -EIO  the decoder failed (nvjd_decode returns it too)
	 * with err saying why when status != 0. Unless the status is 0, what
	 * dst holds is undefined: an image the engines failed may have been
	 * partly written. */
	int status;
	char err[NVJD_ERR_MAX];
};

/*
 * Decodes imgs[0..n), n <= max_batch, on the engines; the pixels of each
 * image with status 0 are written at its dst by work queued on `stream`
 * (a stream of the decoder's device; 0 is the legacy default stream).
 *
 * Synchronous, on the calling thread: the checks of every image (nvJPEG's
 * parse, jh_check_scan, the region, nvJPEG's support check; those that
 * struct nvjd_image's scan_checked and given_w leave out), made while
 * this decoder's previous batch may still run; then a wait for that batch
 * to finish on the GPU (nvJPEG reuses its state's buffers; in a steady
 * stream of batches it is long done); then the submission. When a
 * batch fails, its halves are decoded one after the other, each waited for
 * before the next: a slow path, for batches with a bad image the checks
 * did not catch.
 *
 * Queued on `stream`: the copies of the compressed bytes to the GPU and the
 * decode. Work queued on `stream` after the call sees the pixels; so does
 * the host after nvjd_wait. The compressed bytes may be changed or freed
 * once the batch is done: after nvjd_wait, after this decoder's next
 * nvjd_decode returns, or once work queued on `stream` after the call has
 * completed.
 *
 * Ordering hazard: each dst must be free when nvjd_decode is called: no
 * work still pending on the GPU, on `stream` or any other, may read or
 * write it. nvJPEG's hardware path has been seen (H100) to write its
 * output before work queued earlier on the same stream has finished, so a
 * cudaStreamWaitEvent queued before the call does not protect dst; wait
 * on the host (cudaEventQuery or cudaEventSynchronize of the last user).
 *
 * Returns 0 when every image has its status (some may have failed), or:
 *   -EINVAL   d or imgs NULL, n > max_batch (no image gets a status)
 *   -ENOMEM, -EIO  the decoder itself failed (device memory, a CUDA error,
 *             an nvJPEG failure not tied to an image); every image that was
 *             not queued gets that status and the message, the others keep
 *             status 0. The decoder may be used again; if the failure
 *             persists, close it.
 */
int nvjd_decode(struct nvjd *d, struct nvjd_image *imgs, uint32_t n, cudaStream_t stream);

/* Blocks until the last batch nvjd_decode queued on this decoder is done
 * on the GPU. 0, or -EIO with the CUDA error in why. */
int nvjd_wait(struct nvjd *d, char *why, size_t cap);

/* Waits for the decoder's last batch, then frees everything it holds.
 * NULL is fine. */
void nvjd_close(struct nvjd *d);

#endif
