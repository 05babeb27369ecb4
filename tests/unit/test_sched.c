/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the scheduler (daemon/sched/sched.h) with every neighbour
 * faked: the connections (struct sched_ops), the worker pool (struct
 * sched_workers) and the GPU thread (daemon/gpu/gpuseam.h). A real arena and a
 * real raw source (a file of records) are used, so slot offsets, tensors
 * and sample indices are the daemon's own.
 *
 * What is checked: the share and depth rules for staging slots and the
 * fairness between clients of different depths; in-order delivery when
 * items complete out of order; re-issue of a dead worker's items and the
 * strike rule; generations (stale completions and RELEASEs are ignored,
 * never double-free); a device client's way through the GPU thread
 * (attach, copy, landed, staging free, release, retire); each READY's
 * epoch while batches of the next epoch have started (device path and a
 * group's leader); groups (one read
 * for all members, refcounted slots, agreement, a member that dies or
 * says BYE, a group on the device path); the GPU share the items carry,
 * from the data wait RELEASEs report, and the status line that shows both.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/config/config.h"
#include "daemon/gpu/gpuseam.h"
#include "daemon/sched/sched.h"
#include "daemon/source/source.h"
#include "daemon/core/status.h"
#include "shm/arena.h"

#define RECORD 64
#define N_SAMPLES 512
#define BATCH 8
#define CHUNK 4  /* two items per batch */
#define SLOTS 8
#define MAX_FRAMES 256
#define MAX_CMDS 512

/* ---- a fake connection: what the scheduler sent it ---- */

struct conn {
	struct proto_ready ready[MAX_FRAMES];
	int n_ready;
	int attached;       /* 0 none, 1 WELCOME, -errno refused */
	int failed;         /* positive errno of an ERROR, 0 none */
	char text[PROTO_ERROR_TEXT_MAX];
};

static void conn_attached(struct conn *c, int rc, const struct proto_welcome *w, const char *text)
{
	c->attached = rc < 0 ? rc : 1;
	if (text)
		snprintf(c->text, sizeof(c->text), "%s", text);
	(void)w;
}

static void conn_ready(struct conn *c, const struct proto_ready *r)
{
	assert_true(c->n_ready < MAX_FRAMES);
	c->ready[c->n_ready++] = *r;
}

static void conn_fail(struct conn *c, int code, const char *text)
{
	c->failed = code;
	snprintf(c->text, sizeof(c->text), "%s", text);
}

static int exits_watched;

static void watch_exit(struct exitwatch_set *set, pid_t pid, void (*fn)(void *), void *arg)
{
	(void)set;
	(void)pid;
	exits_watched++;
	fn(arg); /* the process is gone at once */
}

/* ---- a fake pool: the items it was given ---- */

struct fake_pool {
	struct work_cmd cmds[MAX_CMDS];
	int n;
	int room; /* items it takes before it is full */
};

static struct fake_pool pool_fake;

static bool pool_take(struct pool *p, const struct work_cmd *cmd)
{
	(void)p;
	if (pool_fake.room == 0)
		return false;
	assert_true(pool_fake.n < MAX_CMDS);
	pool_fake.cmds[pool_fake.n++] = *cmd;
	pool_fake.room--;
	return true;
}

/* ---- a fake GPU thread ---- */

struct pinner_client {
	int id;
};

struct pinner {
	struct sched_client *attach_c;
	int attaches, copies, directs, retires;
	struct pinner_client pcs[4];
	struct { struct pinner_client *pc; uint32_t d, slot, gen; uint64_t bytes; } copy[64];
	struct pinner_client *retired;
};

static struct pinner gpu_fake;

static void gpu_attach(struct pinner *g, struct sched_client *c, const uint8_t uuid[PROTO_UUID_BYTES],
		       uint32_t pipeline, uint32_t slots, uint64_t slot_bytes, bool client_decodes)
{
	(void)uuid;
	(void)pipeline;
	assert_false(client_decodes); /* raw records: nothing to decode */
	assert_true(slots >= 1 && slot_bytes >= (uint64_t)BATCH * RECORD);
	g->attach_c = c;
	g->attaches++;
}

static void gpu_copy(struct pinner *g, struct pinner_client *pc, uint32_t d, uint32_t slot,
		     uint32_t gen, uint64_t bytes, uint32_t rows)
{
	assert_true(g->copies < 64);
	assert_true(rows > 0);
	g->copy[g->copies].pc = pc;
	g->copy[g->copies].d = d;
	g->copy[g->copies].slot = slot;
	g->copy[g->copies].gen = gen;
	g->copy[g->copies].bytes = bytes;
	g->copies++;
}

static void gpu_copy_direct(struct pinner *g, struct pinner_client *pc, uint32_t d,
			    uint64_t *offsets, uint32_t rows)
{
	(void)pc;
	(void)d;
	(void)rows;
	free(offsets);
	g->directs++;
}

static void gpu_retire(struct pinner *g, struct pinner_client *pc)
{
	g->retires++;
	g->retired = pc;
}

static void gpu_describe(struct pinner_client *pc, struct status_text *t)
{
	status_printf(t, " gpu fake%d", pc->id);
}

/* ---- the world of one test ---- */

struct world {
	char path[64];
	struct config cfg;
	struct source src;
	struct arena arena;
	struct sched *s;
	struct gpu_answers answers;
};

