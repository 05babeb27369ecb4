/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batch: the client library's batches (client_impl.h): next, release, the
 * device calls on a held batch, sample indices and position tokens.
 *
 * Beyond the header's list, ldr_next() returns -EINTR when a signal handler
 * interrupted its wait (poll(2) is never restarted), so a caller can notice
 * its own signals; nothing was consumed and it may be called again.
 */
#include "client_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errtext.h"

_Static_assert(LDR_POSITION_MAX == POSITION_TEXT_MAX, "position token sizes agree");
_Static_assert(sizeof(((struct ldr_position *)0)->pipeline) == POSITION_NAME_MAX + 1,
	       "position pipeline names agree");
_Static_assert(PROTO_TOKEN_MAX >= POSITION_TEXT_MAX, "HELLO holds every token");

static struct client_held_batch *client_find_held(struct ldr_client *c, uint32_t slot)
{
	for (uint32_t i = 0; i < c->depth; i++)
		if (c->held[i].used && c->held[i].slot == slot)
			return &c->held[i];
	return NULL;
}

/* Checks a READY's numbers before any pointer is formed from them: seq
 * must be `seq`. */
static int client_check_ready(struct ldr_client *c, const struct proto_ready *rd, uint64_t seq)
{
	uint64_t end;
	if (rd->seq != seq)
		return client_error(c, -EPROTO, "bad READY: seq %" PRIu64 ", expected %" PRIu64, rd->seq,
				    seq);
	if (c->ring) {
		const struct proto_device *dev = &c->welcome.device;
		if (rd->slot >= dev->slots || rd->slot_offset != (uint64_t)rd->slot * dev->slot_bytes)
			return client_error(c, -EPROTO, "bad READY: device slot %" PRIu32 " at offset %"
					    PRIu64 " is not one of the %" PRIu32 " slots of %" PRIu64
					    " bytes", rd->slot, rd->slot_offset, dev->slots,
					    dev->slot_bytes);
	} else if (__builtin_add_overflow(rd->slot_offset, c->welcome.slot_bytes, &end) ||
		   end > c->arena_bytes) {
		return client_error(c, -EPROTO, "bad READY: slot at offset %" PRIu64 " does not fit the "
				    "arena of %zu bytes", rd->slot_offset, c->arena_bytes);
	} else if (c->arena_private && rd->slot_offset % (uint64_t)sysconf(_SC_PAGESIZE) != 0) {
		return client_error(c, -EPROTO, "bad READY: slot at offset %" PRIu64 " does not start a "
				    "page, which the private mapping (LDR_ATTACH_WRITABLE) needs to drop "
				    "the slot's written pages", rd->slot_offset);
	}
	if (rd->rows == 0 || rd->rows > c->welcome.batch_size)
		return client_error(c, -EPROTO, "bad READY: %" PRIu32 " rows, batch_size %" PRIu32,
				    rd->rows, c->welcome.batch_size);
	/* ldr_sample_index divides by n - epoch_offset and reads rank-local
	 * indices first..first+rows-1: both must name real samples. */
	uint64_t first_end;
	if (rd->epoch_offset >= c->welcome.n_samples ||
	    __builtin_add_overflow(rd->first, (uint64_t)rd->rows, &first_end) ||
	    first_end > sampler_rank_samples(&c->sampler, rd->epoch_offset))
		return client_error(c, -EPROTO, "bad READY: rows %" PRIu64 "..+%" PRIu32 " of the segment "
				    "at %" PRIu64 " are outside the rank's share", rd->first, rd->rows,
				    rd->epoch_offset);
	bool pending = false;
	for (uint32_t i = 0; i < c->n_pending; i++)
		pending |= c->pending[(c->pending_head + i) % PROTO_DEVICE_SLOTS_MAX].slot == rd->slot;
	if (client_find_held(c, rd->slot) || pending)
		return client_error(c, -EPROTO, "bad READY: slot %" PRIu32 " is still held by this client",
				    rd->slot);
	if ((rd->flags & PROTO_READY_DECODE) && !c->decoder)
		return client_error(c, -EPROTO, "bad READY: rows to decode for a client that does not");
	return 0;
}

