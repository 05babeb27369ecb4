/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metricsd: GET /metrics over libmicrohttpd, driven by the daemon's loop
 * (metricsd.h). MHD runs in its "external" epoll mode: no thread, its
 * epoll descriptor in a uv_poll_t, its timeouts in a uv_timer_t.
 */
#include "daemon/server/metricsd.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/listenaddr.h"
#include "common/log.h"
#include "common/promtext.h"
#include "daemon/core/status.h"
#include "daemon/server/server_impl.h"

#define METRICSD_BACKLOG 64

/* A peer's address, for the per-address limit: family 0 is a free slot;
 * a Unix peer (no address) has family AF_UNIX and counts only in the
 * total. */
struct peer_key {
	int family;
	unsigned char addr[16];
};

struct metricsd {
	struct metricsd_ops ops;
	struct MHD_Daemon *mhd;
	struct listen_addr addr;
	char listen[sizeof(((struct config *)0)->metrics_listen)];
	uv_poll_t poll;   /* MHD's epoll descriptor */
	uv_timer_t timer; /* MHD's next timeout */
	unsigned open_handles;
	bool stopped;
	unsigned connections; /* open now */
	struct peer_key peers[METRICSD_CONNECTIONS_MAX]; /* the open connections' addresses */
	uint64_t scrapes;     /* GET or HEAD /metrics answered 200 */
	uint64_t refused;     /* answered 404, 405 or 500, or turned away at the limits */
};

static void run_mhd(struct metricsd *m);

static void on_timer(uv_timer_t *h)
{
	run_mhd(h->data);
}

static void on_epoll(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	run_mhd(h->data);
}

/* Lets MHD do what is ready (accept, read, answer, write, time out), then
 * sets the timer to its next deadline: 0 when it has more to do at once
 * (connections it left ready, edge-triggered), none when it has nothing. */
static void run_mhd(struct metricsd *m)
{
	if (m->stopped)
		return;
	MHD_run(m->mhd);
	MHD_UNSIGNED_LONG_LONG ms;
	if (MHD_get_timeout(m->mhd, &ms) == MHD_YES)
		uv_timer_start(&m->timer, on_timer, ms > UINT32_MAX ? UINT32_MAX : ms, 0);
	else
		uv_timer_stop(&m->timer);
}

static enum MHD_Result answer_text(struct MHD_Connection *conn, unsigned code, const char *text,
				   const char *allow)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
								 MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	enum MHD_Result rc = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return rc;
}

