/* SPDX-License-Identifier: Apache-2.0 */
/* status: the status's two renderings, bounded text and JSON (status.h). */
#include "daemon/core/status.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/escape.h"

#define STATUS_TRUNCATED_NOTE "... (status truncated)\n"
/* Room a list keeps for its "  ... N more WHAT" line. */
#define STATUS_MORE_NOTE_MAX 128

void status_init(struct status_text *t)
{
	t->json = NULL;
	t->len = 0;
	t->buf[0] = '\0';
	t->truncated = false;
	t->cap = sizeof(t->buf) - 1;
	t->in_item = false;
	t->item_overflow = false;
}

static void status_vprintf(struct status_text *t, const char *fmt, va_list ap)
{
	if (t->truncated || t->item_overflow)
		return;
	/* Outside a list item the generic note must still fit after a cut. */
	size_t keep = t->in_item ? 1 : sizeof(STATUS_TRUNCATED_NOTE);
	size_t room = t->cap >= t->len + keep ? t->cap - t->len - keep + 1 : 0;
	int n = -1;
	if (room > 0)
		n = vsnprintf(t->buf + t->len, room, fmt, ap);
	if (n >= 0 && (size_t)n < room) {
		t->len += (size_t)n;
		return;
	}
	t->buf[t->len] = '\0';
	if (t->in_item) { /* status_item_end takes the item back whole */
		t->item_overflow = true;
		return;
	}
	/* Cut at the last whole line and say so. */
	size_t note = sizeof(STATUS_TRUNCATED_NOTE) - 1;
	if (t->len + note <= sizeof(t->buf) - 1) {
		memcpy(t->buf + t->len, STATUS_TRUNCATED_NOTE, note + 1);
		t->len += note;
	}
	t->truncated = true;
}

void status_printf(struct status_text *t, const char *fmt, ...)
{
	if (t->json)
		return;
	va_list ap;
	va_start(ap, fmt);
	status_vprintf(t, fmt, ap);
	va_end(ap);
}

void status_reserve(struct status_text *t, size_t bytes)
{
	t->cap = t->cap > t->len + bytes ? t->cap - bytes : t->len;
}

void status_append(struct status_text *t, const struct status_text *tail)
{
	size_t n = tail->len;
	if (n > sizeof(t->buf) - 1 - t->len)
		n = sizeof(t->buf) - 1 - t->len;
	memcpy(t->buf + t->len, tail->buf, n);
	t->len += n;
	t->buf[t->len] = '\0';
}

void status_list_begin(struct status_text *t, struct status_list *l, const char *what)
{
	l->what = what;
	l->omitted = 0;
	l->full = false;
	l->cap = t->cap;
	status_reserve(t, STATUS_MORE_NOTE_MAX);
	status_array(t, what);
}

bool status_item_begin(struct status_text *t, struct status_list *l)
{
	if (t->json) {
		status_object(t, NULL);
		return true;
	}
	if (l->full || t->truncated) {
		l->omitted++;
		return false;
	}
	l->mark = t->len;
	t->in_item = true;
	t->item_overflow = false;
	return true;
}

void status_item_end(struct status_text *t, struct status_list *l)
{
	if (t->json) {
		status_close(t);
		return;
	}
	t->in_item = false;
	if (!t->item_overflow)
		return;
	t->item_overflow = false;
	t->len = l->mark;
	t->buf[t->len] = '\0';
	l->full = true;
	l->omitted++;
}

void status_list_end(struct status_text *t, struct status_list *l)
{
	if (t->json) {
		status_close(t);
		return;
	}
	t->cap = l->cap;
	if (l->omitted)
		status_printf(t, "  ... %zu more %s (the status text holds at most %u bytes)\n",
			      l->omitted, l->what, (unsigned)PROTO_STATUS_TEXT_MAX);
}

unsigned long long status_now_ms(void)
{
	return clock_mono_ms();
}

/* The JSON rendering. */

