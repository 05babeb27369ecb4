/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the client library's edges (client/loaderd.h) that need no
 * daemon: connecting to a missing path or to something that is not a
 * socket, refusing bad attach options before anything is sent, checking
 * every number the daemon sends, and position tokens' fields.
 *
 * The frames a correct daemon never sends (a READY out of sequence or
 * outside the arena, an arena fd of the wrong size) are written here by a
 * scripted peer on a real listening socket, with the real proto/wire code
 * and a real memfd as the arena. The peer is single-threaded: it queues its
 * frames on the accepted connection before the library reads them, so no
 * test waits for anything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/sampler.h"
#include "loaderd.h"
#include "proto/wire.h"

#define SLOT_BYTES 4096u
#define ARENA_BYTES (4 * SLOT_BYTES) /* a header page, then three slots */
#define N_SAMPLES 10u
#define BATCH 4u
#define SEED 5u
#define RECORD 100u

struct peer {
	char dir[64];
	char path[96];
	int listen_fd;
	int conn;           /* the accepted connection: the daemon's side */
	struct ldr_client *c;
	int arena_fd;
	uint8_t *arena;
};

static int peer_setup(void **state)
{
	struct peer *p = calloc(1, sizeof *p);
	assert_non_null(p);
	snprintf(p->dir, sizeof p->dir, "/tmp/ldr-client-XXXXXX");
	assert_non_null(mkdtemp(p->dir));
	snprintf(p->path, sizeof p->path, "%s/sock", p->dir);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", p->path);
	p->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(p->listen_fd >= 0);
	assert_int_equal(bind(p->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
	assert_int_equal(listen(p->listen_fd, 4), 0);
	assert_int_equal(ldr_connect(p->path, &p->c), 0);
	p->conn = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(p->conn >= 0);

	p->arena_fd = memfd_create("arena", MFD_CLOEXEC);
	assert_true(p->arena_fd >= 0);
	assert_int_equal(ftruncate(p->arena_fd, ARENA_BYTES), 0);
	p->arena = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, p->arena_fd, 0);
	assert_true(p->arena != MAP_FAILED);
	for (size_t i = 0; i < ARENA_BYTES; i++)
		p->arena[i] = (uint8_t)(i * 7 + i / 251);
	*state = p;
	return 0;
}

static int peer_teardown(void **state)
{
	struct peer *p = *state;
	ldr_close(p->c);
	if (p->conn >= 0)
		close(p->conn);
	close(p->listen_fd);
	munmap(p->arena, ARENA_BYTES);
	close(p->arena_fd);
	unlink(p->path);
	rmdir(p->dir);
	free(p);
	return 0;
}

/* The identity the tokens of these tests name: pipeline "p", WELCOME's data. */
#define DATA 0x3f2a09c1d4e5b677ull
#define TOKEN "ldr2:p:3f2a09c1d4e5b677:"

static struct proto_welcome welcome_msg(void)
{
	struct proto_welcome w = {
		.session = 1, .arena_bytes = ARENA_BYTES, .slot_bytes = SLOT_BYTES,
		.n_samples = N_SAMPLES, .seed = SEED, .epoch = 0, .offset = 0,
		.batch_size = BATCH, .rank = 0, .world = 1, .depth = 2, .shuffle = 1,
		.drop_last = 0, .n_tensors = 2, .data = DATA, .name = "p",
	};
	w.tensors[0] = (struct proto_tensor){ .name = "data", .dtype = PROTO_DTYPE_UINT8,
					      .ndim = 2, .shape = { BATCH, RECORD }, .offset = 0 };
	w.tensors[1] = (struct proto_tensor){ .name = "label", .dtype = PROTO_DTYPE_INT64,
					      .ndim = 1, .shape = { BATCH }, .offset = 512 };
	return w;
}

/* Queues WELCOME (answering the library's first request) with fd attached. */
static void send_welcome(struct peer *p, const struct proto_welcome *w, int fd)
{
	static struct proto_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.hdr.type = PROTO_WELCOME;
	msg.hdr.request_id = 1;
	msg.u.welcome = *w;
	assert_int_equal(wire_send(p->conn, &msg, fd), 0);
}

static void send_ready(struct peer *p, uint64_t seq, uint64_t batch, uint32_t slot,
		       uint32_t rows, uint32_t flags)
{
	static struct proto_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.hdr.type = PROTO_READY;
	msg.u.ready = (struct proto_ready){
		.seq = seq, .epoch = 0, .epoch_offset = 0, .batch = batch, .first = batch * BATCH,
		.slot_offset = (uint64_t)(slot + 1) * SLOT_BYTES, .slot = slot,
		.generation = 10 + slot, .rows = rows, .flags = flags,
	};
	assert_int_equal(wire_send(p->conn, &msg, -1), 0);
}

static void send_error(struct peer *p, int code, const char *text)
{
	static struct proto_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.hdr.type = PROTO_ERROR;
	msg.hdr.request_id = 1;
	msg.u.error.code = code;
	snprintf(msg.u.error.text, sizeof msg.u.error.text, "%s", text);
	assert_int_equal(wire_send(p->conn, &msg, -1), 0);
}

/* The next frame the library sent, which must be of type `type`. */
static const struct proto_msg *peer_recv(struct peer *p, uint32_t type)
{
	static struct proto_msg msg;
	char why[256];
	int fd;
	assert_int_equal(wire_recv(p->conn, &msg, &fd, why, sizeof why), 0);
	assert_int_equal(fd, -1);
	assert_int_equal(msg.hdr.type, type);
	return &msg;
}

static void attach_ok(struct peer *p, const struct proto_welcome *w)
{
	send_welcome(p, w, p->arena_fd);
	struct ldr_attach_opts o = { .pipeline = "p", .depth = 3, .client_name = "unit",
				     .resume = TOKEN "5:10:0:0" };
	assert_int_equal(ldr_attach(p->c, &o), 0);
	const struct proto_hello *h = &peer_recv(p, PROTO_HELLO)->u.hello;
	assert_int_equal(h->delivery, PROTO_DELIVERY_HOST);
	assert_int_equal(h->rank, 0);
	assert_int_equal(h->world, 1); /* world 0 means 1 */
	assert_int_equal(h->depth, 3);
	assert_string_equal(h->pipeline, "p");
	assert_string_equal(h->client_name, "unit");
	assert_string_equal(h->resume, TOKEN "5:10:0:0");
}

static void assert_position(struct peer *p, const char *expect)
{
	char token[LDR_POSITION_MAX];
	assert_int_equal(ldr_position(p->c, token, sizeof token), 0);
	assert_string_equal(token, expect);
}

static void test_connect_missing_path(void **state)
{
	struct ldr_client *c;
	const char *path = "/tmp/ldr-client-no-such-dir/loaderd.sock";
	assert_int_equal(ldr_connect(path, &c), -ENOENT);
	/* the errno's text, then what it means (client/connect_why.h, tested
	 * in test_connect_why.c) */
	const char *want = "connect /tmp/ldr-client-no-such-dir/loaderd.sock: No such file or "
			   "directory: nothing at /tmp/ldr-client-no-such-dir/loaderd.sock;";
	assert_memory_equal(ldr_error(c), want, strlen(want));
	assert_non_null(strstr(ldr_error(c), "This path was given; without one, clients connect to "
				"$LOADERD_SOCKET"));
	struct ldr_attach_opts o = { .pipeline = "p" };
	assert_int_equal(ldr_attach(c, &o), -ENOENT); /* the handle stays failed */
	ldr_close(c);
}

static void test_status_not_a_socket(void **state)
{
	char path[] = "/tmp/ldr-client-file-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	char *text = (char *)1;
	char err[512];
	assert_int_equal(ldr_status(path, &text, err, sizeof err), -ECONNREFUSED);
	assert_null(text);
	assert_non_null(strstr(err, path));
	unlink(path);

	char long_path[200];
	memset(long_path, 'x', sizeof long_path - 1);
	long_path[sizeof long_path - 1] = '\0';
	assert_int_equal(ldr_status(long_path, &text, err, sizeof err), -ENAMETOOLONG);
}

static void test_bad_options_send_nothing(void **state)
{
	struct peer *p = *state;
	struct ldr_attach_opts o = { .pipeline = "p", .rank = 2, .world = 2 };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "rank 2"));
	o = (struct ldr_attach_opts){ .pipeline = "" };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	struct pollfd pfd = { .fd = p->conn, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 0), 0);
	/* Refused options leave the handle usable. */
	struct proto_welcome w = welcome_msg();
	attach_ok(p, &w);
}