static struct world *world_new(uint32_t slots, bool with_gpu)
{
	struct world *w = calloc(1, sizeof(*w));
	assert_non_null(w);
	snprintf(w->path, sizeof(w->path), "/tmp/test_sched.XXXXXX");
	int fd = mkstemp(w->path);
	assert_true(fd >= 0);
	uint8_t rec[RECORD];
	for (int i = 0; i < N_SAMPLES; i++) {
		memset(rec, i & 0xff, sizeof(rec));
		assert_int_equal(write(fd, rec, sizeof(rec)), (ssize_t)sizeof(rec));
	}
	close(fd);
	config_defaults(&w->cfg);
	w->cfg.staging_slots = slots;
	w->cfg.max_depth = 16;
	w->cfg.device_slots = 4;
	w->cfg.n_pipelines = 1;
	struct pipeline_cfg *p = &w->cfg.pipelines[0];
	snprintf(p->name, sizeof(p->name), "p");
	snprintf(p->path, sizeof(p->path), "%s", w->path);
	p->kind = SOURCE_RAW;
	p->record_bytes = RECORD;
	p->batch_size = BATCH;
	p->chunk = CHUNK;
	p->shuffle = false;
	char err[512];
	assert_int_equal(source_open(p, &w->src, err, sizeof(err)), 0);
	struct arena_plan plan = {.n_pipelines = 1, .n_workers = 1, .n_slots = slots,
				  .slot_bytes = (w->src.batch_bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN};
	assert_int_equal(arena_create(&plan, &w->arena), 0);
	*arena_pipeline(&w->arena, 0) = w->src.desc;
	struct sched_ops ops = {.attached = conn_attached, .ready = conn_ready, .fail = conn_fail,
				.watch_exit = watch_exit};
	w->s = sched_create(&w->cfg, &w->arena, &w->src, 1, &ops);
	assert_non_null(w->s);
	memset(&pool_fake, 0, sizeof(pool_fake));
	pool_fake.room = MAX_CMDS;
	struct sched_workers workers = {.submit = pool_take};
	sched_set_workers(w->s, &workers);
	memset(&gpu_fake, 0, sizeof(gpu_fake));
	exits_watched = 0;
	if (with_gpu) {
		struct gpu_requests req = {
			.gpu = &gpu_fake, .attach = gpu_attach, .copy = gpu_copy,
			.copy_direct = gpu_copy_direct, .retire = gpu_retire,
			.describe_client = gpu_describe,
		};
		sched_set_gpu(w->s, &req);
		w->answers = sched_gpu_answers(w->s);
	}
	return w;
}

static void world_free(struct world *w)
{
	sched_free(w->s);
	arena_close(&w->arena);
	source_close(&w->src);
	unlink(w->path);
	free(w);
}

static struct sched_client *attach(struct world *w, struct conn *c, uint32_t rank, uint32_t world,
				   uint32_t depth, bool device)
{
	struct proto_hello h = {.rank = rank, .world = world, .depth = depth};
	snprintf(h.pipeline, sizeof(h.pipeline), "p");
	if (device) {
		h.delivery = PROTO_DELIVERY_DEVICE;
		memset(h.device_uuid, 0xab, sizeof(h.device_uuid));
	}
	struct sched_client *sc = NULL;
	struct proto_welcome welcome;
	char err[PROTO_ERROR_TEXT_MAX];
	int rc = sched_attach(w->s, &h, 1000 + (pid_t)rank, c, &sc, &welcome, err, sizeof(err));
	assert_int_equal(rc, device ? SCHED_ATTACH_PENDING : 0);
	return sc;
}

/* A client's counters, from its status line. */
static void client_counts(struct world *w, int id, unsigned *in_flight, unsigned *staging)
{
	struct status_text *t = malloc(sizeof(*t));
	status_init(t);
	sched_describe(w->s, t);
	char key[32];
	snprintf(key, sizeof(key), "  client %d ", id);
	const char *line = strstr(t->buf, key);
	assert_non_null(line);
	assert_non_null(strstr(line, " in_flight "));
	assert_int_equal(sscanf(strstr(line, " in_flight "), " in_flight %u staging %u", in_flight,
				staging), 2);
	free(t);
}

/* Completes the item submitted k-th (status 0). */
static void complete(struct world *w, int k)
{
	struct work_done d = {.item_id = pool_fake.cmds[k].item_id};
	pool_fake.room++;
	sched_item_done(w->s, &d);
}

static void release_host(struct world *w, struct sched_client *sc, const struct proto_ready *r)
{
	struct proto_release rel = {.seq = r->seq, .slot = r->slot, .generation = r->generation};
	sched_release(w->s, sc, &rel);
}

/* With 8 slots and one client of depth 16, the share is 8 / 2 = 4. A
 * second client (depth 2) takes what its depth allows within the new
 * share (8 / 3 = 2); the first, over the new share, gets no new slot until
 * it is back under it, whatever it releases. */
/* A HELLO for a pipeline the daemon does not have: ENOENT, the name, the
 * closest one and the pipelines there are. */
static void test_unknown_pipeline(void **state)
{
	(void)state;
	struct world *w = world_new(SLOTS, false);
	static const struct {
		const char *name, *want;
	} cases[] = {
		{"q", "unknown pipeline \"q\" (pipelines: p)"},
		{"P", "unknown pipeline \"P\" (did you mean \"p\"? pipelines: p)"},
		{"p\"x", "unknown pipeline \"p\\\"x\" (pipelines: p)"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct conn c = {0};
		struct proto_hello h = {.rank = 0, .world = 1};
		snprintf(h.pipeline, sizeof(h.pipeline), "%s", cases[i].name);
		struct sched_client *sc = NULL;
		struct proto_welcome welcome;
		char err[PROTO_ERROR_TEXT_MAX];
		assert_int_equal(sched_attach(w->s, &h, 999, &c, &sc, &welcome, err, sizeof(err)), -ENOENT);
		assert_string_equal(err, cases[i].want);
		assert_null(sc);
	}
	world_free(w);
}

static void test_share_and_depth(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0}, b = {0};
	struct sched_client *sa = attach(w, &a, 0, 2, 16, false);
	unsigned in_flight, staging;
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, SLOTS / 2);
	int items = (SLOTS / 2) * (BATCH / CHUNK);
	assert_int_equal(pool_fake.n, items);
	attach(w, &b, 1, 2, 2, false);
	client_counts(w, 2, &in_flight, &staging);
	assert_int_equal(staging, 2);
	assert_int_equal(pool_fake.n, items + 2 * (BATCH / CHUNK));
	for (int k = 0; k < items; k++) /* a's batches, all done and sent */
		complete(w, k);
	assert_int_equal(a.n_ready, SLOTS / 2);
	release_host(w, sa, &a.ready[0]);
	release_host(w, sa, &a.ready[1]);
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, 2); /* at the share: nothing new */
	assert_int_equal(pool_fake.n, items + 2 * (BATCH / CHUNK));
	release_host(w, sa, &a.ready[2]);
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, 2); /* under it: one new batch */
	assert_int_equal(pool_fake.n, items + 3 * (BATCH / CHUNK));
	world_free(w);
}

