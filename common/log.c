/* log: level-prefixed lines on stderr (see log.h). */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char log_ident[64] = "loaderd";
/* Atomic: a reload changes it on the loop thread while the pinning thread logs. */
static _Atomic int log_max = LOG_LEVEL_INFO;
static int log_journal = -1; /* stderr is journald's stream: use <N> prefixes */

/* systemd sets JOURNAL_STREAM=DEV:INO for the stream it connected; stderr
 * is the journal only when it is still that very stream. */
static int stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	if (!env || sscanf(env, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_init(const char *ident, enum log_level max_level)
{
	snprintf(log_ident, sizeof(log_ident), "%s", ident);
	log_max = max_level;
	log_journal = stderr_is_journal();
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

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const words[] = {
		[LOG_LEVEL_ERROR] = "error: ", [LOG_LEVEL_WARNING] = "warning: ",
		[LOG_LEVEL_NOTICE] = "", [LOG_LEVEL_INFO] = "", [LOG_LEVEL_DEBUG] = "debug: ",
	};
	if (level < LOG_LEVEL_ERROR)
		level = LOG_LEVEL_ERROR;
	if ((int)level > atomic_load_explicit(&log_max, memory_order_relaxed))
		return;
	int saved_errno = errno;
	char line[2048];
	int n;
	if (log_journal > 0)
		n = snprintf(line, sizeof(line), "<%d>%s: ", (int)level, log_ident);
	else
		n = snprintf(line, sizeof(line), "%s: %s", log_ident, words[level]);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
	errno = saved_errno;
}
