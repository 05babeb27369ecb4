/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client: the client library's connection, attach and handle
 * (client_impl.h says how the library's files divide the work).
 *
 * Beyond the header's list, an interrupted ldr_attach() (a signal during
 * the wait for WELCOME, -EINTR) fails the handle: the answer to its HELLO
 * is lost.
 */
#include "client_impl.h"
#include "connect_why.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/paths.h"

#define CLIENT_ATTACH_TIMEOUT_MS 60000 /* HELLO answered by then, or the daemon is stuck */
#define CLIENT_DEPTH_MAX 65536 /* sanity cap on a granted depth: it sizes an allocation */

_Static_assert(LDR_TENSORS_MAX == PROTO_TENSORS_MAX, "tensor count limits agree");
_Static_assert(LDR_NDIM_MAX == PROTO_NDIM_MAX, "ndim limits agree");
_Static_assert(sizeof(((struct ldr_tensor *)0)->name) == PROTO_TENSOR_NAME_MAX,
	       "tensor name sizes agree");
_Static_assert((int)LDR_UINT8 == PROTO_DTYPE_UINT8 && (int)LDR_UINT16 == PROTO_DTYPE_UINT16 &&
	       (int)LDR_UINT32 == PROTO_DTYPE_UINT32 && (int)LDR_INT32 == PROTO_DTYPE_INT32 &&
	       (int)LDR_INT64 == PROTO_DTYPE_INT64 && (int)LDR_FLOAT16 == PROTO_DTYPE_FLOAT16 &&
	       (int)LDR_FLOAT32 == PROTO_DTYPE_FLOAT32, "dtype values agree");

int client_error(struct ldr_client *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verrtext(c->error, sizeof c->error, code, fmt, ap);
	va_end(ap);
	return code;
}

/* Thread-safe strerror (GNU strerror_r returns the text to use). */
static const char *client_strerror(int err, char *buf, size_t cap)
{
	return strerror_r(err, buf, cap);
}

/* client_error, then ": " and the text of errno -code. */
__attribute__((format(printf, 3, 4)))
static int client_error_errno(struct ldr_client *c, int code, const char *fmt, ...)
{
	char ebuf[128];
	va_list ap;
	va_start(ap, fmt);
	verrtext(c->error, sizeof c->error, code, fmt, ap);
	va_end(ap);
	size_t len = strlen(c->error);
	return errtext(c->error + len, sizeof c->error - len, code, ": %s",
		       client_strerror(-code, ebuf, sizeof ebuf));
}

int client_fail(struct ldr_client *c, int r)
{
	if (!c->failed)
		c->failed = r;
	return r;
}

struct ldr_client *client_new(void)
{
	struct ldr_client *c = calloc(1, sizeof *c);
	if (c) {
		c->sock = -1;
		c->pagemap_fd = -1;
		c->next_request_id = 1;
	}
	return c;
}