/* Items complete out of order; READY goes out in seq order, each batch as
 * soon as every earlier one is delivered. */
static void test_in_order_delivery(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0};
	attach(w, &a, 0, 1, 4, false);
	assert_int_equal(pool_fake.n, 4 * 2); /* 4 batches of 2 items */
	/* batch 3, then 2, then the second item of 0: nothing deliverable */
	complete(w, 6);
	complete(w, 7);
	complete(w, 4);
	complete(w, 5);
	complete(w, 1);
	assert_int_equal(a.n_ready, 0);
	complete(w, 0); /* batch 0 whole: 0 goes out, 1 is not done */
	assert_int_equal(a.n_ready, 1);
	complete(w, 3);
	complete(w, 2); /* batch 1 whole: 1, 2 and 3 go out, in order */
	assert_int_equal(a.n_ready, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(a.ready[i].seq, (uint64_t)i);
		assert_int_equal(a.ready[i].batch, (uint64_t)i);
		assert_int_equal(a.ready[i].rows, BATCH);
	}
	world_free(w);
}

/* A dead worker's item goes to the front of the queue and is issued
 * again; an item lost as suspect three times fails its batch. */
static void test_reissue_and_strikes(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0};
	attach(w, &a, 0, 1, 1, false);
	assert_int_equal(pool_fake.n, 2);
	uint64_t lost = pool_fake.cmds[0].item_id;
	pool_fake.room = 0; /* the pool is full: the lost item waits */
	sched_item_lost(w->s, lost, false, "killed by signal 9 (Killed)");
	assert_int_equal(pool_fake.n, 2);
	pool_fake.room = 1;
	sched_pump(w->s);
	assert_int_equal(pool_fake.n, 3);
	assert_int_equal(pool_fake.cmds[2].item_id, lost); /* the same item, again */
	assert_memory_equal(pool_fake.cmds[2].sample_index, pool_fake.cmds[0].sample_index,
			    CHUNK * sizeof(uint64_t));
	/* suspect losses: the third fails the batch, naming how workers died */
	pool_fake.room = 8;
	for (int strike = 1; strike <= 3; strike++) {
		sched_item_lost(w->s, lost, true, "killed: no progress for 30.0 s");
		if (strike < 3) {
			sched_pump(w->s); /* issued again */
			assert_int_equal(pool_fake.n, 3 + strike);
			assert_int_equal(pool_fake.cmds[pool_fake.n - 1].item_id, lost);
		}
	}
	assert_int_equal(pool_fake.n, 5); /* not issued a fourth time */
	complete(w, 1);
	assert_int_equal(a.n_ready, 0);
	assert_int_equal(a.failed, EIO);
	assert_non_null(strstr(a.text, "3 workers in a row died producing them, the last killed: "
				"no progress for 30.0 s"));
	world_free(w);
}

/* A slot's generation changes with every batch: a completion or RELEASE
 * of an earlier batch in the same slot is ignored. */
