/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_conn: a connection's session (server_impl.h): frames in and out,
 * HELLO (held while the daemon starts, for server_up), RELEASE, BYE,
 * STATUS_REQ and RELOAD_REQ, the scheduler's answers
 * (server_attached, server_send_ready, server_fail_client), and closing.
 * Also the links of the handshake queue, which a connection leaves at its
 * first frame, and the status line of the connections' counts. Calls
 * nothing else of the server: server_accept.c and server.c call here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/sched/sched.h"
#include "daemon/server/server_impl.h"
#include "proto/wire.h"

/* Frames read per wake-up before yielding to other connections. */
#define SERVER_READ_BUDGET 64

static void on_conn_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	struct server *srv = c->srv;
	if (c->client)
		sched_detach(srv->sched, c->client, c->said_bye);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->state_before_close == CONN_HELD)
		c->srv->n_held--;
	free(c->declaring);
	server_status_drop(c);
	free(c);
}

/* Closes a connection. Its descriptor is closed at once (libuv allows it
 * once the handle is stopped), so that at EMFILE closing one connection
 * makes room for the next accept. The scheduler lets go of its client in
 * the close callback, on a later loop turn, so callers inside scheduler
 * callbacks never see the client freed under them. */
void conn_close(struct conn *c)
{
	if (c->state == CONN_CLOSING)
		return;
	c->state_before_close = c->state;
	c->state = CONN_CLOSING;
	server_handshake_remove(c);
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, on_conn_closed);
	close(c->fd);
	c->fd = -1;
}

/* Sends one frame; a peer that cannot take it (gone, or not reading) is
 * closed. Frames to a closing connection are dropped. */
static void conn_send(struct conn *c, struct proto_msg *m, int fd)
{
	if (c->state == CONN_CLOSING || c->peer_closed)
		return;
	int rc = wire_send(c->fd, m, fd);
	if (rc == 0)
		return;
	if (rc == -EPIPE || rc == -ECONNRESET) {
		/* The peer's last frames (RELEASE, BYE) may still be queued
		 * for us: the read side takes them, then closes at EOF. */
		c->peer_closed = true;
		return;
	}
	if (rc == -EAGAIN)
		log_warning("client pid %d is not reading its socket; closing it", (int)c->pid);
	else
		log_warning("client pid %d: sending %s: %s; closing it", (int)c->pid,
			    proto_type_name(m->hdr.type), strerror(-rc));
	conn_close(c);
}

void conn_error(struct conn *c, uint64_t request_id, int code, const char *text)
{
	struct proto_msg m; /* not zeroed whole: the union holds a 64 KiB status text */
	m.hdr = (struct proto_header){.type = PROTO_ERROR, .request_id = request_id};
	m.u.error.code = code;
	snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", text[0] ? text : strerror(code));
	conn_send(c, &m, -1);
	conn_close(c);
}

static void protocol_error(struct conn *c, uint64_t request_id, const char *why)
{
	log_warning("client pid %d: %s; closing the connection", (int)c->pid, why);
	conn_error(c, request_id, EPROTO, why);
}

/* Groups whose members have not all come within group_timeout_ms are
 * failed (sched_expire_groups); the timer then waits for the next
 * deadline, and stops while no group waits. */
static void on_group_timer(uv_timer_t *t)
{
	struct server *srv = t->data;
	uint64_t ms = sched_expire_groups(srv->sched);
	if (ms)
		uv_timer_start(&srv->group_timer, on_group_timer, ms, 0);
}

/* HELLO, to the pipeline it names or (entry >= 0) to the one it declared. */
static void hello_attach(struct conn *c, const struct proto_hello *hello, int entry)
{
	struct server *srv = c->srv;
	struct proto_msg out;
	out.hdr = (struct proto_header){.type = PROTO_WELCOME, .request_id = c->hello_request_id};
	char err[PROTO_ERROR_TEXT_MAX];
	int rc = sched_attach_entry(srv->sched, entry, hello, c->pid, c, &c->client, &out.u.welcome,
				    err, sizeof(err));
	if (rc < 0) {
		log_notice("client pid %d refused: %s", (int)c->pid, err);
		conn_error(c, c->hello_request_id, -rc, err);
		return;
	}
	if (hello->group_size > 1 && srv->timers_started)
		on_group_timer(&srv->group_timer); /* it may have started a group that waits */
	if (rc == SCHED_ATTACH_PENDING) {
		c->state = CONN_ATTACHING;
		return;
	}
	c->state = CONN_DATA;
	conn_send(c, &out, srv->arena->client_fd); /* read-only: shm/arena.h */
}