/* Every request, on its first call (its headers read): answered at once;
 * a body, which no request here has, is not waited for. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	struct metricsd *m = cls;
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)req_cls;
	bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
	if (!get && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
		m->refused++;
		return answer_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
				   "405 method not allowed: only GET and HEAD\n", "GET, HEAD");
	}
	if (strcmp(url, "/metrics") != 0) {
		m->refused++;
		return answer_text(conn, MHD_HTTP_NOT_FOUND, "404 not found: the metrics are at "
				   "/metrics\n", NULL);
	}
	char *text = NULL;
	size_t len = 0;
	int rc = m->ops.render(m->ops.ctx, &text, &len);
	if (rc < 0) {
		m->refused++;
		log_warning("metrics %s: rendering the metrics: %s", m->listen, strerror(-rc));
		return answer_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
				   "500 the metrics could not be rendered (the daemon's log says why)\n",
				   NULL);
	}
	struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, PROMTEXT_CONTENT_TYPE);
	enum MHD_Result qrc = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	if (qrc == MHD_YES)
		m->scrapes++;
	return qrc;
}

static struct peer_key peer_key_of(const struct sockaddr *addr)
{
	struct peer_key k = {.family = addr ? addr->sa_family : AF_UNIX};
	if (k.family == AF_INET)
		memcpy(k.addr, &((const struct sockaddr_in *)(const void *)addr)->sin_addr, 4);
	else if (k.family == AF_INET6)
		memcpy(k.addr, &((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr, 16);
	else
		k.family = AF_UNIX;
	return k;
}

/* The limits, counted: a connection beyond METRICSD_CONNECTIONS_MAX, or
 * beyond METRICSD_PER_IP_MAX from one address, is turned away. MHD's own
 * limits, one above, stand behind these (MHD applies them before asking
 * here, and would turn connections away uncounted). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	struct metricsd *m = cls;
	(void)addrlen;
	struct peer_key k = peer_key_of(addr);
	unsigned same = 0;
	for (unsigned i = 0; i < METRICSD_CONNECTIONS_MAX; i++)
		same += k.family != AF_UNIX && memcmp(&m->peers[i], &k, sizeof(k)) == 0;
	if (m->connections < METRICSD_CONNECTIONS_MAX && same < METRICSD_PER_IP_MAX)
		return MHD_YES;
	m->refused++;
	return MHD_NO;
}

/* Keeps peers[] and the count: a started connection takes a free slot
 * (there is one: on_accept let it in), its socket context pointing at it. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct metricsd *m = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		for (unsigned i = 0; i < METRICSD_CONNECTIONS_MAX; i++) {
			if (m->peers[i].family)
				continue;
			m->peers[i] = peer_key_of(ci ? ci->client_addr : NULL);
			*socket_context = &m->peers[i];
			break;
		}
		m->connections++;
		return;
	}
	struct peer_key *slot = *socket_context;
	if (slot)
		memset(slot, 0, sizeof(*slot));
	if (m->connections > 0)
		m->connections--;
}

/* MHD's own messages (a peer that broke the protocol, a limit reached). */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct metricsd *m = cls;
	char text[512];
	vsnprintf(text, sizeof(text), fmt, ap);
	size_t n = strlen(text);
	while (n && (text[n - 1] == '\n' || text[n - 1] == '.'))
		text[--n] = '\0';
	log_info("metrics %s: %s", m->listen, text);
}

/* A Unix path: a stale socket file (nobody answers on it) is replaced; a
 * live one, or another kind of file, is an error. */
static int bind_unix(int fd, const struct listen_addr *a, char *err, size_t cap)
{
	if (bind(fd, &a->u.sa, a->len) == 0)
		return 0;
	int e = errno;
	if (e != EADDRINUSE) {
		snprintf(err, cap, "bind: %s", strerror(e));
		return -e;
	}
	struct stat st;
	if (lstat(a->u.un.sun_path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		snprintf(err, cap, "%s exists and is not a socket", a->u.un.sun_path);
		return -EEXIST;
	}
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, &a->u.sa, a->len) == 0) {
		close(probe);
		snprintf(err, cap, "%s: another process serves it", a->u.un.sun_path);
		return -EADDRINUSE;
	}
	if (probe >= 0)
		close(probe);
	unlink(a->u.un.sun_path);
	if (bind(fd, &a->u.sa, a->len) < 0) {
		e = errno;
		snprintf(err, cap, "bind: %s", strerror(e));
		return -e;
	}
	return 0;
}

/* The listening socket, bound and listened on: a descriptor or -errno. */
static int listen_socket(const struct config *cfg, const struct listen_addr *a, char *err,
			 size_t cap)
{
	int fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		snprintf(err, cap, "socket: %s", strerror(e));
		return -e;
	}
	int rc, one = 1;
	if (a->family == AF_UNIX) {
		rc = bind_unix(fd, a, err, cap);
		if (rc == 0)
			rc = server_socket_permissions(cfg, a->u.un.sun_path, err, cap);
		if (rc < 0)
			goto close_fd;
	} else {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (a->family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, &a->u.sa, a->len) < 0) {
			rc = -errno;
			snprintf(err, cap, "bind: %s", strerror(errno));
			goto close_fd;
		}
	}
	if (listen(fd, METRICSD_BACKLOG) < 0) {
		rc = -errno;
		snprintf(err, cap, "listen: %s", strerror(errno));
		goto unlink_path;
	}
	return fd;