static void test_generations(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0};
	struct sched_client *sc = attach(w, &a, 0, 1, 1, false);
	complete(w, 0);
	complete(w, 1);
	assert_int_equal(a.n_ready, 1);
	struct proto_ready first = a.ready[0];
	struct work_done stale = {.item_id = pool_fake.cmds[0].item_id};
	sched_item_done(w->s, &stale); /* a duplicate completion: ignored */
	release_host(w, sc, &first);
	release_host(w, sc, &first); /* a duplicate RELEASE: ignored */
	unsigned in_flight, staging;
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(in_flight, 1); /* the next batch, not two */
	assert_int_equal(pool_fake.n, 4);
	complete(w, 2);
	complete(w, 3);
	assert_int_equal(a.n_ready, 2);
	struct proto_ready second = a.ready[1];
	assert_int_equal(second.slot, first.slot); /* the freed slot, reused... */
	assert_int_not_equal(second.generation, first.generation); /* ...as a new generation */
	struct proto_release old = {.seq = second.seq, .slot = second.slot,
				    .generation = first.generation};
	sched_release(w->s, sc, &old);
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(in_flight, 1);
	release_host(w, sc, &second);
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, 1); /* batch 2 started in a free slot */
	world_free(w);
}

/* A device client: attach waits for the GPU thread's ring; each batch is
 * copied from its staging slot into a free device slot, READY names the
 * device slot once landed, the staging slot is free once the GPU thread
 * has read it; detaching without BYE retires the ring once the process
 * has exited. */
static void test_device_path(void **state)
{
	struct world *w = world_new(SLOTS, true);
	struct conn a = {0};
	struct sched_client *sc = attach(w, &a, 0, 1, 8, true);
	assert_int_equal(gpu_fake.attaches, 1);
	assert_int_equal(a.attached, 0);
	assert_int_equal(pool_fake.n, 0); /* nothing starts before the ring exists */
	struct proto_device dev = {.slots = 4, .slot_bytes = 4096, .ring_bytes = 4 * 4096};
	gpu_fake.pcs[0].id = 7;
	w->answers.attached(w->answers.sched, sc, &gpu_fake.pcs[0], 0, NULL, &dev, false, false);
	assert_int_equal(a.attached, 1);
	assert_int_equal(pool_fake.n, 4 * 2); /* depth capped by device_slots = 4 */
	for (int k = 0; k < 8; k++)
		complete(w, k);
	assert_int_equal(gpu_fake.copies, 4);
	assert_int_equal(a.n_ready, 0); /* not before the copies have landed */
	uint32_t seen = 0;
	for (int i = 0; i < 4; i++) {
		assert_ptr_equal(gpu_fake.copy[i].pc, &gpu_fake.pcs[0]);
		assert_int_equal(gpu_fake.copy[i].bytes, (uint64_t)BATCH * RECORD);
		seen |= 1u << gpu_fake.copy[i].d;
		w->answers.landed(w->answers.sched, sc, gpu_fake.copy[i].d);
		w->answers.staging_free(w->answers.sched, gpu_fake.copy[i].slot, gpu_fake.copy[i].gen);
	}
	assert_int_equal(seen, 0xf); /* four distinct device slots */
	assert_int_equal(a.n_ready, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(a.ready[i].seq, (uint64_t)i);
		assert_int_equal(a.ready[i].slot_offset, (uint64_t)a.ready[i].slot * 4096);
	}
	/* a staging slot handed back twice is ignored */
	w->answers.staging_free(w->answers.sched, gpu_fake.copy[0].slot, gpu_fake.copy[0].gen);
	struct proto_release rel = {.seq = 0, .slot = a.ready[0].slot,
				    .generation = a.ready[0].generation};
	sched_release(w->s, sc, &rel);
	assert_int_equal(pool_fake.n, 10); /* the freed device slot lets batch 4 start */
	sched_detach(w->s, sc, false);
	assert_int_equal(exits_watched, 1);
	assert_int_equal(gpu_fake.retires, 1);
	assert_ptr_equal(gpu_fake.retired, &gpu_fake.pcs[0]);
	w->answers.retired(w->answers.sched, sc);
	world_free(w);
}

/* A device client whose batches run a step apart: each batch's items
 * complete, it lands and is released before the next one's items do, so
 * batches of the next epoch have started while an older one is handed to
 * the GPU thread. Every READY names its own batch's epoch (handing an
 * older batch on once set the client's epoch back, and the batches
 * started after it were labelled with the older epoch). */
static void test_device_epochs(void **state)
{
	struct world *w = world_new(SLOTS, true);
	struct conn a = {0};
	/* 512 samples over world 32: 16 a rank, two batches of 8 an epoch */
	struct sched_client *sc = attach(w, &a, 0, 32, 8, true);
	struct proto_device dev = {.slots = 4, .slot_bytes = 4096, .ring_bytes = 4 * 4096};
	w->answers.attached(w->answers.sched, sc, &gpu_fake.pcs[0], 0, NULL, &dev, false, false);
	assert_int_equal(a.attached, 1);
	int done = 0, landed = 0;
	for (int b = 0; b < 12; b++) {
		complete(w, done++);
		complete(w, done++);
		assert_int_equal(gpu_fake.copies, landed + 1);
		w->answers.landed(w->answers.sched, sc, gpu_fake.copy[landed].d);
		w->answers.staging_free(w->answers.sched, gpu_fake.copy[landed].slot,
					gpu_fake.copy[landed].gen);
		landed++;
		assert_int_equal(a.n_ready, b + 1);
		const struct proto_ready *r = &a.ready[b];
		assert_int_equal(r->epoch, (uint64_t)b / 2);
		assert_int_equal(r->batch, (uint64_t)b % 2);
		struct proto_release rel = {.seq = r->seq, .slot = r->slot, .generation = r->generation};
		sched_release(w->s, sc, &rel);
	}
	sched_detach(w->s, sc, false);
	w->answers.retired(w->answers.sched, sc);
	world_free(w);
}

