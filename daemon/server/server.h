/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server: the daemon's Unix socket (SOCK_SEQPACKET): accepting clients,
 * reading and validating their frames (proto/wire.h), turning HELLO,
 * RELEASE and BYE into scheduler calls, answering STATUS_REQ and
 * RELOAD_REQ, and sending WELCOME (with the arena fd), READY and ERROR.
 * RELOAD_REQ is taken only from root or the daemon's own user.
 *
 * An invalid frame, or a frame out of order, gets an ERROR when the socket
 * can take one and that connection is closed; no other client notices.
 * Peers are identified by SO_PEERCRED; logs name the client's pid. A peer
 * that cannot be identified (the call fails, or gives pid 0: a process in
 * a pid namespace the daemon cannot see) is refused.
 *
 * What a connection may hold before it says who it is, is bounded: one
 * that sends no first frame within handshake_timeout_ms is closed, and at
 * most max_handshakes wait at once (one more closes the oldest). Running
 * out of descriptors closes those first, then refuses new connections
 * and pauses accepting, never spinning (server_accept.c says how).
 *
 * Runs entirely on the loop thread.
 */
#ifndef LDR_DAEMON_SERVER_H
#define LDR_DAEMON_SERVER_H

#include <stddef.h>
#include <sys/socket.h>
#include <uv.h>

#include "daemon/config/config.h"
#include "proto/proto.h"
#include "shm/arena.h"

struct conn;
struct sched;
struct server;
struct status_text;

struct server_ops {
	void *ctx;
	/* Renders the daemon's status text up to its summary lines. */
	void (*status)(void *ctx, struct status_text *t);
	/* Renders the summary lines (errors:, config:), which follow; the
	 * server adds connections:. They are rendered first and their room
	 * kept, so the lists before them are what gets cut (status.h). */
	void (*summary)(void *ctx, struct status_text *t);
	/* Reloads the configuration (daemon/reload.h): 0 with what changed in
	 * text, or -errno with why nothing did, or SERVER_RELOAD_PENDING: the
	 * answer comes later, through server_reload_answer. */
	int (*reload)(void *ctx, char *text, size_t cap);
	/* A HELLO that declares its pipeline, from client pid on connection
	 * conn_id (daemon/jobs.h): 0 with *entry, the table entry to attach
	 * to; SERVER_DECLARE_PENDING: the pipeline is being made, and
	 * server_declared goes on; or -errno with text (the ERROR). */
	int (*declare)(void *ctx, const struct proto_hello *hello, int pid, uint64_t conn_id,
		       int *entry, char *text, size_t cap);
};

/* Makes path's missing directories (0755, as `mkdir -p`), binds and
 * listens on path (a stale socket file is replaced; a live one, or a file
 * that is not a socket, is an error), mode and group from cfg. With
 * systemd_fd (not -1: the listening socket systemd passed, bound to path,
 * daemon/listenfd.h) it only serves that one: systemd made it and gave it
 * its owner and mode, and its file stays after server_shutdown. 0 or
 * -errno with err saying why, without the path: the caller names it, with
 * the file and line that set it (preflight_socket_where). */
int server_start(uv_loop_t *loop, const struct config *cfg, const char *path, int systemd_fd,
		 struct sched *sched, struct arena *arena, const struct server_ops *ops,
		 struct server **out, char *err, size_t err_cap);

/* Serves GET /metrics where cfg's metrics_listen says (metricsd.h), if
 * anywhere; server_shutdown stops it. 0, or -errno, logged naming the
 * file and line of metrics_listen. */
int server_metrics_start(struct server *srv);
/*
 * While the daemon starts (server_start with sched and arena NULL) the
 * socket is served: status and reload requests are answered (through
 * server_ops, which say the daemon is starting), and a HELLO is held:
 * its connection is kept and not read further, at most max_clients of
 * them. Then server_up serves every held HELLO, as if it had just come
 * (a client that left meanwhile is dropped); or server_start_failed
 * answers each with ERROR (ESHUTDOWN) and why, the log's own words, and
 * the caller shuts the server down.
 */
void server_up(struct server *srv, struct sched *sched, struct arena *arena);
void server_start_failed(struct server *srv, const char *why);
/* HELLOs held now (0 for a NULL server). */
uint32_t server_held(const struct server *srv);

/* Raises RLIMIT_NOFILE's soft limit to the hard limit and warns when that
 * is below the descriptors cfg may need (clients, connections waiting for
 * their first frame, two per worker, a margin). Call once at start, before
 * other threads. */
void server_raise_fd_limit(const struct config *cfg);

/* Whether a peer is identified: rc is getsockopt(SO_PEERCRED)'s result
 * (0 or -errno), len and cred what it gave. 0, or -EPERM with why (for
 * the log and the ERROR frame). Pure; exposed for tests. */
int server_check_peer(int rc, socklen_t len, const struct ucred *cred, char *why, size_t cap);

/* Stops accepting, removes the socket file, sends every client an ERROR
 * (ESHUTDOWN, "daemon shutting down") and closes every connection. */
void server_shutdown(struct server *srv);

#define SERVER_RELOAD_PENDING 1
#define SERVER_DECLARE_PENDING 1

/* A declaration that server_ops.declare left pending is decided: the
 * connection (if it is still there) attaches to entry (rc 0), or gets
 * ERROR (-rc) with text. */
void server_declared(struct server *srv, uint64_t conn_id, int rc, int entry, const char *text);

/* The answer of a reload that server_ops.reload left pending, to every
 * connection that asked for it and is still there: STATUS with text
 * (rc 0), or ERROR (-rc) with text. */
void server_reload_answer(struct server *srv, int rc, const char *text);

/* Frees the server once the loop has run the close callbacks. */
void server_free(struct server *srv);

/* sched_ops implementation (daemon/sched/sched.h). */
void server_attached(struct conn *conn, int rc, const struct proto_welcome *welcome,
		     const char *text);
void server_send_ready(struct conn *conn, const struct proto_ready *ready);
void server_fail_client(struct conn *conn, int code, const char *text);

#endif