static void json_put(struct status_json *j, const char *s, size_t n)
{
	if (j->failed)
		return;
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 16384;
		while (j->len + n + 1 > cap)
			cap *= 2;
		if (cap > PROTO_STATUS_JSON_MAX + 1)
			cap = PROTO_STATUS_JSON_MAX + 1;
		if (j->len + n + 1 > cap) {
			j->failed = j->over = true;
			return;
		}
		char *p = realloc(j->buf, cap);
		if (!p) {
			j->failed = true;
			return;
		}
		j->buf = p;
		j->cap = cap;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void json_puts(struct status_json *j, const char *s)
{
	json_put(j, s, strlen(s));
}

/* The length of the valid UTF-8 sequence at s (1..4), or 0 where s
 * starts none (RFC 3629: no overlongs, no surrogates, at most U+10FFFF). */
static size_t utf8_len(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
		 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
	    (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

/* A JSON string: quotes, backslashes and control characters escaped,
 * valid UTF-8 as it is, and each byte that is not (a path may hold any
 * bytes) as the four characters \xNN, the text's own escape (escape.h),
 * so the document is always valid UTF-8. */
static void json_string(struct status_json *j, const char *str)
{
	const unsigned char *s = (const unsigned char *)str, *run = s;
	json_put(j, "\"", 1);
	while (*s) {
		size_t n = utf8_len(s);
		if (n > 1 || (n == 1 && *s >= 0x20 && *s != '"' && *s != '\\' && *s != 0x7f)) {
			s += n;
			continue;
		}
		json_put(j, (const char *)run, (size_t)(s - run));
		char esc[8];
		if (*s == '"' || *s == '\\')
			snprintf(esc, sizeof(esc), "\\%c", *s);
		else if (*s == '\n')
			snprintf(esc, sizeof(esc), "\\n");
		else if (n == 1)
			snprintf(esc, sizeof(esc), "\\u%04x", *s);
		else
			snprintf(esc, sizeof(esc), "\\\\x%02x", *s);
		json_puts(j, esc);
		run = ++s;
	}
	json_put(j, (const char *)run, (size_t)(s - run));
	json_put(j, "\"", 1);
}

/* The separator and key before a member (key NULL: an array element). */
static void json_key(struct status_json *j, const char *key)
{
	if (j->comma[j->depth])
		json_put(j, ",", 1);
	j->comma[j->depth] = true;
	if (key) {
		json_string(j, key);
		json_put(j, ":", 1);
	}
}

static void json_open(struct status_text *t, const char *key, const char *brace)
{
	struct status_json *j = t->json;
	if (!j)
		return;
	json_key(j, key);
	json_puts(j, brace);
	if (j->depth + 1 >= STATUS_JSON_DEPTH_MAX) {
		j->failed = j->malformed = true;
		return;
	}
	j->comma[++j->depth] = false;
	j->closer[j->depth] = brace[0] == '{' ? '}' : ']';
}

void status_object(struct status_text *t, const char *key)
{
	json_open(t, key, "{");
}

void status_array(struct status_text *t, const char *key)
{
	json_open(t, key, "[");
}

void status_close(struct status_text *t)
{
	struct status_json *j = t->json;
	if (!j || j->failed)
		return;
	if (j->depth == 0) {
		j->failed = j->malformed = true;
		return;
	}
	json_put(j, &j->closer[j->depth--], 1);
}

void status_init_json(struct status_text *t, struct status_json *j)
{
	status_init(t);
	memset(j, 0, sizeof(*j));
	t->json = j;
	json_put(j, "{", 1);
	json_key(j, "schema");
	json_string(j, STATUS_JSON_SCHEMA);
}

int status_json_finish(struct status_text *t)
{
	struct status_json *j = t->json;
	if (j->malformed || (!j->failed && j->depth != 0))
		return -EINVAL; /* a describe call's containers do not match */
	json_put(j, "}\n", 2);
	if (!j->failed)
		return 0;
	return j->over ? -E2BIG : -ENOMEM;
}

void status_json_free(struct status_json *j)
{
	free(j->buf);
	j->buf = NULL;
}

void status_field_(struct status_text *t, const char *key, enum status_kind kind,
		   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	struct status_json *j = t->json;
	if (!j) {
		status_vprintf(t, fmt, ap);
		va_end(ap);
		return;
	}
	char num[64];
	json_key(j, key);
	switch (kind) {
	case STATUS_U64: snprintf(num, sizeof(num), "%llu", (unsigned long long)va_arg(ap, unsigned long long)); break;
	case STATUS_U32: snprintf(num, sizeof(num), "%u", va_arg(ap, unsigned)); break;
	case STATUS_I32: snprintf(num, sizeof(num), "%d", va_arg(ap, int)); break;
	case STATUS_I64: snprintf(num, sizeof(num), "%lld", (long long)va_arg(ap, long long)); break;
	case STATUS_BOOL: snprintf(num, sizeof(num), "%s", va_arg(ap, int) ? "true" : "false"); break;
	case STATUS_F64: {
		double v = va_arg(ap, double);
		if (isfinite(v))
			snprintf(num, sizeof(num), "%.15g", v);
		else
			snprintf(num, sizeof(num), "null");
		break;
	}
	case STATUS_STR: {
		const char *s = va_arg(ap, const char *);
		json_string(j, s ? s : "");
		va_end(ap);
		return;
	}
	}
	va_end(ap);
	json_puts(j, num);
}

void status_quoted(struct status_text *t, const char *key, const char *prefix, const char *s)
{
	if (t->json) {
		json_key(t->json, key);
		json_string(t->json, s);
		return;
	}
	char esc[ESCAPE_SIZE(PROTO_ERROR_TEXT_MAX)];
	status_printf(t, "%s\"%s\"", prefix, escape_str(s, esc, sizeof(esc)));
}

void status_json_bool(struct status_text *t, const char *key, bool v)
{
	if (!t->json)
		return;
	json_key(t->json, key);
	json_puts(t->json, v ? "true" : "false");
}

void status_json_u64(struct status_text *t, const char *key, uint64_t v)
{
	if (t->json)
		status_field_(t, key, STATUS_U64, "%" PRIu64, v);
}

void status_json_f64(struct status_text *t, const char *key, double v)
{
	if (t->json)
		status_field_(t, key, STATUS_F64, "%g", v);
}

bool status_is_json(const struct status_text *t)
{
	return t->json != NULL;
}

void status_no_gpus(struct status_text *t)
{
	status_printf(t, "gpus: 0\ndecode: 0\n");
	status_array(t, "gpus");
	status_close(t);
	status_object(t, "decode");
	status_array(t, "pipelines");
	status_close(t);
	status_close(t);
}