int client_connect_socket(struct ldr_client *c, const char *path)
{
	char def[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int r;
	if (!path) {
		r = paths_client_socket(def, sizeof def);
		if (r < 0)
			return client_error(c, r, "the default socket path is too long: set LOADERD_SOCKET");
		path = def;
	}
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	if (len == 0 || len >= sizeof addr.sun_path)
		return client_error(c, len ? -ENAMETOOLONG : -EINVAL, "socket path \"%s\" is %s", path,
				    len ? "too long" : "empty");
	memcpy(addr.sun_path, path, len + 1);
	memcpy(c->socket_path, path, len + 1);
	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->sock < 0)
		return client_error_errno(c, -errno, "socket");
	if (connect(c->sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
		r = client_error_errno(c, -errno, "connect %s", path);
		close(c->sock);
		c->sock = -1;
		size_t at = strlen(c->error);
		if (at + 2 < sizeof c->error) {
			memcpy(c->error + at, ": ", 3);
			connect_why("/proc", path, path != def, r, c->error + at + 2,
				    sizeof c->error - at - 2);
			if (c->error[at + 2] == '\0')
				c->error[at] = '\0';
		}
		return r;
	}
	return 0;
}

int client_recv_frame(struct ldr_client *c, int timeout_ms, int *fd_out)
{
	char why[256] = "";
	char ebuf[128];
	struct pollfd pfd = { .fd = c->sock, .events = POLLIN };
	int fd = -1, r = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
	if (r < 0) {
		r = -errno;
		return client_error(c, r, "%s", r == -EINTR ? "interrupted by a signal" :
				    client_strerror(-r, ebuf, sizeof ebuf));
	}
	if (r == 0)
		return client_error(c, -ETIMEDOUT, "no answer from the daemon within %d ms", timeout_ms);
	r = wire_recv(c->sock, &c->msg, &fd, why, sizeof why);
	/* A daemon that closed while our frames (RELEASEs) were unread by it
	 * leaves an error on our end, reported once, before the frames it
	 * sent last (its ERROR saying why): read on. At the end of the queue
	 * the read finds the close and does not block. */
	if (r == -ECONNRESET)
		r = wire_recv(c->sock, &c->msg, &fd, why, sizeof why);
	if (r == -ECONNRESET)
		return client_error(c, r, "daemon closed the connection");
	if (r == -EBADMSG || r == -EPROTONOSUPPORT || r == -EMSGSIZE || r == -EPROTO)
		return client_error(c, -EPROTO, "bad frame from the daemon: %s",
				    why[0] ? why : client_strerror(-r, ebuf, sizeof ebuf));
	if (r < 0)
		return client_error_errno(c, r, "receive");
	if (fd_out)
		*fd_out = fd;
	else if (fd >= 0)
		close(fd);
	return 0;
}

int client_daemon_error(struct ldr_client *c)
{
	const struct proto_error *e = &c->msg.u.error;
	return client_error(c, e->code > 0 && e->code < 4096 ? -e->code : -EPROTO, "%s", e->text);
}

int client_send_frame(struct ldr_client *c, const char *what)
{
	int r = wire_send(c->sock, &c->msg, -1);
	if (r == -EPIPE || r == -ECONNRESET) {
		for (int i = 0; i < 1024; i++) { /* finite: nothing more is coming */
			if (client_recv_frame(c, 0, NULL) < 0)
				break;
			if (c->msg.hdr.type == PROTO_ERROR)
				return client_daemon_error(c);
		}
		return client_error(c, -ECONNRESET, "daemon closed the connection");
	}
	return r < 0 ? client_error_errno(c, r, "send %s", what) : r;
}

int ldr_connect(const char *socket_path, struct ldr_client **out)
{
	struct ldr_client *c = client_new();
	*out = c;
	if (!c)
		return -ENOMEM;
	int r = client_connect_socket(c, socket_path);
	return r < 0 ? client_fail(c, r) : 0;
}

/* bytes per row of t (dtype size x the non-batch dims), or 0 on overflow
 * or an invalid description. */
static uint64_t client_tensor_row_bytes(const struct proto_tensor *t)
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
static int client_check_welcome(struct ldr_client *c, const struct proto_welcome *w,
				uint32_t rank, uint32_t world)
{
	if (w->arena_bytes == 0 || w->arena_bytes > SIZE_MAX || w->slot_bytes == 0 ||
	    w->slot_bytes > w->arena_bytes || w->n_samples == 0 || w->batch_size == 0 ||
	    w->offset > w->n_samples || w->depth == 0 || w->depth > CLIENT_DEPTH_MAX ||
	    w->shuffle > 1 || w->drop_last > 1 || w->n_tensors == 0 ||
	    w->n_tensors > PROTO_TENSORS_MAX)
		return client_error(c, -EPROTO, "bad WELCOME: arena %" PRIu64 " bytes, slot %" PRIu64
				    " bytes, %" PRIu64 " samples, batch_size %" PRIu32 ", offset %" PRIu64
				    ", depth %" PRIu32 ", shuffle %" PRIu32 ", drop_last %" PRIu32
				    ", %" PRIu32 " tensors", w->arena_bytes, w->slot_bytes, w->n_samples,
				    w->batch_size, w->offset, w->depth, w->shuffle, w->drop_last,
				    w->n_tensors);
	if (w->rank != rank || w->world != world)
		return client_error(c, -EPROTO, "bad WELCOME: rank %" PRIu32 " world %" PRIu32
				    ", asked for %" PRIu32 "/%" PRIu32, w->rank, w->world, rank, world);
	for (uint32_t i = 0; i < w->n_tensors; i++) {
		const struct proto_tensor *t = &w->tensors[i];
		uint64_t row = client_tensor_row_bytes(t), total, end;
		if (t->name[0] == '\0' || row == 0 || t->shape[0] != w->batch_size)
			return client_error(c, -EPROTO, "bad WELCOME: tensor %" PRIu32
					    " has an invalid description", i);
		if (__builtin_mul_overflow(row, (uint64_t)w->batch_size, &total) ||
		    __builtin_add_overflow(t->offset, total, &end) || end > w->slot_bytes)
			return client_error(c, -EPROTO, "bad WELCOME: tensor \"%s\" (offset %" PRIu64
					    ", %" PRIu64 " bytes per row) does not fit a slot of %" PRIu64
					    " bytes", t->name, t->offset, row, w->slot_bytes);
		c->tensor_row_bytes[i] = row;
	}
	return 0;
}

/* Maps the arena fd from WELCOME after checking its size; closes the fd.
 * writable: MAP_PRIVATE with PROT_WRITE, which the read-only descriptor
 * and the arena's F_SEAL_FUTURE_WRITE both allow (they refuse only shared
 * writable mappings): writes copy pages into this process, never into the
 * arena. */
static int client_map_arena(struct ldr_client *c, int fd, uint64_t arena_bytes, bool writable)
{
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) < 0) {
		r = client_error_errno(c, -errno, "fstat of the arena fd");
		goto close_fd;
	}
	if (st.st_size < 0 || (uint64_t)st.st_size != arena_bytes) {
		r = client_error(c, -EPROTO, "bad WELCOME: arena fd has %lld bytes, WELCOME says %" PRIu64,
				 (long long)st.st_size, arena_bytes);
		goto close_fd;
	}
	void *base = mmap(NULL, (size_t)arena_bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
			  writable ? MAP_PRIVATE : MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		r = client_error_errno(c, -errno, "mmap of the arena (%" PRIu64 " bytes%s)", arena_bytes,
				       writable ? ", private and writable" : "");
		goto close_fd;
	}
	c->arena = base;
	c->arena_private = writable;
	/* Which pages of a slot were written (batch.c); without it, every page
	 * of a released slot is dropped. */
	if (writable)
		c->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	c->arena_bytes = (size_t)arena_bytes;