unlink_path:
	if (a->family == AF_UNIX)
		unlink(a->u.un.sun_path);
close_fd:
	close(fd);
	return rc;
}

int metricsd_start(uv_loop_t *loop, const struct config *cfg, const struct metricsd_ops *ops,
		   struct metricsd **out, char *err, size_t err_cap)
{
	struct metricsd *m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_cap, "out of memory");
		return -ENOMEM;
	}
	m->ops = *ops;
	snprintf(m->listen, sizeof(m->listen), "%s", cfg->metrics_listen);
	char why[256];
	int rc = listen_addr_parse(cfg->metrics_listen, &m->addr, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, err_cap, "%s", why);
		goto free_m;
	}
	int fd = listen_socket(cfg, &m->addr, err, err_cap);
	if (fd < 0) {
		rc = fd;
		goto free_m;
	}
	m->mhd = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, on_accept, m, on_request, m,
		MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, m,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)METRICSD_CONNECTIONS_MAX + 1,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)METRICSD_PER_IP_MAX + 1,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)METRICSD_IDLE_S,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICSD_REQUEST_BYTES,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
		MHD_OPTION_END);
	if (!m->mhd) {
		rc = -EINVAL;
		snprintf(err, err_cap, "libmicrohttpd would not start on the socket");
		goto close_fd;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info) {
		rc = -EINVAL;
		snprintf(err, err_cap, "libmicrohttpd has no epoll descriptor");
		goto stop_mhd;
	}
	rc = uv_poll_init(loop, &m->poll, info->epoll_fd);
	if (rc < 0) {
		snprintf(err, err_cap, "polling: %s", uv_strerror(rc));
		goto stop_mhd;
	}
	uv_timer_init(loop, &m->timer);
	m->poll.data = m->timer.data = m;
	m->open_handles = 2;
	uv_poll_start(&m->poll, UV_READABLE, on_epoll);
	run_mhd(m);
	*out = m;
	return 0;
stop_mhd:
	MHD_stop_daemon(m->mhd); /* closes fd too */
	if (m->addr.family == AF_UNIX)
		unlink(m->addr.u.un.sun_path);
	goto free_m;
close_fd:
	close(fd);
	if (m->addr.family == AF_UNIX)
		unlink(m->addr.u.un.sun_path);
free_m:
	free(m);
	return rc;
}

/* Both handles are closed: MHD's descriptors may go now (not before: the
 * loop must stop watching the epoll descriptor before it is closed). */
static void on_closed(uv_handle_t *h)
{
	struct metricsd *m = h->data;
	if (--m->open_handles)
		return;
	MHD_stop_daemon(m->mhd);
	m->mhd = NULL;
	if (m->addr.family == AF_UNIX)
		unlink(m->addr.u.un.sun_path);
}

void metricsd_stop(struct metricsd *m)
{
	if (!m || m->stopped)
		return;
	m->stopped = true;
	uv_poll_stop(&m->poll);
	uv_close((uv_handle_t *)&m->poll, on_closed);
	uv_close((uv_handle_t *)&m->timer, on_closed);
}

void metricsd_free(struct metricsd *m)
{
	if (!m)
		return;
	if (m->mhd) /* never stopped, or its handles never closed */
		MHD_stop_daemon(m->mhd);
	free(m);
}

void metricsd_describe(const struct metricsd *m, struct status_text *t)
{
	status_object(t, "metrics");
	status_field(t, "listen", "metrics: %s", m ? m->listen : "off");
	status_field(t, "scrapes", " scrapes %" PRIu64, m ? m->scrapes : (uint64_t)0);
	status_field(t, "refused", " refused %" PRIu64 "\n", m ? m->refused : (uint64_t)0);
	status_close(t);
}
