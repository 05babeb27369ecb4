/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reader: the worker's event loop (reader.h). Commands are checked and
 * planned in full before any read starts; reads go through io_uring, or
 * pread when io_uring cannot be set up, with the same results either way.
 */
#include "worker/reader.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/log.h"
#include "common/regfile.h"
#include "worker/reader_impl.h"
#include "worker/worker.h"

#define READER_URING_DEPTH 256
#define READER_ITEMS RING_ENTRIES
#define READER_READS_MAX (READER_ITEMS * WORK_CHUNK_MAX)
#define READER_RETRIES_MAX 64      /* -EAGAIN/-EINTR/-ECANCELED in a row on one read */
#define READER_READ_MAX (1u << 30) /* bytes per read call; a longer sample takes several */

/* user_data of the command eventfd's requests; a sample read carries a
 * pointer, which is never this small. */
#define TAG_CMD_READ 1u
#define TAG_CMD_POLL 2u

struct reader {
	struct arena *arena;
	struct ring cmd;
	struct ring done;
	struct worker_beat *beat;
	struct worker_stats *stats;
	uint64_t t_awake;     /* the last read of the clock: a wait's end or an item's post (busy_ns) */
	bool awake_stale;     /* an image completion's work (a decode) ran since t_awake */
	uint32_t cq_stamped;  /* completions in the CQ whose reads have t_seen */
	uint64_t t_looked;    /* the last look at the CQ in this reap, 0 before the first */
	uint32_t timed_items; /* items in hand whose stages are timed */
	bool look;            /* the CQ is to be looked at before the next completion */
	uint64_t t_flush;     /* stage timing: when this flush's reads are issued, 0 unknown */
	int cmd_fd;
	int done_fd;
	uint32_t n_pipelines; /* header fields, copied once arena_attach checked them */
	uint32_t n_slots;
	uint64_t slots_offset;
	uint64_t slot_bytes;
	bool use_uring;
	bool exiting;         /* WORK_EXIT taken: no further command */
	uint32_t unsignalled; /* completions pushed since the last eventfd write */
	uint32_t n_free;
	struct reader_item *free_items[READER_ITEMS];
	struct reader_item items[READER_ITEMS];
	struct reader_pipeline pipes[ARENA_PIPELINES_MAX];

	/* io_uring mode */
	struct io_uring uring;
	uint32_t inflight;     /* sample reads submitted, not yet completed */
	uint32_t inflight_max; /* keeps every completion inside the CQ ring */
	uint32_t cmd_arm;      /* TAG_CMD_* to queue for the command eventfd, or 0 */
	uint64_t cmd_value;
	uint32_t queue_head;   /* reads waiting for a submission slot */
	uint32_t queue_tail;
	struct reader_read *queue[READER_READS_MAX];
};

static int reader_fatal(const char *what, int err)
{
	log_error("%s: %s", what, strerror(-err));
	return err;
}

/* Forgets what the worker kept of a table entry: a reload filled it
 * again for another pipeline (shm/layout.h), and no item of the old one
 * is in hand (the master reuses an entry only once none names it). */
static void reader_pipeline_forget(struct reader_pipeline *rp)
{
	if (rp->fd >= 0)
		close(rp->fd);
	image_pipeline_free(rp);
	token_index_unmap(rp);
	memset(rp, 0, sizeof(*rp));
	rp->fd = -1;
}

/* The checked pipeline, its data file open. An open failure is not
 * remembered: the next item tries again. A data file that is no longer a
 * regular file (swapped for a FIFO, a device or a directory since start)
 * is REGFILE_NOT_REGULAR, never a blocked open (common/regfile.h). */
