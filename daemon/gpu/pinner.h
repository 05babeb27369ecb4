/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinner: the GPU threads, the only code of the daemon that calls CUDA.
 * One thread per GPU ("lane", named loaderd-gpuN): a GPU's clients never
 * wait behind another GPU's CUDA calls. One thread issued every client's
 * calls for every GPU before; at small batches it was busy 0.83 of a core
 * at 64,000 batches/s on one H100 (bench/RESULTS.md), a ceiling every GPU
 * of a node would have shared.
 *
 * The pinner owns, per daemon: the CUDA runtime (initialised on the first
 * GPU thread, after the workers were spawned: CUDA is not fork-safe), the
 * page-locked memory
 * (pin = copy: `pinned_slots` buffers from cudaHostAlloc, allocated once;
 * pin = register: the arena's staging slots, cudaHostRegister'ed once).
 * Per device client, on its GPU's thread: a ring of device slots in one
 * cudaMalloc on the client's GPU, a non-blocking stream, and one "ready"
 * and one "released" interprocess event per slot, all exported once at
 * attach. The pinned buffers (pin = copy) are shared by the GPU threads:
 * one that finds none free is woken when another gives one back.
 *
 * One batch (the copy request), on the client's stream, never blocking the host:
 *
 *   register: wait(released[d]) -> H2D from the staging slot -> record
 *             ready[d] -> "landed" and "staging free" when the copy is done
 *   copy:     wait(released[d]) -> (host callback) memcpy staging -> pinned
 *             buffer on pin_threads threads -> "staging free" -> H2D ->
 *             record ready[d] -> "landed" when the copy is done, and the
 *             pinned buffer is recycled. A pinned buffer is taken only once slot d is
 *             free on the GPU, so a client with a busy GPU holds none.
 *
 * wait(released[d]) is first a host-side query of the event: when the
 * client's release has already completed, the copy goes without a
 * GPU-side wait; else the batch (and the client's later ones, in order) is
 * retried every 20 us for up to 2 ms before it is queued behind a GPU-side
 * wait. A GPU-side wait on another process's event cost about 160 us of
 * stream time per batch (pinner_batch.c).
 *
 * "Done" is seen from the host: behind each copy the GPU thread records a
 * local event (copied[d]) and, while copies are in flight, queries the
 * oldest of each client's every 10 us (COPY_POLL_NS). A host callback per
 * batch, behind a GPU-side wait for ready[d], cost 250 us and more per
 * batch and serialised every client behind the one callback thread; the
 * query costs a fraction of a microsecond. READY therefore goes out once
 * the batch is on the GPU, and the client's wait for ready[d] is free.
 *
 * A pipeline with `direct = on` has its file page-locked at start
 * (daemon/gpu/direct.h); its device clients' batches (copy_direct) skip
 * staging: wait(released[d]) -> one batched copy of the samples from the
 * file -> record ready[d] -> "landed" when done. Whatever the pin mode.
 *
 * Threads: the loop thread calls the requests (they queue work for the
 * client's GPU thread and return at once); that thread runs it; CUDA host
 * callbacks only queue.
 * Every result comes back on the loop thread as an answer, in order per
 * client. Each staging copy yields exactly one staging_free and, unless the
 * client failed or is retiring, each copy one landed.
 *
 * A device client's resources are freed by the retire request, which the loop
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

#include "daemon/config/config.h"
#include "daemon/gpu/gpuseam.h"
#include "daemon/source/source.h"
#include "proto/proto.h"
#include "shm/arena.h"

struct pinner;
struct pinner_client;
struct status_text;

/* Starts the first GPU thread, which finds the GPUs and starts one thread
 * for each of the others; its start-up result arrives as
 * started(ctx, rc, text): rc 0 and what is offered, or -errno and why GPU
 * delivery is unavailable. Every other result goes to `answers`
 * (daemon/gpu/gpuseam.h). 0 or -errno (thread or handle creation failed).
 * sources (the pipelines, in config order) must outlive the pinner. */
int pinner_start(uv_loop_t *loop, const struct config *cfg, struct arena *arena,
		 const struct source *sources, size_t n_sources, const struct gpu_answers *answers,
		 void (*started)(void *ctx, int rc, const char *text), void *ctx,
		 struct pinner **out);

/* The requests this pinner takes (daemon/gpu/gpuseam.h): attach, copy (a
 * staging slot), copy_direct (a direct client's batch: one landed, unless
 * the client failed or is retiring), retire, describe_client. */
struct gpu_requests pinner_requests(struct pinner *p);

/* Stops the GPU threads (after freeing every CUDA resource) and closes the loop
 * handle; pinner_free after the loop has run its close callbacks. */
void pinner_stop(struct pinner *p);
void pinner_free(struct pinner *p);

/* Status: the "delivery:" line and the "gpus:" section. */
void pinner_describe(struct pinner *p, struct status_text *t);

/* For --version: CUDA runtime and driver versions and the GPUs this process
 * sees. Runs CUDA on the calling thread: only for a process that serves
 * nothing. */
void pinner_print_system(FILE *out);

#endif
