/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuseam: the one interface between the loop thread and a GPU thread.
 *
 * The scheduler's device path (daemon/sched/devpath.c) sends requests; the GPU
 * thread (the pinner, daemon/gpu/pinner.h; the GPU decoder will be a second)
 * answers. Each direction is a struct of typed functions, filled in by the
 * side that implements it: `struct gpu_requests` by the GPU thread
 * (pinner_requests), `struct gpu_answers` by the scheduler
 * (sched_gpu_answers). main.c only hands one to the other, so a batch's
 * way to the GPU and back reads in one direction, and a test can stand in
 * for either side (tests/unit/test_sched.c fakes the GPU thread).
 *
 * Threads: requests are called on the loop thread and return at once (the
 * GPU thread queues them). Answers are called on the loop thread too, in
 * order per client; `attached` comes once per attach, `landed` once per
 * copy unless the client failed or is retiring, `staging_free` once per
 * staging copy, `retired` once per retire.
 */
#ifndef LDR_DAEMON_GPUSEAM_H
#define LDR_DAEMON_GPUSEAM_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/proto.h"

struct pinner;          /* a GPU thread */
struct pinner_client;   /* a device client's resources on that thread */
struct sched;           /* the scheduler (daemon/sched/sched.h) */
struct sched_client;    /* a client of the scheduler: what a request is about */
struct status_text;

/* Loop -> GPU thread. */
struct gpu_requests {
	struct pinner *gpu;
	/* Allocates a ring of `slots` device slots of slot_bytes on the GPU
	 * with this UUID for a client of `pipeline`, and exports it:
	 * answered by `attached`. client_decodes: the client decodes the
	 * images its GPU takes itself, in its own process (the GPU thread
	 * only copies its batches and opens no decoder for it). */
	void (*attach)(struct pinner *gpu, struct sched_client *c,
		       const uint8_t uuid[PROTO_UUID_BYTES], uint32_t pipeline, uint32_t slots,
		       uint64_t slot_bytes, bool client_decodes);
	/* Copies `bytes` of staging slot `staging_slot` (a batch of `rows`
	 * rows) into device slot d: `landed`, and `staging_free` once the
	 * staging slot is read. */
	void (*copy)(struct pinner *gpu, struct pinner_client *pc, uint32_t d, uint32_t staging_slot,
		     uint32_t staging_generation, uint64_t bytes, uint32_t rows);
	/* A direct client's batch: `rows` samples from the page-locked file
	 * at `offsets` (malloc'd, handed over) into device slot d: `landed`. */
	void (*copy_direct)(struct pinner *gpu, struct pinner_client *pc, uint32_t d,
			    uint64_t *offsets, uint32_t rows);
	/* Frees the client's ring once its stream has drained: `retired`. */
	void (*retire)(struct pinner *gpu, struct pinner_client *pc);
	/* The status line's device fields for the client. */
	void (*describe_client)(struct pinner_client *pc, struct status_text *t);
};

/* GPU thread -> loop. */
struct gpu_answers {
	struct sched *sched;
	/* The ring exists (rc 0: pc and dev; direct: its batches come from
	 * the page-locked file; decode: its GPU decodes the images the GPU
	 * takes, so its work items leave those undecoded) or could not be made
	 * (rc -errno, text). */
	void (*attached)(struct sched *s, struct sched_client *c, struct pinner_client *pc, int rc,
			 const char *text, const struct proto_device *dev, bool direct, bool decode);
	/* Device slot d's batch has landed on the GPU (ready[d], recorded
	 * behind the copy, has completed): READY may go. */
	void (*landed)(struct sched *s, struct sched_client *c, uint32_t d);
	/* The GPU thread no longer reads the staging slot. */
	void (*staging_free)(struct sched *s, uint32_t staging_slot, uint32_t staging_generation);
	/* A CUDA call for this client failed; text names the GPU and call. */
	void (*failed)(struct sched *s, struct sched_client *c, const char *text);
	/* retire is done: the ring, stream and events are freed. */
	void (*retired)(struct sched *s, struct sched_client *c);
};

#endif