static int reader_pipeline_get(struct reader *r, uint32_t index, struct reader_pipeline **out,
			       uint64_t *detail)
{
	if (index >= r->n_pipelines)
		return -EINVAL;
	struct reader_pipeline *rp = &r->pipes[index];
	const struct arena_pipeline *p = arena_pipeline(r->arena, index);
	if (rp->state != 0 && rp->generation != p->generation)
		reader_pipeline_forget(rp);
	if (rp->state == 0) {
		rp->generation = p->generation;
		rp->roots = NULL;
		if (!memchr(p->roots, '\0', sizeof(p->roots))) {
			rp->state = -EINVAL;
			return rp->state;
		}
		if (p->roots[0])
			rp->roots = p->roots;
		rp->state = (p->kind == ARENA_SOURCE_IMAGES ?
			     image_pipeline_check(r->arena, r->slot_bytes, p, rp) :
			     token_pipeline_check(r->arena, r->slot_bytes, p, rp)) == 0 ? 1 : -EINVAL;
	}
	if (rp->state < 0)
		return rp->state;
	if (rp->fd < 0 && rp->n_shards == 0) { /* a tar pipeline opens each shard as needed */
		/* An imagefolder's root: O_DIRECTORY refuses a FIFO before
		 * open could block on it. */
		int fd = rp->kind == ARENA_SOURCE_IMAGES ?
			 open(p->path, O_RDONLY | O_CLOEXEC | O_DIRECTORY) :
			 regfile_open(AT_FDCWD, p->path, NULL);
		if (fd < 0)
			return rp->kind == ARENA_SOURCE_IMAGES ? -errno : fd;
		int confined = rp->roots ? confine_fd(fd, rp->roots) : 0;
		if (confined < 0) { /* swapped for a way out since it was declared */
			close(fd);
			return confined;
		}
		rp->fd = fd;
	}
	if (rp->docs_on && !rp->idx_map) { /* the documents' bounds: the .idx, in place */
		int rc = token_index_map(rp, p->path);
		if (rc < 0) {
			*detail = WORKER_DETAIL_INDEX;
			return rc;
		}
	}
	*out = rp;
	return 0;
}

/* The stats block's figures of table entry `index` for its generation
 * gen: cleared first when they counted for another (shm/layout.h). */