static void test_batches_release_position(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	attach_ok(p, &w);
	assert_int_equal(ldr_dataset_size(p->c), N_SAMPLES);
	assert_int_equal(ldr_batch_size(p->c), BATCH);
	assert_int_equal(ldr_batches_in_epoch(p->c, 0), 3);
	assert_position(p, TOKEN "5:10:0:0");

	send_ready(p, 0, 0, 0, BATCH, 0);
	send_ready(p, 1, 1, 1, BATCH, 0);
	send_ready(p, 2, 2, 2, 2, PROTO_READY_LAST_IN_EPOCH);
	struct ldr_batch b0, b1, b2;
	assert_int_equal(ldr_next(p->c, &b0, 1000), 0);
	assert_int_equal(ldr_next(p->c, &b1, 1000), 0);
	assert_int_equal(ldr_next(p->c, &b2, 1000), -EBUSY); /* granted depth is 2 */

	assert_int_equal(b1.seq, 1);
	assert_int_equal(b1.index, 1);
	assert_int_equal(b1.rows, BATCH);
	assert_int_equal(b1.n_tensors, 2);
	assert_string_equal(b1.tensors[0].name, "data");
	assert_int_equal(b1.tensors[0].dtype, LDR_UINT8);
	assert_int_equal(b1.tensors[0].ndim, 2);
	assert_int_equal(b1.tensors[0].shape[0], BATCH);
	assert_int_equal(b1.tensors[0].shape[1], RECORD);
	assert_int_equal(b1.tensors[0].bytes, BATCH * RECORD);
	assert_memory_equal(b1.tensors[0].data, p->arena + 2 * SLOT_BYTES, BATCH * RECORD);
	assert_string_equal(b1.tensors[1].name, "label");
	assert_int_equal(b1.tensors[1].bytes, BATCH * 8);
	assert_memory_equal(b1.tensors[1].data, p->arena + 2 * SLOT_BYTES + 512, BATCH * 8);

	struct sampler s = { .n_samples = N_SAMPLES, .seed = SEED, .batch_size = BATCH,
			     .rank = 0, .world = 1, .shuffle = true };
	for (unsigned r = 0; r < BATCH; r++)
		assert_int_equal(ldr_sample_index(p->c, &b1, r), sampler_sample(&s, 0, 0, 4 + r));
	assert_int_equal(ldr_sample_index(p->c, &b1, BATCH), UINT64_MAX);

	/* Out-of-order release: the position is that of the highest seq. */
	assert_int_equal(ldr_release(p->c, &b1), 0);
	assert_position(p, TOKEN "5:10:0:8");
	assert_int_equal(ldr_release(p->c, &b0), 0);
	assert_position(p, TOKEN "5:10:0:8");
	assert_int_equal(ldr_release(p->c, &b0), -EINVAL);
	const struct proto_release *rel = &peer_recv(p, PROTO_RELEASE)->u.release;
	assert_int_equal(rel->seq, 1);
	assert_int_equal(rel->slot, 1);
	assert_int_equal(rel->generation, 11);
	assert_int_equal(peer_recv(p, PROTO_RELEASE)->u.release.seq, 0);

	assert_int_equal(ldr_next(p->c, &b2, 1000), 0);
	assert_int_equal(b2.rows, 2);
	assert_true(b2.last_in_epoch);
	assert_int_equal(b2.tensors[0].shape[0], 2);
	assert_int_equal(b2.tensors[0].bytes, 2 * RECORD);
	assert_int_equal(ldr_release(p->c, &b2), 0);
	assert_position(p, TOKEN "5:10:1:0");

	struct ldr_batch b3;
	assert_int_equal(ldr_next(p->c, &b3, 0), -ETIMEDOUT);
	send_error(p, EIO, "pipeline \"p\": /data/p.bin: short read");
	assert_int_equal(ldr_next(p->c, &b3, 1000), -EIO);
	assert_string_equal(ldr_error(p->c), "pipeline \"p\": /data/p.bin: short read");
	assert_int_equal(ldr_next(p->c, &b3, 1000), -EIO);
}