/* Holds the slot of READY rd (checked) and describes its batch in b; the
 * call waited wait_ns for it. */
static void client_hand_out(struct ldr_client *c, const struct proto_ready *rd, struct ldr_batch *b,
			    uint64_t wait_ns)
{
	struct client_held_batch *hb = NULL;
	for (uint32_t i = 0; i < c->depth && !hb; i++)
		if (!c->held[i].used)
			hb = &c->held[i];
	*hb = (struct client_held_batch){
		.used = true, .seq = rd->seq, .epoch = rd->epoch, .epoch_offset = rd->epoch_offset,
		.first = rd->first, .slot = rd->slot, .generation = rd->generation,
		.rows = rd->rows, .slot_offset = rd->slot_offset, .last = (rd->flags & PROTO_READY_LAST_IN_EPOCH) != 0,
		.decoded = (rd->flags & PROTO_READY_DECODE) != 0, .wait_ns = wait_ns,
	};
	c->n_held++;
	c->next_seq++;
	hb->wait_ns += c->wait_carry;
	c->wait_carry = 0;
	c->stats.batches++;
	c->stats.wait_ns += hb->wait_ns;

	memset(b, 0, sizeof *b);
	b->seq = rd->seq;
	b->epoch = rd->epoch;
	b->index = rd->batch;
	b->rows = rd->rows;
	b->last_in_epoch = hb->last;
	b->on_device = c->ring != NULL;
	b->n_tensors = c->welcome.n_tensors;
	for (uint32_t i = 0; i < c->welcome.n_tensors; i++) {
		const struct proto_tensor *t = &c->welcome.tensors[i];
		struct ldr_tensor *out = &b->tensors[i];
		memcpy(out->name, t->name, sizeof out->name);
		out->dtype = (enum ldr_dtype)t->dtype;
		out->ndim = t->ndim;
		out->shape[0] = rd->rows;
		for (uint32_t d = 1; d < t->ndim; d++)
			out->shape[d] = (int64_t)t->shape[d];
		out->data = c->ring ? device_ptr(c->ring, rd->slot_offset + t->offset)
				    : c->arena + rd->slot_offset + t->offset;
		out->bytes = (size_t)(c->tensor_row_bytes[i] * rd->rows);
	}
	b->priv_first = rd->first;
	b->priv_epoch_offset = rd->epoch_offset;
	b->priv_slot = rd->slot;
	b->priv_generation = rd->generation;
}

/* The frame in c->msg when it ends the stream (ERROR, BYE): its -errno,
 * with the text set; 0 for any other frame. -ETIMEDOUT and -EINTR say
 * "nothing yet, call again": never the daemon's error, or a caller would
 * call again for ever. */
static int stream_end(struct ldr_client *c)
{
	if (c->msg.hdr.type == PROTO_BYE)
		return client_error(c, -ECONNRESET, "daemon closed the connection");
	if (c->msg.hdr.type != PROTO_ERROR)
		return 0;
	int r = client_daemon_error(c);
	return r == -ETIMEDOUT || r == -EINTR ? -ECONNABORTED : r;
}

/* A wait of ldr_next that ended with nothing (-ETIMEDOUT, -EINTR): counted
 * to the next batch handed out, and the caller may call again. */
static int wait_ended_empty(struct ldr_client *c, int r, int timeout_ms, uint64_t t0)
{
	if (r == -ETIMEDOUT)
		client_error(c, r, "no batch within %d ms", timeout_ms);
	c->wait_carry += clock_mono_ns() - t0;
	return r;
}

/* ---- a client that decodes (decode.h) ---- */

/* Milliseconds left of timeout_ms (< 0: for ever) since t0. */
static int remaining_ms(int timeout_ms, uint64_t t0)
{
	if (timeout_ms < 0)
		return -1;
	uint64_t spent = (clock_mono_ns() - t0) / 1000000;
	return spent >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int)spent;
}