void conn_hello(struct conn *c, const struct proto_hello *hello)
{
	struct server *srv = c->srv;
	if (!hello->declaration[0]) {
		hello_attach(c, hello, -1);
		return;
	}
	char err[PROTO_ERROR_TEXT_MAX];
	int entry = -1;
	int rc = srv->ops.declare ? srv->ops.declare(srv->ops.ctx, hello, c->pid, c->id,
						     &entry, err, sizeof(err)) :
		 (snprintf(err, sizeof(err), "this daemon takes no declared pipelines"), -EPERM);
	if (rc < 0) {
		log_notice("client pid %d refused: %s", (int)c->pid, err);
		conn_error(c, c->hello_request_id, -rc, err);
		return;
	}
	if (rc == 0) {
		hello_attach(c, hello, entry);
		return;
	}
	c->declaring = malloc(sizeof(*c->declaring));
	if (!c->declaring) {
		conn_error(c, c->hello_request_id, ENOMEM, "out of memory");
		return;
	}
	*c->declaring = *hello;
	c->state = CONN_DECLARING;
}

/* A HELLO while the daemon starts is kept and its connection no longer
 * read (its next frames wait in the socket) until server_up serves it or
 * server_start_failed says why it cannot be. As many may wait as may
 * attach (max_clients). */
static void hold_hello(struct conn *c, const struct proto_hello *hello)
{
	struct server *srv = c->srv;
	char why[PROTO_ERROR_TEXT_MAX];
	if (srv->n_held >= srv->cfg->max_clients) {
		snprintf(why, sizeof(why), "loaderd is starting and %u clients already wait for it "
			 "(max_clients = %u)", srv->n_held, srv->cfg->max_clients);
		log_notice("client pid %d refused: %s", (int)c->pid, why);
		conn_error(c, c->hello_request_id, EAGAIN, why);
		return;
	}
	c->declaring = malloc(sizeof(*c->declaring));
	if (!c->declaring) {
		conn_error(c, c->hello_request_id, ENOMEM, "out of memory");
		return;
	}
	*c->declaring = *hello;
	c->state = CONN_HELD;
	srv->n_held++;
	uv_poll_stop(&c->poll);
	log_info("client pid %d waits for loaderd to start", (int)c->pid);
}

/* HELLO: served, or held while the daemon starts. */
static void handle_hello(struct conn *c, const struct proto_msg *in)
{
	c->hello_request_id = in->hdr.request_id;
	if (!c->srv->sched) {
		hold_hello(c, &in->u.hello);
		return;
	}
	conn_hello(c, &in->u.hello);
}

void server_declared(struct server *srv, uint64_t conn_id, int rc, int entry, const char *text)
{
	struct conn *c = srv->conns;
	while (c && c->id != conn_id)
		c = c->next;
	if (!c || c->state != CONN_DECLARING) /* gone meanwhile */
		return;
	c->state = CONN_NEW;
	if (rc < 0) {
		log_notice("client pid %d refused: %s", (int)c->pid, text);
		conn_error(c, c->hello_request_id, -rc, text);
		return;
	}
	hello_attach(c, c->declaring, entry);
}

void server_attached(struct conn *c, int rc, const struct proto_welcome *welcome,
		     const char *text)
{
	if (c->state != CONN_ATTACHING)
		return;
	if (rc < 0) {
		conn_error(c, c->hello_request_id, -rc, text);
		return;
	}
	struct proto_msg out;
	out.hdr = (struct proto_header){.type = PROTO_WELCOME, .request_id = c->hello_request_id};
	out.u.welcome = *welcome;
	c->state = CONN_DATA;
	/* device delivery: the ring's handles are in the frame; a client that
	 * decodes reads its JPEGs from the arena, read-only (shm/arena.h) */
	conn_send(c, &out, welcome->decode ? c->srv->arena->client_fd : -1);
}

/* Answers a control request with STATUS carrying text and closes the
 * control session. */
static void conn_send_status(struct conn *c, uint64_t request_id, const char *text, size_t len)
{
	server_status_fill(c->srv, request_id, text, len);
	conn_send(c, c->srv->tx, -1);
	conn_close(c);
}

/* A reload re-reads the operator's file: only root and the daemon's own
 * user may ask for one (the socket's group is the training jobs'). */
static void handle_reload(struct conn *c, const struct proto_msg *in)
{
	struct server *srv = c->srv;
	char text[PROTO_ERROR_TEXT_MAX];
	if (c->uid != 0 && c->uid != getuid()) {
		snprintf(text, sizeof(text), "reload refused: client pid %d runs as uid %u; only root "
			 "and loaderd's user (uid %u) may reload", (int)c->pid, (unsigned)c->uid,
			 (unsigned)getuid());
		log_warning("%s", text);
		conn_error(c, in->hdr.request_id, EPERM, text);
		return;
	}
	log_info("client pid %d asks for a reload", (int)c->pid);
	int rc = srv->ops.reload(srv->ops.ctx, text, sizeof(text));
	if (rc == SERVER_RELOAD_PENDING) {
		c->state = CONN_RELOADING;
		c->reload_request_id = in->hdr.request_id;
		return;
	}
	if (rc < 0) {
		conn_error(c, in->hdr.request_id, -rc, text);
		return;
	}
	conn_send_status(c, in->hdr.request_id, text, strlen(text));
}

void server_reload_answer(struct server *srv, int rc, const char *text)
{
	for (struct conn *c = srv->conns, *next; c; c = next) {
		next = c->next; /* answering closes c */
		if (c->state != CONN_RELOADING || c->fd < 0)
			continue;
		c->state = CONN_NEW;
		if (rc < 0)
			conn_error(c, c->reload_request_id, -rc, text);
		else
			conn_send_status(c, c->reload_request_id, text, strlen(text));
	}
}

