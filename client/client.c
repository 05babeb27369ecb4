/*
 * client: the loaderd client library (client/loaderd.h).
 *
 * A handle owns one SOCK_SEQPACKET connection and, once attached, one
 * read-only mapping of the daemon's arena. The daemon is trusted to mean
 * well but not to be bug-free: every number it sends (sizes, offsets,
 * sequence numbers, row counts) is checked before a pointer is formed from
 * it, and a frame that breaks a rule is -EPROTO with a text saying which.
 *
 * Beyond the header's list, ldr_next() returns -EINTR when a signal handler
 * interrupted its wait (poll(2) is never restarted), so a caller can notice
 * its own signals; nothing was consumed and it may be called again. An
 * interrupted ldr_attach() fails the handle: the answer to its HELLO is lost.
 *
 * After the connection fails (the daemon's ERROR, its close, a bad frame)
 * the handle stays failed: later calls return the same code and ldr_error()
 * keeps the first reason.
 */
#include "loaderd.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/gpu_uuid.h"
#include "common/paths.h"
#include "common/position.h"
#include "common/sampler.h"
#include "device.h"
#include "proto/wire.h"

#define CLIENT_ERROR_MAX (PROTO_ERROR_TEXT_MAX + 256)
#define CLIENT_ATTACH_TIMEOUT_MS 60000 /* HELLO answered by then, or the daemon is stuck */
#define CLIENT_STATUS_TIMEOUT_MS 10000
#define CLIENT_DEPTH_MAX 65536 /* sanity cap on a granted depth: it sizes an allocation */

_Static_assert(LDR_TENSORS_MAX == PROTO_TENSORS_MAX, "tensor count limits agree");
_Static_assert(LDR_NDIM_MAX == PROTO_NDIM_MAX, "ndim limits agree");
_Static_assert(sizeof(((struct ldr_tensor *)0)->name) == PROTO_TENSOR_NAME_MAX,
	       "tensor name sizes agree");
_Static_assert(LDR_POSITION_MAX == POSITION_TEXT_MAX, "position token sizes agree");
_Static_assert((int)LDR_UINT8 == PROTO_DTYPE_UINT8 && (int)LDR_UINT16 == PROTO_DTYPE_UINT16 &&
	       (int)LDR_UINT32 == PROTO_DTYPE_UINT32 && (int)LDR_INT32 == PROTO_DTYPE_INT32 &&
	       (int)LDR_INT64 == PROTO_DTYPE_INT64 && (int)LDR_FLOAT16 == PROTO_DTYPE_FLOAT16 &&
	       (int)LDR_FLOAT32 == PROTO_DTYPE_FLOAT32, "dtype values agree");

/* A batch handed out by ldr_next() and not yet released. */
struct held_batch {
	bool used;
	uint64_t seq;
	uint64_t epoch;
	uint64_t epoch_offset;
	uint64_t first;
	uint32_t slot;
	uint32_t generation;
	uint32_t rows;
	bool last;
};

struct ldr_client {
	int sock;                   /* -1 when not connected */
	int failed;                 /* 0, or the -errno the connection died with */
	bool attached;
	uint64_t next_request_id;
	char error[CLIENT_ERROR_MAX];

	/* WELCOME facts, valid once attached */
	const uint8_t *arena;       /* host delivery */
	size_t arena_bytes;
	struct device_ring *ring;   /* device delivery */
	int device_ordinal;
	char device_uuid[GPU_UUID_TEXT_MAX]; /* "" for host delivery */
	struct proto_welcome welcome;
	uint64_t tensor_row_bytes[PROTO_TENSORS_MAX];
	struct sampler sampler;

	uint64_t next_seq;          /* seq the next READY must carry */
	uint32_t depth;             /* granted: most batches held at once */
	uint32_t n_held;
	struct held_batch *held;    /* depth entries */

	struct position position;   /* after the highest-seq released batch */
	bool released_any;
	uint64_t position_seq;

	struct proto_msg msg;       /* the frame being sent or received (~64 KiB) */
};

