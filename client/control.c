/* SPDX-License-Identifier: Apache-2.0 */
/*
 * control: the client library's control requests (ldr_status, ldr_reload):
 * each call makes a handle of its own (client_impl.h) for one connection,
 * one request and its answer, so the calls are safe from any thread.
 */
#include "client_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errtext.h"

#define CLIENT_STATUS_TIMEOUT_MS 10000
/* A reload that adds pipelines answers once their data is listed (a
 * large imagefolder's tree takes a while). */
#define CLIENT_RELOAD_TIMEOUT_MS 600000

/* One control session: sends the request frame `type` (no payload) and
 * returns the STATUS text that answers it. */
static int client_control_request(const char *socket_path, uint16_t type, char **text, char *err,
				  size_t err_cap)
{
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
	r = client_send_frame(c, proto_type_name(type));
	if (r == 0)
		r = client_recv_frame(c, type == PROTO_RELOAD_REQ ? CLIENT_RELOAD_TIMEOUT_MS :
				      CLIENT_STATUS_TIMEOUT_MS, NULL);
	if (r < 0)
		goto free_client;
	if (c->msg.hdr.type == PROTO_ERROR) {
		r = client_daemon_error(c);
		goto free_client;
	}
	if (c->msg.hdr.type != PROTO_STATUS || c->msg.hdr.request_id != 1 ||
	    c->msg.u.status.text_len > PROTO_STATUS_TEXT_MAX) {
		r = client_error(c, -EPROTO, "bad answer to %s: %s", proto_type_name(type),
				 proto_type_name(c->msg.hdr.type));
		goto free_client;
	}
	*text = strndup(c->msg.u.status.text, c->msg.u.status.text_len);
	if (!*text)
		r = client_error(c, -ENOMEM, "out of memory");
free_client:
	if (c->sock >= 0)
		close(c->sock);
	if (r < 0)
		errtext(err, err_cap, r, "%s", c->error);
	free(c);
	return r;
}

int ldr_status(const char *socket_path, char **text, char *err, size_t err_cap)
{
	return client_control_request(socket_path, PROTO_STATUS_REQ, text, err, err_cap);
}

int ldr_reload(const char *socket_path, char **text, char *err, size_t err_cap)
{
	return client_control_request(socket_path, PROTO_RELOAD_REQ, text, err, err_cap);
}
