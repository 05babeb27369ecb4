/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status: the daemon's human-readable status text, answered to STATUS_REQ
 * (what `loaderctl status` prints). The line formats are documented in
 * docs/operations.md ("Status") and are stable: scripts and tests parse them.
 *
 * Each module describes itself (pool_describe, sched_describe); this
 * module holds the bounded text buffer they write into. The text must fit
 * one STATUS frame (PROTO_STATUS_TEXT_MAX): the summary lines at the end
 * (errors:, config:, connections:) are rendered first and their room kept,
 * and the lists before them (workers, pipelines, clients) are cut by whole
 * items, with a line saying how many were left out.
 */
#ifndef LDR_DAEMON_STATUS_H
#define LDR_DAEMON_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#include "proto/proto.h"

struct status_text {
	char buf[PROTO_STATUS_TEXT_MAX + 1];
	size_t len;
	size_t cap;          /* bytes the text may fill now (less what is reserved) */
	bool truncated;      /* a line outside a list did not fit; the text ends with a note */
	bool in_item;        /* between status_item_begin and status_item_end */
	bool item_overflow;  /* the item being written did not fit */
};

/* A list of items (workers, pipelines, clients) that may be cut: items
 * that do not fit are left out whole and counted, and the list ends with
 * "  ... N more WHAT (the status text holds at most M bytes)". */
struct status_list {
	const char *what;
	size_t omitted;
	size_t mark; /* the text's length where the current item began */
	size_t cap;  /* the text's cap before the list reserved its note */
	bool full;
};

void status_init(struct status_text *t);
void status_printf(struct status_text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Keeps bytes of room at the end for text appended later (the summary
 * lines, which must never be cut): status_printf stops short of them. */
void status_reserve(struct status_text *t, size_t bytes);
/* Appends tail's text (into the room reserved for it). */
void status_append(struct status_text *t, const struct status_text *tail);

/* A list: begin (its heading already printed), then for each item
 * `if (status_item_begin(t, l)) { print it; status_item_end(t, l); }`,
 * then end, which prints the count of items left out, if any. */
void status_list_begin(struct status_text *t, struct status_list *l, const char *what);
bool status_item_begin(struct status_text *t, struct status_list *l);
void status_item_end(struct status_text *t, struct status_list *l);
void status_list_end(struct status_text *t, struct status_list *l);

/* Milliseconds on the monotonic clock (for uptime and back-off). */
unsigned long long status_now_ms(void);

#endif
