/*
 * log: one line per event on stderr, with the level prefix systemd's journal
 * understands ("<3>" ... "<7>") when stderr is the journal, and a readable
 * "error:"/"warning:" word otherwise.
 *
 * Contract: log only where the decision is made (STYLE.md). Safe from any
 * thread: each line is written with a single write(2).
 */
#ifndef LDR_COMMON_LOG_H
#define LDR_COMMON_LOG_H

enum log_level {
	LOG_LEVEL_ERROR = 3,
	LOG_LEVEL_WARNING = 4,
	LOG_LEVEL_NOTICE = 5,
	LOG_LEVEL_INFO = 6,
	LOG_LEVEL_DEBUG = 7,
};

/* ident prefixes every line ("loaderd", "loaderd-worker[3]"). Lines above
 * max_level are dropped. Call once, before other threads start. */
void log_init(const char *ident, enum log_level max_level);
void log_set_level(enum log_level max_level);

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