/* A daemon's error whose code is one of ldr_next's "call again" codes
 * (ETIMEDOUT, EINTR) comes back as -ECONNABORTED, every time, with the
 * daemon's text: a caller that waits again on -ETIMEDOUT must not spin on
 * a client that has failed. */
static void test_error_not_call_again(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	attach_ok(p, &w);
	struct ldr_batch b;
	assert_int_equal(ldr_next(p->c, &b, 0), -ETIMEDOUT); /* nothing yet: call again */
	send_error(p, ETIMEDOUT, "group \"g\": 1 of its 2 members attached");
	assert_int_equal(ldr_next(p->c, &b, 1000), -ECONNABORTED);
	assert_string_equal(ldr_error(p->c), "group \"g\": 1 of its 2 members attached");
	assert_int_equal(ldr_next(p->c, &b, 0), -ECONNABORTED);
}

static void test_resumed_position(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	w.epoch = 3;
	w.offset = 6;
	attach_ok(p, &w);
	assert_position(p, TOKEN "5:10:3:6");
	assert_int_equal(ldr_batches_in_epoch(p->c, 3), 1); /* 4 samples left */
	assert_int_equal(ldr_batches_in_epoch(p->c, 4), 3);
}

static void test_attach_error(void **state)
{
	struct peer *p = *state;
	send_error(p, ENOENT, "unknown pipeline \"nope\"");
	struct ldr_attach_opts o = { .pipeline = "nope" };
	assert_int_equal(ldr_attach(p->c, &o), -ENOENT);
	assert_string_equal(ldr_error(p->c), "unknown pipeline \"nope\"");
}

