/*
 * pinner: the pinning thread, the only code of the daemon that calls CUDA.
 *
 * It owns, per daemon: the CUDA runtime (initialised on this thread, after
 * the workers were spawned: CUDA is not fork-safe), the page-locked memory
 * (pin = copy: `pinned_slots` buffers from cudaHostAlloc, allocated once;
 * pin = register: the arena's staging slots, cudaHostRegister'ed once).
 * Per device client: a ring of device slots in one cudaMalloc on the
 * client's GPU, a non-blocking stream, and one "ready" and one "released"
 * interprocess event per slot, all exported once at attach.
 *
 * One batch (pinner_copy), on the client's stream, never blocking the host:
 *
 *   register: wait(released[d]) -> H2D from the staging slot -> record
 *             ready[d]; "issued" at once, "staging free" when the copy is done
 *   copy:     wait(released[d]) -> (host callback) memcpy staging -> pinned
 *             buffer on pin_threads threads -> "staging free" -> H2D ->
 *             record ready[d] -> "issued"; the pinned buffer is recycled when
 *             the copy is done. A pinned buffer is taken only once slot d is
 *             free on the GPU, so a client with a busy GPU holds none.
 *
 * wait(released[d]) is first a host-side query of the event: when the
 * client's release has already completed, the copy goes without a
 * GPU-side wait; else the batch (and the client's later ones, in order) is
 * retried every 20 us for up to 2 ms before it is queued behind a GPU-side
 * wait. A GPU-side wait on another process's event cost about 160 us of
 * stream time per batch (pinner_batch.c). Completion callbacks run on a
 * second stream per client that waits for ready[d], so the copy stream
 * never stalls on the host.
 *
 * A pipeline with `direct = on` has its file page-locked at start
 * (daemon/direct.h); its device clients' batches (pinner_copy_direct) skip
 * staging: wait(released[d]) -> one batched copy of the samples from the
 * file -> record ready[d] -> "issued". Whatever the pin mode.
 *
 * Threads: the loop thread calls pinner_* (they queue work and return at
 * once); the pinning thread runs it; CUDA host callbacks only queue. Every
 * result comes back on the loop thread through pinner_ops, in order per
 * client. Each pinner_copy yields exactly one staging_free and, unless the
 * client failed or is retiring, one issued before it.
 *
 * A device client's resources are freed by pinner_retire, which the loop
 * calls only once the client process has closed its IPC handles (it said
 * BYE) or has exited: freeing memory another process still maps is
 * undefined behaviour.
 */
#ifndef LDR_DAEMON_PINNER_H
#define LDR_DAEMON_PINNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/source.h"
#include "proto/proto.h"
#include "shm/arena.h"

struct pinner;
struct pinner_client;
struct status_text;

struct pinner_ops {
	void *ctx;
	/* Start-up finished: rc 0 (text describes what is offered) or -errno
	 * (text says why GPU delivery is unavailable). */
	void (*started)(void *ctx, int rc, const char *text);
	/* pinner_attach's answer: pc and dev on success, else rc -errno and
	 * text. direct: the pipeline's file is registered, so batches go
	 * through pinner_copy_direct. */
	void (*attached)(void *ctx, void *tag, struct pinner_client *pc, int rc, const char *text,
			 const struct proto_device *dev, bool direct);
	/* The batch is on its way to device slot d and ready[d] is recorded:
	 * READY may be sent. */
	void (*issued)(void *ctx, void *tag, uint32_t device_slot);
	/* The pinner no longer reads the staging slot. */
	void (*staging_free)(void *ctx, uint32_t staging_slot, uint32_t staging_generation);
	/* A CUDA call for this client failed; text names the GPU and call. The
	 * client's later batches only come back as staging_free. */
	void (*failed)(void *ctx, void *tag, const char *text);
	/* pinner_retire finished: the ring, stream and events are freed. */
	void (*retired)(void *ctx, void *tag);
};

/* Starts the pinning thread; its start-up result arrives as ops->started.
 * 0 or -errno (thread or handle creation failed). sources (the pipelines,
 * in config order) must outlive the pinner. */
int pinner_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
		 const struct source *sources, size_t n_sources, const struct pinner_ops *ops,
		 struct pinner **out);

/* Allocates a ring of `slots` device slots of slot_bytes on the GPU with
 * this UUID for a client of `pipeline` and exports it; the answer is
 * ops->attached(tag). */
void pinner_attach(struct pinner *p, void *tag, const uint8_t uuid[PROTO_UUID_BYTES],
		   uint32_t pipeline, uint32_t slots, uint64_t slot_bytes);

/* Copies `bytes` of staging slot `staging_slot` into device slot d. */
void pinner_copy(struct pinner *p, struct pinner_client *pc, uint32_t d, uint32_t staging_slot,
		 uint32_t staging_generation, uint64_t bytes);

/* Direct clients: copies `rows` samples, sample i from file offset
 * offsets[i], into device slot d. Takes ownership of offsets (malloc'd).
 * Yields one issued, unless the client failed or is retiring. */
void pinner_copy_direct(struct pinner *p, struct pinner_client *pc, uint32_t d, uint64_t *offsets,
			uint32_t rows);

/* Frees the client's ring once its stream has drained (ops->retired). */
void pinner_retire(struct pinner *p, struct pinner_client *pc);

/* Stops the thread (after freeing every CUDA resource) and closes the loop
 * handle; pinner_free after the loop has run its close callbacks. */
void pinner_stop(struct pinner *p);
void pinner_free(struct pinner *p);

/* Status: the "delivery:" line and the "gpus:" section. */
void pinner_describe(struct pinner *p, struct status_text *t);
/* The client line's device fields:
 * " gpu UUID stream_depth N bytes_moved N path direct|staging". */
void pinner_describe_client(struct pinner_client *pc, struct status_text *t);

/* For --version: CUDA runtime and driver versions and the GPUs this process
 * sees. Runs CUDA on the calling thread: only for a process that serves
 * nothing. */
void pinner_print_system(FILE *out);

#endif
