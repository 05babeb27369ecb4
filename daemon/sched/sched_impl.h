/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched_impl.h: the scheduler's state and the calls its files make to
 * one another; nothing outside daemon/sched includes it.
 *
 * The files are layers; a file calls only the files below it (and its
 * own), never one above:
 *
 *   sched.c       create, wire, free; status lines        \
 *   session.c     attach, detach, RELEASE (the server)     > entry points
 *   gpuanswer.c   the GPU thread's answers                /
 *   fill.c        the engine: slots to clients, items to workers,
 *                 completions (the pool), delivery in order
 *   devpath.c     device rings, batches handed to the GPU thread,
 *                 direct batches
 *   sched_blend.c a blend's batches: rows traced to members' samples
 *   batchfail.c   bad samples, failed batches and streams
 *   group.c       tensor-parallel groups
 *   batch.c       a client's next batch, slots freed and found, the
 *                 stages' figures, its data wait and GPU share, samples
 *                 named
 *   gpushare.c    the GPU share's rule (pure; gpushare.h)
 *
 * After anything that may free a slot or a client's room, an entry
 * point calls sched_fill; a lower file never does (devpath_release says
 * whether it freed one). Calls back up leave the scheduler only through
 * its callbacks to the server and the GPU thread (struct sched_ops,
 * struct gpu_requests), which answer later, never from inside the call.
 */
#ifndef LDR_DAEMON_SCHED_IMPL_H
#define LDR_DAEMON_SCHED_IMPL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/escape.h"
#include "common/sampler.h"
#include "daemon/source/docorder.h"
#include "daemon/sched/gpushare.h"
#include "daemon/sched/sched.h"

enum slot_state {
	SLOT_FREE,
	SLOT_FILLING, /* items outstanding */
	SLOT_DONE,    /* complete, waiting for earlier batches of its client */
	SLOT_HELD,    /* READY sent; the client's until RELEASE (host delivery) */
	SLOT_ORPHAN,  /* its client left while it was filling */
	SLOT_PINNING, /* the GPU thread reads it (device delivery); client may be NULL */
	SLOT_DECODING, /* copied, and its JPEGs the client's to decode until its DECODED
			* (device delivery to a client that decodes: devpath.c) */
};

enum dev_state { DEV_FREE, DEV_COPYING, DEV_HELD };

/* Where a batch sits in its client's stream of batches: what READY says;
 * and when it passed each stage (sched_now_ns), for the client's stage
 * figures. */
struct batch_pos {
	uint64_t seq, epoch, g, batch, first;
	uint32_t rows;
	bool last;
	uint64_t t_pick, t_filled, t_handed, t_ready;
};

/* The stages of a batch, as a client's status line and detach log line
 * show them (means per batch):
 *  fill   picked -> its last item done (the workers)
 *  order  done -> handed on: READY sent (host), or given to the GPU thread
 *         (device), once every earlier batch of the client was
 *  gpu    given to the GPU thread -> its copy landed and READY sent
 *  held   READY sent -> RELEASE received (the client's own time) */
enum sched_stage { STAGE_FILL, STAGE_ORDER, STAGE_GPU, STAGE_HELD, STAGE_COUNT };

struct stage_sums {
	uint64_t ns[STAGE_COUNT];
	uint64_t n[STAGE_COUNT];
};

/* A device slot of a client's ring, with the batch it holds (the staging
 * slot may be reused before READY goes out). */
struct dev_slot {
	enum dev_state state;
	uint32_t generation;
	struct batch_pos pos;
	/* a client that decodes: the staging slot holding the batch's JPEGs,
	 * which READY names (decode: it has rows the GPU takes) */
	bool decode;
	uint32_t staging, staging_generation;
};

enum item_state { ITEM_PENDING, ITEM_DISPATCHED, ITEM_DONE };

struct item {
	uint32_t first_row;
	uint32_t count;
	enum item_state state;
	uint32_t strikes; /* times lost as suspect (sched.h) */
};