__attribute__((format(printf, 2, 3)))
static void set_error(struct ldr_client *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->error, sizeof c->error, fmt, ap);
	va_end(ap);
}

/* Thread-safe strerror (GNU strerror_r returns the text to use). */
static const char *err_text(int err, char *buf, size_t cap)
{
	return strerror_r(err, buf, cap);
}

/* Connects c to path (NULL: the default): 0 or -errno with the reason set. */
static int connect_socket(struct ldr_client *c, const char *path)
{
	char def[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char ebuf[128];
	int r;
	if (!path) {
		r = paths_client_socket(def, sizeof def);
		if (r < 0) {
			set_error(c, "the default socket path is too long: set LOADERD_SOCKET");
			return r;
		}
		path = def;
	}
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	if (len == 0 || len >= sizeof addr.sun_path) {
		set_error(c, "socket path \"%s\" is %s", path, len ? "too long" : "empty");
		return len ? -ENAMETOOLONG : -EINVAL;
	}
	memcpy(addr.sun_path, path, len + 1);
	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->sock < 0) {
		r = -errno;
		set_error(c, "socket: %s", err_text(-r, ebuf, sizeof ebuf));
		return r;
	}
	if (connect(c->sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
		r = -errno;
		set_error(c, "connect %s: %s", path, err_text(-r, ebuf, sizeof ebuf));
		close(c->sock);
		c->sock = -1;
		return r;
	}
	return 0;
}

/*
 * Waits up to timeout_ms (< 0: forever) for one frame into c->msg. An fd
 * riding along goes to *fd_out, or is closed when fd_out is NULL. Frames
 * the decoder refuses are -EPROTO.
 */
static int recv_frame(struct ldr_client *c, int timeout_ms, int *fd_out)
{
	char why[256] = "";
	char ebuf[128];
	struct pollfd pfd = { .fd = c->sock, .events = POLLIN };
	int fd = -1, r = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
	if (r < 0) {
		r = -errno;
		set_error(c, "%s", r == -EINTR ? "interrupted by a signal" :
			  err_text(-r, ebuf, sizeof ebuf));
		return r;
	}
	if (r == 0) {
		set_error(c, "no answer from the daemon within %d ms", timeout_ms);
		return -ETIMEDOUT;
	}
	r = wire_recv(c->sock, &c->msg, &fd, why, sizeof why);
	/* A daemon that closed while our frames (RELEASEs) were unread by it
	 * leaves an error on our end, reported once, before the frames it
	 * sent last (its ERROR saying why): read on. At the end of the queue
	 * the read finds the close and does not block. */
	if (r == -ECONNRESET)
		r = wire_recv(c->sock, &c->msg, &fd, why, sizeof why);
	if (r == -ECONNRESET) {
		set_error(c, "daemon closed the connection");
		return r;
	}
	if (r == -EBADMSG || r == -EPROTONOSUPPORT || r == -EMSGSIZE || r == -EPROTO) {
		set_error(c, "bad frame from the daemon: %s",
			  why[0] ? why : err_text(-r, ebuf, sizeof ebuf));
		return -EPROTO;
	}
	if (r < 0) {
		set_error(c, "receive: %s", err_text(-r, ebuf, sizeof ebuf));
		return r;
	}
	if (fd_out)
		*fd_out = fd;
	else if (fd >= 0)
		close(fd);
	return 0;
}

/* The daemon's ERROR frame (in c->msg) as a return value and text. */
static int daemon_error(struct ldr_client *c)
{
	const struct proto_error *e = &c->msg.u.error;
	set_error(c, "%s", e->text);
	return e->code > 0 && e->code < 4096 ? -e->code : -EPROTO;
}

/* Marks the connection dead with code r (the text is already set). */
static int fail(struct ldr_client *c, int r)
{
	if (!c->failed)
		c->failed = r;
	return r;
}

/*
 * Sends c->msg. When the daemon is gone it may have said why just before
 * closing (an ERROR such as "daemon shutting down", or a refused client),
 * and that frame is still queued for us: it is the reason reported.
 */
static int send_frame(struct ldr_client *c, const char *what)
{
	char ebuf[128];
	int r = wire_send(c->sock, &c->msg, -1);
	if (r == -EPIPE || r == -ECONNRESET) {
		for (int i = 0; i < 1024; i++) { /* finite: nothing more is coming */
			if (recv_frame(c, 0, NULL) < 0)
				break;
			if (c->msg.hdr.type == PROTO_ERROR)
				return daemon_error(c);
		}
		set_error(c, "daemon closed the connection");
		return -ECONNRESET;
	}
	if (r < 0)
		set_error(c, "send %s: %s", what, err_text(-r, ebuf, sizeof ebuf));
	return r;
}

static struct ldr_client *client_new(void)
{
	struct ldr_client *c = calloc(1, sizeof *c);
	if (c) {
		c->sock = -1;
		c->next_request_id = 1;
	}
	return c;
}

int ldr_connect(const char *socket_path, struct ldr_client **out)
{
	struct ldr_client *c = client_new();
	*out = c;
	if (!c)
		return -ENOMEM;
	int r = connect_socket(c, socket_path);
	return r < 0 ? fail(c, r) : 0;
}

/* bytes per row of t (dtype size x the non-batch dims), or 0 on overflow
 * or an invalid description. */
static uint64_t tensor_row_bytes(const struct proto_tensor *t)
{
	uint64_t bytes = proto_dtype_bytes(t->dtype);
	if (bytes == 0 || t->ndim < 1 || t->ndim > PROTO_NDIM_MAX)
		return 0;
	for (uint32_t d = 1; d < t->ndim; d++)
		if (t->shape[d] == 0 || __builtin_mul_overflow(bytes, t->shape[d], &bytes))
			return 0;
	return bytes;
}

/* Checks WELCOME's numbers against each other and against the request. */
static int check_welcome(struct ldr_client *c, const struct proto_welcome *w,
			 uint32_t rank, uint32_t world)
{
	if (w->arena_bytes == 0 || w->arena_bytes > SIZE_MAX || w->slot_bytes == 0 ||
	    w->slot_bytes > w->arena_bytes || w->n_samples == 0 || w->batch_size == 0 ||
	    w->offset > w->n_samples || w->depth == 0 || w->depth > CLIENT_DEPTH_MAX ||
	    w->shuffle > 1 || w->drop_last > 1 || w->n_tensors == 0 ||
	    w->n_tensors > PROTO_TENSORS_MAX) {
		set_error(c, "bad WELCOME: arena %" PRIu64 " bytes, slot %" PRIu64 " bytes, %" PRIu64
			  " samples, batch_size %" PRIu32 ", offset %" PRIu64 ", depth %" PRIu32
			  ", shuffle %" PRIu32 ", drop_last %" PRIu32 ", %" PRIu32 " tensors",
			  w->arena_bytes, w->slot_bytes, w->n_samples, w->batch_size, w->offset,
			  w->depth, w->shuffle, w->drop_last, w->n_tensors);
		return -EPROTO;
	}
	if (w->rank != rank || w->world != world) {
		set_error(c, "bad WELCOME: rank %" PRIu32 " world %" PRIu32 ", asked for %" PRIu32 "/%" PRIu32,
			  w->rank, w->world, rank, world);
		return -EPROTO;
	}
	for (uint32_t i = 0; i < w->n_tensors; i++) {
		const struct proto_tensor *t = &w->tensors[i];
		uint64_t row = tensor_row_bytes(t), total, end;
		if (t->name[0] == '\0' || row == 0 || t->shape[0] != w->batch_size) {
			set_error(c, "bad WELCOME: tensor %" PRIu32 " has an invalid description", i);
			return -EPROTO;
		}
		if (__builtin_mul_overflow(row, (uint64_t)w->batch_size, &total) ||
		    __builtin_add_overflow(t->offset, total, &end) || end > w->slot_bytes) {
			set_error(c, "bad WELCOME: tensor \"%s\" (offset %" PRIu64 ", %" PRIu64
				  " bytes per row) does not fit a slot of %" PRIu64 " bytes",
				  t->name, t->offset, row, w->slot_bytes);
			return -EPROTO;
		}
		c->tensor_row_bytes[i] = row;
	}
	return 0;
}

/* Maps the arena fd from WELCOME after checking its size; closes the fd. */
static int map_arena(struct ldr_client *c, int fd, uint64_t arena_bytes)
{
	char ebuf[128];
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		set_error(c, "fstat of the arena fd: %s", err_text(-r, ebuf, sizeof ebuf));
		goto close_fd;
	}
	if (st.st_size < 0 || (uint64_t)st.st_size != arena_bytes) {
		set_error(c, "bad WELCOME: arena fd has %lld bytes, WELCOME says %" PRIu64,
			  (long long)st.st_size, arena_bytes);
		r = -EPROTO;
		goto close_fd;
	}
	void *base = mmap(NULL, (size_t)arena_bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		r = -errno;
		set_error(c, "mmap of the arena (%" PRIu64 " bytes): %s", arena_bytes,
			  err_text(-r, ebuf, sizeof ebuf));
		goto close_fd;
	}
	c->arena = base;
	c->arena_bytes = (size_t)arena_bytes;
close_fd:
	close(fd);
	return r;
}