/* How a pending READY was read (client_impl.h, pending_read). */
enum { READ_AT_CALL = 1, READ_IN_WAIT = 2, READ_AHEAD = 3 };

/* The frame in c->msg, read by a client that decodes: a READY is checked
 * and its rows queued for the decoding thread; a failure behind pending
 * batches is kept for when they are handed out. 0 or a fatal -errno. */
static int take_frame(struct ldr_client *c)
{
	struct proto_msg *msg = &c->msg;
	int r;
	if ((r = stream_end(c)) < 0) { /* handed out once the batches before it are */
		c->deferred = r;
		snprintf(c->deferred_text, sizeof c->deferred_text, "%s", c->error);
		return 0;
	}
	if (msg->hdr.type != PROTO_READY)
		return client_error(c, -EPROTO, "unexpected %s frame from the daemon",
				    proto_type_name(msg->hdr.type));
	const struct proto_ready *rd = &msg->u.ready;
	if (c->n_pending + c->n_held >= c->depth)
		return client_error(c, -EPROTO, "bad READY: batch %" PRIu64 " beyond the depth of %"
				    PRIu32, rd->seq, c->depth);
	r = client_check_ready(c, rd, c->recv_seq);
	if (r == 0 && (rd->flags & PROTO_READY_DECODE))
		r = decoder_submit(c->decoder, rd->seq, rd->slot,
				   (void *)device_ptr(c->ring, rd->slot_offset), rd->staging_offset,
				   rd->rows, c->error, sizeof c->error);
	if (r < 0)
		return r;
	uint32_t at = (c->pending_head + c->n_pending++) % PROTO_DEVICE_SLOTS_MAX;
	c->pending[at] = *rd;
	c->pending_read[at].call = c->next_calls;
	c->pending_read[at].how = c->reading;
	c->recv_seq++;
	return 0;
}

/* Reads frames: the first within timeout_ms, then all that are there.
 * 0, -ETIMEDOUT or -EINTR (none read), or a fatal -errno. */
static int pump(struct ldr_client *c, int timeout_ms)
{
	int r = client_recv_frame(c, timeout_ms, NULL);
	if (r == -ETIMEDOUT || r == -EINTR)
		return r;
	while (r == 0 && !c->deferred) {
		r = take_frame(c);
		if (r == 0 && !c->deferred) {
			r = client_recv_frame(c, 0, NULL);
			if (r == -ETIMEDOUT || r == -EINTR)
				return 0;
		}
	}
	return r;
}

/* Tells the daemon the staging slot of rd is read: DECODED. */
static int send_decoded(struct ldr_client *c, const struct proto_ready *rd,
			const struct decoder_result *res)
{
	struct proto_msg *msg = &c->msg;
	msg->hdr = (struct proto_header){.type = PROTO_DECODED};
	msg->u.decoded = (struct proto_decoded){
		.seq = rd->seq, .staging_slot = rd->staging_slot,
		.staging_generation = rd->staging_generation, .gpu = res->gpu, .cpu = res->cpu,
		.bad = res->bad, .bad_sample = res->bad ? res->bad_sample : UINT64_MAX,
		.submit_ns = res->submit_ns,
	};
	return client_send_frame(c, "DECODED");
}

/* Counts a wait of ldr_next for the decoding of the batch at the head of
 * pending (ldr_stats): read in an earlier call, the engines were behind;
 * read at this call's first look, its decoding began only now, the READY
 * having waited in the socket since the caller's last call. One read while
 * this call waited for it came late from the workers: data wait only. */
static void count_decode_wait(struct ldr_client *c, uint64_t ns)
{
	uint8_t how = c->pending_read[c->pending_head].how;
	if (how == READ_AHEAD || c->pending_read[c->pending_head].call != c->next_calls)
		c->stats.decode_wait_ns += ns;
	else if (how == READ_AT_CALL)
		c->stats.decode_late_ns += ns;
}