struct slot {
	enum slot_state state;
	uint32_t generation;
	uint32_t pipeline;   /* of the batch it holds, while not SLOT_FREE (an orphan's too) */
	struct sched_client *client;
	struct batch_pos pos;
	uint32_t n_items, items_done;
	struct item *items;
	int error;         /* first failure of an item: -errno (-ECHILD: struck out) */
	uint32_t bad_row;
	uint64_t error_detail;
	char lost_why[96]; /* -ECHILD: how the last worker holding it ended */
	/* a group's batch (group.c): the members that still hold it (a bit per
	 * member index, host delivery), and the GPU thread's copies of it not
	 * yet done (device delivery) */
	struct sched_group *group;
	uint64_t holders;
	uint32_t pins;
	/* a document-shuffled pipeline's batch: where each row's window starts
	 * (work_cmd.doc_pos, doc_skip), room for the largest such batch */
	bool docs;
	uint64_t *doc_pos, *doc_skip;
	/* a blend's batch (sched_blend.c): each row's member, the member's
	 * sample and the epoch of its order; room for the largest blend batch */
	bool blend;
	uint64_t *blend_member, *blend_sample, *blend_epoch;
	/* a decoding client's batch with rows for its GPU: kept for the client
	 * once copied (SLOT_DECODING), unless its DECODED came first */
	bool decode_hold, decoded_early;
};

struct sched_client {
	struct conn *conn;  /* NULL once detached */
	uint64_t session;
	pid_t pid;
	char name[ESCAPE_SIZE(PROTO_NAME_MAX - 1)]; /* the client's, escaped (escape.h) */
	uint32_t pipeline;
	uint32_t split;     /* enum split_id: the dataset split it streams (source.h) */
	struct sampler sampler;
	uint32_t depth;
	uint64_t epoch, g, next_batch, segment_batches;
	uint64_t next_seq;  /* seq of the next batch to start */
	uint64_t send_seq;  /* seq of the next batch to deliver */
	uint64_t released;
	uint64_t released_rows; /* rows of the batches released */
	uint32_t in_flight; /* batches started and not yet released */
	uint32_t staging;   /* staging slots it has in use (filling, done, held, pinning) */
	struct stage_sums stages;
	struct gpushare share; /* its data wait, and the GPU's share of its images (batch.c) */
	bool failed;
	/* device delivery (devpath.c) */
	bool device;
	bool attaching;     /* waiting for the GPU thread's ring */
	bool direct;        /* batches come from the page-locked file, not staging */
	bool gpu_decode;    /* its GPU decodes the images it takes (WORK_CMD_GPU_DECODE) */
	bool client_decode; /* ... in the client's own process (HELLO's DECODE flag) */
	struct {
		uint64_t batches, gpu, cpu, bad, submit_ns;
	} decoded;          /* what its DECODEDs said, summed */
	bool gone;          /* detached while attaching: retire once the ring exists */
	struct pinner_client *pc; /* the GPU thread's client, NULL until attached */
	uint64_t pin_seq;   /* seq of the next batch to hand to the GPU thread */
	uint64_t dev_slot_bytes;
	uint8_t uuid[PROTO_UUID_BYTES];
	struct proto_welcome welcome; /* kept while attaching */
	struct sched *sched;          /* for the exit watch (devpath_retire_on_exit) */
	struct sched_client *retiring_next; /* detached, ring not yet freed */
	struct sched_group *group; /* NULL when it is in none (group.c) */
	uint32_t member;           /* its index in the group */
	struct dev_slot dev[PROTO_DEVICE_SLOTS_MAX];
};

/* Clients that see the same batches from one read (a tensor-parallel
 * group, group.c). The group is scheduled as one consumer: its leader,
 * members[0], takes the slots and the sampler's batches; every member gets
 * READY for each of them. */