/* Client-side checks of what proto_encode would refuse, with a reason. */
static int check_opts(struct ldr_client *c, const struct ldr_attach_opts *o, uint32_t world)
{
	if (!o || !o->pipeline || !o->pipeline[0] || strlen(o->pipeline) >= PROTO_NAME_MAX) {
		set_error(c, "pipeline name must be 1..%d bytes", PROTO_NAME_MAX - 1);
		return -EINVAL;
	}
	if (o->rank >= world) {
		set_error(c, "rank %u is not below world %" PRIu32, o->rank, world);
		return -EINVAL;
	}
	if (o->client_name && strlen(o->client_name) >= PROTO_NAME_MAX) {
		set_error(c, "client name is longer than %d bytes", PROTO_NAME_MAX - 1);
		return -EINVAL;
	}
	if (o->resume && strlen(o->resume) >= PROTO_TOKEN_MAX) {
		set_error(c, "resume token is longer than %d bytes", PROTO_TOKEN_MAX - 1);
		return -EINVAL;
	}
	/* The daemon's decoder refuses other bytes in these two (PROTOCOL.md, 5.1). */
	const char *word = o->pipeline, *what = "pipeline name";
	long bad = proto_word_bad_byte(word);
	if (bad < 0 && o->resume) {
		word = o->resume;
		what = "resume token";
		bad = proto_word_bad_byte(word);
	}
	if (bad >= 0) {
		set_error(c, "%s: byte %ld is 0x%02x; only printable ASCII without spaces "
			  "(0x21..0x7e) may be used", what, bad, (unsigned char)word[bad]);
		return -EINVAL;
	}
	return 0;
}