/* Attaches member `pid` of group "g" of 2 (rank 0 of 1 unless said):
 * sched_attach's result, err its text. */
static int attach_member(struct world *w, struct conn *c, pid_t pid, uint32_t rank, uint32_t depth,
			 bool device, struct sched_client **sc, char *err, size_t cap)
{
	struct proto_hello h = {.rank = rank, .world = 2, .depth = depth, .group_size = 2};
	snprintf(h.pipeline, sizeof(h.pipeline), "p");
	snprintf(h.group, sizeof(h.group), "g");
	if (device) {
		h.delivery = PROTO_DELIVERY_DEVICE;
		memset(h.device_uuid, 0xab, sizeof(h.device_uuid));
	}
	struct proto_welcome welcome;
	return sched_attach(w->s, &h, pid, c, sc, &welcome, err, cap);
}

static bool same_ready(const struct proto_ready *a, const struct proto_ready *b)
{
	return a->seq == b->seq && a->slot == b->slot && a->generation == b->generation &&
	       a->epoch == b->epoch && a->batch == b->batch && a->first == b->first &&
	       a->rows == b->rows;
}

/* Host delivery: nothing starts before both members are there; each batch
 * is read once (2 items) and both get the same READY; the slot is reused
 * only once both released it. A member that disagrees, and a third, are
 * refused naming the group; a member that dies fails the other at once,
 * naming its pid; the key can be used again once the group is gone. */
static void test_group_host(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0}, b = {0}, x = {0};
	struct sched_client *sa = NULL, *sb = NULL, *sx = NULL;
	char err[PROTO_ERROR_TEXT_MAX];
	assert_int_equal(attach_member(w, &a, 501, 1, 2, false, &sa, err, sizeof(err)), 0);
	assert_int_equal(pool_fake.n, 0); /* waiting for its second member */
	assert_int_equal(attach_member(w, &x, 502, 0, 2, false, &sx, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "group \"g\": this member's rank is 0 of 2, the group's is 1 of 2 "
				    "(as its first member, pid 501, attached)"));
	assert_int_equal(attach_member(w, &x, 502, 1, 3, false, &sx, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "depth is 3, the group's is 2"));
	assert_int_equal(attach_member(w, &b, 502, 1, 2, false, &sb, err, sizeof(err)), 0);
	assert_int_equal(pool_fake.n, 2 * (BATCH / CHUNK)); /* depth 2: two batches, read once */
	assert_int_equal(attach_member(w, &x, 503, 1, 2, false, &sx, err, sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "group \"g\" already has its 2 members (pids 501, 502)"));
	for (int k = 0; k < pool_fake.n; k++)
		complete(w, k);
	assert_int_equal(a.n_ready, 2);
	assert_int_equal(b.n_ready, 2);
	for (int i = 0; i < 2; i++)
		assert_true(same_ready(&a.ready[i], &b.ready[i]));
	/* the rank's samples: rank 1 of 2, no shuffle */
	assert_int_equal(pool_fake.cmds[0].sample_index[0], 1);
	release_host(w, sa, &a.ready[0]);
	release_host(w, sa, &a.ready[0]); /* a duplicate: ignored */
	assert_int_equal(pool_fake.n, 4); /* b still holds it: no new batch */
	unsigned in_flight, staging;
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, 2);
	release_host(w, sb, &b.ready[0]);
	assert_int_equal(pool_fake.n, 6); /* free again: batch 2 starts */
	complete(w, 4);
	complete(w, 5);
	assert_int_equal(a.n_ready, 3);
	assert_int_equal(b.n_ready, 3);
	assert_true(same_ready(&a.ready[2], &b.ready[2]));
	assert_int_equal(a.ready[2].slot, a.ready[0].slot);
	/* b dies: a is failed at once, naming it */
	sched_detach(w->s, sb, false);
	assert_int_equal(a.failed, ENOLINK);
	assert_non_null(strstr(a.text, "group \"g\": member pid 502 (client "));
	assert_non_null(strstr(a.text, "left the group (its connection closed without BYE: it died)"));
	/* the key starts a new group at once, while a is still attached */
	int n = pool_fake.n;
	struct conn y = {0};
	struct sched_client *sy = NULL;
	assert_int_equal(attach_member(w, &x, 503, 1, 1, false, &sx, err, sizeof(err)), 0);
	assert_int_equal(attach_member(w, &y, 504, 1, 1, false, &sy, err, sizeof(err)), 0);
	assert_int_equal(pool_fake.n, n + BATCH / CHUNK); /* depth 1: its first batch */
	sched_detach(w->s, sa, false);
	assert_int_equal(x.failed, 0);
	sched_detach(w->s, sx, true);
	sched_detach(w->s, sy, true);
	world_free(w);
}

/* A group whose second member never comes: nothing is started for it,
 * sched_expire_groups says how long is left, and once group_timeout_ms has
 * passed the member there gets ETIME naming the group, its pid and the
 * missing count; a complete group, and a timeout of 0, never expire. */