/* Queues WELCOME w with fd; ldr_attach refuses it, its text saying `says`. */
static void refused_welcome(struct peer *p, const struct proto_welcome *w, int fd, const char *says)
{
	send_welcome(p, w, fd);
	struct ldr_attach_opts o = { .pipeline = "p" };
	assert_int_equal(ldr_attach(p->c, &o), -EPROTO);
	assert_non_null(strstr(ldr_error(p->c), says));
}

/* Attaches, then queues one READY (batch 0, epoch 0); ldr_next refuses it,
 * its text saying `says`. */
static void refused_ready(struct peer *p, uint64_t seq, uint32_t slot, uint32_t rows,
			  const char *says)
{
	struct proto_welcome w = welcome_msg();
	attach_ok(p, &w);
	send_ready(p, seq, 0, slot, rows, 0);
	struct ldr_batch b;
	assert_int_equal(ldr_next(p->c, &b, 1000), -EPROTO);
	assert_non_null(strstr(ldr_error(p->c), says));
}

static void test_welcome_arena_size_mismatch(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	w.arena_bytes = 2 * ARENA_BYTES;
	refused_welcome(p, &w, p->arena_fd, "arena fd has");
}

static void test_welcome_without_fd(void **state)
{
	struct proto_welcome w = welcome_msg();
	refused_welcome(*state, &w, -1, "without an arena fd");
}

static void test_ready_out_of_sequence(void **state)
{
	refused_ready(*state, 1, 0, BATCH, "seq 1, expected 0");
}

static void test_ready_outside_arena(void **state)
{
	/* slot 3 would start at the arena's end */
	refused_ready(*state, 0, 3, BATCH, "does not fit the arena");
}

static void test_ready_too_many_rows(void **state)
{
	refused_ready(*state, 0, 0, BATCH + 1, "rows");
}

static void test_peer_closed(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	attach_ok(p, &w);
	close(p->conn);
	p->conn = -1;
	struct ldr_batch b;
	assert_int_equal(ldr_next(p->c, &b, 1000), -ECONNRESET);
	assert_string_equal(ldr_error(p->c), "daemon closed the connection");
}

/* ldr_position_parse and ldr_position_format need no daemon: the fields
 * of a token and back, with the parser's reason for a malformed one. */