bool client_read_ahead(struct ldr_client *c)
{
	if (c->deferred || c->ahead_failed) /* (c->failed is the caller's: not read here) */
		return true;
	c->reading = READ_AHEAD;
	for (;;) {
		struct pollfd p = {.fd = c->sock, .events = POLLIN};
		if (poll(&p, 1, 0) <= 0)
			return false; /* nothing there: the caller read it */
		int r = client_recv_frame(c, 0, NULL);
		if (r == 0)
			r = take_frame(c); /* an ERROR or BYE: deferred behind the batches before it */
		if (r < 0) {
			c->ahead_failed = r;
			snprintf(c->deferred_text, sizeof c->deferred_text, "%s", c->error);
		}
		if (c->deferred || c->ahead_failed)
			return true;
	}
}

static int next_decoding_locked(struct ldr_client *c, struct ldr_batch *b, int timeout_ms)
{
	uint64_t t0 = clock_mono_ns(), waited = 0;
	if (c->ahead_failed) {
		snprintf(c->error, sizeof c->error, "%s", c->deferred_text);
		return client_fail(c, c->ahead_failed);
	}
	c->next_calls++;
	c->reading = READ_AT_CALL;
	int r = c->deferred ? 0 : pump(c, 0);
	c->reading = READ_IN_WAIT;
	if (r < 0 && r != -ETIMEDOUT && r != -EINTR)
		return client_fail(c, r);
	while (c->n_pending == 0) {
		if (c->deferred) {
			snprintf(c->error, sizeof c->error, "%s", c->deferred_text);
			return client_fail(c, c->deferred);
		}
		r = pump(c, remaining_ms(timeout_ms, t0));
		if (r == -ETIMEDOUT || r == -EINTR)
			return wait_ended_empty(c, r, timeout_ms, t0);
		if (r < 0)
			return client_fail(c, r);
		waited = clock_mono_ns() - t0;
	}
	const struct proto_ready *rd = &c->pending[c->pending_head];
	if (rd->flags & PROTO_READY_DECODE) {
		struct decoder_result res;
		uint64_t t_sent = clock_mono_ns(); /* the batch is here; its decoding may not be */
		bool ready = decoder_done(c->decoder, rd->seq);
		r = decoder_take(c->decoder, rd->seq, remaining_ms(timeout_ms, t0), &res, c->error,
				 sizeof c->error);
		if (r == -ETIMEDOUT) {
			client_error(c, r, "batch %" PRIu64 " not decoded within %d ms", rd->seq, timeout_ms);
			c->wait_carry += clock_mono_ns() - t0;
			return r; /* the next call waits for it again */
		}
		if (r < 0)
			return client_fail(c, r);
		if (!ready) {
			uint64_t now = clock_mono_ns();
			count_decode_wait(c, now - t_sent);
			waited = now - t0;
		}
		r = send_decoded(c, rd, &res); /* the slot is read, whatever became of the batch */
		if (res.rc < 0)
			return client_fail(c, res.rc); /* c->error names the image or call */
		if (r < 0)
			return client_fail(c, r);
	}
	struct proto_ready out = *rd;
	c->pending_head = (c->pending_head + 1) % PROTO_DEVICE_SLOTS_MAX;
	c->n_pending--;
	client_hand_out(c, &out, b, waited);
	return 0;
}

