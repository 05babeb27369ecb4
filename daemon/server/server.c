/* server: the socket's sessions: frames in and out (server.h); accepting
 * connections is server_accept.c's. */
#include "daemon/server/server.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/regfile.h"
#include "daemon/sched/sched.h"
#include "daemon/server/server_impl.h"
#include "daemon/core/status.h"
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

static void handle_hello(struct conn *c, const struct proto_msg *in)
{
	struct server *srv = c->srv;
	struct proto_msg out;
	out.hdr = (struct proto_header){.type = PROTO_WELCOME, .request_id = in->hdr.request_id};
	char err[PROTO_ERROR_TEXT_MAX];
	c->hello_request_id = in->hdr.request_id;
	int rc = sched_attach(srv->sched, &in->u.hello, c->pid, c, &c->client, &out.u.welcome,
			      err, sizeof(err));
	if (rc < 0) {
		log_notice("client pid %d refused: %s", (int)c->pid, err);
		conn_error(c, in->hdr.request_id, -rc, err);
		return;
	}
	if (in->u.hello.group_size > 1 && srv->timers_started)
		on_group_timer(&srv->group_timer); /* it may have started a group that waits */
	if (rc == SCHED_ATTACH_PENDING) {
		c->state = CONN_ATTACHING;
		return;
	}
	c->state = CONN_DATA;
	conn_send(c, &out, srv->arena->client_fd); /* read-only: shm/arena.h */
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
	conn_send(c, &out, -1); /* device delivery: the ring's handles are in the frame */
}

/* The STATUS frame in srv->tx: text (len bytes, at most
 * PROTO_STATUS_TEXT_MAX). */
static void status_frame(struct server *srv, uint64_t request_id, const char *text, size_t len)
{
	struct proto_msg *m = srv->tx;
	memset(&m->hdr, 0, sizeof(m->hdr));
	m->hdr.type = PROTO_STATUS;
	m->hdr.request_id = request_id;
	m->u.status.text_len = (uint32_t)len;
	memcpy(m->u.status.text, text, len);
	m->u.status.text[len] = '\0';
}

/* Answers a control request with STATUS carrying text and closes the
 * control session. */
static void conn_send_status(struct conn *c, uint64_t request_id, const char *text, size_t len)
{
	status_frame(c->srv, request_id, text, len);
	conn_send(c, c->srv->tx, -1);
	conn_close(c);
}

int server_status_frame(struct server *srv, uint64_t request_id)
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
	status_frame(srv, request_id, t->buf, t->len);
	free(t);
	return 0;
}

static void handle_status(struct conn *c, const struct proto_msg *in)
{
	if (server_status_frame(c->srv, in->hdr.request_id) < 0) {
		conn_error(c, in->hdr.request_id, ENOMEM, "out of memory");
		return;
	}
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
	if (rc < 0) {
		conn_error(c, in->hdr.request_id, -rc, text);
		return;
	}
	conn_send_status(c, in->hdr.request_id, text, strlen(text));
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
			handle_status(c, m);
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
	if (c->state == CONN_ATTACHING && type != PROTO_BYE) {
		snprintf(why, sizeof(why), "%s frame before WELCOME", proto_type_name(type));
		protocol_error(c, m->hdr.request_id, why);
		return;
	}
	switch (type) {
	case PROTO_RELEASE:
		sched_release(c->srv->sched, c->client, &m->u.release);
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
	for (int i = 0; (peer_gone || i < SERVER_READ_BUDGET) && c->state != CONN_CLOSING; i++) {
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
	conn_read(h->data, status < 0);
}

/* A socket file left by a daemon that died is replaced; one that answers
 * belongs to a live daemon and is an error. */
static int bind_socket(int fd, const struct sockaddr_un *addr, char *err, size_t cap)
{
	if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0)
		return 0;
	if (errno != EADDRINUSE) {
		int e = errno;
		snprintf(err, cap, "bind: %s", strerror(e));
		return -e;
	}
	struct stat st;
	if (lstat(addr->sun_path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		snprintf(err, cap, "exists and is not a socket (%s)", regfile_kind(st.st_mode));
		return -EEXIST;
	}
	int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (const struct sockaddr *)addr, sizeof(*addr)) == 0) {
		close(probe);
		snprintf(err, cap, "another loaderd is serving this socket");
		return -EADDRINUSE;
	}
	if (probe >= 0)
		close(probe);
	unlink(addr->sun_path);
	if (bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0) {
		int e = errno;
		snprintf(err, cap, "bind: %s", strerror(e));
		return -e;
	}
	return 0;
}

