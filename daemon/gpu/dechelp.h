/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dechelp: the helpers of a GPU thread's JPEG decoder (pinner_decode.c's
 * "Submission" and "Decoder processes"): threads, each with an nvJPEG
 * decoder and stream per buffer set, or threads that each hand their
 * share to a loaderd-decoder process of their own (decoder_proto.h).
 * They take shares of a part through the library's struct gd_share
 * (gpudecode/gpudecode.h): dechelp_share fills one in. Shared by
 * pinner_decode.c (which opens and closes them with the lane's decoder)
 * and pinner_dechelp.c (the helpers themselves); nothing else includes it.
 */
#ifndef LDR_DAEMON_DECHELP_H
#define LDR_DAEMON_DECHELP_H

#include <limits.h>
#include <sys/types.h>

#include "daemon/gpu/decoder_proto.h"
#include "daemon/gpu/pinner_impl.h"
#include "gpudecode/gpudecode.h"

_Static_assert(GD_SETS_MAX <= DECODER_SETS_MAX, "a decoder process takes every set");

struct image_sampler;

/* A helper thread of a lane's decoder: its own nvJPEG state and stream
 * per set (a stream shared by the sets would queue each part's decode
 * behind the one before, whichever set it used); under mu, `busy` hands
 * it imgs[0..n) for set `set` and is cleared when they are queued (rc:
 * nvjd_decode's). */
struct decode_helper {
	pthread_t thread;
	bool started;
	int dev;
	struct nvjd *nvjd[GD_SETS_MAX];
	cudaStream_t stream[GD_SETS_MAX];
	cudaEvent_t queued[GD_SETS_MAX]; /* behind its decode, for the set's stream to wait on */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool busy, quit;
	struct nvjd_image *imgs;
	uint32_t n;
	uint32_t set;            /* whose decoder takes imgs */
	int rc;
	bool assigned;           /* given a share of the part being decoded */
	/* gpu_decode_helpers = processes: the helper hands its share to its
	 * decoder process (loaderd-decoder) instead of nvjd; queued[] are
	 * that process's events, opened here. */
	bool proc;               /* it has (or had) a decoder process */
	pid_t pid;               /* 0: none (or it ended) */
	int sock;                /* -1: none */
	bool dead;               /* its process failed: no shares until one is started again */
	bool counted;            /* pid is in the GPU's `decoders` */
	uint64_t born_ns;        /* when pid answered its setup */
	uint64_t restart_ns;     /* when to start another, while dead */
	uint32_t backoff_ms;     /* the wait before the next start after a failure */
	uint32_t timeout_ms;     /* for any answer: worker_timeout_ms */
	struct lane *lane;       /* what a start needs, for the helper thread's restarts */
	struct lane_decode *dc;
	unsigned flags;
	char lib[PATH_MAX];      /* nvjpeg_library, taken at the start */
	struct gpu *gpu;         /* its uuid for the log, and its count of decoders */
	const uint8_t *arena_base;
	uint8_t *set_buf[GD_SETS_MAX];
	uint8_t *msg;
	size_t msg_cap;
};

/* A lane's JPEG decoder: the library's decoder and buffer sets, its
 * helpers, and what a batch's job needs. */
struct lane_decode {
	struct gd *gd;
	struct gd_info info;      /* gd's sets, engines, flags */
	struct gd_share share;    /* the helpers, for gd_decode_batch */
	struct decode_helper *helpers;
	uint32_t n_helpers;
	uint32_t threads;         /* wanted: gpu_decode_threads, or its default for the GPU */
	bool procs;               /* the helpers are decoder processes */
	uint32_t max_rows;        /* the largest batch_size of a decoding pipeline */
	struct gd_image *job;     /* a batch's images the workers left to the GPU, [max_rows] */
	uint32_t *job_rows;       /* each one's row of the batch */
	uint32_t *bad_rows;       /* the batch's rows both decoders refused (substitute) */
	uint32_t n_bad;
	struct image_sampler *samplers[ARENA_PIPELINES_MAX]; /* the CPU path's, per pipeline */
};

/* dc->threads - 1 helpers, as many as can be made (at least none), for
 * decoders opened with `flags`. A decoder process that cannot be started
 * here is reported and its helper not made: that is the program or the
 * GPU, not a passing fault; one that dies later is started again. Fills
 * dc->share. */
void dechelp_start(struct lane *l, struct lane_decode *dc, unsigned flags);
/* Stops and frees every helper of dc (before dc->gd is closed). */
void dechelp_stop(struct lane_decode *dc);

#endif