static void test_group_timeout(void **state)
{
	(void)state;
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0}, b = {0}, c = {0};
	struct sched_client *sa = NULL, *sb = NULL, *sc = NULL;
	char err[PROTO_ERROR_TEXT_MAX];
	w->cfg.group_timeout_ms = 0;
	assert_int_equal(attach_member(w, &a, 601, 1, 2, false, &sa, err, sizeof(err)), 0);
	assert_int_equal(sched_expire_groups(w->s), 0); /* no limit */
	w->cfg.group_timeout_ms = 60000;
	uint64_t left = sched_expire_groups(w->s);
	assert_true(left > 59000 && left <= 60001);
	assert_int_equal(a.failed, 0);
	w->cfg.group_timeout_ms = 1;
	struct timespec ts = {0, 5 * 1000 * 1000};
	nanosleep(&ts, NULL);
	assert_int_equal(sched_expire_groups(w->s), 0); /* no group waits any more */
	assert_int_equal(a.failed, ETIME);
	assert_non_null(strstr(a.text, "group \"g\": 1 of its 2 members attached (pids 601) and the "
				    "other 1 did not within group_timeout_ms (1 ms) of the first"));
	assert_int_equal(pool_fake.n, 0); /* nothing was read for it */
	sched_detach(w->s, sa, false);
	/* a group that has all its members does not expire */
	assert_int_equal(attach_member(w, &b, 602, 1, 1, false, &sb, err, sizeof(err)), 0);
	assert_int_equal(attach_member(w, &c, 603, 1, 1, false, &sc, err, sizeof(err)), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(sched_expire_groups(w->s), 0);
	assert_int_equal(b.failed, 0);
	assert_int_equal(c.failed, 0);
	sched_detach(w->s, sb, true);
	sched_detach(w->s, sc, true);
	world_free(w);
}

/* The same for a group's leader on the host path: READYs of older batches
 * go to every member after the leader has started the next epoch's. */
static void test_group_epochs(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0}, b = {0};
	struct sched_client *sa = NULL, *sb = NULL;
	char err[PROTO_ERROR_TEXT_MAX];
	assert_int_equal(attach_member(w, &a, 501, 1, 4, false, &sa, err, sizeof(err)), 0);
	assert_int_equal(attach_member(w, &b, 502, 1, 4, false, &sb, err, sizeof(err)), 0);
	const int per_epoch = N_SAMPLES / 2 / BATCH; /* rank 1 of 2 */
	int done = 0;
	for (int i = 0; i < per_epoch + 8; i++) {
		complete(w, done++);
		complete(w, done++);
		assert_int_equal(a.n_ready, i + 1);
		assert_int_equal(b.n_ready, i + 1);
		assert_true(same_ready(&a.ready[i], &b.ready[i]));
		assert_int_equal(a.ready[i].epoch, (uint64_t)(i / per_epoch));
		assert_int_equal(a.ready[i].batch, (uint64_t)(i % per_epoch));
		release_host(w, sa, &a.ready[i]);
		release_host(w, sb, &b.ready[i]);
	}
	sched_detach(w->s, sa, true);
	sched_detach(w->s, sb, true);
	world_free(w);
}

/* A member that says BYE ends the group: nothing new starts, and the
 * other is failed (ENOLINK, naming it) only once it has released every
 * batch it was given, so members that stop together both finish. */
static void test_group_bye(void **state)
{
	struct world *w = world_new(SLOTS, false);
	struct conn a = {0}, b = {0};
	struct sched_client *sa = NULL, *sb = NULL;
	char err[PROTO_ERROR_TEXT_MAX];
	assert_int_equal(attach_member(w, &a, 601, 0, 2, false, &sa, err, sizeof(err)), 0);
	assert_int_equal(attach_member(w, &b, 602, 0, 2, false, &sb, err, sizeof(err)), 0);
	complete(w, 0);
	complete(w, 1); /* batch 0 done; batch 1 still filling */
	assert_int_equal(b.n_ready, 1);
	release_host(w, sa, &a.ready[0]);
	sched_detach(w->s, sa, true); /* the leader says BYE: batch 1 is never delivered */
	assert_int_equal(b.failed, 0);
	int n = pool_fake.n;
	release_host(w, sb, &b.ready[0]);
	assert_int_equal(pool_fake.n, n); /* nothing new starts */
	assert_int_equal(b.failed, ENOLINK);
	assert_non_null(strstr(b.text, "group \"g\": member pid 601 (client 1) left the group (BYE) "
				    "after 1 batches"));
	complete(w, 2);
	complete(w, 3); /* the orphaned batch finishes into nothing */
	assert_int_equal(b.n_ready, 1);
	sched_detach(w->s, sb, false);
	world_free(w);
}

/* Device delivery: the one staging slot is copied into each member's
 * ring; it is free once the GPU thread has read it for both; each member
 * gets READY when its own copy has landed. */