struct sched_group {
	char key[PROTO_GROUP_MAX];                       /* as HELLO sent it */
	char shown[ESCAPE_SIZE(PROTO_GROUP_MAX - 1)];    /* escaped, for texts */
	uint32_t size;                                   /* HELLO's group_size */
	uint32_t joined;                                 /* members that attached so far */
	uint32_t present;                                /* of those, not detached */
	struct sched_client *members[PROTO_GROUP_SIZE_MAX]; /* NULL once detached */
	/* what every member must agree on (HELLO) */
	uint32_t pipeline, split, rank, world, depth, delivery;
	char resume[PROTO_TOKEN_MAX];
	uint64_t born_ns;   /* when its first member attached (sched_now_ns) */
	bool failed;        /* a member died or failed: every other member is failed */
	bool ending;        /* a member said BYE: no new batch; the others are failed
			     * once they have released every batch started */
	char why[PROTO_ERROR_TEXT_MAX]; /* ending: the others' ERROR text */
	struct sched_group *next;
};

/* Pending item references (slot << 16 | item), a ring-buffer deque. */
struct pending {
	uint32_t *refs;
	size_t cap, head, count;
};

struct sched {
	const struct config *cfg;
	struct arena *arena;
	const struct source *sources; /* the table: ARENA_PIPELINES_MAX entries */
	size_t n_sources;
	bool live[ARENA_PIPELINES_MAX]; /* entries clients may attach to (sched_pipeline_add) */
	/* what the slots' arrays have room for (sched.c, sched_room) */
	uint32_t max_items, max_doc_rows, max_blend_rows;
	struct sched_ops ops;
	struct sched_workers workers;
	struct gpu_requests gpu;
	bool has_device;
	char no_device[200]; /* why device delivery is refused, when !has_device */
	char unable[PATH_MAX + 256]; /* why no worker can run, "" while they can */
	struct sched_client *retiring; /* detached device clients whose ring is not yet freed */
	struct sched_group *groups;    /* groups with a member attached (group.c) */
	uint32_t n_slots, free_slots;
	struct slot *slots;
	struct pending pending;
	struct sched_client **clients;
	uint32_t n_clients;
	uint32_t fair_start; /* rotates to break ties between equal clients */
	uint64_t next_session;
	uint64_t read_errors;
	uint64_t bad_images;      /* image samples that could not be used, each time met */
	uint64_t substituted;     /* of those, replaced by another sample */
	uint8_t *bad_seen[ARENA_PIPELINES_MAX]; /* image pipelines: a bit per sample, logged once */
	struct docorder_cache docorder; /* epochs' document orders (daemon/source/docorder.h) */
};

/* ---- batch.c ---- */

/* The monotonic clock, in ns: stage timestamps. */
uint64_t sched_now_ns(void);
/* Adds `to - from` to client c's figures of stage st. */
void sched_stage(struct sched_client *c, enum sched_stage st, uint64_t from, uint64_t to);
/* c released the batch at pos: its held stage ends now, its rows count. */
void sched_released(struct sched_client *c, const struct batch_pos *pos);
/* Client c's figures in its status item: the bytes of its batches released, its
 * data wait as it reported it, the time its batches waited ready in
 * staging (the order stage, in all). */
void sched_traffic_describe(const struct sched *s, const struct sched_client *c,
			    struct status_text *t);
/* " fill_us F order_us O gpu_us G held_us H": c's means per batch. */
int sched_stage_text(const struct sched_client *c, char *buf, size_t cap);
void sched_stage_describe(const struct sched_client *c, struct status_text *t);
void sched_slot_free(struct sched *s, struct slot *sl);
/* The slot holding client c's finished batch `seq`, or NULL. */
struct slot *sched_done_slot(struct sched *s, struct sched_client *c, uint64_t seq);
/* Advances client c to its next batch and says where that batch sits. */
struct batch_pos sched_batch_next(struct sched_client *c);
/* Where client c's next batch sits, c left as it is (sched_batch_next's
 * answer but for seq, t_pick and the count of batches in flight). */
struct batch_pos sched_batch_peek(const struct sched_client *c);
/* READY for the batch at pos, in the given slot. */
struct proto_ready sched_ready_of(const struct batch_pos *pos, uint32_t slot, uint32_t generation,
				  uint64_t slot_offset);