/* Every missing directory on the way to path, made 0755 (before umask), as
 * `mkdir -p` would; preflight_socket checked that they can be made. */
static int make_socket_dirs(const char *path, char *err, size_t cap)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (char *p = dir + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char keep = *p;
		*p = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			int e = errno;
			snprintf(err, cap, "creating directory %s: %s", dir, strerror(e));
			return -e;
		}
		*p = keep;
		if (keep == '\0')
			return 0;
	}
}

static int socket_permissions(const struct config *cfg, const char *path, char *err, size_t cap)
{
	if (cfg->socket_group[0]) {
		struct group gr, *found = NULL;
		char buf[4096];
		if (getgrnam_r(cfg->socket_group, &gr, buf, sizeof(buf), &found) != 0 || !found) {
			snprintf(err, cap, "socket_group \"%s\": no such group", cfg->socket_group);
			return -ENOENT;
		}
		if (chown(path, (uid_t)-1, found->gr_gid) < 0) {
			int e = errno;
			snprintf(err, cap, "chown to group %s: %s", cfg->socket_group, strerror(e));
			return -e;
		}
	}
	if (chmod(path, cfg->socket_mode) < 0) {
		int e = errno;
		snprintf(err, cap, "chmod: %s", strerror(e));
		return -e;
	}
	return 0;
}

int server_start(uv_loop_t *loop, const struct config *cfg, const char *path,
		 struct sched *sched, struct arena *arena, const struct server_ops *ops,
		 struct server **out, char *err, size_t err_cap)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(addr.sun_path)) {
		snprintf(err, err_cap, "longer than %zu bytes (a Unix socket address)",
			 sizeof(addr.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	struct server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->rx = malloc(sizeof(*srv->rx));
	srv->tx = malloc(sizeof(*srv->tx));
	int rc = -ENOMEM;
	if (!srv->rx || !srv->tx)
		goto free_srv;
	srv->loop = loop;
	srv->cfg = cfg;
	srv->sched = sched;
	srv->arena = arena;
	srv->ops = *ops;
	memcpy(srv->path, addr.sun_path, sizeof(srv->path));

	rc = make_socket_dirs(path, err, err_cap);
	if (rc < 0)
		goto free_srv;
	srv->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (srv->listen_fd < 0) {
		rc = -errno;
		snprintf(err, err_cap, "socket: %s", strerror(errno));
		goto free_srv;
	}
	rc = bind_socket(srv->listen_fd, &addr, err, err_cap);
	if (rc < 0)
		goto close_listen;
	rc = socket_permissions(cfg, path, err, err_cap);
	if (rc < 0)
		goto unlink_socket;
	if (listen(srv->listen_fd, SERVER_BACKLOG) < 0) {
		rc = -errno;
		snprintf(err, err_cap, "listen: %s", strerror(errno));
		goto unlink_socket;
	}
	rc = uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	if (rc < 0) {
		snprintf(err, err_cap, "polling: %s", uv_strerror(rc));
		goto unlink_socket;
	}
	srv->listen_poll.data = srv;
	srv->listening = true;
	server_accept_start(srv);
	uv_poll_start(&srv->listen_poll, UV_READABLE, server_on_listen_readable);
	*out = srv;
	return 0;
unlink_socket:
	unlink(path);
close_listen:
	close(srv->listen_fd);
free_srv:
	free(srv->rx);
	free(srv->tx);
	free(srv);
	return rc;
}

static void on_listen_closed(uv_handle_t *h)
{
	struct server *srv = h->data;
	close(srv->listen_fd);
	srv->listen_fd = -1;
}

void server_shutdown(struct server *srv)
{
	if (srv->listening) {
		srv->listening = false;
		uv_poll_stop(&srv->listen_poll);
		uv_close((uv_handle_t *)&srv->listen_poll, on_listen_closed);
		unlink(srv->path);
	}
	server_accept_stop(srv);
	for (struct conn *c = srv->conns; c; c = c->next) {
		if (c->state == CONN_DATA || c->state == CONN_ATTACHING)
			conn_error(c, 0, ESHUTDOWN, "daemon shutting down");
		else
			conn_close(c);
	}
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	free(srv->rx);
	free(srv->tx);
	free(srv);
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