static void test_group_device(void **state)
{
	struct world *w = world_new(SLOTS, true);
	struct conn a = {0}, b = {0};
	struct sched_client *sa = NULL, *sb = NULL;
	char err[PROTO_ERROR_TEXT_MAX];
	assert_int_equal(attach_member(w, &a, 701, 0, 2, true, &sa, err, sizeof(err)),
			 SCHED_ATTACH_PENDING);
	assert_int_equal(attach_member(w, &b, 702, 0, 2, true, &sb, err, sizeof(err)),
			 SCHED_ATTACH_PENDING);
	struct proto_device dev = {.slots = 4, .slot_bytes = 4096, .ring_bytes = 4 * 4096};
	w->answers.attached(w->answers.sched, sa, &gpu_fake.pcs[0], 0, NULL, &dev, false, false);
	assert_int_equal(pool_fake.n, 0); /* b's ring is not there yet */
	w->answers.attached(w->answers.sched, sb, &gpu_fake.pcs[1], 0, NULL, &dev, false, false);
	assert_int_equal(a.attached, 1);
	assert_int_equal(b.attached, 1);
	assert_int_equal(pool_fake.n, 2 * (BATCH / CHUNK));
	complete(w, 0);
	complete(w, 1);
	assert_int_equal(gpu_fake.copies, 2); /* one staging slot, a copy per member */
	assert_ptr_equal(gpu_fake.copy[0].pc, &gpu_fake.pcs[0]);
	assert_ptr_equal(gpu_fake.copy[1].pc, &gpu_fake.pcs[1]);
	assert_int_equal(gpu_fake.copy[0].slot, gpu_fake.copy[1].slot);
	assert_int_equal(gpu_fake.copy[0].gen, gpu_fake.copy[1].gen);
	unsigned in_flight, staging;
	w->answers.staging_free(w->answers.sched, gpu_fake.copy[0].slot, gpu_fake.copy[0].gen);
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, 2); /* still read for b */
	w->answers.staging_free(w->answers.sched, gpu_fake.copy[1].slot, gpu_fake.copy[1].gen);
	client_counts(w, 1, &in_flight, &staging);
	assert_int_equal(staging, 1);
	w->answers.landed(w->answers.sched, sb, gpu_fake.copy[1].d);
	assert_int_equal(b.n_ready, 1);
	assert_int_equal(a.n_ready, 0);
	w->answers.landed(w->answers.sched, sa, gpu_fake.copy[0].d);
	assert_int_equal(a.n_ready, 1);
	assert_int_equal(a.ready[0].seq, b.ready[0].seq);
	assert_int_equal(a.ready[0].batch, b.ready[0].batch);
	sched_detach(w->s, sb, false); /* b dies: a is failed, naming it */
	assert_int_equal(a.failed, ENOLINK);
	assert_non_null(strstr(a.text, "member pid 702"));
	w->answers.retired(w->answers.sched, sb);
	sched_detach(w->s, sa, false);
	w->answers.retired(w->answers.sched, sa);
	world_free(w);
}

/* A device member whose ring cannot be made fails the other member with
 * its reason; a member of a direct pipeline is refused, naming the group. */
static void test_group_device_refused(void **state)
{
	struct world *w = world_new(SLOTS, true);
	struct conn a = {0}, b = {0}, x = {0}, y = {0};
	struct sched_client *sa = NULL, *sb = NULL, *sx = NULL, *sy = NULL;
	char err[PROTO_ERROR_TEXT_MAX];
	struct proto_device dev = {.slots = 4, .slot_bytes = 4096, .ring_bytes = 4 * 4096};
	assert_int_equal(attach_member(w, &a, 801, 0, 2, true, &sa, err, sizeof(err)),
			 SCHED_ATTACH_PENDING);
	assert_int_equal(attach_member(w, &b, 802, 0, 2, true, &sb, err, sizeof(err)),
			 SCHED_ATTACH_PENDING);
	w->answers.attached(w->answers.sched, sa, &gpu_fake.pcs[0], 0, NULL, &dev, false, false);
	w->answers.attached(w->answers.sched, sb, NULL, -ENOMEM, "GPU-ab: 64 MiB free, 96 MiB asked",
			    NULL, false, false);
	assert_int_equal(b.attached, -ENOMEM);
	assert_int_equal(a.failed, ENOMEM);
	assert_non_null(strstr(a.text, "group \"g\": member pid 802 (client "));
	assert_non_null(strstr(a.text, "64 MiB free"));
	assert_int_equal(pool_fake.n, 0);
	sched_detach(w->s, sb, false);
	sched_detach(w->s, sa, false);
	w->answers.retired(w->answers.sched, sa);
	/* a direct pipeline's member */
	assert_int_equal(attach_member(w, &x, 803, 0, 2, true, &sx, err, sizeof(err)),
			 SCHED_ATTACH_PENDING);
	assert_int_equal(attach_member(w, &y, 804, 0, 2, true, &sy, err, sizeof(err)),
			 SCHED_ATTACH_PENDING);
	w->answers.attached(w->answers.sched, sx, &gpu_fake.pcs[2], 0, NULL, &dev, true, false);
	assert_int_equal(x.attached, -EOPNOTSUPP);
	assert_non_null(strstr(x.text, "group \"g\": the pipeline's file is page-locked (direct)"));
	assert_int_equal(y.failed, 0); /* still attaching: refused once its ring exists */
	w->answers.attached(w->answers.sched, sy, &gpu_fake.pcs[3], 0, NULL, &dev, true, false);
	assert_true(y.attached < 0);
	sched_detach(w->s, sx, false);
	w->answers.retired(w->answers.sched, sx);
	sched_detach(w->s, sy, false);
	w->answers.retired(w->answers.sched, sy);
	world_free(w);
}

