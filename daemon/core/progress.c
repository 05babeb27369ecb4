/* SPDX-License-Identifier: Apache-2.0 */
/* progress: how far long start-up work is (progress.h). */
#include "daemon/core/progress.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"

static progress_sink_fn progress_sink;
static char progress_prefix[128];
static uint64_t progress_first_ns = PROGRESS_FIRST_NS, progress_every_ns = PROGRESS_EVERY_NS;

void progress_set_interval(uint64_t interval_ns)
{
	progress_first_ns = interval_ns ? interval_ns : PROGRESS_FIRST_NS;
	progress_every_ns = interval_ns ? interval_ns : PROGRESS_EVERY_NS;
}

void progress_set_sink(progress_sink_fn sink)
{
	progress_sink = sink;
}

void progress_scope(const char *scope)
{
	snprintf(progress_prefix, sizeof(progress_prefix), "%s", scope ? scope : "");
}

/* n with a comma every three digits: 1,200,000. */
static void progress_number(uint64_t n, char *buf, size_t cap)
{
	char digits[32];
	int len = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)n);
	size_t at = 0;
	for (int i = 0; i < len && at + 2 < cap; i++) {
		if (i > 0 && (len - i) % 3 == 0)
			buf[at++] = ',';
		buf[at++] = digits[i];
	}
	buf[at] = '\0';
}

static void progress_say(struct progress *p, uint64_t now_ns, bool done)
{
	char count[40], text[PROGRESS_TEXT_MAX];
	progress_number(p->count, count, sizeof(count));
	unsigned long long s = (now_ns - p->start_ns) / 1000000000ull;
	snprintf(text, sizeof(text), "%s%s%s: %s %s%s, %llu s", progress_prefix,
		 progress_prefix[0] ? ": " : "", p->what, count, p->unit,
		 done ? " in all" : " so far", s);
	progress_sink(text, done);
}

void progress_begin(struct progress *p, const char *unit, const char *what)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->what, sizeof(p->what), "%s", what);
	p->unit = unit;
	p->start_ns = clock_mono_ns();
	p->next_ns = p->start_ns + progress_first_ns;
}

void progress_add(struct progress *p, uint64_t n)
{
	p->count += n;
	if (!progress_sink)
		return;
	uint64_t now = clock_mono_ns();
	if (now < p->next_ns)
		return;
	p->next_ns = now + progress_every_ns;
	p->said = true;
	progress_say(p, now, false);
}

void progress_end(struct progress *p)
{
	if (progress_sink && p->said)
		progress_say(p, clock_mono_ns(), true);
	p->said = false;
}
