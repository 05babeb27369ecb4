/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metricsd: the daemon's HTTP endpoint for Prometheus ([daemon]
 * metrics_listen): GET /metrics (and HEAD) answers the status in the
 * Prometheus text format, rendered by the same code as `loaderctl
 * metrics` (common/promtext.h); any other path gets 404, any other
 * method 405, each with a short plain-text body.
 *
 * HTTP is libmicrohttpd's, run from the daemon's libuv loop without a
 * thread of its own: MHD in epoll mode, its epoll descriptor watched by a
 * uv_poll_t (MHD_run when it is readable) and a uv_timer_t set from
 * MHD_get_timeout. MHD reads and writes non-blocking, so a slow or
 * stalled peer never holds the loop, and the request handler runs on the
 * loop thread, reading the daemon's state directly. Bounded: at most
 * METRICSD_CONNECTIONS_MAX connections (METRICSD_PER_IP_MAX from one
 * address), each closed after METRICSD_IDLE_S seconds without progress,
 * each request's line and headers within METRICSD_REQUEST_BYTES (over it:
 * 431 and close).
 *
 * The listening socket is bound here (a Unix path, given socket_mode and
 * socket_group as the daemon's socket, or a loopback TCP address) and
 * handed to MHD. Runs entirely on the loop thread.
 */
#ifndef LDR_DAEMON_METRICSD_H
#define LDR_DAEMON_METRICSD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config/config.h"

#define METRICSD_CONNECTIONS_MAX 16
#define METRICSD_PER_IP_MAX 8
#define METRICSD_IDLE_S 5
#define METRICSD_REQUEST_BYTES 8192

struct metricsd;
struct status_text;

struct metricsd_ops {
	void *ctx;
	/* The metrics text: 0 with *text (malloc'd, the caller frees it)
	 * and *len, or -errno (the request gets 500). */
	int (*render)(void *ctx, char **text, size_t *len);
};

/* Serves GET /metrics at cfg->metrics_listen (a valid value: the config
 * check parsed it). 0 with *out, or -errno with err saying why (without
 * the key: the caller names it). */
int metricsd_start(uv_loop_t *loop, const struct config *cfg, const struct metricsd_ops *ops,
		   struct metricsd **out, char *err, size_t err_cap);

/* Stops serving: closes every connection and the listening socket, and
 * removes a Unix path. NULL is fine. */
void metricsd_stop(struct metricsd *m);

/* Frees m once the loop has run the close callbacks. NULL is fine. */
void metricsd_free(struct metricsd *m);

/* The status line "metrics: WHERE scrapes N refused M", or "metrics:
 * off" for m NULL; JSON {"metrics": {"listen", "scrapes", "refused"}}. */
void metricsd_describe(const struct metricsd *m, struct status_text *t);

#endif
