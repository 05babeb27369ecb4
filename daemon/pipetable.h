/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pipetable: the pipelines while loaderd runs. The arena's pipeline table
 * has ARENA_PIPELINES_MAX entries (shm/layout.h); this module says which
 * entry holds which pipeline, keeps each running pipeline's configuration
 * (its source's cfg points here, so the file's view, struct config, may
 * change under it on a reload), shares out the index area kept for
 * pipelines added later (`runtime_index_bytes`), and adds and removes
 * pipelines for a reload (daemon/reload.h):
 *
 *  - An added pipeline's data is opened and listed (source_open: a large
 *    imagefolder's listing takes seconds) on libuv's thread pool, never on
 *    the loop. Once every added pipeline of a reload is opened, the reload
 *    commits them all or none: each takes a free entry (and one per blend
 *    member) and its share of the runtime index area, and its batch must
 *    fit a staging slot; then its sample list and table entry are written
 *    into the arena (a new generation, so workers drop what they kept of
 *    the entry's last pipeline) and the scheduler makes it live. No work
 *    item names the entry before that, and the work rings' release and
 *    acquire order the entry's bytes before any item's.
 *  - A removed pipeline stops at once: no client may attach to it, and
 *    its clients get ERROR naming it and the reload. Its entry, source and
 *    index share stay until nothing names them (its staging slots still
 *    filling, device rings not yet freed: sched_pipeline_busy), then are
 *    freed (pipetable_reap, called before every allocation and status).
 *
 * Runs on the loop thread; only source_open runs on the pool's threads,
 * on memory of its own (struct pipe_open) that the loop reads only once
 * the work is done.
 */
#ifndef LDR_DAEMON_PIPETABLE_H
#define LDR_DAEMON_PIPETABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config/config.h"
#include "daemon/source/source.h"
#include "shm/arena.h"

struct pipetable;
struct sched;
struct status_text;

/* An added pipeline being opened, then committed (pipetable_open). */
struct pipe_open {
	uv_work_t work;
	struct pipetable *pt;
	struct pipeline_cfg cfg;
	struct source src;
	int rc;                   /* source_open's */
	char err[PATH_MAX + 512];
	int entry;                /* pipetable_reserve's, -1 before */
	void (*done)(struct pipe_open *po, void *ctx); /* on the loop, once opened (rc, err) */
	void *ctx;
	struct pipe_open *next;   /* the caller's list */
};

/*
 * Takes over the n pipelines preflight opened into sources[0..n) (their
 * blends' members numbered after them, source_blend_number): their
 * configurations are copied here and their sources' cfg pointed at the
 * copies. runtime_at is where runtime_index_bytes start in the index area
 * (struct arena_sizing). NULL on -ENOMEM.
 */
struct pipetable *pipetable_create(uv_loop_t *loop, const struct config *cfg,
				   struct source *sources, size_t n, const uint64_t *index_at,
				   uint64_t runtime_at);
/* The arena (filled) and the scheduler, once they exist. */
void pipetable_set(struct pipetable *pt, struct arena *arena, struct sched *sched);
void pipetable_free(struct pipetable *pt);

/* The live pipeline of the file named name: its entry, or -1. */
int pipetable_find(const struct pipetable *pt, const char *name);
/* The live pipeline job declared named name (daemon/jobs.h), or -1. */
int pipetable_find_declared(const struct pipetable *pt, const char *job, const char *name);
/* Bytes src's lists take in the index area, a blend's members' included. */
uint64_t pipetable_index_bytes(const struct source *src);
/* The running configuration of the pipeline at entry. */
const struct pipeline_cfg *pipetable_cfg(const struct pipetable *pt, int entry);
/* Bytes of a staging slot. */
uint64_t pipetable_slot_bytes(const struct pipetable *pt);
/* Live pipelines. */
size_t pipetable_count(const struct pipetable *pt);
/* Clients attached to the live pipeline at entry (0 when it is not). */
uint32_t pipetable_entry_clients(const struct pipetable *pt, int entry);
/* Clients attached to the live pipeline name (0 for none such). */
uint32_t pipetable_clients(const struct pipetable *pt, const char *name);

/*
 * Opens cfg's source on the thread pool: *out, whose done(po, ctx) is
 * called on the loop once it has ended (po->rc, po->err); the caller then
 * commits or discards it (pipetable_reserve and pipetable_commit,
 * pipetable_discard), alone or in a list of its own (po->next). 0 or
 * -errno.
 */
int pipetable_open(struct pipetable *pt, const struct pipeline_cfg *cfg,
		   void (*done)(struct pipe_open *po, void *ctx), void *ctx, struct pipe_open **out);

/* loaderd stops: opens under way give up soon (their scans' progress_add
 * fails, daemon/core/progress.h) and end with -ECANCELED. */
void pipetable_stop(struct pipetable *pt);

/*
 * Reserves what every opened pipeline of list needs (entries, index
 * shares), checking that each fits (a staging slot, direct off), all or
 * none: 0, or -errno with text naming the pipeline, the figure and the
 * key (-ENOSPC). Then pipetable_commit makes each live.
 */
int pipetable_reserve(struct pipetable *pt, struct pipe_open *list, char *text, size_t cap);
/* Copies the sample lists of list's reserved pipelines into their shares
 * of the index area on a thread of the pool (source_place_index: a
 * megatron index's block sums, 20 MB at 10^10 documents, never on the
 * loop), then calls done(ctx) on the loop; pipetable_commit follows (or
 * pipetable_discard). 0, or -errno (nothing queued: commit copies them). */
int pipetable_place(struct pipetable *pt, struct pipe_open *list, void (*done)(void *ctx),
		    void *ctx);
/* Writes each reserved pipeline of list into the arena and makes it live
 * (in order); frees list. Returns how many went live (a scheduler out of
 * memory leaves one out, logged). */
size_t pipetable_commit(struct pipetable *pt, struct pipe_open *list);
/* Undoes list's reservations, closes its sources (opened or not) and
 * frees it. */
void pipetable_discard(struct pipetable *pt, struct pipe_open *list);

/* Removes the live pipeline at entry: its clients get ERROR text, which
 * the log says too. */
void pipetable_remove(struct pipetable *pt, int entry, const char *text);
/* Frees the entries of removed pipelines that nothing names any more. */
void pipetable_reap(struct pipetable *pt);

/* "  removed pipeline NAME: waiting for N staging slots..." lines for
 * removed pipelines not yet freed, and "runtime_index: USED of BYTES". */
void pipetable_describe(struct pipetable *pt, struct status_text *t);

#endif