static void conn_handle(struct conn *c, const struct proto_msg *m)
{
	char why[128];
	uint16_t type = m->hdr.type;
	if (c->state == CONN_NEW) {
		server_handshake_remove(c);
		if (type == PROTO_HELLO) {
			handle_hello(c, m);
			return;
		}
		if (type == PROTO_STATUS_REQ) {
			server_answer_status(c, m);
			return;
		}
		if (type == PROTO_RELOAD_REQ) {
			handle_reload(c, m);
			return;
		}
		snprintf(why, sizeof(why), "first frame must be HELLO, STATUS_REQ or RELOAD_REQ, not %s",
			 proto_type_name(type));
		protocol_error(c, m->hdr.request_id, why);
		return;
	}
	if (c->state == CONN_RELOADING || c->state == CONN_DECLARING || c->state == CONN_STATUS) {
		snprintf(why, sizeof(why), "%s frame before %s", proto_type_name(type),
			 c->state == CONN_RELOADING ? "its reload's answer" :
			 c->state == CONN_STATUS ? "the end of its status" : "WELCOME");
		protocol_error(c, m->hdr.request_id, why);
		return;
	}
	if (c->state == CONN_ATTACHING && type != PROTO_BYE) {
		snprintf(why, sizeof(why), "%s frame before WELCOME", proto_type_name(type));
		protocol_error(c, m->hdr.request_id, why);
		return;
	}
	switch (type) {
	case PROTO_RELEASE:
		sched_release(c->srv->sched, c->client, &m->u.release);
		return;
	case PROTO_DECODED:
		sched_decoded(c->srv->sched, c->client, &m->u.decoded);
		return;
	case PROTO_BYE:
		c->said_bye = true;
		conn_close(c);
		return;
	default:
		snprintf(why, sizeof(why), "unexpected %s frame in a data session", proto_type_name(type));
		protocol_error(c, m->hdr.request_id, why);
	}
}

/* A peer that closes with READY frames unread leaves an error on our end
 * (ECONNRESET). libuv reports it as status < 0 and stops the handle;
 * recvmsg reports it once, before the frames the peer sent last (its final
 * RELEASEs and BYE), which are still queued. So a gone peer's queue is
 * read to the end, past the read budget (it cannot grow any more), and
 * only then is the connection closed. */
void conn_read(struct conn *c, bool peer_gone)
{
	peer_gone = peer_gone || c->peer_closed;
	bool reset_seen = false;
	for (int i = 0; (peer_gone || i < SERVER_READ_BUDGET) && c->state != CONN_CLOSING &&
	     c->state != CONN_HELD; i++) {
		char why[160] = "";
		int fd = -1;
		int rc = wire_recv(c->fd, c->srv->rx, &fd, why, sizeof(why));
		if (fd >= 0) {
			close(fd); /* clients never send descriptors */
			protocol_error(c, 0, "unexpected file descriptor from client");
			return;
		}
		if (rc == -ECONNRESET && !reset_seen) {
			reset_seen = peer_gone = true;
			continue;
		}
		if (rc == -EAGAIN && !peer_gone)
			return;
		if (rc < 0 && (peer_gone || rc == -ECONNRESET)) {
			conn_close(c);
			return;
		}
		if (rc < 0) {
			char text[200];
			snprintf(text, sizeof(text), "invalid frame: %s",
				 why[0] ? why : rc == -EMSGSIZE ? "packet larger than 65536 bytes" : strerror(-rc));
			protocol_error(c, 0, text);
			return;
		}
		conn_handle(c, c->srv->rx);
	}
}

void on_conn_event(uv_poll_t *h, int status, int events)
{
	struct conn *c = h->data;
	if (status == 0 && (events & UV_WRITABLE) && c->state == CONN_STATUS)
		server_status_writable(c);
	conn_read(c, status < 0);
}

void server_send_ready(struct conn *c, const struct proto_ready *ready)
{
	struct proto_msg m; /* not zeroed whole: the union holds a 64 KiB status text */
	m.hdr = (struct proto_header){.type = PROTO_READY};
	m.u.ready = *ready;
	conn_send(c, &m, -1);
}

void server_fail_client(struct conn *c, int code, const char *text)
{
	conn_error(c, 0, code, text);
}

void server_handshake_push(struct server *srv, struct conn *c)
{
	c->handshaking = true;
	c->hs_next = NULL;
	c->hs_prev = srv->hs_tail;
	if (srv->hs_tail)
		srv->hs_tail->hs_next = c;
	else
		srv->hs_head = c;
	srv->hs_tail = c;
	srv->n_handshakes++;
}

void server_handshake_remove(struct conn *c)
{
	struct server *srv = c->srv;
	if (!c->handshaking)
		return;
	c->handshaking = false;
	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else
		srv->hs_head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	else
		srv->hs_tail = c->hs_prev;
	c->hs_next = c->hs_prev = NULL;
	srv->n_handshakes--;
}

