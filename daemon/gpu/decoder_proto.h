/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decoder_proto: what the daemon's decoding thread and a decoder process
 * (loaderd-decoder, daemon/gpu/decoder_main.c) say to each other, over a
 * SOCK_SEQPACKET socketpair, one message per datagram.
 *
 * Why processes: nvJPEG takes one process's submissions one at a time,
 * and beside a training process each waits on the GPU; several processes
 * submit at once (bench/RESULTS.md, "GPU decoding beside training").
 *
 *   daemon -> decoder  setup: the GPU, the buffer sets' device memory as
 *                      CUDA IPC handles (the decoder writes its images
 *                      there, where the daemon's resize reads them)
 *   decoder -> daemon  ready: rc, and an interprocess CUDA event per set,
 *                      recorded behind the decoder's work on that set
 *   daemon -> decoder  job: a set, and images: where their bytes lie in
 *                      the arena (the decoder maps it read-only from the
 *                      descriptor it inherited) and where their pixels go
 *                      in the set's buffer
 *   decoder -> daemon  done: rc and each image's status, sizes and, for
 *                      the failed ones, nvjd's message; the set's event
 *                      has been recorded behind the queued decode
 *
 * The daemon trusts its own decoder program no more than a worker: every
 * answer is checked before use (decoder_done_check: its length, its
 * indexes, each decoded image at the size asked and inside its
 * destination), and a decoder that
 * answers wrongly, late (worker_timeout_ms, as a worker) or not at all
 * is killed, and its images are decoded on the CPU; another is started
 * in its place after DECODER_RESTART_MIN_MS, the wait doubling up to
 * DECODER_RESTART_MAX_MS while they die young.
 */
#ifndef LDR_DAEMON_DECODER_PROTO_H
#define LDR_DAEMON_DECODER_PROTO_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "gpudecode/nvjd.h"

#define DECODER_MAGIC 0x6c64726465636f32ull /* "ldrdeco2" */
#define DECODER_SETS_MAX 4
#define DECODER_FD_SOCKET 3 /* the decoder's end of the socketpair */
#define DECODER_FD_ARENA 4  /* the arena, read-only */
#define DECODER_RESTART_MIN_MS 1000
#define DECODER_RESTART_MAX_MS 60000
/* Images of one job at most. A done message whose images' messages do
 * not fit the socket's buffer (212992 bytes by default: about 1,100
 * failed images) goes again without them. */
#define DECODER_JOB_MAX NVJD_MAX_BATCH

struct decoder_setup {
	uint64_t magic;
	uint32_t sets;
	uint32_t pad;
	uint64_t buf_bytes; /* of each set */
	cudaIpcMemHandle_t buf[DECODER_SETS_MAX];
};

struct decoder_ready {
	uint64_t magic;
	int32_t rc;    /* 0, or -errno with why */
	uint32_t engines;
	char why[256];
	cudaIpcEventHandle_t event[DECODER_SETS_MAX];
};

struct decoder_image {
	uint64_t data_offset; /* in the arena */
	uint64_t len;
	uint64_t dst_offset;  /* in the set's buffer */
	uint64_t pitch;
	uint64_t dst_bytes;
	uint32_t roi_x, roi_y, roi_w, roi_h;
	uint32_t scan_checked;
	uint32_t given_w, given_h; /* struct nvjd_image */
	uint32_t pad;
};

struct decoder_job {
	uint64_t magic;
	uint32_t set;
	uint32_t n; /* followed by n struct decoder_image */
};

struct decoder_result {
	int32_t status;
	uint32_t width, height, out_w, out_h;
	uint32_t has_err; /* a struct decoder_err follows the results for it */
};

struct decoder_err {
	uint32_t index;
	char text[NVJD_ERR_MAX];
};

struct decoder_done {
	uint64_t magic;
	int32_t rc;   /* nvjd_decode's */
	uint32_t n;   /* followed by n struct decoder_result, then the errs */
	uint32_t n_err;
	uint32_t pad;
};

/* The checks of a job and of its answer (daemon/gpu/decoder_msg.c, fuzzed by
 * fuzz/fuzz_decoder.c): NULL, or what is wrong with the message, in
 * words. */

/* A job of len bytes at msg, for a decoder of `sets` buffer sets of
 * buf_bytes each, max_batch images and an arena of arena_bytes: every
 * image's bytes inside the arena and its pixels inside the set's buffer.
 * On NULL, *job is its header, and its job->n images follow it in msg. */
const char *decoder_job_check(const void *msg, size_t len, uint32_t sets, uint32_t max_batch,
			      uint64_t arena_bytes, uint64_t buf_bytes, struct decoder_job *job);

/* An answer of len bytes at msg to a job of the n images asked: a result
 * for each, each decoded one at the size it was asked for (its region,
 * else the size it was given) and inside its destination, so that nothing
 * that reads the pixels afterwards reads beyond what was written; each
 * message for one of them. On NULL, *done is its header; its n results,
 * then done->n_err messages, follow it in msg. */
const char *decoder_done_check(const void *msg, size_t len, const struct nvjd_image *asked,
			       uint32_t n, struct decoder_done *done);

#endif