int ldr_attach(struct ldr_client *c, const struct ldr_attach_opts *opts)
{
	if (c->failed)
		return c->failed;
	if (c->attached) {
		set_error(c, "already attached");
		return -EALREADY;
	}
	uint32_t world = opts && opts->world ? opts->world : 1;
	int r = check_opts(c, opts, world);
	if (r < 0)
		return r;

	struct proto_msg *msg = &c->msg;
	memset(msg, 0, sizeof *msg);
	msg->hdr.type = PROTO_HELLO;
	msg->hdr.request_id = c->next_request_id++;
	struct proto_hello *h = &msg->u.hello;
	h->delivery = PROTO_DELIVERY_HOST;
	uint8_t uuid[PROTO_UUID_BYTES] = {0};
	bool device = opts->device && opts->device[0];
	if (device) {
		r = device_resolve(opts->device, &c->device_ordinal, uuid, c->error, sizeof c->error);
		if (r < 0)
			return r;
		h->delivery = PROTO_DELIVERY_DEVICE;
		memcpy(h->device_uuid, uuid, sizeof uuid);
	}
	h->rank = opts->rank;
	h->world = world;
	h->depth = opts->depth;
	snprintf(h->pipeline, sizeof h->pipeline, "%s", opts->pipeline);
	snprintf(h->client_name, sizeof h->client_name, "%s", opts->client_name ? opts->client_name : "");
	snprintf(h->resume, sizeof h->resume, "%s", opts->resume ? opts->resume : "");
	uint64_t request_id = msg->hdr.request_id;
	r = send_frame(c, "HELLO");
	if (r < 0)
		return fail(c, r);

	int fd = -1;
	r = recv_frame(c, CLIENT_ATTACH_TIMEOUT_MS, &fd);
	if (r < 0)
		return fail(c, r);
	if (msg->hdr.type == PROTO_ERROR) {
		if (fd >= 0)
			close(fd);
		return fail(c, daemon_error(c));
	}
	if (msg->hdr.type != PROTO_WELCOME || msg->hdr.request_id != request_id) {
		set_error(c, "bad answer to HELLO: %s for request %" PRIu64,
			  proto_type_name(msg->hdr.type), msg->hdr.request_id);
		r = -EPROTO;
		goto close_fd;
	}
	const struct proto_welcome *w = &msg->u.welcome;
	if (w->delivery != (device ? PROTO_DELIVERY_DEVICE : PROTO_DELIVERY_HOST) ||
	    (fd < 0) != device) {
		set_error(c, "bad WELCOME: %s delivery %s an arena fd, asked for %s delivery",
			  w->delivery == PROTO_DELIVERY_DEVICE ? "device" : "host",
			  fd < 0 ? "without" : "with", device ? "device" : "host");
		r = -EPROTO;
		goto close_fd;
	}
	r = check_welcome(c, w, opts->rank, world);
	if (r < 0)
		goto close_fd;
	c->held = calloc(w->depth, sizeof *c->held);
	if (!c->held) {
		set_error(c, "out of memory");
		r = -ENOMEM;
		goto close_fd;
	}
	if (device) {
		r = device_open(c->device_ordinal, &w->device, &c->ring, c->error, sizeof c->error);
		gpu_uuid_format(uuid, c->device_uuid);
	} else {
		r = map_arena(c, fd, w->arena_bytes); /* closes fd */
	}
	if (r < 0) {
		free(c->held);
		c->held = NULL;
		return fail(c, r);
	}
	c->welcome = *w;
	c->depth = w->depth;
	c->sampler = (struct sampler){
		.n_samples = w->n_samples, .seed = w->seed, .batch_size = w->batch_size,
		.rank = w->rank, .world = w->world, .shuffle = w->shuffle, .drop_last = w->drop_last,
	};
	c->position = (struct position){
		.seed = w->seed, .n_samples = w->n_samples, .epoch = w->epoch, .offset = w->offset,
	};
	c->attached = true;
	c->error[0] = '\0';
	return 0;

close_fd:
	if (fd >= 0)
		close(fd);
	return fail(c, r);
}