int ldr_next(struct ldr_client *c, struct ldr_batch *b, int timeout_ms)
{
	if (c->failed)
		return c->failed;
	if (!c->attached)
		return client_error(c, -EINVAL, "not attached");
	if (c->n_held >= c->depth)
		return client_error(c, -EBUSY, "%" PRIu32 " batches held, the depth is %" PRIu32
				    ": release one first", c->n_held, c->depth);
	if (c->decoder) {
		client_lock(c);
		int r = next_decoding_locked(c, b, timeout_ms);
		client_unlock(c);
		return r;
	}
	struct proto_msg *msg = &c->msg;
	uint64_t t0 = clock_mono_ns();
	int r = client_recv_frame(c, timeout_ms, NULL);
	if (r == -ETIMEDOUT || r == -EINTR)
		return wait_ended_empty(c, r, timeout_ms, t0);
	if (r < 0)
		return client_fail(c, r);
	if ((r = stream_end(c)) < 0)
		return client_fail(c, r);
	if (msg->hdr.type != PROTO_READY)
		return client_fail(c, client_error(c, -EPROTO, "unexpected %s frame from the daemon",
						   proto_type_name(msg->hdr.type)));
	r = client_check_ready(c, &msg->u.ready, c->next_seq);
	if (r < 0)
		return client_fail(c, r);
	client_hand_out(c, &msg->u.ready, b, clock_mono_ns() - t0);
	return 0;
}

/* The held batch b names, or NULL with the reason set. */
static struct client_held_batch *client_held(struct ldr_client *c, const struct ldr_batch *b)
{
	if (!c->attached) {
		client_error(c, -EINVAL, "not attached");
		return NULL;
	}
	struct client_held_batch *hb = client_find_held(c, b->priv_slot);
	if (!hb || hb->generation != b->priv_generation || hb->seq != b->seq) {
		client_error(c, -EINVAL, "batch %" PRIu64 " (slot %" PRIu32 ") is not held by this client",
			     b->seq, b->priv_slot);
		return NULL;
	}
	return hb;
}

int ldr_stream_wait(struct ldr_client *c, const struct ldr_batch *b, void *cuda_stream)
{
	struct client_held_batch *hb = client_held(c, b);
	if (!hb)
		return -EINVAL;
	if (!c->ring)
		return client_error(c, -EINVAL, "ldr_stream_wait: the client is not attached with "
				    "device delivery");
	int r = device_wait(c->ring, hb->slot, cuda_stream, c->error, sizeof c->error);
	if (r == 0 && hb->decoded)
		r = decoder_stream_wait(c->decoder, hb->slot, cuda_stream, c->error, sizeof c->error);
	return r;
}

int ldr_copy_to_host(struct ldr_client *c, const struct ldr_batch *b, unsigned tensor, void *dst)
{
	struct client_held_batch *hb = client_held(c, b);
	if (!hb)
		return -EINVAL;
	if (tensor >= b->n_tensors)
		return client_error(c, -EINVAL, "tensor %u: the batch has %u", tensor, b->n_tensors);
	const struct ldr_tensor *t = &b->tensors[tensor];
	if (!c->ring) {
		memcpy(dst, t->data, t->bytes);
		return 0;
	}
	if (hb->decoded) {
		int r = decoder_slot_sync(c->decoder, hb->slot, c->error, sizeof c->error);
		if (r < 0)
			return r;
	}
	return device_copy_to_host(c->ring, hb->slot, t->data, dst, t->bytes, c->error,
				   sizeof c->error);
}

int ldr_synchronize(struct ldr_client *c)
{
	if (!c->attached || !c->ring)
		return 0;
	return device_synchronize(c->ring, c->error, sizeof c->error);
}

int ldr_release(struct ldr_client *c, const struct ldr_batch *b)
{
	return ldr_release_stream(c, b, NULL);
}

int ldr_release_stream(struct ldr_client *c, const struct ldr_batch *b, void *cuda_stream)
{
	return ldr_release_streams(c, b, &cuda_stream, 1);
}

/* The position once held batch hb is consumed, into *p. */
static void client_position_after(const struct ldr_client *c, const struct client_held_batch *hb,
				  struct position *p)
{
	position_after_batch(c->welcome.seed, c->welcome.n_samples, c->welcome.world, hb->epoch,
			     hb->epoch_offset, hb->first, hb->rows, hb->last, p);
	p->split = c->split;
	p->data = c->welcome.data;
	memcpy(p->pipeline, c->position.pipeline, sizeof(p->pipeline)); /* set at attach */
}

