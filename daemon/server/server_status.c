/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_status: the answers to STATUS_REQ (server_impl.h). The text goes
 * in one STATUS frame; the JSON (STATUS_REQ with PROTO_FLAG_JSON) in as
 * many as it takes, each but the last with PROTO_FLAG_MORE, sent while the
 * socket takes them and the rest as the client reads (the connection
 * waits in CONN_STATUS, holding its document), so that a big node's
 * status never blocks the loop. Also the status line of the connections'
 * counts.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/server/metricsd.h"
#include "daemon/server/server_impl.h"
#include "proto/wire.h"

/* Connections sending a JSON status at once: each holds its document
 * (at most PROTO_STATUS_JSON_MAX bytes) until its client has read it. */
#define SERVER_STATUS_OUT_MAX 8

void server_status_fill(struct server *srv, uint64_t request_id, const char *text, size_t len)
{
	struct proto_msg *m = srv->tx;
	memset(&m->hdr, 0, sizeof(m->hdr));
	m->hdr.type = PROTO_STATUS;
	m->hdr.request_id = request_id;
	m->u.status.text_len = (uint32_t)len;
	memcpy(m->u.status.text, text, len);
	m->u.status.text[len] = '\0';
}

/* The text in srv->tx. Its summary lines are rendered first and their
 * room kept, so a long status cuts its lists, never them. */
static int status_text(struct server *srv, uint64_t request_id)
{
	struct status_text *t = malloc(2 * sizeof(*t)), *summary = t + 1;
	if (!t)
		return -ENOMEM;
	status_init(summary);
	srv->ops.summary(srv->ops.ctx, summary);
	server_describe_connections(srv, summary);
	status_init(t);
	status_reserve(t, summary->len);
	srv->ops.status(srv->ops.ctx, t);
	status_append(t, summary);
	server_status_fill(srv, request_id, t->buf, t->len);
	free(t);
	return 0;
}

/* The JSON into j: the same describe calls, in the same order, nothing
 * cut. 0, or -ENOMEM / -E2BIG with why. */
int server_status_json(struct server *srv, struct status_json *j, char *why, size_t cap)
{
	struct status_text *t = malloc(sizeof(*t));
	if (!t) {
		memset(j, 0, sizeof(*j));
		return errtext(why, cap, -ENOMEM, "out of memory");
	}
	status_init_json(t, j);
	srv->ops.status(srv->ops.ctx, t);
	srv->ops.summary(srv->ops.ctx, t);
	server_describe_connections(srv, t);
	int rc = status_json_finish(t);
	free(t);
	if (rc == -E2BIG)
		return errtext(why, cap, rc, "the status as JSON is over the %u bytes it may take",
			       (unsigned)PROTO_STATUS_JSON_MAX);
	if (rc == -EINVAL)
		return errtext(why, cap, rc, "the status as JSON is malformed (unclosed or too deep)");
	if (rc < 0)
		return errtext(why, cap, rc, "out of memory");
	return 0;
}

/* Sends j's frames from *at on while the socket takes them: 0 once the
 * last went, -EAGAIN when the socket is full, else wire_send's error. */
static int status_send_frames(struct server *srv, int fd, uint64_t request_id,
			      const struct status_json *j, size_t *at)
{
	while (*at < j->len) {
		size_t n = j->len - *at;
		if (n > PROTO_STATUS_TEXT_MAX)
			n = PROTO_STATUS_TEXT_MAX;
		server_status_fill(srv, request_id, j->buf + *at, n);
		if (*at + n < j->len)
			srv->tx->hdr.flags = PROTO_FLAG_MORE;
		int rc = wire_send(fd, srv->tx, -1);
		if (rc < 0)
			return rc;
		*at += n;
	}
	return 0;
}

/* Sends what c's socket takes of its JSON; closes c when all went or the
 * peer is gone, else waits to be writable. */