static struct hist_atomic *reader_stage_hists(struct reader *r, uint32_t index, uint32_t gen)
{
	struct worker_stats *st = r->stats;
	if (atomic_load_explicit(&st->gen[index], memory_order_relaxed) != gen) {
		atomic_store_explicit(&st->gen[index], 0, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		for (uint32_t k = 0; k < PSTAGE_WORKER_COUNT; k++)
			hist_atomic_clear(&st->stage[index][k]);
		atomic_store_explicit(&st->gen[index], gen, memory_order_release);
	}
	return st->stage[index];
}

/* Time since the last wait counts as busy; the wait about to start is
 * measured by reader_wait_end. */
static uint64_t reader_wait_begin(struct reader *r)
{
	uint64_t now = clock_mono_ns();
	atomic_store_explicit(&r->stats->busy_ns,
			      atomic_load_explicit(&r->stats->busy_ns, memory_order_relaxed) +
			      (now - r->t_awake), memory_order_relaxed);
	return now;
}

/* A blocking wait that began at t0 has ended: with items in hand it was
 * a wait for reads. */
static void reader_wait_end(struct reader *r, uint64_t t0)
{
	r->t_awake = clock_mono_ns();
	r->awake_stale = false;
	if (r->n_free < READER_ITEMS)
		atomic_store_explicit(&r->stats->idle_io_ns,
				      atomic_load_explicit(&r->stats->idle_io_ns, memory_order_relaxed) +
				      (r->t_awake - t0), memory_order_relaxed);
}

/* slot_offset must be the start of one of the arena's staging slots: rows
 * are then checked against that slot, never against the whole arena, so a
 * bad command cannot reach the header, the rings or a neighbouring slot. */
static bool reader_slot_valid(const struct reader *r, uint64_t slot_offset)
{
	if (slot_offset < r->slots_offset || r->slot_bytes == 0)
		return false;
	uint64_t rel = slot_offset - r->slots_offset;
	return rel % r->slot_bytes == 0 && rel / r->slot_bytes < r->n_slots;
}

/* Every read of a failed item still runs to its end, so which row is
 * named does not depend on the order in which reads complete, nor on
 * io_uring versus pread. */
void reader_item_fail(struct reader_item *it, uint32_t row, int status, uint64_t detail)
{
	if (it->status != 0 && it->bad_row <= row)
		return;
	it->status = status;
	it->bad_row = row;
	it->detail = detail;
}

/* Plans every read of a command before any starts, so a command that is
 * bad anywhere writes nothing. A failed plan leaves count = pending = 0. */
static void reader_item_plan(struct reader *r, struct reader_item *it, const struct work_cmd *cmd)
{
	*it = (struct reader_item){.item_id = cmd->item_id, .epoch = cmd->epoch, .beat = r->beat,
				   .gpu_decode = (cmd->flags & WORK_CMD_GPU_DECODE) != 0,
				   .gpu_share = cmd->gpu_share,
				   .pipeline = cmd->pipeline};
	if (cmd->op != WORK_READ || cmd->count == 0 || cmd->count > WORK_CHUNK_MAX ||
	    !reader_slot_valid(r, cmd->slot_offset)) {
		reader_item_fail(it, cmd->first_row, -EINVAL, 0);
		return;
	}
	uint64_t detail = 0;
	int err = reader_pipeline_get(r, cmd->pipeline, &it->pipe, &detail);
	if (err < 0) {
		reader_item_fail(it, cmd->first_row, err, detail);
		return;
	}
	if (!(cmd->flags & WORK_CMD_NO_TIMING)) {
		it->hist = reader_stage_hists(r, cmd->pipeline, it->pipe->generation);
		r->timed_items++;
	}
	for (uint32_t k = 0; k < cmd->count; k++) {
		err = it->pipe->kind == ARENA_SOURCE_IMAGES ?
		      image_plan(r->arena, r->slot_bytes, it, cmd, k, &it->reads[k]) :
		      token_plan(r->arena, r->slot_bytes, it, cmd, k, &it->reads[k]);
		if (err < 0) {
			reader_item_fail(it, cmd->first_row + k, err, 0);
			return;
		}
	}
	it->count = cmd->count;
	it->pending = cmd->count;
}

/* Stage timing: the time as of the worker's last read of the clock, if
 * nothing longer than planning commands ran since (no image's decode):
 * a wait has just ended or an item was just posted. Else the clock. */
static uint64_t reader_time(const struct reader *r)
{
	return r->awake_stale ? clock_mono_ns() : r->t_awake;
}

/* Stage timing: a read call for rd is issued at *now (reader_time on
 * first use, 0 before: the reads of one flush share one time, most often
 * without a read of the clock of their own). The sample's read time runs
 * from its first call (a replacement image's: from its own). */
static void reader_read_issued(const struct reader *r, struct reader_read *rd, uint64_t *now)
{
	if (rd->item->hist && rd->done_bytes == 0) {
		if (*now == 0)
			*now = reader_time(r);
		rd->t_read = *now;
	}
	rd->t_seen = 0;
}

/* Applies the result of one read call (bytes, or -errno) to rd; t_seen is
 * when it was seen complete (stage timing: 0 for now). Returns true
 * when rd needs another call (short read, transient error, an image
 * replaced by another). */
static bool reader_read_progress(struct reader_read *rd, int64_t res, uint64_t t_seen)
{
	struct reader_item *it = rd->item;
	const struct reader_pipeline *p = it->pipe;
	bool image = p->kind == ARENA_SOURCE_IMAGES;
	reader_beat(rd); /* a read came back: progress, whatever its result */
	if (res > 0) {
		rd->done_bytes += (uint64_t)res;
		rd->retries = 0;
		if (rd->done_bytes < rd->len)
			/* a document-shuffled row goes on in the next document */
			return rd->piece_end != rd->done_bytes || token_next_piece(rd);
		if (it->hist) {
			uint64_t end = t_seen ? t_seen : clock_mono_ns();
			hist_atomic_add_own(&it->hist[PSTAGE_READ], end > rd->t_read ? end - rd->t_read : 0);
		}
		if (image)
			return image_finish(rd);
		token_finish(rd);
		return false;
	}
	if (res == 0) {
		/* The file shrank after start. */
		if (image)
			return image_retry(rd, -ENODATA);
		reader_item_fail(it, rd->row, -ENODATA, rd->done_bytes);
		return false;
	}
	if ((res == -EAGAIN || res == -EINTR || res == -ECANCELED) &&
	    ++rd->retries < READER_RETRIES_MAX)
		return true;
	if (image)
		return image_retry(rd, (int)res);
	reader_item_fail(it, rd->row, (int)res, 0);
	return false;
}

/* A completion of rd's is about to be worked on: an image's work (a
 * decode) is long, so the time of the last clock read is stale after it. */
static void reader_work_begins(struct reader *r, const struct reader_read *rd)
{
	if (rd->item->pipe->kind == ARENA_SOURCE_IMAGES)
		r->awake_stale = true;
}

/* Starts an image row: its file open and buffer ready (true), or given up
 * on (false: the item has failed on it). Other rows are always ready. */
static bool reader_read_arm(struct reader_read *rd)
{
	if (rd->item->pipe->kind != ARENA_SOURCE_IMAGES)
		return true;
	return image_start(rd);
}

static size_t reader_read_len(const struct reader_read *rd)
{
	uint64_t left = (rd->piece_end ? rd->piece_end : rd->len) - rd->done_bytes;
	return left > READER_READ_MAX ? READER_READ_MAX : (size_t)left;
}

static int reader_done_push(struct reader *r, const struct work_done *d)
{
	/* The master keeps at most RING_ENTRIES items outstanding per worker,
	 * so a full completion ring means the two sides disagree. */
	if (!ring_push(&r->done, d))
		return reader_fatal("completion ring full", -ENOBUFS);
	r->unsignalled++;
	return 0;
}

/* One eventfd write for every completion pushed since the last one. */
static int reader_done_signal(struct reader *r)
{
	if (r->unsignalled == 0)
		return 0;
	uint64_t one = 1;
	for (;;) {
		ssize_t n = write(r->done_fd, &one, sizeof(one));
		/* EAGAIN: the counter is at its maximum; the master wakes anyway. */
		if (n == (ssize_t)sizeof(one) || (n < 0 && errno == EAGAIN))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		return reader_fatal("completion eventfd write", n < 0 ? -errno : -EIO);
	}
	r->unsignalled = 0;
	return 0;
}

static int reader_item_post(struct reader *r, struct reader_item *it)
{
	atomic_fetch_add_explicit(&r->beat->beats, 1, memory_order_release);
	r->t_awake = reader_wait_begin(r); /* busy time so far counted now, not at the next wait */
	r->awake_stale = false;
	struct work_done d = {
		.item_id = it->item_id,
		.status = it->status,
		.bad_row = it->status != 0 ? it->bad_row : 0,
		.detail = it->status != 0 ? it->detail : 0,
		.n_bad = it->n_bad,
		.bad_index = it->bad_index,
		.bad_status = it->bad_status,
	};
	r->free_items[r->n_free++] = it;
	if (it->hist)
		r->timed_items--;
	return reader_done_push(r, &d);
}

/* A read that will not be submitted again: the item completes with its
 * last one. */
static int reader_read_retire(struct reader *r, struct reader_read *rd)
{
	struct reader_item *it = rd->item;
	image_release(rd);
	if (--it->pending == 0)
		return reader_item_post(r, it);
	return 0;
}

static void reader_queue_push(struct reader *r, struct reader_read *rd)
{
	/* Each read is queued or in flight, never both, so the queue (sized
	 * for every read of every item) cannot overflow. */
	r->queue[r->queue_tail++ % READER_READS_MAX] = rd;
}

static int reader_uring_start(struct reader *r, struct reader_item *it)
{
	if (it->pending == 0)
		return reader_item_post(r, it);
	for (uint32_t k = 0; k < it->count; k++) {
		struct reader_read *rd = &it->reads[k];
		if (reader_read_arm(rd)) {
			reader_queue_push(r, rd);
			continue;
		}
		int err = reader_read_retire(r, rd);
		if (err < 0)
			return err;
	}
	return 0;
}

static int reader_pread_item(struct reader *r, struct reader_item *it)
{
	for (uint32_t k = 0; k < it->count; k++) {
		struct reader_read *rd = &it->reads[k];
		bool more = reader_read_arm(rd);
		while (more) {
			uint8_t *to = rd->buf ? rd->buf : rd->dst;
			uint64_t now = 0;
			reader_read_issued(r, rd, &now);
			ssize_t n = pread(rd->fd, to + rd->done_bytes, reader_read_len(rd),
					  (off_t)reader_read_offset(rd));
			reader_work_begins(r, rd);
			more = reader_read_progress(rd, n < 0 ? -(int64_t)errno : (int64_t)n, 0);
		}
		image_release(rd);
	}
	int err = reader_item_post(r, it);
	if (err == 0)
		err = reader_done_signal(r);
	return err;
}

/* Takes commands while an item is free. In pread mode each item is served
 * before the next command is taken. */
static int reader_cmd_take(struct reader *r)
{
	struct work_cmd cmd;
	while (!r->exiting && r->n_free > 0 && ring_pop(&r->cmd, &cmd)) {
		if (cmd.op == WORK_EXIT) {
			r->exiting = true;
			break;
		}
		struct reader_item *it = r->free_items[--r->n_free];
		reader_item_plan(r, it, &cmd);
		int err = r->use_uring ? reader_uring_start(r, it) : reader_pread_item(r, it);
		if (err < 0)
			return err;
	}
	return 0;
}

/* Queues the command eventfd's request and as many queued reads as the
 * completion ring has room for; submits whenever the SQ fills. */
static int reader_uring_flush(struct reader *r)
{
	r->t_flush = 0;
	for (;;) {
		bool want_cmd = r->cmd_arm != 0;
		if (!want_cmd && (r->queue_head == r->queue_tail || r->inflight >= r->inflight_max))
			return 0;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
		if (sqe == NULL) {
			int ret = io_uring_submit(&r->uring);
			if (ret > 0)
				continue;
			if (ret == 0 || ret == -EAGAIN || ret == -EBUSY || ret == -EINTR)
				return 0; /* the rest goes after the next completions */
			return reader_fatal("io_uring_submit", ret);
		}
		if (want_cmd) {
			if (r->cmd_arm == TAG_CMD_POLL)
				io_uring_prep_poll_add(sqe, r->cmd_fd, POLLIN);
			else
				io_uring_prep_read(sqe, r->cmd_fd, &r->cmd_value, sizeof(r->cmd_value), 0);
			io_uring_sqe_set_data64(sqe, r->cmd_arm);
			r->cmd_arm = 0;
			continue;
		}
		struct reader_read *rd = r->queue[r->queue_head++ % READER_READS_MAX];
		uint8_t *to = rd->buf ? rd->buf : rd->dst;
		reader_read_issued(r, rd, &r->t_flush);
		io_uring_prep_read(sqe, rd->fd, to + rd->done_bytes, (unsigned)reader_read_len(rd),
				   reader_read_offset(rd));
		io_uring_sqe_set_data(sqe, rd);
		r->inflight++;
	}
}

static int reader_uring_complete(struct reader *r, uint64_t tag, int res)
{
	if (tag == TAG_CMD_READ || tag == TAG_CMD_POLL) {
		if (res < 0 && res != -EAGAIN && res != -EINTR && res != -ECANCELED)
			return reader_fatal("command eventfd", res);
		/* A non-blocking eventfd answers -EAGAIN instead of waiting:
		 * wait for it with a poll, then read it. */
		r->cmd_arm = tag == TAG_CMD_READ && res == -EAGAIN ? TAG_CMD_POLL : TAG_CMD_READ;
		return 0;
	}
	struct reader_read *rd = (struct reader_read *)(uintptr_t)tag;
	r->inflight--;
	reader_work_begins(r, rd);
	/* not stamped: it arrived during this reap after its last look, while
	 * the worker did short work (raw or token rows): as of that look */
	if (reader_read_progress(rd, res, rd->t_seen ? rd->t_seen : r->t_looked)) {
		reader_queue_push(r, rd);
		return 0;
	}
	return reader_read_retire(r, rd);
}

/* Stage timing: when the reads whose completions are new in the CQ
 * completed. Called before each completion's work (an image's decode).
 * At a reap's first look, they are what ended the wait: complete now. At
 * a later one they arrived while the worker worked on another sample,
 * after its previous look: complete then, at the latest moment known not
 * to be after it, so that a read is not charged with the decodes of the
 * images before it (a lower bound, short by at most one sample's work). */
static void reader_uring_stamp(struct reader *r)
{
	if (r->timed_items == 0 || !r->look)
		return;
	/* the first look follows the wait's end, whose time is at hand */
	uint64_t now = r->t_looked ? clock_mono_ns() : reader_time(r);
	uint64_t at = r->t_looked ? r->t_looked : now;
	r->t_looked = now;
	unsigned ready = io_uring_cq_ready(&r->uring);
	if (ready <= r->cq_stamped)
		return;
	/* the new entries only, as io_uring_for_each_cqe walks them: the head
	 * stays where it is until the reap's end */
	unsigned head = *r->uring.cq.khead;
	for (unsigned i = r->cq_stamped; i < ready; i++) {
		const struct io_uring_cqe *cqe =
			&r->uring.cq.cqes[io_uring_cqe_index(&r->uring, head + i, r->uring.cq.ring_mask)];
		uint64_t tag = cqe->user_data;
		struct reader_read *rd = (struct reader_read *)(uintptr_t)tag;
		if (tag != TAG_CMD_READ && tag != TAG_CMD_POLL)
			rd->t_seen = at > rd->t_read ? at : rd->t_read;
	}
	r->cq_stamped = ready;
}

static int reader_uring_reap(struct reader *r)
{
	struct io_uring_cqe *cqe;
	unsigned head;
	unsigned seen = 0;
	int err = 0;
	r->cq_stamped = 0;
	r->t_looked = 0;
	r->look = true;
	io_uring_for_each_cqe(&r->uring, head, cqe) {
		seen++;
		reader_uring_stamp(r);
		/* a completion that decodes an image takes long enough for more
		 * to arrive: look again after it; a raw or token row's work is
		 * too short to be worth a look (and a read of the clock) */
		uint64_t tag = cqe->user_data;
		r->look = tag != TAG_CMD_READ && tag != TAG_CMD_POLL &&
			  ((struct reader_read *)(uintptr_t)tag)->item->pipe->kind == ARENA_SOURCE_IMAGES;
		err = reader_uring_complete(r, cqe->user_data, cqe->res);
		if (err < 0)
			break;
	}
	io_uring_cq_advance(&r->uring, seen);
	return err;
}

/* The command eventfd's read is always queued or in flight; whenever it
 * completes, the ring is drained. Completions that arrive together are
 * signalled with one eventfd write. */
static int reader_uring_loop(struct reader *r)
{
	r->cmd_arm = TAG_CMD_READ;
	for (;;) {
		int err = reader_cmd_take(r);
		if (err == 0)
			err = reader_uring_flush(r);
		if (err == 0)
			err = reader_done_signal(r);
		if (err < 0)
			return err;
		if (r->exiting && r->n_free == READER_ITEMS)
			return 0;
		uint64_t t0 = reader_wait_begin(r);
		int ret = io_uring_submit_and_wait(&r->uring, 1);
		reader_wait_end(r, t0);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			return reader_fatal("io_uring_submit_and_wait", ret);
		err = reader_uring_reap(r);
		if (err < 0)
			return err;
	}
}

static int reader_pread_wait(struct reader *r)
{
	for (;;) {
		ssize_t n = read(r->cmd_fd, &r->cmd_value, sizeof(r->cmd_value));
		if (n == (ssize_t)sizeof(r->cmd_value))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = {.fd = r->cmd_fd, .events = POLLIN};
			if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
				return reader_fatal("command eventfd poll", -errno);
			continue;
		}
		return reader_fatal("command eventfd read", n < 0 ? -errno : -EIO);
	}
}

