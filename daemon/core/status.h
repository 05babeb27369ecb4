/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status: the daemon's status, answered to STATUS_REQ, in one of two
 * renderings of the same facts: the text `loaderctl status` prints, or
 * JSON (`loaderctl status --json`, schema "loaderd.status/1"). Both are
 * documented in docs/operations.md ("Status") and are stable: scripts and
 * tests parse them.
 *
 * Each module describes itself (pool_describe, sched_describe) through
 * one set of calls: status_field writes a fact (a JSON key and value, and
 * the text fragment showing that same value), status_object/status_array
 * and the lists give it structure, and status_printf writes text-only
 * decoration (headings, newlines). A status_text renders one of the two:
 * text (status_init) or JSON (status_init_json), so the two renderings
 * never disagree. This module holds the bounded text buffer and the JSON
 * writer. The text must fit
 * one STATUS frame (PROTO_STATUS_TEXT_MAX): the summary lines at the end
 * (errors:, config:, connections:) are rendered first and their room kept,
 * and the lists before them (workers, pipelines, clients) are cut by whole
 * items, with a line saying how many were left out.
 */
#ifndef LDR_DAEMON_STATUS_H
#define LDR_DAEMON_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* The status as JSON: one document, grown as needed up to
 * PROTO_STATUS_JSON_MAX bytes (a status over it fails the request). */
#define STATUS_JSON_DEPTH_MAX 16
#define STATUS_JSON_SCHEMA "loaderd.status/1"
struct status_json {
	char *buf;
	size_t len, cap;
	bool failed;   /* out of memory, over the limit or nested too deep */
	bool over;     /* over PROTO_STATUS_JSON_MAX */
	bool malformed; /* containers closed that were not open, or nested too deep */
	uint32_t depth;
	bool comma[STATUS_JSON_DEPTH_MAX]; /* the container at this depth has a member */
	char closer[STATUS_JSON_DEPTH_MAX]; /* '}' or ']' */
};

struct status_text {
	struct status_json *json; /* NULL: the text rendering */
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
/* The JSON rendering, into j (zeroed by the call; freed with
 * status_json_free): writes the opening brace and the "schema" member;
 * status_json_finish closes the document. */
void status_init_json(struct status_text *t, struct status_json *j);
/* 0; -E2BIG over PROTO_STATUS_JSON_MAX; -EINVAL a container left open
 * or nested too deep (a describe call's bug); -ENOMEM. */
int status_json_finish(struct status_text *t);
void status_json_free(struct status_json *j);

/* Text-only: headings, separators, newlines. Nothing in JSON. */
void status_printf(struct status_text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* One fact: in JSON the member "key": value (numbers, booleans, strings
 * escaped), in text fmt formatted with that same value, e.g.
 * status_field(t, "items", " items %" PRIu64, w->items_done). key is NULL
 * for an array's element. The value's C type picks its JSON type. */
enum status_kind { STATUS_U64, STATUS_U32, STATUS_I32, STATUS_I64, STATUS_F64, STATUS_STR,
		   STATUS_BOOL };
#define STATUS_KIND(v) _Generic((v), \
	unsigned long: STATUS_U64, unsigned long long: STATUS_U64, unsigned: STATUS_U32, \
	int: STATUS_I32, long: STATUS_I64, long long: STATUS_I64, double: STATUS_F64, \
	char *: STATUS_STR, const char *: STATUS_STR, _Bool: STATUS_BOOL)
#define status_field(t, key, fmt, v) status_field_((t), (key), STATUS_KIND(v), fmt, v)
void status_field_(struct status_text *t, const char *key, enum status_kind kind,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A string the text shows quoted and escaped (escape_str): prefix"s". */
void status_quoted(struct status_text *t, const char *key, const char *prefix, const char *s);
/* A fact only JSON states; the text says it by its wording. */
void status_json_bool(struct status_text *t, const char *key, bool v);
/* Numbers only JSON states (a histogram's buckets, a sum the text leaves
 * out). */
void status_json_u64(struct status_text *t, const char *key, uint64_t v);
void status_json_f64(struct status_text *t, const char *key, double v);
/* Whether t is the JSON rendering. */
bool status_is_json(const struct status_text *t);

/* "gpus: 0" and "decode: 0", and their empty JSON ("gpus": [],
 * "decode": {"pipelines": []}): a daemon with no GPU to deliver to. */
void status_no_gpus(struct status_text *t);

/* JSON structure; nothing in text. key is NULL inside an array. */
void status_object(struct status_text *t, const char *key);
void status_array(struct status_text *t, const char *key);
void status_close(struct status_text *t);

/* Keeps bytes of room at the end for text appended later (the summary
 * lines, which must never be cut): status_printf stops short of them. */
void status_reserve(struct status_text *t, size_t bytes);
/* Appends tail's text (into the room reserved for it). */
void status_append(struct status_text *t, const struct status_text *tail);

/* A list: begin (its heading already printed), then for each item
 * `if (status_item_begin(t, l)) { print it; status_item_end(t, l); }`,
 * then end, which prints the count of items left out, if any. In JSON
 * the list is the array named what, each item an object, and no item is
 * left out. */
void status_list_begin(struct status_text *t, struct status_list *l, const char *what);
bool status_item_begin(struct status_text *t, struct status_list *l);
void status_item_end(struct status_text *t, struct status_list *l);
void status_list_end(struct status_text *t, struct status_list *l);

/* Milliseconds on the monotonic clock (for uptime and back-off). */
unsigned long long status_now_ms(void);

#endif
