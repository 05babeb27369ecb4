/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_accept: taking connections in (server_impl.h), so that idle,
 * unidentifiable or too many connections cannot take the daemon's
 * descriptors or its loop away from the clients it serves.
 *
 * - The peer is identified with SO_PEERCRED at accept; a peer that cannot
 *   be (the call fails, or its pid is 0: it lives in a pid namespace that
 *   loaderd cannot see into, so loaderd can neither name it in its logs nor
 *   watch its exit) is refused with an ERROR saying why.
 * - A new connection's first frame is read at once when the client sent it
 *   with its connect (clients send HELLO or STATUS_REQ right away): a
 *   status request is answered before anything is decided about the rest.
 * - Until its first frame a connection sits in the handshake queue, oldest
 *   first. One timer closes those older than handshake_timeout_ms; at
 *   most max_handshakes wait: one more closes the oldest, which is what
 *   keeps `loaderctl status` answerable during a flood of idle connections
 *   (refusing the newcomer instead would let the idle ones hold the places
 *   for as long as the timeout). Before any of them is closed its first
 *   frame is looked for once more.
 * - accept failing with EMFILE or ENFILE closes the oldest connection of
 *   the queue if there is one and accepts again. Without one, the spare
 *   descriptor (one /dev/null kept open) is given up to take the waiting
 *   connections one at a time: a STATUS_REQ already sent is answered, any
 *   other gets ERROR EMFILE; either way it is closed at once, so clients
 *   hear why instead of hanging in a full backlog. Then, as for ENOBUFS,
 *   ENOMEM and anything unexpected, accepting pauses: the listen poll stops
 *   for 50 ms, doubling to 1 s while the failure lasts (libuv's poll is
 *   level-triggered: retrying at once would spin). One line says when an
 *   episode begins and one, with counts, when it ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/log.h"
#include "daemon/server/server_impl.h"
#include "daemon/core/status.h"
#include "proto/wire.h"

/* Connections accepted per wake-up before yielding to their frames. */
#define SERVER_ACCEPT_BUDGET 32
/* Send buffer per connection: a STATUS frame (64 KiB) always fits. */
#define SERVER_SNDBUF_BYTES (512 * 1024)
#define PAUSE_FIRST_MS 50
#define PAUSE_MAX_MS 1000
/* Descriptors beside connections and workers: stdio, the loop's own,
 * the arena, the listen socket, the spare, sd_notify, pidfds of exit
 * watches, the GPU threads' device files. */
#define SERVER_FD_MARGIN 64

int server_check_peer(int rc, socklen_t len, const struct ucred *cred, char *why, size_t cap)
{
	if (rc < 0)
		return errtext(why, cap, -EPERM, "loaderd cannot identify the connecting process: "
			       "SO_PEERCRED: %s", strerror(-rc));
	if (len != sizeof(*cred))
		return errtext(why, cap, -EPERM, "loaderd cannot identify the connecting process: "
			       "SO_PEERCRED gave %u bytes, not %zu", (unsigned)len, sizeof(*cred));
	if (cred->pid <= 0)
		return errtext(why, cap, -EPERM, "the connecting process (uid %u) is not visible "
			       "in loaderd's pid namespace (SO_PEERCRED gave pid %d): loaderd "
			       "could neither name it nor watch it exit; connect from a process "
			       "loaderd can see", (unsigned)cred->uid, (int)cred->pid);
	return 0;
}

/* Writes the summaries of log lines dropped by the rate limit once their
 * window is over, even when the flood that filled it has stopped. */
static void server_on_log_timer(uv_timer_t *t)
{
	int64_t ms = log_flush_suppressed();
	if (ms >= 0)
		uv_timer_start(t, server_on_log_timer, (uint64_t)ms + 1, 0);
}

/* Call after logging where floods happen: (re)arms the timer for the
 * earliest window with drops. */
static void server_log_backstop(struct server *srv)
{
	if (srv->timers_started)
		server_on_log_timer(&srv->log_timer);
}

/* Sends ERROR (when the socket takes it) and closes fd. What the peer has
 * sent is read and dropped first: closing with it unread would reset the
 * connection, and the peer could lose the ERROR. */
static void server_refuse_fd(int fd, int code, const char *text)
{
	struct proto_msg m; /* not zeroed whole: the union holds a 64 KiB status text */
	m.hdr = (struct proto_header){.type = PROTO_ERROR};
	m.u.error.code = code;
	snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", text);
	char drop[64];
	for (int i = 0; i < 4 && recv(fd, drop, sizeof(drop), MSG_DONTWAIT) > 0; i++)
		;
	(void)wire_send(fd, &m, -1);
	close(fd);
}

static void server_on_hs_timer(uv_timer_t *t);

/* Arms the timer for the oldest connection's deadline. */
static void server_hs_timer_arm(struct server *srv)
{
	if (!srv->hs_head || !srv->timers_started)
		return;
	uint64_t due = srv->hs_head->accepted_ms + srv->cfg->handshake_timeout_ms;
	uint64_t now = uv_now(srv->loop);
	uv_timer_start(&srv->hs_timer, server_on_hs_timer, due > now ? due - now : 0, 0);
}

