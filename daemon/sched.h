/*
 * sched: the master's scheduler. It decides everything workers do: which
 * samples make which batch for each attached client (common/sampler.h),
 * which staging slot holds it, how the batch is split into work items, and
 * the order in which finished batches are delivered.
 *
 *  - Staging slots are shared by all clients. A free slot goes to the
 *    client furthest below its prefetch depth (in_flight / depth), so a
 *    fast client cannot starve a slow one and none hoards slots.
 *  - Items are queued FIFO, so the batch a client needs next is the one
 *    every worker works on; items of a dead worker go to the queue's front.
 *  - Batches finish out of order and wait in their slot until every
 *    earlier batch of the same client has been delivered.
 *  - A slot's generation changes on every reuse; completions and RELEASEs
 *    carrying an old generation are ignored, never double-free a slot.
 *
 * Delivery is host mode: READY names the staging slot, which stays the
 * client's until its RELEASE. (GPU delivery will insert the pinning stage
 * between "batch complete" and READY; see sched_ops.ready.)
 *
 * Runs entirely on the loop thread.
 */
#ifndef LDR_DAEMON_SCHED_H
#define LDR_DAEMON_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/config.h"
#include "daemon/source.h"
#include "proto/proto.h"
#include "shm/arena.h"

struct pool;
struct sched;
struct sched_client;
struct status_text;

struct sched_ops {
	/* Send READY to the connection `conn` given at attach. */
	void (*ready)(void *conn, const struct proto_ready *ready);
	/* The client's stream cannot go on (code: positive errno, text names the
	 * failing object): send ERROR and close. The scheduler stops serving the
	 * client at once; the server calls sched_detach when the connection is
	 * gone. */
	void (*fail)(void *conn, int code, const char *text);
};

struct sched *sched_create(const struct config *cfg, struct arena *arena,
			   const struct source *sources, size_t n_sources,
			   const struct sched_ops *ops);
void sched_set_pool(struct sched *s, struct pool *pool);
void sched_free(struct sched *s);

/*
 * Attaches a client. On success fills the WELCOME (all but the arena size
 * fields, which the server adds) and starts filling its batches. On failure
 * returns -errno with a text for the ERROR frame: -EBUSY too many clients,
 * -ENOENT unknown pipeline, -EOPNOTSUPP device delivery, -EINVAL a bad
 * resume token or a world size that leaves this rank no batch.
 */
int sched_attach(struct sched *s, const struct proto_hello *hello, pid_t pid, void *conn,
		 struct sched_client **out, struct proto_welcome *welcome,
		 char *err, size_t err_cap);

/* The client's connection is gone: its held slots are freed at once, slots
 * still being filled as soon as their outstanding items finish. */
void sched_detach(struct sched *s, struct sched_client *c);

/* A RELEASE from the client. Stale or duplicate ones are ignored (0 is
 * returned either way; the ignored case is logged at debug level). */
void sched_release(struct sched *s, struct sched_client *c, const struct proto_release *r);

/* Worker pool callbacks (daemon/pool.h). */
void sched_item_done(struct sched *s, const struct work_done *done);
void sched_item_lost(struct sched *s, uint64_t item_id);
void sched_pump(struct sched *s);

/* Status lines: the arena's; then pipelines, clients and error counters. */
void sched_describe_arena(const struct sched *s, struct status_text *t);
void sched_describe(const struct sched *s, struct status_text *t);

#endif