static void test_position_tokens(void **state)
{
	(void)state;
	struct ldr_position p = { 0 };
	char err[256] = "", token[LDR_POSITION_MAX], small[8];
	assert_int_equal(ldr_sizeof_position(), sizeof(struct ldr_position));
	assert_int_equal(ldr_position_parse(TOKEN "5:10:3:6", &p, err, sizeof err), 0);
	assert_true(p.seed == 5 && p.n_samples == 10 && p.epoch == 3 && p.offset == 6);
	assert_true(p.data == DATA && strcmp(p.pipeline, "p") == 0);
	p.epoch = 4;
	p.offset = 0;
	assert_int_equal(ldr_position_format(&p, token, sizeof token), 0);
	assert_string_equal(token, TOKEN "5:10:4:0");
	assert_int_equal(ldr_position_format(&p, small, sizeof small), -ENOSPC);
	assert_string_equal(small, "");

	assert_int_equal(ldr_position_parse(TOKEN "5:10:4294967296:0", &p, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "EPOCH 4294967296 is not below"));
	assert_int_equal(p.epoch, 4); /* left alone */
	assert_int_equal(ldr_position_parse(TOKEN "5:x:0:0", &p, NULL, 0), -EINVAL);
	assert_int_equal(ldr_position_parse(NULL, &p, err, sizeof err), -EINVAL);

	/* a token of the valid split says so, both ways */
	assert_int_equal(ldr_position_parse(TOKEN "5:10:3:6:valid", &p, err, sizeof err), 0);
	assert_true(p.split == 1 && p.epoch == 3 && p.offset == 6);
	p.split = 2;
	assert_int_equal(ldr_position_format(&p, token, sizeof token), 0);
	assert_string_equal(token, TOKEN "5:10:3:6:test");
	p.split = 3;
	assert_int_equal(ldr_position_format(&p, token, sizeof token), -EINVAL);
	assert_string_equal(token, "");
	assert_int_equal(ldr_position_parse(TOKEN "5:10:3:6:dev", &p, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "SPLIT \"dev\" is not valid or test"));

	/* the pipeline and data travel both ways; a name no pipeline can have is no token */
	p.split = 0;
	strcpy(p.pipeline, "other.v2");
	p.data = 1;
	assert_int_equal(ldr_position_format(&p, token, sizeof token), 0);
	assert_string_equal(token, "ldr2:other.v2:0000000000000001:5:10:3:6");
	strcpy(p.pipeline, "a b");
	assert_int_equal(ldr_position_format(&p, token, sizeof token), -EINVAL);
	assert_string_equal(token, "");
	memset(p.pipeline, 'x', sizeof p.pipeline); /* not terminated */
	assert_int_equal(ldr_position_format(&p, token, sizeof token), -EINVAL);

	/* a token of the older format, which names no pipeline, is refused as such */
	assert_int_equal(ldr_position_parse("ldr1:5:10:3:6", &p, err, sizeof err), -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "older format (ldr1), which names no pipeline"));
}

/* The split asked for travels in HELLO, and the client's position tokens
 * carry it. */
static void test_split_position(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	send_welcome(p, &w, p->arena_fd);
	struct ldr_attach_opts o = { .pipeline = "p", .split = "valid" };
	assert_int_equal(ldr_attach(p->c, &o), 0);
	assert_string_equal(peer_recv(p, PROTO_HELLO)->u.hello.split, "valid");
	assert_position(p, TOKEN "5:10:0:0:valid");
	send_ready(p, 0, 0, 0, BATCH, 0);
	struct ldr_batch b;
	assert_int_equal(ldr_next(p->c, &b, 1000), 0);
	char token[LDR_POSITION_MAX];
	assert_int_equal(ldr_position_after(p->c, &b, token, sizeof token), 0);
	assert_string_equal(token, TOKEN "5:10:0:4:valid");
	assert_int_equal(ldr_release(p->c, &b), 0);
	assert_position(p, TOKEN "5:10:0:4:valid");
}

/* A split name is a word of at most 15 bytes, checked before anything is
 * sent; which names exist is the daemon's call. */
static void test_split_name_refused(void **state)
{
	struct peer *p = *state;
	struct ldr_attach_opts o = { .pipeline = "p", .split = "val id" };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "split name: byte 3 is 0x20"));
	o.split = "0123456789abcdef";
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "split name is longer than 15 bytes"));
	struct pollfd pfd = { .fd = p->conn, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 0), 0);
}

/* A group travels in HELLO (key and size); group_size 1 (or 0) is no
 * group, whatever the key; a key is a word of at most 63 bytes, and a
 * group of more than one needs one; all checked before anything is sent. */
static void test_group_hello(void **state)
{
	struct peer *p = *state;
	struct ldr_attach_opts o = { .pipeline = "p", .group = "job 1", .group_size = 2 };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "group key: byte 3 is 0x20"));
	o.group = NULL;
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "a group of 2 needs a group key of 1..63 bytes"));
	o.group = "k";
	o.group_size = 65;
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "group size 65 is over 64"));
	struct pollfd pfd = { .fd = p->conn, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 0), 0);
	o.group = "job-dp1";
	o.group_size = 4;
	struct proto_welcome w = welcome_msg();
	send_welcome(p, &w, p->arena_fd);
	assert_int_equal(ldr_attach(p->c, &o), 0);
	const struct proto_hello *h = &peer_recv(p, PROTO_HELLO)->u.hello;
	assert_string_equal(h->group, "job-dp1");
	assert_int_equal(h->group_size, 4);
	/* gone: ldr_close (a member waits for the daemon's close) ends at once */
	close(p->conn);
	p->conn = -1;
}