enum close_why { CLOSE_TIMEOUT, CLOSE_CAP, CLOSE_NO_FD };

/* Closes c, still without a first frame, unless that frame has come in
 * the meantime (then it is handled as usual). */
static void server_handshake_close(struct conn *c, enum close_why why)
{
	struct server *srv = c->srv;
	conn_read(c, false);
	if (!c->handshaking)
		return;
	char text[256];
	uint64_t waited_ms = uv_now(srv->loop) - c->accepted_ms;
	int code = EBUSY;
	switch (why) {
	case CLOSE_TIMEOUT:
		srv->counts.timed_out++;
		code = ETIMEDOUT;
		snprintf(text, sizeof(text), "no HELLO, STATUS_REQ or RELOAD_REQ within %u ms "
			 "(handshake_timeout_ms)", srv->cfg->handshake_timeout_ms);
		break;
	case CLOSE_CAP:
		srv->counts.evicted++;
		snprintf(text, sizeof(text), "closed after %" PRIu64 " ms without a first frame: it was "
			 "the oldest of more than %u such connections (max_handshakes)", waited_ms,
			 srv->cfg->max_handshakes);
		break;
	case CLOSE_NO_FD:
		srv->counts.evicted++;
		snprintf(text, sizeof(text), "closed after %" PRIu64 " ms without a first frame: loaderd "
			 "is out of file descriptors and it was the oldest such connection", waited_ms);
		break;
	}
	log_notice("client pid %d (uid %u): %s", (int)c->pid, (unsigned)c->uid, text);
	server_log_backstop(srv);
	conn_error(c, 0, code, text);
}

static void server_on_hs_timer(uv_timer_t *t)
{
	struct server *srv = t->data;
	uint64_t now = uv_now(srv->loop);
	while (srv->hs_head && srv->hs_head->accepted_ms + srv->cfg->handshake_timeout_ms <= now)
		server_handshake_close(srv->hs_head, CLOSE_TIMEOUT);
	server_hs_timer_arm(srv);
}

/* The peer of a connection just accepted, into *cred; a peer that cannot
 * be identified is counted, refused (ERROR EPERM, why) and false. */
static bool server_peer_identify(struct server *srv, int fd, struct ucred *cred, char *why,
				 size_t cap)
{
	socklen_t len = sizeof(*cred);
	memset(cred, 0, sizeof(*cred));
	int rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) < 0 ? -errno : 0;
	if (server_check_peer(rc, len, cred, why, cap) == 0)
		return true;
	srv->counts.unidentified++;
	server_refuse_fd(fd, EPERM, why);
	return false;
}

/* Takes a connection just accepted on fd. */
static void server_conn_accept(struct server *srv, int fd)
{
	struct ucred cred;
	char why[300];
	if (!server_peer_identify(srv, fd, &cred, why, sizeof(why))) {
		log_warning("%s: connection refused: %s", srv->path, why);
		server_log_backstop(srv);
		return;
	}
	int rc;
	int sndbuf = SERVER_SNDBUF_BYTES;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		server_refuse_fd(fd, ENOMEM, "loaderd is out of memory");
		return;
	}
	rc = uv_poll_init(srv->loop, &c->poll, fd);
	if (rc < 0) {
		log_warning("client pid %d: polling its connection: %s", (int)cred.pid, uv_strerror(rc));
		server_refuse_fd(fd, -rc, "loaderd cannot poll this connection");
		free(c);
		return;
	}
	c->srv = srv;
	c->id = ++srv->next_conn_id;
	c->fd = fd;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->state = CONN_NEW;
	c->accepted_ms = uv_now(srv->loop);
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	c->poll.data = c;
	uv_poll_start(&c->poll, UV_READABLE | UV_DISCONNECT, on_conn_event);
	server_handshake_push(srv, c);
	conn_read(c, false);
	if (srv->hs_head == c)
		server_hs_timer_arm(srv);
	while (srv->n_handshakes > srv->cfg->max_handshakes)
		server_handshake_close(srv->hs_head, CLOSE_CAP);
}

static void server_spare_open(struct server *srv)
{
	if (srv->spare_fd < 0)
		srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Out of descriptors with none to reclaim: the waiting connections are
 * taken on the spare descriptor, one at a time, and closed. */
static void server_shed_backlog(struct server *srv)
{
	for (int i = 0; i < SERVER_BACKLOG && srv->spare_fd >= 0; i++) {
		close(srv->spare_fd);
		srv->spare_fd = -1;
		int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			server_spare_open(srv);
			return;
		}
		struct ucred cred;
		char why[300];
		if (server_peer_identify(srv, fd, &cred, why, sizeof(why))) {
			/* Status stays answerable: a STATUS_REQ sent with the
			 * connect is here already. */
			int passed = -1;
			int rc = wire_recv(fd, srv->rx, &passed, why, sizeof(why));
			if (passed >= 0)
				close(passed);
			int sndbuf = SERVER_SNDBUF_BYTES;
			setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
			if (rc == 0 && srv->rx->hdr.type == PROTO_STATUS_REQ &&
			    server_status_at_once(srv, fd, srv->rx) == 0) {
				close(fd);
			} else {
				srv->counts.shed++;
				srv->episode_shed++;
				server_refuse_fd(fd, EMFILE, "loaderd is out of file descriptors "
						 "and cannot take this connection; try again later");
			}
		}
		server_spare_open(srv);
	}
}