/* /proc/self/pagemap's bits (Documentation/admin-guide/mm/pagemap.rst). */
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_SWAPPED (1ull << 62)
#define PAGEMAP_FILE (1ull << 61) /* a file page (or shared anonymous): not a private copy */
#define PAGEMAP_CHUNK 512

/*
 * Drops this process's private copies of the arena's pages in [offset,
 * offset + bytes) of a private mapping (MADV_DONTNEED: the range shows the
 * arena again). A page of a private file mapping that is not a file page is
 * one this process wrote (or one of those, swapped out): only those runs
 * are dropped, so the slot's other pages stay mapped and are not faulted in
 * again for the next batch. Where pagemap cannot tell, the whole range.
 * 0 or -errno. offset is page-aligned (client_check_ready).
 */
static int drop_pages(uintptr_t base, uint64_t page, uint64_t first, uint64_t end)
{
	return madvise((void *)(base + first * page), (end - first) * page, MADV_DONTNEED) < 0 ? -errno
											    : 0;
}

static int drop_written_pages(struct ldr_client *c, uint64_t offset, uint64_t bytes)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uintptr_t base = (uintptr_t)c->arena + offset;
	const uint64_t n = (bytes + page - 1) / page;
	uint64_t entries[PAGEMAP_CHUNK];
	uint64_t run = UINT64_MAX; /* first page of the run of private copies being read */
	if (c->pagemap_fd < 0)
		return drop_pages(base, page, 0, n);
	for (uint64_t i = 0; i < n; i += PAGEMAP_CHUNK) {
		uint64_t k = n - i < PAGEMAP_CHUNK ? n - i : PAGEMAP_CHUNK;
		ssize_t want = (ssize_t)(k * sizeof entries[0]);
		if (pread(c->pagemap_fd, entries, (size_t)want,
			  (off_t)((base / page + i) * sizeof entries[0])) != want)
			return drop_pages(base, page, 0, n);
		for (uint64_t j = 0; j < k; j++) {
			uint64_t e = entries[j];
			bool copy = ((e & PAGEMAP_PRESENT) && !(e & PAGEMAP_FILE)) || (e & PAGEMAP_SWAPPED);
			if (copy && run == UINT64_MAX) {
				run = i + j;
			} else if (!copy && run != UINT64_MAX) {
				int r = drop_pages(base, page, run, i + j);
				if (r < 0)
					return r;
				run = UINT64_MAX;
			}
		}
	}
	return run == UINT64_MAX ? 0 : drop_pages(base, page, run, n);
}

int ldr_release_streams(struct ldr_client *c, const struct ldr_batch *b, void *const *cuda_streams,
			unsigned n)
{
	struct client_held_batch *hb = client_held(c, b);
	if (!hb)
		return -EINVAL;
	if (n == 0)
		return client_error(c, -EINVAL, "ldr_release_streams: no stream given");
	/* The released event is recorded before RELEASE goes out: the daemon's
	 * next copy into the slot waits for it. A failed record keeps the batch
	 * held (the slot is not known to be free). */
	if (c->ring) {
		int r = device_release(c->ring, hb->slot, cuda_streams, n, c->error, sizeof c->error);
		if (r < 0)
			return r;
	}
	/* A private mapping: drop the pages this process wrote (its own
	 * copies), so that the slot shows the arena again when the daemon
	 * refills it. A failure keeps the batch held. */
	if (c->arena_private && !c->ring) {
		int r = drop_written_pages(c, hb->slot_offset, c->welcome.slot_bytes);
		if (r < 0)
			return client_error(c, r, "madvise of slot %" PRIu32 " (%" PRIu64 " bytes at %"
					    PRIu64 "): %s", hb->slot, c->welcome.slot_bytes,
					    hb->slot_offset, strerror(-r));
	}
	/* The caller is done with the batch whether or not the daemon still
	 * listens, so the position advances before the send. */
	if (!c->released_any || hb->seq > c->position_seq) {
		client_position_after(c, hb, &c->position);
		c->position_seq = hb->seq;
		c->released_any = true;
	}
	client_lock(c); /* c->msg and the depth count, with the read-ahead thread */
	struct proto_msg *msg = &c->msg; /* only the fields RELEASE uses: the union is 64 KiB */
	msg->hdr = (struct proto_header){.type = PROTO_RELEASE};
	msg->u.release = (struct proto_release){
		.seq = hb->seq, .slot = hb->slot, .generation = hb->generation, .wait_ns = hb->wait_ns,
	};
	hb->used = false;
	c->n_held--;
	int r = c->failed ? c->failed : client_send_frame(c, "RELEASE");
	if (r < 0 && !c->failed)
		client_fail(c, r);
	client_unlock(c);
	return r < 0 ? r : 0;
}