/* Client c has been handed every batch of its last epoch. */
bool sched_stream_ended(const struct sched_client *c);
/* sched_describe_sample for a sample of a known split. */
void sched_describe_split_sample(struct sched *s, uint32_t pipeline, uint32_t split,
				 uint64_t sample, char *buf, size_t cap);
/* Client c's GPU share, by its pipeline's decode and gpu_decode_percent
 * (gpushare.h), from its attach on. */
void sched_share_init(const struct sched *s, struct sched_client *c);
/* A RELEASE of c's that waited wait_ns (proto_release.wait_ns): into c's
 * share, which adapts while c's GPU decodes its images (c->gpu_decode); a
 * notable change is logged (leaving 0, reaching the most, back to 0, taken
 * back), the others at debug. */
void sched_share_note(const struct sched *s, struct sched_client *c, uint64_t wait_ns);
/* The share c's work items carry (work_cmd.gpu_share): c's own, 0 while
 * its GPU does not decode; a group's, the largest of its members' (each
 * member's follows its own waits). */
uint32_t sched_share_units(const struct sched_client *c);
/* " gpu_share S wait_ms W wait_pct P" for c's status line: its share now,
 * its data wait in all and as a percent of its time attached. */
int sched_share_text(const struct sched_client *c, char *buf, size_t cap);
void sched_share_describe(const struct sched_client *c, struct status_text *t);

/* ---- group.c ---- */

/* Puts new client c (not yet in s->clients) into HELLO's group, creating
 * it with the first member: 0, or -errno with err naming the group and,
 * for a member that disagrees, the field (-EINVAL), or a full or failed
 * group (-EBUSY). No group (group_size <= 1): 0, nothing done. */
int group_join(struct sched *s, struct sched_client *c, const struct proto_hello *hello,
	       char *err, size_t cap);
/* Client c is detaching: the group cannot go on without it. When it said
 * BYE (said_bye) the group ends: no new batch is started, and each other
 * member is failed (EPIPE) once it has released every batch started for
 * it (group_drain), so members that stop together all finish cleanly.
 * Otherwise (its process died, its connection broke) the other members
 * are failed at once. c lets go of the group's batches it holds, and the
 * group goes with its last member. */
void group_leave(struct sched *s, struct sched_client *c, bool said_bye);
/* Fails member c of an ending group once it holds no batch (sched_fill). */
void group_drain(struct sched *s, struct sched_client *c);
/* c is a member other than the group's leader: it takes no slot itself. */
bool group_follower(const struct sched_client *c);
/* c may start a batch as far as its group is concerned: no group, or c
 * leads a group whose members have all attached and each has room. */
bool group_may_start(const struct sched_client *c);
/* Leader c has started a batch: every other member has one more in flight. */
void group_started(struct sched_client *c);
/* Host delivery of leader c's batch in sl: READY r to every member, each
 * of which holds the slot until its RELEASE. */
void group_deliver(struct sched *s, struct sched_client *c, struct slot *sl,
		   const struct proto_ready *r);
/* A RELEASE from member c (host delivery); false when it names no batch
 * c holds. */
bool group_release(struct sched *s, struct sched_client *c, const struct proto_release *r);
/* Fails every member of c's group but c with code and text (c's failure,
 * decided elsewhere): a group cannot go on without one of its members. */
void group_fail_others(struct sched *s, struct sched_client *c, int code, const char *text);
/* Fails each group still waiting for members timeout_ns after its first
 * attached (ETIME, naming the group, the members there and the
 * missing count). The nanoseconds until the next such deadline, or
 * UINT64_MAX when no group waits. */
uint64_t group_expire(struct sched *s, uint64_t now_ns, uint64_t timeout_ns);
/* " group KEY size N members M/N" for c's status line, "" for none. */
int group_status_text(const struct sched_client *c, char *buf, size_t cap);
void group_describe(const struct sched_client *c, struct status_text *t);

/* ---- batchfail.c ---- */