close_fd:
	close(fd);
	return r;
}

/* The job key of a declared pipeline (ldr_attach_opts.job) into job
 * (PROTO_JOB_MAX bytes). */
static int client_job_key(struct ldr_client *c, const struct ldr_attach_opts *o, uint32_t world,
			  char *job)
{
	const char *run = getenv("TORCHELASTIC_RUN_ID"), *slurm = getenv("SLURM_JOB_ID");
	const char *step = getenv("SLURM_STEP_ID");
	int n;
	if (o->job && o->job[0])
		n = snprintf(job, PROTO_JOB_MAX, "%s", o->job);
	else if (run && run[0])
		n = snprintf(job, PROTO_JOB_MAX, "torchelastic:%s", run);
	else if (slurm && slurm[0])
		n = snprintf(job, PROTO_JOB_MAX, "slurm:%s.%s", slurm, step && step[0] ? step : "0");
	else if (world == 1)
		n = snprintf(job, PROTO_JOB_MAX, "process:%ld:%d", (long)gethostid(), (int)getpid());
	else
		return client_error(c, -EINVAL, "a pipeline declared by rank %u of %u needs the job's "
				    "key, for its ranks to share it: pass job= (ldr_attach_opts.job), or "
				    "run under torchrun ($TORCHELASTIC_RUN_ID) or Slurm ($SLURM_JOB_ID)",
				    o->rank, world);
	if (n <= 0 || n >= PROTO_JOB_MAX)
		return client_error(c, -EINVAL, "job key is longer than %d bytes", PROTO_JOB_MAX - 1);
	long bad = proto_word_bad_byte(job);
	if (bad >= 0)
		return client_error(c, -EINVAL, "job key: byte %ld is 0x%02x; only printable ASCII "
				    "without spaces (0x21..0x7e) may be used", bad,
				    (unsigned char)job[bad]);
	return 0;
}