uint64_t ldr_dataset_size(const struct ldr_client *c)
{
	return c && c->attached ? c->welcome.n_samples : 0;
}

unsigned ldr_batch_size(const struct ldr_client *c)
{
	return c && c->attached ? c->welcome.batch_size : 0;
}

uint64_t ldr_batches_in_epoch(const struct ldr_client *c, uint64_t epoch)
{
	if (!c || !c->attached)
		return 0;
	return sampler_batches(&c->sampler, epoch == c->welcome.epoch ? c->welcome.offset : 0);
}

static struct held_batch *find_held_slot(struct ldr_client *c, uint32_t slot)
{
	for (uint32_t i = 0; i < c->depth; i++)
		if (c->held[i].used && c->held[i].slot == slot)
			return &c->held[i];
	return NULL;
}

/* Checks a READY's numbers before any pointer is formed from them. */
static int check_ready(struct ldr_client *c, const struct proto_ready *rd)
{
	uint64_t end;
	if (rd->seq != c->next_seq) {
		set_error(c, "bad READY: seq %" PRIu64 ", expected %" PRIu64, rd->seq, c->next_seq);
		return -EPROTO;
	}
	if (c->ring) {
		const struct proto_device *dev = &c->welcome.device;
		if (rd->slot >= dev->slots || rd->slot_offset != (uint64_t)rd->slot * dev->slot_bytes) {
			set_error(c, "bad READY: device slot %" PRIu32 " at offset %" PRIu64 " is not one "
				  "of the %" PRIu32 " slots of %" PRIu64 " bytes", rd->slot,
				  rd->slot_offset, dev->slots, dev->slot_bytes);
			return -EPROTO;
		}
	} else if (__builtin_add_overflow(rd->slot_offset, c->welcome.slot_bytes, &end) ||
		   end > c->arena_bytes) {
		set_error(c, "bad READY: slot at offset %" PRIu64 " does not fit the arena of %zu bytes",
			  rd->slot_offset, c->arena_bytes);
		return -EPROTO;
	}
	if (rd->rows == 0 || rd->rows > c->welcome.batch_size) {
		set_error(c, "bad READY: %" PRIu32 " rows, batch_size %" PRIu32, rd->rows,
			  c->welcome.batch_size);
		return -EPROTO;
	}
	/* ldr_sample_index divides by n - epoch_offset and reads rank-local
	 * indices first..first+rows-1: both must name real samples. */
	uint64_t first_end;
	if (rd->epoch_offset >= c->welcome.n_samples ||
	    __builtin_add_overflow(rd->first, (uint64_t)rd->rows, &first_end) ||
	    first_end > sampler_rank_samples(&c->sampler, rd->epoch_offset)) {
		set_error(c, "bad READY: rows %" PRIu64 "..+%" PRIu32 " of the segment at %" PRIu64
			  " are outside the rank's share", rd->first, rd->rows, rd->epoch_offset);
		return -EPROTO;
	}
	if (find_held_slot(c, rd->slot)) {
		set_error(c, "bad READY: slot %" PRIu32 " is still held by this client", rd->slot);
		return -EPROTO;
	}
	return 0;
}

