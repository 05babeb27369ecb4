/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_impl.h: what the server's files share; no other module includes
 * it (daemon/server/server.h is the interface). Each file calls only those
 * below it:
 *
 *   server.c         the listening socket: start (bind, owner, mode,
 *                    listen) and shutdown; the daemon up (HELLOs held
 *                    while it started served) or failed to start
 *   server_accept.c  connections: accept, the peer's identity, the queue of
 *                    connections that have not sent their first frame
 *                    (timeout, cap), running out of descriptors
 *   server_conn.c    sessions: frames in and out, HELLO/RELEASE/BYE,
 *                    STATUS_REQ/RELOAD_REQ, closing; the handshake queue's
 *                    links and the connections' status line
 *   server_status.c  the status, as text and as JSON
 *   server_metrics.c GET /metrics (metricsd.c, HTTP) from the status JSON
 *
 * Everything here runs on the loop thread.
 */
#ifndef LDR_DAEMON_SERVER_IMPL_H
#define LDR_DAEMON_SERVER_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>
#include <uv.h>

#include "daemon/server/server.h"

/* The listen socket's backlog. */
#define SERVER_BACKLOG 128

enum conn_state {
	CONN_NEW,       /* no frame yet: in the handshake queue */
	CONN_ATTACHING, /* HELLO for device delivery: the GPU ring is being made */
	CONN_DATA,
	CONN_CLOSING,
	CONN_RELOADING, /* RELOAD_REQ taken: its answer comes once the reload ends */
	CONN_DECLARING, /* HELLO declared a pipeline being made: server_declared goes on */
	CONN_STATUS,    /* the JSON status is being sent, frame by frame as the peer reads */
	CONN_HELD,      /* HELLO while the daemon starts: kept, not read further (server_up) */
};

struct conn {
	struct server *srv;
	struct conn *next, *prev;       /* every connection */
	struct conn *hs_next, *hs_prev; /* the handshake queue, oldest first */
	bool handshaking;               /* in the handshake queue */
	int fd;                         /* -1 once closed */
	pid_t pid;
	uid_t uid;
	enum conn_state state;
	enum conn_state state_before_close; /* CONN_CLOSING: the state it left */
	bool peer_closed; /* a send found the peer gone: reads drain, then close */
	bool said_bye;    /* BYE received: a device client has closed its IPC handles */
	uint64_t accepted_ms; /* uv_now() at accept */
	uint64_t hello_request_id;
	uint64_t reload_request_id; /* CONN_RELOADING: the request to answer */
	uint64_t id;                /* server-unique, for answers that come later */
	struct proto_hello *declaring; /* CONN_DECLARING, CONN_HELD: its HELLO, kept */
	struct status_json *status_out; /* CONN_STATUS: the JSON, and the bytes sent */
	size_t status_at;
	uint64_t status_request_id;
	uv_poll_t poll;
	struct sched_client *client;
};

/* What the status line "connections:" counts since start. */
struct server_counts {
	uint64_t timed_out;     /* closed without a first frame in handshake_timeout_ms */
	uint64_t evicted;       /* closed without a first frame to make room */
	uint64_t unidentified;  /* refused: SO_PEERCRED failed or gave pid 0 */
	uint64_t shed;          /* refused at once: no descriptor for them */
	uint64_t accept_pauses; /* episodes of accept failing (EMFILE, ENFILE, ENOBUFS, ...) */
};

struct server {
	uv_loop_t *loop;
	const struct config *cfg;
	struct sched *sched;      /* NULL while the daemon starts (server_up) */
	struct arena *arena;
	struct server_ops ops;
	uint32_t n_held;          /* connections in CONN_HELD */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	bool listening;
	bool from_systemd;       /* listen_fd came from systemd (daemon/listenfd.h) */
	uv_poll_t listen_poll;
	struct conn *conns;
	uint64_t next_conn_id;
	struct proto_msg *rx; /* scratch for decoding (a frame can be 64 KiB) */
	struct proto_msg *tx; /* scratch for STATUS replies */

	/* server_accept.c */
	struct conn *hs_head, *hs_tail;
	uint32_t n_handshakes;
	uv_timer_t hs_timer;     /* the head's handshake deadline */
	uv_timer_t accept_timer; /* ends a pause of accepting */
	uv_timer_t log_timer;    /* writes the log's suppressed-lines summaries */
	uv_timer_t group_timer;  /* the next group's deadline for its members (server_conn.c) */
	bool timers_started;
	bool accept_paused;      /* the listen poll is stopped until accept_timer */
	bool in_episode;         /* accept has failed and not succeeded since */
	uint64_t episode_start_ms, episode_failures, episode_shed;
	uint32_t pause_ms;       /* the next pause: 50 ms doubling to 1 s */
	int spare_fd;            /* /dev/null, given up to take one connection at EMFILE */
	uint32_t n_status_out;   /* connections in CONN_STATUS (server_status.c) */
	struct metricsd *metrics; /* GET /metrics (server_metrics.c), NULL: not served */
	struct server_counts counts;
};

/* ---- server.c ---- */

/* Gives the socket file at path cfg's socket_group and socket_mode. 0 or
 * -errno with err. */
int server_socket_permissions(const struct config *cfg, const char *path, char *err, size_t cap);

/* ---- server_accept.c ---- */

void server_accept_start(struct server *srv);
void server_accept_stop(struct server *srv);
void server_on_listen_readable(uv_poll_t *h, int status, int events);

/* ---- server_conn.c ---- */

void conn_close(struct conn *c);
void conn_error(struct conn *c, uint64_t request_id, int code, const char *text);
/* Reads and handles the frames waiting on c (all of them when the peer is
 * gone, else up to a budget). */
void conn_read(struct conn *c, bool peer_gone);
void on_conn_event(uv_poll_t *h, int status, int events);
void server_describe_connections(struct server *srv, struct status_text *t);

/* HELLO (request id in c->hello_request_id): attached, or the declared
 * pipeline made first. */
void conn_hello(struct conn *c, const struct proto_hello *hello);

/* ---- server_status.c ---- */

/* srv->tx becomes the STATUS frame answering request_id with text (len
 * bytes, at most PROTO_STATUS_TEXT_MAX). */
void server_status_fill(struct server *srv, uint64_t request_id, const char *text, size_t len);
/* STATUS_REQ on c: the text in one frame, then closes c; or (its JSON
 * flag) the JSON, sent by as many frames as the socket takes now and the
 * rest as it drains (CONN_STATUS, server_status_writable), then closes. */
void server_answer_status(struct conn *c, const struct proto_msg *in);
/* c's socket takes more: the next frames of its JSON status. */
void server_status_writable(struct conn *c);
/* c is freed: lets go of its JSON status, if any. */
void server_status_drop(struct conn *c);
/* Answers a STATUS_REQ on a connection the server cannot keep (out of
 * descriptors): every frame sent at once, or as many as the socket
 * takes. 0 or -errno. */
int server_status_at_once(struct server *srv, int fd, const struct proto_msg *req);
/* The status as JSON into j (freed with status_json_free, also on
 * failure): the same describe calls as the text, in the same order,
 * nothing cut. 0, or -ENOMEM / -E2BIG / -EINVAL with why. */
int server_status_json(struct server *srv, struct status_json *j, char *why, size_t cap);
/* c, just accepted, joins the handshake queue (newest last)... */
void server_handshake_push(struct server *srv, struct conn *c);
/* ...and leaves it when it has sent its first frame, or is closing. */
void server_handshake_remove(struct conn *c);

#endif
