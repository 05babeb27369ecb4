/* SPDX-License-Identifier: Apache-2.0 */
/* log: level-prefixed lines on stderr (see log.h). */
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

static char log_ident[64] = "loaderd";
/* Atomic: a reload changes it on the loop thread while the GPU threads log. */
static _Atomic int log_max = LOG_LEVEL_INFO;
static int log_journal = -1; /* stderr is journald's stream: use <N> prefixes */
static _Atomic bool log_limit = true;

/* Rate limit (log.h): one entry per call site with a window open. A site
 * is the pair (return address, format): a tail call can make two sites of
 * one function return to the same address, and one "%s" format serves many
 * sites. More sites than LOG_SITES at once, or than LOG_PROBE on one hash
 * chain, take the place of the entry whose window ends first. */
#define LOG_SITES 128
#define LOG_PROBE 8
#define LOG_LIKE_MAX 80   /* start of the first line dropped, for the summary */
#define LOG_SUMMARIES 4   /* summaries taken per lock, written after it */

struct log_site {
	const void *caller; /* NULL: a free entry */
	const char *fmt;
	uint64_t window_end_ms;
	unsigned printed, dropped;
	int level;
	char like[LOG_LIKE_MAX];
};

struct log_summary {
	int level;
	unsigned dropped;
	char like[LOG_LIKE_MAX];
};

static uint64_t log_monotonic_ms(void)
{
	return clock_mono_ms();
}

/* Everything below is guarded by log_lock; lines are written outside it. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_site log_sites[LOG_SITES];
static uint64_t log_next_summary_ms = UINT64_MAX; /* earliest ended-with-drops window */
static uint64_t (*log_clock)(void) = log_monotonic_ms;

/* systemd sets JOURNAL_STREAM=DEV:INO for the stream it connected; stderr
 * is the journal only when it is still that very stream. */
