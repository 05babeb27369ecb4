/* SPDX-License-Identifier: Apache-2.0 */
/* status: bounded status text (status.h). */
#include "daemon/core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

#define STATUS_TRUNCATED_NOTE "... (status truncated)\n"
/* Room a list keeps for its "  ... N more WHAT" line. */
#define STATUS_MORE_NOTE_MAX 128

void status_init(struct status_text *t)
{
	t->len = 0;
	t->buf[0] = '\0';
	t->truncated = false;
	t->cap = sizeof(t->buf) - 1;
	t->in_item = false;
	t->item_overflow = false;
}

void status_printf(struct status_text *t, const char *fmt, ...)
{
	if (t->truncated || t->item_overflow)
		return;
	/* Outside a list item the generic note must still fit after a cut. */
	size_t keep = t->in_item ? 1 : sizeof(STATUS_TRUNCATED_NOTE);
	size_t room = t->cap >= t->len + keep ? t->cap - t->len - keep + 1 : 0;
	int n = -1;
	if (room > 0) {
		va_list ap;
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, room, fmt, ap);
		va_end(ap);
	}
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
}

bool status_item_begin(struct status_text *t, struct status_list *l)
{
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
	t->cap = l->cap;
	if (l->omitted)
		status_printf(t, "  ... %zu more %s (the status text holds at most %u bytes)\n",
			      l->omitted, l->what, (unsigned)PROTO_STATUS_TEXT_MAX);
}

unsigned long long status_now_ms(void)
{
	return clock_mono_ms();
}
