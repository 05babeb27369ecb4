/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched: the master's scheduler. It decides everything workers do: which
 * samples make which batch for each attached client (common/sampler.h),
 * which staging slot holds it, how the batch is split into work items, and
 * the order in which finished batches are delivered.
 *
 *  - Staging slots are shared by all clients. With N clients using them
 *    (all but direct clients), none has more than its share,
 *    max(1, slots / (N + 1)), in use: a client that stops keeps what it
 *    holds but takes nothing more, and the next client to attach finds its
 *    share free. Within the shares a free slot goes to the client furthest
 *    below its prefetch depth (in_flight / depth), so a fast client cannot
 *    starve a slow one.
 *  - Items are queued FIFO, so the batch a client needs next is the one
 *    every worker works on; items of a dead worker go to the queue's front.
 *  - Batches finish out of order and wait in their slot until every
 *    earlier batch of the same client has been delivered.
 *  - A slot's generation changes on every reuse; completions and RELEASEs
 *    carrying an old generation are ignored, never double-free a slot.
 *
 * Host delivery: READY names the staging slot, which stays the client's
 * until its RELEASE.
 *
 * Device delivery (daemon/sched/devpath.c): the client has a ring of `depth`
 * device slots (the GPU thread allocates it; attaching waits for that). A
 * complete batch, in order, takes a free device slot and goes to the GPU
 * thread (daemon/gpu/gpuseam.h); its staging slot is free again once the GPU
 * thread has read it, and READY (naming the device slot) goes out once the
 * copy has landed. The device slot is the client's until its RELEASE. A
 * client's in_flight counts its batches from start to RELEASE, so a free
 * device slot always exists when a batch is handed on. A direct client
 * (its pipeline's file is page-locked, daemon/gpu/direct.h) uses no staging
 * slot and no worker: each batch starts straight in a free device slot as
 * the list of its samples' file offsets.
 *
 * The folder's contract:
 *  - It owns: the clients' sessions (attach, detach, RELEASE, resume,
 *    groups), the staging slots and their shares, the work items and
 *    their queue, the order of delivery, device rings on the loop side,
 *    and the texts of bad samples and failed batches and streams.
 *  - It may call: daemon/source (counts, where a sample lives, the texts
 *    that name a sample or a failed batch, status lines), daemon/core
 *    (status text), and below the daemon common/ (the sampler, positions),
 *    shm/ and proto/. The worker pool, the GPU thread and the server are
 *    reached only through the callbacks they hand it (struct
 *    sched_workers, struct gpu_requests in daemon/gpu/gpuseam.h, struct
 *    sched_ops), never by their headers' calls.
 *  - It is called by: the server (attach, detach, release, status), the
 *    worker pool (item done or lost, pump, workers unable), the GPU
 *    thread's answers on the loop (sched_gpu_answers), start-up (create,
 *    wiring, free).
 *  - Inside, its files are layers that call one way, top to bottom
 *    (sched_impl.h): sched.c, session.c, gpuanswer.c (entry points);
 *    fill.c (the engine: slots, items, fairness, delivery); devpath.c
 *    (device slots and the GPU side of a batch); sched_blend.c (a blend's
 *    batches); batchfail.c (bad samples, failed batches and streams);
 *    group.c (tensor-parallel groups); batch.c (a client's batches, slots,
 *    stage figures). No cycle is left.
 *
 * Runs entirely on the loop thread.
 */
#ifndef LDR_DAEMON_SCHED_H
#define LDR_DAEMON_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/config/config.h"
#include "daemon/gpu/gpuseam.h"
#include "daemon/source/source.h"
#include "proto/proto.h"
#include "shm/arena.h"

struct conn;         /* a client's connection (daemon/server/server.h) */
struct exitwatch_set;
struct pool;
struct sched;
struct sched_client;
struct status_text;

/* What the scheduler tells a client's connection (daemon/server/server.h). */
struct sched_ops {
	/* A pending attach (SCHED_ATTACH_PENDING) is decided: rc 0 with the
	 * WELCOME to send, or -errno with the ERROR text. */
	void (*attached)(struct conn *conn, int rc, const struct proto_welcome *welcome,
			 const char *text);
	/* Send READY. */
	void (*ready)(struct conn *conn, const struct proto_ready *ready);
	/* The client's stream cannot go on (code: positive errno, text names the
	 * failing object): send ERROR and close. The scheduler stops serving the
	 * client at once; the server calls sched_detach when the connection is
	 * gone. */
	void (*fail)(struct conn *conn, int code, const char *text);
	/* Calls fn(arg) on the loop once process pid has exited (at once when
	 * it cannot be watched): daemon/pool/exitwatch.h. */
	struct exitwatch_set *exits;
	void (*watch_exit)(struct exitwatch_set *exits, pid_t pid, void (*fn)(void *arg), void *arg);
};

/* Where work items go: the worker pool (daemon/pool/pool.h), or a stand-in. */
struct sched_workers {
	struct pool *pool;
	/* Queues the item on a worker; false when none has room (the pool
	 * calls sched_pump when one has). */
	bool (*submit)(struct pool *pool, const struct work_cmd *cmd);
};

#define SCHED_ATTACH_PENDING 1

struct sched *sched_create(const struct config *cfg, struct arena *arena,
			   const struct source *sources, size_t n_sources,
			   const struct sched_ops *ops);
void sched_set_workers(struct sched *s, const struct sched_workers *workers);
/* Device delivery through this GPU thread (daemon/gpu/gpuseam.h). */
void sched_set_gpu(struct sched *s, const struct gpu_requests *gpu);
/* The answers this scheduler takes from a GPU thread. */
struct gpu_answers sched_gpu_answers(struct sched *s);
/* Why device delivery is refused when no GPU thread is set (the ERROR
 * text names it). */