static void status_pump(struct conn *c)
{
	int rc = status_send_frames(c->srv, c->fd, c->status_request_id, c->status_out,
				    &c->status_at);
	if (rc == -EAGAIN) {
		uv_poll_start(&c->poll, UV_READABLE | UV_WRITABLE | UV_DISCONNECT, on_conn_event);
		return;
	}
	if (rc < 0 && rc != -EPIPE)
		log_warning("client pid %d: sending its status: %s; closing it", (int)c->pid,
			    strerror(-rc));
	conn_close(c);
}

void server_answer_status(struct conn *c, const struct proto_msg *in)
{
	struct server *srv = c->srv;
	char why[PROTO_ERROR_TEXT_MAX];
	if (!(in->hdr.flags & PROTO_FLAG_JSON)) {
		if (status_text(srv, in->hdr.request_id) < 0) {
			conn_error(c, in->hdr.request_id, ENOMEM, "out of memory");
			return;
		}
		int rc = wire_send(c->fd, srv->tx, -1);
		if (rc < 0 && rc != -EPIPE)
			log_warning("client pid %d: sending its status: %s; closing it", (int)c->pid,
				    strerror(-rc));
		conn_close(c);
		return;
	}
	if (srv->n_status_out >= SERVER_STATUS_OUT_MAX) {
		snprintf(why, sizeof(why), "%u clients are reading the status as JSON already; try "
			 "again when one is done", (unsigned)SERVER_STATUS_OUT_MAX);
		conn_error(c, in->hdr.request_id, EBUSY, why);
		return;
	}
	struct status_json *j = malloc(sizeof(*j));
	int rc = j ? server_status_json(srv, j, why, sizeof(why)) : errtext(why, sizeof(why), -ENOMEM,
								      "out of memory");
	if (rc < 0) {
		log_warning("client pid %d asked for the status: %s", (int)c->pid, why);
		if (j)
			status_json_free(j);
		free(j);
		conn_error(c, in->hdr.request_id, -rc, why);
		return;
	}
	c->status_out = j;
	c->status_at = 0;
	c->status_request_id = in->hdr.request_id;
	c->state = CONN_STATUS;
	srv->n_status_out++;
	status_pump(c);
}

void server_status_writable(struct conn *c)
{
	status_pump(c);
}

void server_status_drop(struct conn *c)
{
	if (!c->status_out)
		return;
	status_json_free(c->status_out);
	free(c->status_out);
	c->status_out = NULL;
	c->srv->n_status_out--;
}

int server_status_at_once(struct server *srv, int fd, const struct proto_msg *req)
{
	uint64_t request_id = req->hdr.request_id;
	if (!(req->hdr.flags & PROTO_FLAG_JSON)) {
		int rc = status_text(srv, request_id);
		return rc < 0 ? rc : wire_send(fd, srv->tx, -1);
	}
	char why[PROTO_ERROR_TEXT_MAX];
	struct status_json j;
	size_t at = 0;
	int rc = server_status_json(srv, &j, why, sizeof(why));
	if (rc == 0)
		rc = status_send_frames(srv, fd, request_id, &j, &at);
	status_json_free(&j);
	return rc;
}

void server_describe_connections(struct server *srv, struct status_text *t)
{
	const struct server_counts *n = &srv->counts;
	status_object(t, "connections");
	status_field(t, "handshaking", "connections: handshaking %u", srv->n_handshakes);
	status_field(t, "max_handshakes", " max_handshakes %u", srv->cfg->max_handshakes);
	status_field(t, "timed_out", " timed_out %" PRIu64, n->timed_out);
	status_field(t, "evicted", " evicted %" PRIu64, n->evicted);
	status_field(t, "unidentified", " unidentified %" PRIu64, n->unidentified);
	status_field(t, "shed", " shed %" PRIu64, n->shed);
	status_field(t, "accept_pauses", " accept_pauses %" PRIu64, n->accept_pauses);
	status_field(t, "accepting", " accepting %s", srv->accept_paused ? "paused" : "yes");
	status_field(t, "socket", " socket %s\n", srv->from_systemd ? "systemd" : "bound");
	status_close(t);
	metricsd_describe(srv->metrics, t);
}