static void server_on_accept_timer(uv_timer_t *t)
{
	struct server *srv = t->data;
	if (!srv->listening || !srv->accept_paused)
		return;
	srv->accept_paused = false;
	uv_poll_start(&srv->listen_poll, UV_READABLE, server_on_listen_readable);
}

/* accept failed with errno e (not EAGAIN): shed what waits if the failure
 * is for descriptors, and pause accepting. */
static void server_accept_failed(struct server *srv, int e)
{
	srv->episode_failures++;
	if (!srv->in_episode) {
		struct rlimit rl = {0};
		char limit[64] = "";
		if (e == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
			snprintf(limit, sizeof(limit), " (RLIMIT_NOFILE %llu)",
				 (unsigned long long)rl.rlim_cur);
		srv->in_episode = true;
		srv->episode_start_ms = uv_now(srv->loop);
		srv->pause_ms = PAUSE_FIRST_MS;
		srv->counts.accept_pauses++;
		log_warning("accept on %s: %s%s: new connections are refused and accepting pauses "
			    "until it passes", srv->path, strerror(e), limit);
		server_log_backstop(srv);
	}
	if (e == EMFILE || e == ENFILE)
		server_shed_backlog(srv);
	uv_poll_stop(&srv->listen_poll);
	srv->accept_paused = true;
	uv_timer_start(&srv->accept_timer, server_on_accept_timer, srv->pause_ms, 0);
	srv->pause_ms = srv->pause_ms * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : srv->pause_ms * 2;
}

static void server_episode_end(struct server *srv)
{
	if (!srv->in_episode)
		return;
	srv->in_episode = false;
	log_notice("accepting connections on %s again after %" PRIu64 " ms: %" PRIu64 " failed "
		   "accepts, %" PRIu64 " connections refused for want of a descriptor", srv->path,
		   uv_now(srv->loop) - srv->episode_start_ms, srv->episode_failures, srv->episode_shed);
	srv->episode_failures = srv->episode_shed = 0;
}

void server_on_listen_readable(uv_poll_t *h, int status, int events)
{
	struct server *srv = h->data;
	server_spare_open(srv);
	for (int i = 0; i < SERVER_ACCEPT_BUDGET && srv->listening; i++) {
		int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			server_episode_end(srv);
			server_conn_accept(srv, fd);
			continue;
		}
		int e = errno;
		if (e == EAGAIN || e == EWOULDBLOCK)
			return;
		if (e == EINTR || e == ECONNABORTED)
			continue;
		if ((e == EMFILE || e == ENFILE) && srv->hs_head) {
			server_handshake_close(srv->hs_head, CLOSE_NO_FD);
			continue;
		}
		server_accept_failed(srv, e);
		return;
	}
}

void server_accept_start(struct server *srv)
{
	srv->spare_fd = -1;
	server_spare_open(srv);
	uv_timer_init(srv->loop, &srv->hs_timer);
	uv_timer_init(srv->loop, &srv->accept_timer);
	uv_timer_init(srv->loop, &srv->log_timer);
	uv_timer_init(srv->loop, &srv->group_timer);
	srv->hs_timer.data = srv->accept_timer.data = srv->log_timer.data = srv;
	srv->group_timer.data = srv;
	srv->timers_started = true;
}

static void server_on_timer_closed(uv_handle_t *h)
{
	(void)h;
}

void server_accept_stop(struct server *srv)
{
	if (!srv->timers_started)
		return;
	srv->timers_started = false;
	uv_close((uv_handle_t *)&srv->hs_timer, server_on_timer_closed);
	uv_close((uv_handle_t *)&srv->accept_timer, server_on_timer_closed);
	uv_close((uv_handle_t *)&srv->log_timer, server_on_timer_closed);
	uv_close((uv_handle_t *)&srv->group_timer, server_on_timer_closed);
	if (srv->spare_fd >= 0)
		close(srv->spare_fd);
	srv->spare_fd = -1;
}

void server_raise_fd_limit(const struct config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		/* libuv polls with epoll, never select(): no FD_SETSIZE to fear. */
		struct rlimit raised = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
			rl = raised;
	}
	unsigned long long need = (unsigned long long)cfg->max_clients + cfg->max_handshakes +
				  2ull * cfg->max_workers + SERVER_FD_MARGIN;
	if (rl.rlim_cur >= need)
		return;
	log_warning("RLIMIT_NOFILE is %llu (hard limit %llu), below the %llu descriptors loaderd may "
		    "need: max_clients %u + max_handshakes %u + 2 for each of max_workers %u + %u; "
		    "when they run out, connections without a first frame are closed first and new "
		    "ones are refused; raise LimitNOFILE= or lower max_clients or max_handshakes",
		    (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, need,
		    cfg->max_clients, cfg->max_handshakes, cfg->max_workers, SERVER_FD_MARGIN);
}
