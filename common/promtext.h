/* SPDX-License-Identifier: Apache-2.0 */
/*
 * promtext: the daemon's status JSON (schema loaderd.status/1) in the
 * Prometheus text exposition format (version 0.0.4). `loaderctl metrics`
 * and the daemon's GET /metrics (daemon/server/metricsd.h) both render
 * through it, so the two never differ. Pure: no I/O but out, no logging.
 * Built as its own library (ldr_promtext, with jansson), so that what
 * links the rest of common/ does not need jansson.
 */
#ifndef LDR_COMMON_PROMTEXT_H
#define LDR_COMMON_PROMTEXT_H

#include <stddef.h>
#include <stdio.h>

#define PROMTEXT_SCHEMA "loaderd.status/1"
/* The Content-Type of the text, for HTTP. */
#define PROMTEXT_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Writes the metrics of the status document json (len bytes) to out.
 * 0, or -EINVAL with why: json is not JSON, or not of PROMTEXT_SCHEMA.
 * Whether out took every byte is out's to say (ferror). */
int promtext_render(const char *json, size_t len, FILE *out, char *why, size_t cap);

#endif