static int log_stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	if (!env || sscanf(env, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static void log_flush_at_exit(void);

void log_init(const char *ident, enum log_level max_level)
{
	static bool exit_hook;
	snprintf(log_ident, sizeof(log_ident), "%s", ident);
	log_max = max_level;
	log_journal = log_stderr_is_journal();
	if (!exit_hook && atexit(log_flush_at_exit) == 0)
		exit_hook = true;
}

void log_set_ratelimit(bool on)
{
	atomic_store_explicit(&log_limit, on, memory_order_relaxed);
}

void log_set_clock(uint64_t (*now_ms)(void))
{
	log_clock = now_ms ? now_ms : log_monotonic_ms;
}

void log_set_level(enum log_level max_level)
{
	atomic_store_explicit(&log_max, max_level, memory_order_relaxed);
}

static const struct {
	const char *name;
	enum log_level level;
} level_names[] = {
	{"error", LOG_LEVEL_ERROR}, {"warning", LOG_LEVEL_WARNING},
	{"notice", LOG_LEVEL_NOTICE}, {"info", LOG_LEVEL_INFO},
	{"debug", LOG_LEVEL_DEBUG},
};
#define N_LEVELS (sizeof(level_names) / sizeof(level_names[0]))

const char *log_level_name(enum log_level level)
{
	for (size_t i = 0; i < N_LEVELS; i++)
		if (level_names[i].level == level)
			return level_names[i].name;
	return "?";
}

int log_level_parse(const char *text, enum log_level *out)
{
	for (size_t i = 0; i < N_LEVELS; i++) {
		if (strcmp(text, level_names[i].name) == 0) {
			*out = level_names[i].level;
			return 0;
		}
	}
	return -EINVAL;
}

static const char *const level_words[] = {
	[LOG_LEVEL_ERROR] = "error: ", [LOG_LEVEL_WARNING] = "warning: ",
	[LOG_LEVEL_NOTICE] = "", [LOG_LEVEL_INFO] = "", [LOG_LEVEL_DEBUG] = "debug: ",
};

/* Writes one line: the prefix, the formatted text and '\n', in one write. */
/* log_capture's buffer: error lines' messages, "; " between them. */
static char *log_capture_buf; /* under log_lock */
static size_t log_capture_cap;
static atomic_bool log_capture_on; /* read without the lock: whether to bother */

static void log_capture_add(const char *msg)
{
	pthread_mutex_lock(&log_lock);
	if (log_capture_buf) {
		size_t at = strlen(log_capture_buf);
		if (at + 3 < log_capture_cap)
			snprintf(log_capture_buf + at, log_capture_cap - at, "%s%s", at ? "; " : "",
				 msg);
	}
	pthread_mutex_unlock(&log_lock);
}

void log_capture(char *buf, size_t cap)
{
	pthread_mutex_lock(&log_lock);
	log_capture_buf = buf && cap ? buf : NULL;
	log_capture_cap = cap;
	atomic_store(&log_capture_on, log_capture_buf != NULL);
	if (log_capture_buf)
		buf[0] = '\0';
	pthread_mutex_unlock(&log_lock);
}

static void log_write_line(int level, const char *fmt, va_list ap)
{
	char line[2048];
	int n;
	if (log_journal > 0)
		n = snprintf(line, sizeof(line), "<%d>%s: ", level, log_ident);
	else
		n = snprintf(line, sizeof(line), "%s: %s", log_ident, level_words[level]);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	if (level == LOG_LEVEL_ERROR && atomic_load_explicit(&log_capture_on, memory_order_relaxed)) {
		line[len] = '\0';
		log_capture_add(line + n);
	}
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

static void log_write_linef(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_write_linef(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_write_line(level, fmt, ap);
	va_end(ap);
}

static void log_write_summaries(const struct log_summary *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		log_write_linef(s[i].level, "%u similar message%s suppressed: %s", s[i].dropped,
				s[i].dropped == 1 ? "" : "s", s[i].like);
}

/* Moves a site's drops into *out and frees the site. Under log_lock. */
static void log_site_take(struct log_site *site, struct log_summary *out)
{
	out->level = site->level;
	out->dropped = site->dropped;
	snprintf(out->like, sizeof(out->like), "%s", site->like[0] ? site->like : site->fmt);
	memset(site, 0, sizeof(*site));
}

/* Takes up to cap summaries of windows with drops that ended by now (every
 * window with drops when all is set) and recomputes log_next_summary_ms.
 * Under log_lock. */
static size_t log_take_ended(uint64_t now, bool all, struct log_summary *out, size_t cap)
{
	size_t n = 0;
	if (!all && now < log_next_summary_ms)
		return 0;
	uint64_t next = UINT64_MAX;
	for (size_t i = 0; i < LOG_SITES; i++) {
		struct log_site *site = &log_sites[i];
		if (!site->caller || !site->dropped)
			continue;
		if ((all || site->window_end_ms <= now) && n < cap)
			log_site_take(site, &out[n++]);
		else if (site->window_end_ms < next)
			next = site->window_end_ms;
	}
	log_next_summary_ms = next;
	return n;
}

/* The entry of (caller, fmt), its window current at now; a full chain
 * gives up the entry whose window ends first, its drops into *evicted.
 * Under log_lock. */
static struct log_site *log_site_get(const void *caller, const char *fmt, uint64_t now,
				     struct log_summary *evicted, size_t *n_evicted)
{
	uintptr_t h = ((uintptr_t)caller ^ ((uintptr_t)fmt >> 3)) * (uintptr_t)0x9E3779B97F4A7C15ull;
	size_t start = (size_t)(h >> 7) % LOG_SITES;
	struct log_site *spare = NULL, *oldest = NULL;
	for (size_t i = 0; i < LOG_PROBE; i++) {
		struct log_site *site = &log_sites[(start + i) % LOG_SITES];
		if (site->caller == caller && site->fmt == fmt) {
			if (now >= site->window_end_ms) {
				if (site->dropped)
					log_site_take(site, &evicted[(*n_evicted)++]);
				spare = site;
				break;
			}
			return site;
		}
		bool reusable = !site->caller || (now >= site->window_end_ms && !site->dropped);
		if (reusable && (!spare || (spare->caller && !site->caller)))
			spare = site;
		if (!oldest || site->window_end_ms < oldest->window_end_ms)
			oldest = site;
	}
	if (!spare) {
		spare = oldest;
		if (spare->dropped)
			log_site_take(spare, &evicted[(*n_evicted)++]);
	}
	*spare = (struct log_site){.caller = caller, .fmt = fmt, .window_end_ms = now + LOG_WINDOW_MS};
	return spare;
}

/* "like": the message of the first dropped line, cut at a word boundary. */
static void log_set_like(const void *caller, const char *fmt, uint64_t window_end_ms, va_list ap)
{
	char text[LOG_LIKE_MAX];
	int m = vsnprintf(text, sizeof(text), fmt, ap);
	if (m < 0)
		return;
	if ((size_t)m >= LOG_LIKE_MAX) {
		size_t cut = LOG_LIKE_MAX - 4;
		while (cut > LOG_LIKE_MAX / 2 && text[cut] != ' ')
			cut--;
		memcpy(text + cut, "...", 4);
	}
	pthread_mutex_lock(&log_lock);
	for (size_t i = 0; i < LOG_SITES; i++) {
		struct log_site *site = &log_sites[i];
		if (site->caller == caller && site->fmt == fmt && site->window_end_ms == window_end_ms) {
			memcpy(site->like, text, sizeof(site->like));
			break;
		}
	}
	pthread_mutex_unlock(&log_lock);
}

/* Writes the summaries of the windows with drops that ended by now;
 * returns when the next one ends (UINT64_MAX: none pending). */
static uint64_t log_flush_ended(uint64_t now)
{
	struct log_summary out[LOG_SUMMARIES];
	size_t n;
	uint64_t next;
	do {
		pthread_mutex_lock(&log_lock);
		n = log_take_ended(now, false, out, LOG_SUMMARIES);
		next = log_next_summary_ms;
		pthread_mutex_unlock(&log_lock);
		log_write_summaries(out, n);
	} while (n == LOG_SUMMARIES);
	return next;
}

int64_t log_flush_suppressed(void)
{
	int saved_errno = errno;
	uint64_t now = log_clock(), next = log_flush_ended(now);
	errno = saved_errno;
	return next == UINT64_MAX ? -1 : next <= now ? 0 : (int64_t)(next - now);
}

/* At exit every pending count is written, its window over or not. */
static void log_flush_at_exit(void)
{
	struct log_summary out[LOG_SUMMARIES];
	size_t n;
	do {
		pthread_mutex_lock(&log_lock);
		n = log_take_ended(0, true, out, LOG_SUMMARIES);
		pthread_mutex_unlock(&log_lock);
		log_write_summaries(out, n);
	} while (n == LOG_SUMMARIES);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level < LOG_LEVEL_ERROR)
		level = LOG_LEVEL_ERROR;
	if ((int)level > atomic_load_explicit(&log_max, memory_order_relaxed))
		return;
	int saved_errno = errno;
	va_list ap;
	if (!atomic_load_explicit(&log_limit, memory_order_relaxed)) {
		va_start(ap, fmt);
		log_write_line((int)level, fmt, ap);
		va_end(ap);
		errno = saved_errno;
		return;
	}
	const void *caller = __builtin_return_address(0);
	struct log_summary evicted;
	size_t n = 0;
	uint64_t now = log_clock();
	log_flush_ended(now); /* older news first */
	pthread_mutex_lock(&log_lock);
	struct log_site *site = log_site_get(caller, fmt, now, &evicted, &n);
	site->level = (int)level;
	bool print = site->printed < LOG_BURST;
	bool first_drop = false;
	if (print) {
		site->printed++;
	} else if (site->dropped++ == 0) {
		first_drop = true;
		if (site->window_end_ms < log_next_summary_ms)
			log_next_summary_ms = site->window_end_ms;
	}
	uint64_t window_end_ms = site->window_end_ms;
	pthread_mutex_unlock(&log_lock);

	log_write_summaries(&evicted, n);
	va_start(ap, fmt);
	if (print)
		log_write_line((int)level, fmt, ap);
	else if (first_drop)
		log_set_like(caller, fmt, window_end_ms, ap);
	va_end(ap);
	errno = saved_errno;
}