/* Client-side checks of what proto_encode would refuse, with a reason. */
static int client_check_opts(struct ldr_client *c, const struct ldr_attach_opts *o, uint32_t world)
{
	if (!o)
		return client_error(c, -EINVAL, "no attach options");
	bool named = o->pipeline && o->pipeline[0], declared = o->declaration && o->declaration[0];
	if (named == declared)
		return client_error(c, -EINVAL, "exactly one of a pipeline name and a declaration "
				    "(ldr_attach_opts.pipeline, .declaration)");
	if (declared && strlen(o->declaration) >= PROTO_DECLARE_MAX)
		return client_error(c, -EINVAL, "the declaration is longer than %d bytes",
				    PROTO_DECLARE_MAX - 1);
	for (size_t i = 0; declared && o->declaration[i]; i++) {
		unsigned char ch = (unsigned char)o->declaration[i];
		if ((ch < 0x20 || ch > 0x7e) && ch != '\n' && ch != '\t')
			return client_error(c, -EINVAL, "the declaration: byte %zu is 0x%02x; only "
					    "printable ASCII, tabs and newlines may be used", i, ch);
	}
	if (named && strlen(o->pipeline) >= PROTO_NAME_MAX)
		return client_error(c, -EINVAL, "pipeline name must be 1..%d bytes", PROTO_NAME_MAX - 1);
	if (o->rank >= world)
		return client_error(c, -EINVAL, "rank %u is not below world %" PRIu32, o->rank, world);
	if (o->flags & ~LDR_ATTACH_WRITABLE)
		return client_error(c, -EINVAL, "attach flags 0x%x: unknown bits 0x%x", o->flags,
				    o->flags & ~LDR_ATTACH_WRITABLE);
	if (o->client_name && strlen(o->client_name) >= PROTO_NAME_MAX)
		return client_error(c, -EINVAL, "client name is longer than %d bytes", PROTO_NAME_MAX - 1);
	if (o->resume && strlen(o->resume) >= PROTO_TOKEN_MAX)
		return client_error(c, -EINVAL, "resume token is longer than %d bytes", PROTO_TOKEN_MAX - 1);
	if (o->split && strlen(o->split) >= PROTO_SPLIT_MAX)
		return client_error(c, -EINVAL, "split name is longer than %d bytes", PROTO_SPLIT_MAX - 1);
	bool grouped = o->group_size > 1;
	if (grouped && o->group_size > PROTO_GROUP_SIZE_MAX)
		return client_error(c, -EINVAL, "group size %u is over %d", o->group_size,
				    PROTO_GROUP_SIZE_MAX);
	if (grouped && (!o->group || !o->group[0] || strlen(o->group) >= PROTO_GROUP_MAX))
		return client_error(c, -EINVAL, "a group of %u needs a group key of 1..%d bytes",
				    o->group_size, PROTO_GROUP_MAX - 1);
	/* The daemon's decoder refuses other bytes in these two (PROTOCOL.md, 5.1). */
	const char *word = named ? o->pipeline : "", *what = "pipeline name";
	long bad = proto_word_bad_byte(word);
	if (bad < 0 && o->resume) {
		word = o->resume;
		what = "resume token";
		bad = proto_word_bad_byte(word);
	}
	if (bad < 0 && o->split) {
		word = o->split;
		what = "split name";
		bad = proto_word_bad_byte(word);
	}
	if (bad < 0 && grouped) {
		word = o->group;
		what = "group key";
		bad = proto_word_bad_byte(word);
	}
	if (bad >= 0)
		return client_error(c, -EINVAL, "%s: byte %ld is 0x%02x; only printable ASCII without "
				    "spaces (0x21..0x7e) may be used", what, bad, (unsigned char)word[bad]);
	return 0;
}

/* The decoder of a client the daemon lets decode (decode.h). */
static int client_open_decoder(struct ldr_client *c, const struct proto_welcome *w)
{
	struct decoder_config cfg = {
		.device = c->device_ordinal, .arena = c->arena, .arena_bytes = c->arena_bytes,
		.staging_bytes = w->slot_bytes, .pipeline = w->pipeline,
		.memory_bytes = w->decode_memory, .batch_size = w->batch_size,
		.slots = w->device.slots, .slot_bytes = w->device.slot_bytes,
		.n_tensors = w->n_tensors,
	};
	for (uint32_t i = 0; i < w->n_tensors; i++) {
		cfg.tensor_offset[i] = w->tensors[i].offset;
		cfg.tensor_row_bytes[i] = c->tensor_row_bytes[i];
	}
	char why[CLIENT_ERROR_MAX - 200];
	int r = decoder_open(&cfg, &c->decoder, why, sizeof why);
	if (r < 0)
		return client_error(c, r, "this process could not start decoding its GPU's JPEGs, which "
				    "the daemon leaves to it: %s (LOADERD_CLIENT_DECODE=0 before attaching "
				    "has the daemon decode them)", why);
	return 0;
}

