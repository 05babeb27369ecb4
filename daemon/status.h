/*
 * status: the daemon's human-readable status text, answered to STATUS_REQ
 * (what `loaderctl status` prints). The line formats are documented in
 * the README and are stable: scripts and tests parse them.
 *
 * Each module describes itself (pool_describe, sched_describe); this
 * module holds the bounded text buffer they write into.
 */
#ifndef LDR_DAEMON_STATUS_H
#define LDR_DAEMON_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/proto.h"

struct status_text {
	char buf[PROTO_STATUS_TEXT_MAX + 1];
	size_t len;
	bool truncated; /* a line did not fit; the text ends with a note */
};

void status_init(struct status_text *t);
void status_printf(struct status_text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Milliseconds on the monotonic clock (for uptime and back-off). */
unsigned long long status_now_ms(void);

#endif
