/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: one line per event on stderr, with the level prefix systemd's journal
 * understands ("<3>" ... "<7>") when stderr is the journal, and a readable
 * "error:"/"warning:" word otherwise.
 *
 * Contract: log only where the decision is made (docs/style.md, habit 4). Safe from any
 * thread: each line is written with a single write(2).
 *
 * Rate limit: each call site (the code address log_msg returns to) may
 * write LOG_BURST lines per LOG_WINDOW_MS window; further lines from that
 * site in the window are dropped, at every level (an error flood fills a
 * disk as surely as any other). Once a window with drops has ended, one
 * line at the site's level says "N similar messages suppressed: " and the
 * start of the last line dropped; it is written by the next log call from
 * any thread, by log_flush_suppressed(), or at exit. A process that logs
 * a bounded number of lines (start-up, with one line per pipeline) turns
 * the limit off meanwhile with log_set_ratelimit(false).
 */
#ifndef LDR_COMMON_LOG_H
#define LDR_COMMON_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
	LOG_LEVEL_ERROR = 3,
	LOG_LEVEL_WARNING = 4,
	LOG_LEVEL_NOTICE = 5,
	LOG_LEVEL_INFO = 6,
	LOG_LEVEL_DEBUG = 7,
};

/* 50 lines: the largest burst one site makes in normal work is about a
 * line per client (all ranks of a node attaching at once) and passes
 * whole; a flood is held to 10 lines a second per site. */
#define LOG_BURST 50
#define LOG_WINDOW_MS 5000

/* ident prefixes every line ("loaderd", "loaderd-worker[3]"). Lines above
 * max_level are dropped. Call once, before other threads start. */
void log_init(const char *ident, enum log_level max_level);
void log_set_level(enum log_level max_level);

/* Turns the per-site rate limit on (the default) or off. */
void log_set_ratelimit(bool on);

/* Writes the summary line of every window with drops that has ended.
 * Returns the milliseconds until the next such window ends, or -1 when no
 * line is being dropped: a caller with a timer can come back then. */
int64_t log_flush_suppressed(void);

/* Replaces the monotonic clock (milliseconds) the rate limit reads; NULL
 * restores it. For tests: call it while no other thread logs. */
void log_set_clock(uint64_t (*now_ms)(void));

/* From now on the message of every error line (without the ident and
 * level) is also appended to buf (cap bytes, emptied here), "; " between
 * them, as far as it fits; NULL stops it. For a process that must tell
 * someone else why it failed with the words its log used. */
void log_capture(char *buf, size_t cap);

/* The level's name as log_level_parse takes it ("info"). */
const char *log_level_name(enum log_level level);

/* Parses "error|warning|notice|info|debug"; returns 0 or -EINVAL. */
int log_level_parse(const char *text, enum log_level *out);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LEVEL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
