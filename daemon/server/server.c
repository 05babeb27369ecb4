/* SPDX-License-Identifier: Apache-2.0 */
/* server: the listening socket's life (server.h): made, bound, given its
 * owner and mode, listened on (or taken from systemd, who did all that);
 * the daemon up, or failed to start; shut down and freed. Accepting connections
 * is server_accept.c's, their sessions server_conn.c's. */
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
#include "daemon/server/metricsd.h"
#include "daemon/server/server_impl.h"

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

int server_socket_permissions(const struct config *cfg, const char *path, char *err, size_t cap)
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

int server_start(uv_loop_t *loop, const struct config *cfg, const char *path, int systemd_fd,
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

	if (systemd_fd >= 0) { /* made, bound, owned and listened on by systemd */
		srv->listen_fd = systemd_fd;
		srv->from_systemd = true;
		goto poll_listen;
	}
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
	rc = server_socket_permissions(cfg, path, err, err_cap);
	if (rc < 0)
		goto unlink_socket;
	if (listen(srv->listen_fd, SERVER_BACKLOG) < 0) {
		rc = -errno;
		snprintf(err, err_cap, "listen: %s", strerror(errno));
		goto unlink_socket;
	}
poll_listen:
	rc = uv_poll_init(loop, &srv->listen_poll, srv->listen_fd);
	if (rc < 0) {
		snprintf(err, err_cap, "polling: %s", uv_strerror(rc));
		if (srv->from_systemd)
			goto free_srv; /* systemd's socket stays, for the next start */
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
		/* systemd's socket file stays: a client connecting after this
		 * waits in systemd's backlog for the next start. */
		if (!srv->from_systemd)
			unlink(srv->path);
	}
	server_accept_stop(srv);
	metricsd_stop(srv->metrics);
	for (struct conn *c = srv->conns; c; c = c->next) {
		if (c->state == CONN_DATA || c->state == CONN_ATTACHING || c->state == CONN_HELD)
			conn_error(c, 0, ESHUTDOWN, "daemon shutting down");
		else
			conn_close(c);
	}
}

/* Whether a held connection's peer is still there: its next frame (or
 * nothing yet) is waiting, not its end. */
static bool held_peer_there(const struct conn *c)
{
	char byte;
	ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

void server_up(struct server *srv, struct sched *sched, struct arena *arena)
{
	srv->sched = sched;
	srv->arena = arena;
	for (struct conn *c = srv->conns, *next; c; c = next) {
		next = c->next; /* serving c may close it (freed later, in its close callback) */
		if (c->state != CONN_HELD)
			continue;
		struct proto_hello *hello = c->declaring;
		c->declaring = NULL;
		c->state = CONN_NEW;
		srv->n_held--;
		if (!held_peer_there(c)) {
			log_info("client pid %d left before loaderd had started", (int)c->pid);
			conn_close(c);
		} else {
			uv_poll_start(&c->poll, UV_READABLE | UV_DISCONNECT, on_conn_event);
			conn_hello(c, hello);
		}
		free(hello);
	}
}

void server_start_failed(struct server *srv, const char *why)
{
	for (struct conn *c = srv->conns, *next; c; c = next) {
		next = c->next;
		if (c->state == CONN_HELD)
			conn_error(c, c->hello_request_id, ESHUTDOWN, why);
	}
}

uint32_t server_held(const struct server *srv)
{
	return srv ? srv->n_held : 0;
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	metricsd_free(srv->metrics);
	free(srv->rx);
	free(srv->tx);
	free(srv);
}