void sched_set_no_device(struct sched *s, const char *why);
void sched_free(struct sched *s);

/*
 * The pipeline table while loaderd runs (daemon/pipetable.h). sources
 * (as sched_create got it) has ARENA_PIPELINES_MAX entries; the first
 * n_sources are live from the start.
 *
 * sched_pipeline_add: entry, its source opened and its table entry in
 * the arena filled, is live: clients may attach to it (the slots' arrays
 * grow for its batches first). 0 or -ENOMEM.
 * sched_pipeline_remove: no client may attach to entry any more, and
 * every client attached to it is failed with ERROR ENOENT and text.
 * sched_pipeline_busy: whether a client (attached, or detached with a
 * device ring not yet freed) or a staging slot still names entry; while
 * it does, its source and table entry must stay as they are.
 * sched_pipeline_forget: drops what the scheduler kept of entry (bad
 * images seen, document orders), once it is no longer busy.
 */
int sched_pipeline_add(struct sched *s, uint32_t entry);
bool sched_pipeline_live(const struct sched *s, uint32_t entry);
void sched_pipeline_remove(struct sched *s, uint32_t entry, const char *text);
bool sched_pipeline_busy(const struct sched *s, uint32_t entry);
/* Clients attached to entry. */
uint32_t sched_pipeline_clients(const struct sched *s, uint32_t entry);
void sched_pipeline_forget(struct sched *s, uint32_t entry);

/*
 * Attaches a client. On success fills the WELCOME (all but the arena size
 * fields, which the server adds) and starts filling its batches. On failure
 * returns -errno with a text for the ERROR frame: -EBUSY too many clients,
 * -ENOENT unknown pipeline, -EOPNOTSUPP device delivery from a daemon
 * without it, -EINVAL a bad resume token or a world size that leaves this
 * rank no batch, -EAGAIN no worker can run. Device delivery returns
 * SCHED_ATTACH_PENDING: the answer comes through ops.attached once the
 * ring exists (or could not be made).
 */
int sched_attach(struct sched *s, const struct proto_hello *hello, pid_t pid, struct conn *conn,
		 struct sched_client **out, struct proto_welcome *welcome,
		 char *err, size_t err_cap);

/* sched_attach to the live pipeline at table entry `entry` (a pipeline
 * the client declared, daemon/jobs.h), or by HELLO's name when entry < 0. */
int sched_attach_entry(struct sched *s, int entry, const struct proto_hello *hello, pid_t pid,
		       struct conn *conn, struct sched_client **out, struct proto_welcome *welcome,
		       char *err, size_t err_cap);

/* Fails every group whose members have not all attached within
 * group_timeout_ms of its first (0: never): each member there gets ERROR
 * ETIME naming the group, its members' pids and how many are missing.
 * The milliseconds until the next group's deadline, or 0 when no group
 * waits (the caller's timer stops). */
uint64_t sched_expire_groups(struct sched *s);

/* The client's connection is gone: its held slots are freed at once, slots
 * still being filled as soon as their outstanding items finish. A device
 * client's ring is freed once the process has closed its IPC handles:
 * at once when it said so (handles_closed: it sent BYE), else when the
 * process has exited. */
void sched_detach(struct sched *s, struct sched_client *c, bool handles_closed);

/* A RELEASE from the client. Stale or duplicate ones are ignored (logged
 * at debug level). */
void sched_release(struct sched *s, struct sched_client *c, const struct proto_release *r);

/* A DECODED from a client that decodes its GPU's images: the staging slot
 * it names is free again. Stale or duplicate ones are ignored (logged at
 * debug level). */
void sched_decoded(struct sched *s, struct sched_client *c, const struct proto_decoded *d);

/* From the worker pool (daemon/pool/pool.h). A lost item is issued again; one
 * lost as suspect SCHED_ITEM_STRIKES times (its worker crashed or was
 * killed as stuck each time) fails its batch instead, with an error that
 * names its samples and how the workers ended. */
#define SCHED_ITEM_STRIKES 3
void sched_item_done(struct sched *s, const struct work_done *done);
void sched_item_lost(struct sched *s, uint64_t item_id, bool suspect, const char *why);
void sched_pump(struct sched *s);
/* No worker can run (why), or they can again (NULL): while they cannot,
 * every client that needs workers (all but direct clients) gets ERROR
 * (EAGAIN, with why), and so does an attach. */
void sched_workers_unable(struct sched *s, const char *why);
/* Names a work item for a log line: pipeline, epoch, batch, rows and its
 * first sample (source_sample_where); "an item no longer wanted" for a
 * stale id. */
void sched_describe_item(struct sched *s, uint64_t item_id, char *buf, size_t cap);
/* Names sample `sample` of a pipeline for a log line. */
void sched_describe_sample(struct sched *s, uint32_t pipeline, uint64_t sample, char *buf,
			   size_t cap);

/* A client's data wait, as its RELEASEs said it (proto_release.wait_ns),
 * summed since it attached: for workers = auto (daemon/pool/wtune.h). */
struct sched_wait {
	uint64_t session;
	pid_t pid;
	uint64_t releases;
	uint64_t wait_ns;
};
/* Fills out with the clients the workers serve (attached, not failed, not
 * direct), at most cap of them; returns how many. */
size_t sched_waits(const struct sched *s, struct sched_wait *out, size_t cap);

/* Status lines: the arena's; then pipelines, clients and error counters. */
void sched_describe_arena(const struct sched *s, struct status_text *t);
void sched_describe(const struct sched *s, struct status_text *t);
/* The errors: line, one of the summary lines (daemon/core/status.h). */
void sched_describe_errors(const struct sched *s, struct status_text *t);

#endif
