/* SPDX-License-Identifier: Apache-2.0 */
/* progress: how far long scans are (progress.h). */
#include "daemon/core/progress.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "daemon/core/status.h"

static _Atomic(progress_sink_fn) progress_sink;
static uint64_t progress_first_ns = PROGRESS_FIRST_NS, progress_every_ns = PROGRESS_EVERY_NS;
/* The thread's scope and cancel flag (progress.h, "Threads"). */
static _Thread_local char progress_pipeline[PROGRESS_SCOPE_MAX];
static _Thread_local const atomic_bool *progress_cancel;
/* The running scans, newest first: written by the scans' threads, read
 * by progress_describe's. */
static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
static struct progress *progress_running;

void progress_set_interval(uint64_t interval_ns)
{
	progress_first_ns = interval_ns ? interval_ns : PROGRESS_FIRST_NS;
	progress_every_ns = interval_ns ? interval_ns : PROGRESS_EVERY_NS;
}

void progress_set_sink(progress_sink_fn sink)
{
	atomic_store(&progress_sink, sink);
}

void progress_scope(const char *pipeline)
{
	snprintf(progress_pipeline, sizeof(progress_pipeline), "%s", pipeline ? pipeline : "");
}

void progress_set_cancel(const atomic_bool *flag)
{
	progress_cancel = flag;
}

bool progress_cancelled(void)
{
	return progress_cancel && atomic_load_explicit(progress_cancel, memory_order_relaxed);
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

/* "pipeline train: listing /data/train: 1,200,000 files so far" (done:
 * "in all", or "when stopped" for a scan its cancel flag stopped) */
static void progress_text(const struct progress *p, uint64_t count, bool done, char *buf,
			  size_t cap)
{
	char number[40];
	progress_number(count, number, sizeof(number));
	bool stopped = p->cancel && atomic_load(p->cancel);
	snprintf(buf, cap, "%s%s%s%s: %s %s%s", p->pipeline[0] ? "pipeline " : "", p->pipeline,
		 p->pipeline[0] ? ": " : "", p->what, number, p->unit,
		 !done ? " so far" : stopped ? " when stopped" : " in all");
}

static void progress_say(struct progress *p, uint64_t now_ns, bool done)
{
	char text[PROGRESS_TEXT_MAX], line[PROGRESS_TEXT_MAX + 32];
	progress_text(p, atomic_load(&p->count), done, text, sizeof(text));
	snprintf(line, sizeof(line), "%s, %llu s", text,
		 (unsigned long long)((now_ns - p->start_ns) / 1000000000ull));
	progress_sink_fn sink = atomic_load(&progress_sink);
	if (sink)
		sink(line, done);
}

void progress_begin(struct progress *p, const char *unit, const char *what)
{
	memset(p, 0, sizeof(*p));
	atomic_init(&p->count, 0);
	snprintf(p->pipeline, sizeof(p->pipeline), "%s", progress_pipeline);
	snprintf(p->what, sizeof(p->what), "%s", what);
	p->unit = unit;
	p->cancel = progress_cancel;
	p->start_ns = clock_mono_ns();
	p->next_ns = p->start_ns + progress_first_ns;
	pthread_mutex_lock(&progress_lock);
	p->next = progress_running;
	if (progress_running)
		progress_running->prev = p;
	progress_running = p;
	pthread_mutex_unlock(&progress_lock);
}

int progress_add(struct progress *p, uint64_t n)
{
	atomic_fetch_add_explicit(&p->count, n, memory_order_relaxed);
	if (p->cancel && atomic_load_explicit(p->cancel, memory_order_relaxed))
		return -ECANCELED;
	if (!atomic_load_explicit(&progress_sink, memory_order_relaxed))
		return 0;
	uint64_t now = clock_mono_ns();
	if (now < p->next_ns)
		return 0;
	p->next_ns = now + progress_every_ns;
	p->said = true;
	progress_say(p, now, false);
	return 0;
}

void progress_end(struct progress *p)
{
	pthread_mutex_lock(&progress_lock);
	if (p->prev)
		p->prev->next = p->next;
	else if (progress_running == p)
		progress_running = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
	pthread_mutex_unlock(&progress_lock);
	if (p->said)
		progress_say(p, clock_mono_ns(), true);
	p->said = false;
}

void progress_describe(struct status_text *t)
{
	uint64_t now = clock_mono_ns();
	status_array(t, "scans");
	pthread_mutex_lock(&progress_lock);
	for (struct progress *p = progress_running; p; p = p->next) {
		uint64_t count = atomic_load_explicit(&p->count, memory_order_relaxed);
		double s = (double)((now - p->start_ns) / 100000000ull) / 10;
		status_object(t, NULL);
		if (t->json) { /* the text has the count with its commas, as the log */
			status_field(t, "pipeline", "%s", (const char *)p->pipeline);
			status_field(t, "what", "%s", (const char *)p->what);
			status_field(t, "count", "%llu", (unsigned long long)count);
			status_field(t, "unit", "%s", p->unit);
		} else {
			char text[PROGRESS_TEXT_MAX];
			progress_text(p, count, false, text, sizeof(text));
			status_printf(t, "scan: %s", text);
		}
		status_field(t, "seconds", ", %.1f s\n", s);
		status_close(t);
	}
	pthread_mutex_unlock(&progress_lock);
	status_close(t);
}

void progress_first(char *buf, size_t cap)
{
	buf[0] = '\0';
	pthread_mutex_lock(&progress_lock);
	if (progress_running)
		progress_text(progress_running, atomic_load(&progress_running->count), false, buf,
			      cap);
	pthread_mutex_unlock(&progress_lock);
}
