/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_metrics: the daemon's GET /metrics (metricsd.h) fed from the
 * server's status: each scrape renders the status JSON, the document
 * `loaderctl status --json` gets, and turns it into Prometheus's text by
 * common/promtext.c, as `loaderctl metrics` does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/promtext.h"
#include "daemon/core/status.h"
#include "daemon/server/metricsd.h"
#include "daemon/server/server_impl.h"

/* metricsd_ops.render */
static int render_metrics(void *ctx, char **text, size_t *len)
{
	struct server *srv = ctx;
	char why[PROTO_ERROR_TEXT_MAX];
	struct status_json j;
	int rc = server_status_json(srv, &j, why, sizeof(why));
	if (rc < 0) {
		log_warning("metrics: %s", why);
		status_json_free(&j);
		return rc;
	}
	*text = NULL;
	*len = 0;
	FILE *out = open_memstream(text, len);
	if (!out) {
		status_json_free(&j);
		return -ENOMEM;
	}
	rc = promtext_render(j.buf, j.len, out, why, sizeof(why));
	status_json_free(&j);
	if (fclose(out) != 0 && rc == 0)
		rc = -ENOMEM;
	if (rc < 0) {
		if (rc != -ENOMEM)
			log_warning("metrics: %s", why);
		free(*text);
		*text = NULL;
	}
	return rc;
}

int server_metrics_start(struct server *srv)
{
	const struct config *cfg = srv->cfg;
	if (!cfg->metrics_listen[0])
		return 0;
	struct metricsd_ops ops = {.ctx = srv, .render = render_metrics};
	char err[512];
	int rc = metricsd_start(srv->loop, cfg, &ops, &srv->metrics, err, sizeof(err));
	if (rc < 0) {
		log_error("%s:%d: [daemon] metrics_listen = %s: %s", cfg->file,
			  config_key_line(cfg, NULL, "metrics_listen"), cfg->metrics_listen, err);
		return rc;
	}
	log_info("metrics: serving GET /metrics on %s", cfg->metrics_listen);
	return 0;
}