/* Commands queued before the first wake-up are served too: the ring is
 * drained before each wait. */
static int reader_pread_loop(struct reader *r)
{
	for (;;) {
		int err = reader_cmd_take(r);
		if (err < 0)
			return err;
		if (r->exiting)
			return 0;
		uint64_t t0 = reader_wait_begin(r);
		err = reader_pread_wait(r);
		reader_wait_end(r, t0);
		if (err < 0)
			return err;
	}
}

int reader_run(struct arena *a, uint32_t index, int cmd_fd, int done_fd)
{
	struct reader *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return reader_fatal("reader state", -ENOMEM);
	r->arena = a;
	r->cmd = arena_cmd_ring(a, index);
	r->done = arena_done_ring(a, index);
	r->beat = arena_worker_beat(a, index);
	r->stats = arena_worker_stats(a, index);
	r->t_awake = clock_mono_ns();
	r->cmd_fd = cmd_fd;
	r->done_fd = done_fd;
	r->n_pipelines = a->hdr->n_pipelines;
	r->n_slots = a->hdr->n_slots;
	r->slots_offset = a->hdr->slots_offset;
	r->slot_bytes = a->hdr->slot_bytes;
	for (uint32_t i = 0; i < ARENA_PIPELINES_MAX; i++)
		r->pipes[i].fd = -1;
	for (uint32_t i = 0; i < READER_ITEMS; i++)
		r->free_items[i] = &r->items[i];
	r->n_free = READER_ITEMS;

	struct io_uring_params params = {0};
	int ret = io_uring_queue_init_params(READER_URING_DEPTH, &r->uring, &params);
	struct work_done ready = {.item_id = 0, .status = WORK_STATUS_READY};
	if (ret < 0) {
		log_warning("io_uring unavailable (%s): reading with pread", strerror(-ret));
		ready.flags = WORK_FLAG_NO_URING;
	} else {
		r->use_uring = true;
		/* Two CQ entries stay free for the command eventfd's requests. */
		r->inflight_max = params.cq_entries - 2;
	}

	int err = reader_done_push(r, &ready);
	if (err == 0)
		err = reader_done_signal(r);
	if (err == 0)
		err = r->use_uring ? reader_uring_loop(r) : reader_pread_loop(r);

	if (r->use_uring)
		io_uring_queue_exit(&r->uring);
	for (uint32_t i = 0; i < ARENA_PIPELINES_MAX; i++) {
		if (r->pipes[i].fd >= 0)
			close(r->pipes[i].fd);
		image_pipeline_free(&r->pipes[i]);
		token_index_unmap(&r->pipes[i]);
	}
	free(r);
	return err;
}