uint64_t ldr_sample_index(const struct ldr_client *c, const struct ldr_batch *b, unsigned row)
{
	/* No error channel: UINT64_MAX for what names no sample. */
	if (!c || !c->attached || row >= b->rows || b->priv_epoch_offset >= c->welcome.n_samples)
		return UINT64_MAX;
	return sampler_sample(&c->sampler, b->epoch, b->priv_epoch_offset, b->priv_first + row);
}

int ldr_get_stats(const struct ldr_client *c, struct ldr_stats *out)
{
	if (!c || !c->attached)
		return -EINVAL;
	*out = c->stats;
	out->decoding = c->decoder != NULL;
	snprintf(out->decode_why_not, sizeof out->decode_why_not, "%s",
		 c->ring && !c->decoder ? c->decode_why_not : "");
	if (c->decoder)
		decoder_stats(c->decoder, out);
	return 0;
}

size_t ldr_sizeof_stats(void)
{
	return sizeof(struct ldr_stats);
}

size_t ldr_sizeof_batch(void)
{
	return sizeof(struct ldr_batch);
}

int ldr_position_after(struct ldr_client *c, const struct ldr_batch *b, char *buf, size_t cap)
{
	if (cap)
		buf[0] = '\0';
	struct client_held_batch *hb = client_held(c, b);
	if (!hb)
		return -EINVAL;
	struct position p;
	client_position_after(c, hb, &p);
	return position_format(&p, buf, cap);
}

int ldr_position(const struct ldr_client *c, char *buf, size_t cap)
{
	if (!c || !c->attached) {
		if (cap)
			buf[0] = '\0';
		return -EINVAL;
	}
	return position_format(&c->position, buf, cap);
}

int ldr_position_parse(const char *token, struct ldr_position *out, char *err, size_t err_cap)
{
	if (!err)
		err_cap = 0;
	if (!token)
		return errtext(err, err_cap, -EINVAL, "no token");
	struct position p;
	int r = position_parse(token, &p, err, err_cap);
	if (r < 0)
		return r;
	*out = (struct ldr_position){
		.seed = p.seed, .n_samples = p.n_samples, .epoch = p.epoch, .offset = p.offset,
		.split = p.split, .data = p.data,
	};
	memcpy(out->pipeline, p.pipeline, sizeof(out->pipeline));
	return 0;
}

int ldr_position_format(const struct ldr_position *p, char *buf, size_t cap)
{
	struct position q = {
		.seed = p->seed, .n_samples = p->n_samples, .epoch = p->epoch, .offset = p->offset,
		.split = p->split, .data = p->data,
	};
	size_t len = strnlen(p->pipeline, sizeof(p->pipeline));
	if (p->split >= SPLIT_COUNT || len == sizeof(p->pipeline)) {
		if (cap)
			buf[0] = '\0';
		return -EINVAL;
	}
	memcpy(q.pipeline, p->pipeline, len + 1);
	int r = position_format(&q, buf, cap);
	if (r < 0 && cap)
		buf[0] = '\0'; /* no token rather than a cut one */
	return r;
}

size_t ldr_sizeof_position(void)
{
	return sizeof(struct ldr_position);
}