int ldr_next(struct ldr_client *c, struct ldr_batch *b, int timeout_ms)
{
	if (c->failed)
		return c->failed;
	if (!c->attached) {
		set_error(c, "not attached");
		return -EINVAL;
	}
	if (c->n_held >= c->depth) {
		set_error(c, "%" PRIu32 " batches held, the depth is %" PRIu32 ": release one first",
			  c->n_held, c->depth);
		return -EBUSY;
	}
	struct proto_msg *msg = &c->msg;
	int r = recv_frame(c, timeout_ms, NULL);
	if (r == -ETIMEDOUT)
		set_error(c, "no batch within %d ms", timeout_ms);
	if (r == -ETIMEDOUT || r == -EINTR)
		return r; /* nothing consumed: the caller may wait again */
	if (r < 0)
		return fail(c, r);
	if (msg->hdr.type == PROTO_ERROR)
		return fail(c, daemon_error(c));
	if (msg->hdr.type == PROTO_BYE) {
		set_error(c, "daemon closed the connection");
		return fail(c, -ECONNRESET);
	}
	if (msg->hdr.type != PROTO_READY) {
		set_error(c, "unexpected %s frame from the daemon", proto_type_name(msg->hdr.type));
		return fail(c, -EPROTO);
	}
	const struct proto_ready *rd = &msg->u.ready;
	r = check_ready(c, rd);
	if (r < 0)
		return fail(c, r);

	struct held_batch *hb = NULL;
	for (uint32_t i = 0; i < c->depth && !hb; i++)
		if (!c->held[i].used)
			hb = &c->held[i];
	*hb = (struct held_batch){
		.used = true, .seq = rd->seq, .epoch = rd->epoch, .epoch_offset = rd->epoch_offset,
		.first = rd->first, .slot = rd->slot, .generation = rd->generation,
		.rows = rd->rows, .last = (rd->flags & PROTO_READY_LAST_IN_EPOCH) != 0,
	};
	c->n_held++;
	c->next_seq++;

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
	return 0;
}