/* A client's GPU share and data wait, from its status line. */
static void client_share(struct world *w, int id, double *share, unsigned long long *wait_ms)
{
	struct status_text *t = malloc(sizeof(*t));
	status_init(t);
	sched_describe(w->s, t);
	char key[32];
	snprintf(key, sizeof(key), "  client %d ", id);
	const char *line = strstr(t->buf, key);
	assert_non_null(line);
	const char *at = strstr(line, " gpu_share ");
	assert_non_null(at);
	double pct;
	assert_int_equal(sscanf(at, " gpu_share %lf wait_ms %llu wait_pct %lf", share, wait_ms, &pct),
			 3);
	assert_true(pct >= 0 && pct <= 100);
	free(t);
}

/* Batches of client sc: items completed (k: those done so far), copies
 * landed (device; copy: those landed), each READY released (r: those
 * released) step_us later, saying it waited wait_ns. */
static void steps(struct world *w, struct sched_client *sc, struct conn *a, int *k, int *copy,
		  int *r, int batches, long step_us, uint64_t wait_ns)
{
	for (int b = 0; b < batches; b++) {
		while (*k < pool_fake.n)
			complete(w, (*k)++);
		for (; *copy < gpu_fake.copies; (*copy)++) {
			w->answers.landed(w->answers.sched, sc, gpu_fake.copy[*copy].d);
			w->answers.staging_free(w->answers.sched, gpu_fake.copy[*copy].slot,
						gpu_fake.copy[*copy].gen);
		}
		assert_true(*r < a->n_ready);
		usleep((useconds_t)step_us);
		const struct proto_ready *ready = &a->ready[(*r)++];
		struct proto_release rel = {.seq = ready->seq, .slot = ready->slot,
					    .generation = ready->generation, .wait_ns = wait_ns};
		sched_release(w->s, sc, &rel);
	}
}

/* The GPU share the work items carry: a device client whose GPU decodes
 * starts at 0; RELEASEs that say it waited half its time raise it, the
 * items after carry it, and its status line shows it with its wait. A host
 * client's waits show, but its items never leave rows to a GPU. */
static void test_gpu_share(void **state)
{
	struct world *w = world_new(SLOTS, true);
	w->cfg.pipelines[0].gpu_decode_percent = 100; /* decode = auto, up to all */
	struct conn a = {0};
	struct sched_client *sc = attach(w, &a, 0, 1, 2, true);
	struct proto_device dev = {.slots = 2, .slot_bytes = 4096, .ring_bytes = 2 * 4096};
	w->answers.attached(w->answers.sched, sc, &gpu_fake.pcs[0], 0, NULL, &dev, false, true);
	assert_int_equal(a.attached, 1);
	assert_true(pool_fake.n > 0);
	for (int i = 0; i < pool_fake.n; i++)
		assert_true(pool_fake.cmds[i].flags == WORK_CMD_GPU_DECODE &&
			    pool_fake.cmds[i].gpu_share == 0);
	int k = 0, copy = 0, r = 0, first_raised = -1;
	for (int b = 0; b < 40 && first_raised < 0; b++) {
		steps(w, sc, &a, &k, &copy, &r, 1, 6000, 3000000);
		for (int i = 0; i < pool_fake.n && first_raised < 0; i++)
			if (pool_fake.cmds[i].gpu_share > 0)
				first_raised = i;
	}
	assert_true(first_raised > 0);
	/* f = 50% (less on a busy machine): the share that keeps up is about
	 * 0.5, but one raise adds at most 0.1 (gpushare.h) */
	assert_true(pool_fake.cmds[first_raised].gpu_share > WORK_GPU_SHARE_ONE / 20 &&
		    pool_fake.cmds[first_raised].gpu_share <= WORK_GPU_SHARE_ONE / 10 + 1);
	double share;
	unsigned long long wait_ms;
	client_share(w, 1, &share, &wait_ms);
	assert_true(share > 0.05 && share < 0.75);
	assert_true(wait_ms >= 10);
	sched_detach(w->s, sc, false);
	w->answers.retired(w->answers.sched, sc);
	world_free(w);

	w = world_new(SLOTS, false);
	struct conn h = {0};
	sc = attach(w, &h, 0, 1, 2, false);
	k = copy = r = 0;
	steps(w, sc, &h, &k, &copy, &r, 30, 6000, 3000000);
	for (int i = 0; i < pool_fake.n; i++)
		assert_true(pool_fake.cmds[i].flags == 0 && pool_fake.cmds[i].gpu_share == 0);
	client_share(w, 1, &share, &wait_ms);
	assert_true(share == 0.0);
	assert_int_equal(wait_ms, 30 * 3);
	sched_detach(w->s, sc, true);
	world_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unknown_pipeline),
		cmocka_unit_test(test_share_and_depth),
		cmocka_unit_test(test_in_order_delivery),
		cmocka_unit_test(test_reissue_and_strikes),
		cmocka_unit_test(test_generations),
		cmocka_unit_test(test_device_path),
		cmocka_unit_test(test_device_epochs),
		cmocka_unit_test(test_group_host),
		cmocka_unit_test(test_group_timeout),
		cmocka_unit_test(test_group_epochs),
		cmocka_unit_test(test_group_bye),
		cmocka_unit_test(test_group_device),
		cmocka_unit_test(test_group_device_refused),
		cmocka_unit_test(test_gpu_share),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
