/* status: bounded status text (status.h). */
#include "daemon/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

#define STATUS_TRUNCATED_NOTE "... (status truncated)\n"

void status_init(struct status_text *t)
{
	t->len = 0;
	t->buf[0] = '\0';
	t->truncated = false;
}

void status_printf(struct status_text *t, const char *fmt, ...)
{
	if (t->truncated)
		return;
	size_t room = sizeof(t->buf) - sizeof(STATUS_TRUNCATED_NOTE) - t->len;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->buf + t->len, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room) {
		/* Cut at the last whole line and say so. */
		t->buf[t->len] = '\0';
		memcpy(t->buf + t->len, STATUS_TRUNCATED_NOTE, sizeof(STATUS_TRUNCATED_NOTE));
		t->len += sizeof(STATUS_TRUNCATED_NOTE) - 1;
		t->truncated = true;
		return;
	}
	t->len += (size_t)n;
}

unsigned long long status_now_ms(void)
{
	return clock_mono_ms();
}
