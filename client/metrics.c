/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics: `loaderctl metrics`, the daemon's status (its JSON, from
 * ldr_status_json) in the Prometheus text exposition format, for
 * node_exporter's textfile collector (docs/operations.md, "Metrics").
 * The rendering is common/promtext.c's, the same the daemon serves at
 * GET /metrics when metrics_listen is set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/loaderctl.h"
#include "client/loaderd.h"
#include "common/promtext.h"

int ctl_metrics_run(const char *socket)
{
	char *text;
	char err[4096];
	if (ldr_status_json(socket, &text, err, sizeof err) < 0) {
		ctl_error("metrics: %s", err);
		return 1;
	}
	int rc = promtext_render(text, strlen(text), stdout, err, sizeof err);
	free(text);
	if (rc < 0) {
		ctl_error("metrics: %s", err);
		return 1;
	}
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