/* The held batch b names, or NULL with the reason set. */
static struct held_batch *held_batch(struct ldr_client *c, const struct ldr_batch *b)
{
	if (!c->attached) {
		set_error(c, "not attached");
		return NULL;
	}
	struct held_batch *hb = find_held_slot(c, b->priv_slot);
	if (!hb || hb->generation != b->priv_generation || hb->seq != b->seq) {
		set_error(c, "batch %" PRIu64 " (slot %" PRIu32 ") is not held by this client",
			  b->seq, b->priv_slot);
		return NULL;
	}
	return hb;
}

static int device_only(struct ldr_client *c, const char *call)
{
	if (c->ring)
		return 0;
	set_error(c, "%s: the client is not attached with device delivery", call);
	return -EINVAL;
}

int ldr_stream_wait(struct ldr_client *c, const struct ldr_batch *b, void *cuda_stream)
{
	struct held_batch *hb = held_batch(c, b);
	if (!hb)
		return -EINVAL;
	int r = device_only(c, "ldr_stream_wait");
	return r < 0 ? r : device_wait(c->ring, hb->slot, cuda_stream, c->error, sizeof c->error);
}

int ldr_copy_to_host(struct ldr_client *c, const struct ldr_batch *b, unsigned tensor, void *dst)
{
	struct held_batch *hb = held_batch(c, b);
	if (!hb)
		return -EINVAL;
	if (tensor >= b->n_tensors) {
		set_error(c, "tensor %u: the batch has %u", tensor, b->n_tensors);
		return -EINVAL;
	}
	const struct ldr_tensor *t = &b->tensors[tensor];
	if (!c->ring) {
		memcpy(dst, t->data, t->bytes);
		return 0;
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

const char *ldr_device_uuid(const struct ldr_client *c)
{
	return c ? c->device_uuid : "";
}

int ldr_release(struct ldr_client *c, const struct ldr_batch *b)
{
	return ldr_release_stream(c, b, NULL);
}

int ldr_release_stream(struct ldr_client *c, const struct ldr_batch *b, void *cuda_stream)
{
	return ldr_release_streams(c, b, &cuda_stream, 1);
}

int ldr_release_streams(struct ldr_client *c, const struct ldr_batch *b, void *const *cuda_streams,
			unsigned n)
{
	struct held_batch *hb = held_batch(c, b);
	if (!hb)
		return -EINVAL;
	if (n == 0) {
		set_error(c, "ldr_release_streams: no stream given");
		return -EINVAL;
	}
	/* The released event is recorded before RELEASE goes out: the daemon's
	 * next copy into the slot waits for it. A failed record keeps the batch
	 * held (the slot is not known to be free). */
	if (c->ring) {
		int r = device_release(c->ring, hb->slot, cuda_streams, n, c->error, sizeof c->error);
		if (r < 0)
			return r;
	}
	/* The caller is done with the batch whether or not the daemon still
	 * listens, so the position advances before the send. */
	if (!c->released_any || hb->seq > c->position_seq) {
		position_after_batch(c->welcome.seed, c->welcome.n_samples, c->welcome.world,
				     hb->epoch, hb->epoch_offset, hb->first, hb->rows, hb->last,
				     &c->position);
		c->position_seq = hb->seq;
		c->released_any = true;
	}
	struct proto_msg *msg = &c->msg; /* only the fields RELEASE uses: the union is 64 KiB */
	msg->hdr = (struct proto_header){.type = PROTO_RELEASE};
	msg->u.release = (struct proto_release){
		.seq = hb->seq, .slot = hb->slot, .generation = hb->generation,
	};
	hb->used = false;
	c->n_held--;
	if (c->failed)
		return c->failed;
	int r = send_frame(c, "RELEASE");
	return r < 0 ? fail(c, r) : 0;
}

uint64_t ldr_sample_index(const struct ldr_client *c, const struct ldr_batch *b, unsigned row)
{
	/* No error channel: UINT64_MAX for what names no sample. */
	if (!c || !c->attached || row >= b->rows || b->priv_epoch_offset >= c->welcome.n_samples)
		return UINT64_MAX;
	return sampler_sample(&c->sampler, b->epoch, b->priv_epoch_offset, b->priv_first + row);
}

int ldr_position_after(struct ldr_client *c, const struct ldr_batch *b, char *buf, size_t cap)
{
	if (cap)
		buf[0] = '\0';
	struct held_batch *hb = held_batch(c, b);
	if (!hb)
		return -EINVAL;
	struct position p;
	position_after_batch(c->welcome.seed, c->welcome.n_samples, c->welcome.world, hb->epoch,
			     hb->epoch_offset, hb->first, hb->rows, hb->last, &p);
	return position_format(&p, buf, cap);
}

size_t ldr_sizeof_batch(void)
{
	return sizeof(struct ldr_batch);
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

const char *ldr_error(const struct ldr_client *c)
{
	return c ? c->error : "out of memory";
}

void ldr_close(struct ldr_client *c)
{
	if (!c)
		return;
	/* BYE tells the daemon our IPC handles are closed: its ring can go. */
	device_close(c->ring);
	if (c->sock >= 0 && c->attached && !c->failed) {
		memset(&c->msg, 0, sizeof c->msg);
		c->msg.hdr.type = PROTO_BYE;
		(void)wire_send(c->sock, &c->msg, -1); /* best effort: closing says the same */
	}
	if (c->arena)
		munmap((void *)c->arena, c->arena_bytes);
	if (c->sock >= 0)
		close(c->sock);
	free(c->held);
	free(c);
}

/* One control session: sends the request frame `type` (no payload) and
 * returns the STATUS text that answers it. */
static int control_request(const char *socket_path, uint16_t type, char **text, char *err,
			   size_t err_cap)
{
	struct ldr_client *c = client_new(); /* one frame buffer and error text */
	int r;
	*text = NULL;
	if (!c) {
		if (err && err_cap)
			snprintf(err, err_cap, "out of memory");
		return -ENOMEM;
	}
	r = connect_socket(c, socket_path);
	if (r < 0)
		goto free_client;
	memset(&c->msg, 0, sizeof c->msg);
	c->msg.hdr.type = type;
	c->msg.hdr.request_id = 1;
	r = send_frame(c, proto_type_name(type));
	if (r == 0)
		r = recv_frame(c, CLIENT_STATUS_TIMEOUT_MS, NULL);
	if (r < 0)
		goto free_client;
	if (c->msg.hdr.type == PROTO_ERROR) {
		r = daemon_error(c);
		goto free_client;
	}
	if (c->msg.hdr.type != PROTO_STATUS || c->msg.hdr.request_id != 1 ||
	    c->msg.u.status.text_len > PROTO_STATUS_TEXT_MAX) {
		set_error(c, "bad answer to %s: %s", proto_type_name(type),
			  proto_type_name(c->msg.hdr.type));
		r = -EPROTO;
		goto free_client;
	}
	*text = strndup(c->msg.u.status.text, c->msg.u.status.text_len);
	if (!*text) {
		set_error(c, "out of memory");
		r = -ENOMEM;
	}
free_client:
	if (c->sock >= 0)
		close(c->sock);
	if (r < 0 && err && err_cap)
		snprintf(err, err_cap, "%s", c->error);
	free(c);
	return r;
}

int ldr_status(const char *socket_path, char **text, char *err, size_t err_cap)
{
	return control_request(socket_path, PROTO_STATUS_REQ, text, err, err_cap);
}

int ldr_reload(const char *socket_path, char **text, char *err, size_t err_cap)
{
	return control_request(socket_path, PROTO_RELOAD_REQ, text, err, err_cap);
}
