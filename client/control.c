/* SPDX-License-Identifier: Apache-2.0 */
/*
 * control: the client library's control requests (ldr_status, ldr_reload):
 * each call makes a handle of its own (client_impl.h) for one connection,
 * one request and its answer, so the calls are safe from any thread.
 */
#include "client_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errtext.h"

#define CLIENT_STATUS_TIMEOUT_MS 10000
/* The status asked for only to explain a timeout (client_starting_text). */
#define CLIENT_STARTING_TIMEOUT_MS 1000
/* A reload that adds pipelines answers once their data is listed (a
 * large imagefolder's tree takes a while). */
#define CLIENT_RELOAD_TIMEOUT_MS 600000

/* Appends the STATUS frame in c->msg to *text (*len bytes so far), the
 * whole answer at most max bytes. */
static int client_status_append(struct ldr_client *c, uint16_t type, char **text, size_t *len,
				size_t max)
{
	const struct proto_status *st = &c->msg.u.status;
	if (c->msg.hdr.type != PROTO_STATUS || c->msg.hdr.request_id != 1 ||
	    st->text_len > PROTO_STATUS_TEXT_MAX)
		return client_error(c, -EPROTO, "bad answer to %s: %s", proto_type_name(type),
				    proto_type_name(c->msg.hdr.type));
	if (*len + st->text_len > max)
		return client_error(c, -EPROTO, "the answer to %s is over %zu bytes",
				    proto_type_name(type), max);
	char *p = realloc(*text, *len + st->text_len + 1);
	if (!p)
		return client_error(c, -ENOMEM, "out of memory");
	memcpy(p + *len, st->text, st->text_len);
	*len += st->text_len;
	p[*len] = '\0';
	*text = p;
	return 0;
}

/* One control session: sends the request frame `type` (no payload;
 * flags PROTO_FLAG_JSON for the status as JSON) and returns the STATUS
 * text that answers it, joined from its frames (PROTO_FLAG_MORE). */
static int client_control_request(const char *socket_path, uint16_t type, uint32_t flags,
				  int timeout_ms, char **text, char *err, size_t err_cap)
{
	size_t len = 0, max = flags & PROTO_FLAG_JSON ? PROTO_STATUS_JSON_MAX : PROTO_STATUS_TEXT_MAX;
	struct ldr_client *c = client_new(); /* one frame buffer and error text */
	int r;
	*text = NULL;
	if (!c)
		return errtext(err, err_cap, -ENOMEM, "out of memory");
	r = client_connect_socket(c, socket_path);
	if (r < 0)
		goto free_client;
	memset(&c->msg, 0, sizeof c->msg);
	c->msg.hdr.type = type;
	c->msg.hdr.request_id = 1;
	c->msg.hdr.flags = flags;
	r = client_send_frame(c, proto_type_name(type));
	if (r == 0)
		r = client_recv_frame(c, timeout_ms, NULL);
	if (r < 0)
		goto free_client;
	for (;;) {
		if (c->msg.hdr.type == PROTO_ERROR) {
			r = client_daemon_error(c);
			break;
		}
		r = client_status_append(c, type, text, &len, max);
		if (r < 0 || !(c->msg.hdr.flags & PROTO_FLAG_MORE))
			break;
		r = client_recv_frame(c, timeout_ms, NULL);
		if (r < 0)
			break;
	}
free_client:
	if (r < 0) {
		free(*text);
		*text = NULL;
	}
	if (c->sock >= 0)
		close(c->sock);
	if (r < 0)
		errtext(err, err_cap, r, "%s", c->error);
	free(c);
	return r;
}

int ldr_status(const char *socket_path, char **text, char *err, size_t err_cap)
{
	return client_control_request(socket_path, PROTO_STATUS_REQ, 0, CLIENT_STATUS_TIMEOUT_MS,
				      text, err, err_cap);
}

int ldr_status_json(const char *socket_path, char **json, char *err, size_t err_cap)
{
	return client_control_request(socket_path, PROTO_STATUS_REQ, PROTO_FLAG_JSON,
				      CLIENT_STATUS_TIMEOUT_MS, json, err, err_cap);
}

int ldr_reload(const char *socket_path, char **text, char *err, size_t err_cap)
{
	return client_control_request(socket_path, PROTO_RELOAD_REQ, 0, CLIENT_RELOAD_TIMEOUT_MS,
				      text, err, err_cap);
}

/* The text status of a daemon that starts (docs/operations.md, "Start-up"):
 *   state: starting for 12.3 s, 2 clients waiting
 *   scan: pipeline train: listing /data/train: 1,200,000 files so far, 12.0 s */
void client_starting_text(const char *path, char *buf, size_t cap)
{
	char *text = NULL, err[64];
	buf[0] = '\0';
	if (client_control_request(path, PROTO_STATUS_REQ, 0, CLIENT_STARTING_TIMEOUT_MS, &text,
				   err, sizeof err) < 0)
		return;
	const char *state = strstr(text, "\nstate: starting");
	if (state) {
		const char *scan = strstr(state, "\nscan: ");
		if (scan) {
			scan += strlen("\nscan: ");
			snprintf(buf, cap, "daemon is starting: %.*s", (int)strcspn(scan, "\n"), scan);
		} else {
			state += strlen("\nstate: ");
			snprintf(buf, cap, "daemon is %.*s", (int)strcspn(state, "\n"), state);
		}
	}
	free(text);
}