int ldr_set_attach_timeout(struct ldr_client *c, int timeout_ms)
{
	if (!c)
		return -EINVAL;
	c->attach_timeout_ms = timeout_ms;
	return 0;
}

int ldr_attach(struct ldr_client *c, const struct ldr_attach_opts *opts)
{
	if (c->failed)
		return c->failed;
	if (c->attached)
		return client_error(c, -EALREADY, "already attached");
	uint32_t world = opts && opts->world ? opts->world : 1;
	int r = client_check_opts(c, opts, world);
	if (r < 0)
		return r;
	char job[PROTO_JOB_MAX] = "";
	bool declared = opts->declaration && opts->declaration[0];
	if (declared && (r = client_job_key(c, opts, world, job)) < 0)
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
		/* This process decodes its GPU's JPEGs when it can (decode.h) */
		if (decoder_available(c->decode_why_not, sizeof c->decode_why_not))
			h->flags |= PROTO_HELLO_DECODE;
	}
	h->rank = opts->rank;
	h->world = world;
	h->depth = opts->depth;
	if (declared) {
		memcpy(h->job, job, sizeof(h->job));
		snprintf(h->declaration, sizeof h->declaration, "%s", opts->declaration);
	} else {
		snprintf(h->pipeline, sizeof h->pipeline, "%s", opts->pipeline);
	}
	snprintf(h->client_name, sizeof h->client_name, "%s", opts->client_name ? opts->client_name : "");
	snprintf(h->resume, sizeof h->resume, "%s", opts->resume ? opts->resume : "");
	snprintf(h->split, sizeof h->split, "%s", opts->split ? opts->split : "");
	h->group_size = opts->group_size > 1 ? opts->group_size : 1;
	if (h->group_size > 1)
		snprintf(h->group, sizeof h->group, "%s", opts->group);
	uint32_t h_group_size = h->group_size;
	bool asked_decode = (h->flags & PROTO_HELLO_DECODE) != 0;
	uint64_t request_id = msg->hdr.request_id;
	r = client_send_frame(c, "HELLO");
	if (r < 0)
		return client_fail(c, r);

	int fd = -1;
	int timeout_ms = c->attach_timeout_ms ? c->attach_timeout_ms : CLIENT_ATTACH_TIMEOUT_MS;
	r = client_recv_frame(c, timeout_ms, &fd);
	if (r == -ETIMEDOUT) { /* a daemon still starting holds the HELLO: say what it does */
		char starting[CLIENT_ERROR_MAX - 64];
		client_starting_text(c->socket_path, starting, sizeof starting);
		if (starting[0])
			client_error(c, r, "%s; no answer to HELLO within %d ms", starting, timeout_ms);
	}
	if (r < 0)
		return client_fail(c, r);
	if (msg->hdr.type == PROTO_ERROR) {
		if (fd >= 0)
			close(fd);
		return client_fail(c, client_daemon_error(c));
	}
	if (msg->hdr.type != PROTO_WELCOME || msg->hdr.request_id != request_id) {
		r = client_error(c, -EPROTO, "bad answer to HELLO: %s for request %" PRIu64,
				 proto_type_name(msg->hdr.type), msg->hdr.request_id);
		goto close_fd;
	}
	const struct proto_welcome *w = &msg->u.welcome;
	if (w->delivery != (device ? PROTO_DELIVERY_DEVICE : PROTO_DELIVERY_HOST) ||
	    (fd < 0) != (device && !w->decode) || (w->decode && !asked_decode)) {
		r = client_error(c, -EPROTO, "bad WELCOME: %s delivery%s %s an arena fd, asked for %s "
				 "delivery%s", w->delivery == PROTO_DELIVERY_DEVICE ? "device" : "host",
				 w->decode ? " with decoding" : "", fd < 0 ? "without" : "with",
				 device ? "device" : "host", asked_decode ? " with decoding" : "");
		goto close_fd;
	}
	r = client_check_welcome(c, w, opts->rank, world);
	if (r < 0)
		goto close_fd;
	c->held = calloc(w->depth, sizeof *c->held);
	if (!c->held) {
		r = client_error(c, -ENOMEM, "out of memory");
		goto close_fd;
	}
	if (device) {
		r = device_open(c->device_ordinal, &w->device, &c->ring, c->error, sizeof c->error);
		gpu_uuid_format(uuid, c->device_uuid);
		if (w->decode) {
			if (r == 0)
				r = client_map_arena(c, fd, w->arena_bytes, false); /* closes fd */
			else
				close(fd);
			if (r == 0)
				r = client_open_decoder(c, w);
		} else if (asked_decode) {
			snprintf(c->decode_why_not, sizeof c->decode_why_not, "pipeline \"%s\": the daemon "
				 "does not leave JPEGs to its GPU for this client (decode = cpu, not an "
				 "image pipeline, or a tensor-parallel group)", w->name);
		}
	} else {
		r = client_map_arena(c, fd, w->arena_bytes,
				     (opts->flags & LDR_ATTACH_WRITABLE) != 0); /* closes fd */
	}
	if (r < 0) {
		free(c->held);
		c->held = NULL;
		return client_fail(c, r);
	}
	c->welcome = *w;
	c->depth = w->depth;
	c->sampler = (struct sampler){
		.n_samples = w->n_samples, .seed = w->seed, .batch_size = w->batch_size,
		.rank = w->rank, .world = w->world, .shuffle = w->shuffle, .drop_last = w->drop_last,
	};
	/* The daemon accepted the name, so it is one of the three. */
	if (!split_from_name(opts->split ? opts->split : "", &c->split))
		c->split = SPLIT_TRAIN;
	c->grouped = h_group_size > 1;
	c->position = (struct position){
		.seed = w->seed, .n_samples = w->n_samples, .epoch = w->epoch, .offset = w->offset,
		.split = c->split, .data = w->data,
	};
	/* The pipeline's name, as the daemon gave it (a declared pipeline's is
	 * the daemon's): a valid one (position.h). */
	snprintf(c->position.pipeline, sizeof c->position.pipeline, "%s", w->name);
	const char *ahead = getenv("LOADERD_CLIENT_READ_AHEAD");
	if (c->decoder && ahead && strcmp(ahead, "1") == 0 && (r = client_ahead_start(c)) < 0)
		return client_fail(c, r);
	c->attached = true;
	c->error[0] = '\0';
	return 0;