/* Bad images a work item met (counted; the first logged once per file). */
void batchfail_note_bad(struct sched *s, uint32_t pipeline, const struct work_done *done);
/* Fails client c for the batch in sl whose item failed (sl->error). */
void batchfail_batch(struct sched *s, struct slot *sl);
/* Fails client c, whose stream has passed its last epoch. */
void batchfail_stream_end(struct sched *s, struct sched_client *c);
/* Fails client c, whose batch in sl could not be started: the epoch's
 * document order could not be computed (err, -errno). Frees sl. */
void batchfail_docorder(struct sched *s, struct slot *sl, int err);
/* Fails client c because no worker can run (s->unable). */
void batchfail_unable(struct sched *s, struct sched_client *c);

/* ---- sched_blend.c: a blend's batches ---- */
/* Plans sl's batch of blend client c: each row's member sample (and
 * where its window starts, for a document-shuffled member), and the
 * items, each rows of one member in one order, at most chunk of them.
 * 0 or -errno (docorder_locate's). */
int sched_blend_plan(struct sched *s, struct slot *sl, const struct sched_client *c);
/* Item it of blend batch sl as cmd: its member's table entry, epoch and
 * samples. */
void sched_blend_cmd(const struct sched *s, const struct slot *sl, const struct item *it,
		     struct work_cmd *cmd);

/* ---- docwork.c: document orders off the loop ---- */
/* The scheduler's order cache, its computations on libuv's pool. */
void sched_docwork_init(struct sched *s);
/* The document order of table entry `entry`'s split, from the arena. */
void sched_doc_split(const struct sched *s, uint32_t entry, uint32_t split,
		     struct docorder_split *out);
/* Whether the orders client c's next batch needs are computed: those
 * that are not are asked for (and the scheduler filled again when they
 * are), and in the last quarter of an epoch so is the next epoch's. */
bool sched_orders_ready(struct sched *s, const struct sched_client *c);
/* Where window `window` of table entry `entry`'s split starts in the
 * epoch's document order (docorder_locate's *k and *skip), the order
 * computed here if it is not ready after all. 0 or -errno. */
int sched_doc_locate(struct sched *s, uint32_t entry, uint32_t split, uint64_t epoch,
		     uint64_t seq_len, uint64_t window, uint64_t *k, uint64_t *skip);

/* ---- devpath.c ---- */

/* Hands, in seq order, every finished batch of device client c that is
 * next in line to the GPU thread, each into a free device slot. */
void devpath_flush(struct sched *s, struct sched_client *c);
/* A direct client's next batches, while it has room. */
void devpath_fill_direct(struct sched *s, struct sched_client *c);
/* Asks the GPU thread for c's ring. */
void devpath_attach(struct sched *s, struct sched_client *c);
/* c is detached; its ring goes once no process can touch it. */
void devpath_detach(struct sched *s, struct sched_client *c, bool handles_closed);
/* A RELEASE of a device slot: true when it freed one (the caller then
 * calls sched_fill), false for a stale or duplicate one. */
bool devpath_release(struct sched_client *c, const struct proto_release *r);
/* A decoding client's DECODED: true when it freed a staging slot. */
bool devpath_decoded(struct sched *s, struct sched_client *c, const struct proto_decoded *d);
/* The GPU thread has read staging slot sl: false when it stays the
 * decoding client's (SLOT_DECODING), true when it is to be freed. */
bool devpath_staging_read(struct slot *sl);

/* ---- fill.c ---- */

/* Starts batches for clients that can take one, then hands items to the
 * workers. Called by the entry points after anything that may free a
 * slot or a client's room. */
void sched_fill(struct sched *s);
/* Clients that take staging slots: every attached one but direct clients. */
bool sched_uses_staging(const struct sched_client *c);
/* The most staging slots a client may have in use (sched.h). */
uint32_t sched_slot_share(const struct sched *s);

/* ---- session.c ---- */

/* Status line of each client. */
void session_describe(const struct sched *s, struct status_text *t);

#endif
