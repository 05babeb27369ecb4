/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decode: the client library's own GPU JPEG decoding (internal to client/).
 *
 * For an image pipeline whose GPU takes JPEGs, a device client decodes
 * them in its own process, in the training's CUDA context, rather than
 * the daemon in another: beside a training, a second context's GPU work
 * takes turns with the training's in time slices, and costs it about ten
 * times as much per image as the same work inside its own context
 * (docs/gpu-decoding.md). The daemon's workers keep every CPU step (read,
 * header check, crop box and flip, the CPU path, on_error); the batch's
 * other rows are copied into the device slot as always; the rows the
 * workers left to the GPU arrive as JPEGs and plans in a staging slot of
 * the arena (READY's DECODE flag), and this module decodes them into the
 * device slot with the GPU decoding library (gpudecode/gpudecode.h).
 *
 * One thread of the library's own per client does the decoding, so that
 * nvJPEG's submission (about 45 us an image on the host) never runs on the
 * caller's thread (in Python, the training's): ldr_next queues a batch the
 * moment its READY is read and, when the caller asks for it, waits only
 * for what is not done yet. The thread works on a CUDA stream of its own
 * in the device's primary context, at the device's highest stream priority
 * (the training waits for the decoding, whose kernels would otherwise
 * queue behind the training's; $LOADERD_CLIENT_DECODE_PRIORITY=0 leaves it
 * at the default), and its calls are in the relaxed
 * stream-capture mode, so a CUDA graph captured on another thread's stream
 * is neither broken by them nor breaks them. A "decoded" event per device
 * slot, recorded behind the batch's work, is what the caller's streams wait
 * for (with the daemon's ready event).
 *
 * The hazard of nvJPEG's hardware decode (it writes its output when
 * called, not in stream order) is the library's: it writes only into its
 * own buffers, each known free on the host before it is reused
 * (gpudecode.h, "The hazard"). The device slot is written by kernels and
 * copies in stream order, after the daemon's copy (READY comes only once
 * that copy has completed) and so after the caller's last use of the slot,
 * which that copy waited for.
 *
 * Errors: 0 or -errno with the reason in err. Not thread-safe beyond the
 * client handle's promise (loaderd.h): one caller thread at a time, beside
 * the decoding thread this module owns.
 */
#ifndef LDR_CLIENT_DECODE_H
#define LDR_CLIENT_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loaderd.h"

struct decoder;

/* Whether this process can decode: built with GPU decoding, nvJPEG
 * loadable ($LOADERD_NVJPEG_LIBRARY, else nvJPEG's usual name), and not
 * turned off ($LOADERD_CLIENT_DECODE=0). When not, why (cap bytes). */
bool decoder_available(char *why, size_t cap);

struct decoder_config {
	int device;                 /* CUDA ordinal of this process */
	const uint8_t *arena;       /* the daemon's arena, mapped read-only */
	size_t arena_bytes;
	uint64_t staging_bytes;     /* one staging slot's bytes (WELCOME.slot_bytes) */
	uint32_t pipeline;          /* its index in the arena's table (WELCOME) */
	uint64_t memory_bytes;      /* device memory the decoder may take (WELCOME) */
	uint32_t batch_size;
	uint32_t slots;             /* device slots */
	uint64_t slot_bytes;        /* bytes of a device slot */
	unsigned n_tensors;         /* the batch's tensors: their offsets within a slot */
	uint64_t tensor_offset[LDR_TENSORS_MAX];
	uint64_t tensor_row_bytes[LDR_TENSORS_MAX];
};

/* Starts the decoding thread, which opens the decoder on the device
 * (device memory, nvJPEG, a stream, an event per device slot, the arena's
 * staging slots registered as page-locked where the driver allows);
 * returns once it has, or has failed to. */
int decoder_open(const struct decoder_config *cfg, struct decoder **out, char *err, size_t cap);

/* Queues the decoding of batch seq: `rows` rows whose staging slot is at
 * arena offset staging_offset, into device slot `slot` at device address
 * dst. At most `slots` batches are queued or done and not yet taken. */
int decoder_submit(struct decoder *d, uint64_t seq, uint32_t slot, void *dst,
		   uint64_t staging_offset, uint32_t rows, char *err, size_t cap);

/* What became of a batch's rows (proto_decoded's counts). */
struct decoder_result {
	int rc;                /* 0, or the batch failed (err of decoder_take says why) */
	uint32_t gpu, cpu, bad;
	uint64_t bad_sample;   /* the first bad row's sample, UINT64_MAX when none */
	uint64_t submit_ns;
};

/* Whether batch seq is done (decoded or failed). */
bool decoder_done(struct decoder *d, uint64_t seq);

/* Waits up to timeout_ms (< 0: for ever) for batch seq, then takes its
 * result: 0, -ETIMEDOUT (not done yet; call again), or -EINVAL (not
 * queued). A failed batch is res->rc with the reason in err. */
int decoder_take(struct decoder *d, uint64_t seq, int timeout_ms, struct decoder_result *res,
		 char *err, size_t cap);

/* stream (a cudaStream_t of the device) waits for the decoding of the
 * batch last decoded into device slot `slot`. */
int decoder_stream_wait(struct decoder *d, uint32_t slot, void *stream, char *err, size_t cap);

/* Blocks until that decoding is done. */
int decoder_slot_sync(struct decoder *d, uint32_t slot, char *err, size_t cap);

/* Fills out's decoding counts. */
void decoder_stats(const struct decoder *d, struct ldr_stats *out);

/* Stops the thread once the batch it works on is done, frees everything.
 * NULL is fine. */
void decoder_close(struct decoder *d);

#endif