close_fd:
	if (fd >= 0)
		close(fd);
	return client_fail(c, r);
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

const char *ldr_device_uuid(const struct ldr_client *c)
{
	return c ? c->device_uuid : "";
}

const char *ldr_error(const struct ldr_client *c)
{
	return c ? c->error : "out of memory";
}

/* A group's member waits for the daemon to close the connection after its
 * BYE (at most LEAVE_WAIT_MS): the daemon has then taken it out of its
 * group, so a member attaching again at once (a checkpoint restored on
 * every rank) finds a new group, not the old one full. Frames still on
 * the way are read and dropped. */
#define LEAVE_WAIT_MS 5000

static void client_wait_leave(int sock)
{
	char scratch[512];
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ssize_t n = recv(sock, scratch, sizeof scratch, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return; /* closed by the daemon, or gone */
		if (n > 0)
			continue;
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long spent_ms = (long)(now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (spent_ms >= LEAVE_WAIT_MS)
			return;
		struct pollfd p = {.fd = sock, .events = POLLIN};
		(void)poll(&p, 1, (int)(LEAVE_WAIT_MS - spent_ms));
	}
}

void ldr_close(struct ldr_client *c)
{
	if (!c)
		return;
	/* BYE tells the daemon our IPC handles are closed: its ring can go.
	 * The decoder writes into the ring: it stops first, after the thread
	 * that queues work for it. */
	client_ahead_stop(c);
	decoder_close(c->decoder);
	device_close(c->ring);
	if (c->sock >= 0 && c->attached && !c->failed) {
		memset(&c->msg, 0, sizeof c->msg);
		c->msg.hdr.type = PROTO_BYE;
		if (wire_send(c->sock, &c->msg, -1) >= 0 && c->grouped) /* best effort: closing says the same */
			client_wait_leave(c->sock);
	}
	if (c->arena)
		munmap((void *)c->arena, c->arena_bytes);
	if (c->pagemap_fd >= 0)
		close(c->pagemap_fd);
	if (c->sock >= 0)
		close(c->sock);
	free(c->held);
	free(c);
}