static void test_no_group_hello(void **state)
{
	struct peer *p = *state;
	struct ldr_attach_opts o = { .pipeline = "p", .group = "ignored", .group_size = 1 };
	struct proto_welcome w = welcome_msg();
	send_welcome(p, &w, p->arena_fd);
	assert_int_equal(ldr_attach(p->c, &o), 0);
	const struct proto_hello *h = &peer_recv(p, PROTO_HELLO)->u.hello;
	assert_string_equal(h->group, "");
	assert_int_equal(h->group_size, 1);
}

/* A declared pipeline: the HELLO carries the declaration and the job key
 * (job=, else $TORCHELASTIC_RUN_ID, else $SLURM_JOB_ID.$SLURM_STEP_ID,
 * else with world 1 a key of this process), no name; the position names
 * the pipeline as the WELCOME does. Refused before anything is sent: a
 * name and a declaration, a declaration of world 2 without a job key, a
 * control byte in it. */
static void test_declared_hello(void **state)
{
	struct peer *p = *state;
	const char *text = "source = raw:/data/x.bin\nrecord_bytes = 16\nbatch_size = 4\n";
	unsetenv("TORCHELASTIC_RUN_ID");
	unsetenv("SLURM_JOB_ID");
	struct ldr_attach_opts o = { .pipeline = "p", .declaration = text };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "exactly one of a pipeline name and a declaration"));
	o = (struct ldr_attach_opts){ .declaration = text, .rank = 1, .world = 2 };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "pass job="));
	o = (struct ldr_attach_opts){ .declaration = "seed = 1\x01\n", .job = "j" };
	assert_int_equal(ldr_attach(p->c, &o), -EINVAL);
	assert_non_null(strstr(ldr_error(p->c), "byte 8 is 0x01"));
	struct pollfd pfd = { .fd = p->conn, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 0), 0);

	setenv("SLURM_JOB_ID", "977", 1);
	setenv("SLURM_STEP_ID", "2", 1);
	o = (struct ldr_attach_opts){ .declaration = text, .rank = 1, .world = 2 };
	struct proto_welcome w = welcome_msg();
	w.rank = 1;
	w.world = 2;
	snprintf(w.name, sizeof w.name, "d.0123456789abcdef");
	send_welcome(p, &w, p->arena_fd);
	assert_int_equal(ldr_attach(p->c, &o), 0);
	const struct proto_hello *h = &peer_recv(p, PROTO_HELLO)->u.hello;
	assert_string_equal(h->pipeline, "");
	assert_string_equal(h->declaration, text);
	assert_string_equal(h->job, "slurm:977.2");
	char token[LDR_POSITION_MAX];
	assert_int_equal(ldr_position(p->c, token, sizeof token), 0);
	assert_true(strncmp(token, "ldr2:d.0123456789abcdef:", 24) == 0);
	unsetenv("SLURM_JOB_ID");
	unsetenv("SLURM_STEP_ID");
}

/* The daemon said why and closed while the client held a batch: the
 * release reports that reason, and the position still counts the batch. */
static void test_release_after_daemon_left(void **state)
{
	struct peer *p = *state;
	struct proto_welcome w = welcome_msg();
	attach_ok(p, &w);
	send_ready(p, 0, 0, 0, BATCH, 0);
	struct ldr_batch b;
	assert_int_equal(ldr_next(p->c, &b, 1000), 0);
	send_error(p, ESHUTDOWN, "daemon shutting down");
	close(p->conn);
	p->conn = -1;
	assert_int_equal(ldr_release(p->c, &b), -ESHUTDOWN);
	assert_string_equal(ldr_error(p->c), "daemon shutting down");
	assert_position(p, TOKEN "5:10:0:4");
	assert_int_equal(ldr_next(p->c, &b, 1000), -ESHUTDOWN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_missing_path),
		cmocka_unit_test(test_status_not_a_socket),
		cmocka_unit_test(test_position_tokens),
		cmocka_unit_test_setup_teardown(test_bad_options_send_nothing, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_batches_release_position, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_resumed_position, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_error_not_call_again, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_split_position, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_split_name_refused, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_group_hello, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_declared_hello, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_no_group_hello, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_attach_error, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_welcome_arena_size_mismatch, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_welcome_without_fd, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_ready_out_of_sequence, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_ready_outside_arena, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_ready_too_many_rows, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_peer_closed, peer_setup, peer_teardown),
		cmocka_unit_test_setup_teardown(test_release_after_daemon_left, peer_setup, peer_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
