/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_text.h: what the configuration parser's unit tests share: a
 * temporary directory per test process, config text written to a file
 * there and loaded, and an error expected with its "FILE:LINE: " prefix.
 * Included by the test_config*.c files only.
 */
#ifndef LDR_TESTS_CONFIG_TEXT_H
#define LDR_TESTS_CONFIG_TEXT_H

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "daemon/config/config.h"

/* One temporary directory per test process; config text is written to
 * tmp_dir/loaderd.conf (or a path below it). */
static char tmp_dir[PATH_MAX];
static char conf_path[PATH_MAX + 32];
static struct config *cfg;
static char err[8192];

static inline int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/test_config.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmp_dir))
		return -1;
	snprintf(conf_path, sizeof(conf_path), "%s/loaderd.conf", tmp_dir);
	cfg = malloc(sizeof(*cfg));
	return cfg ? 0 : -1;
}

static inline int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path);
}

static inline int teardown(void **state)
{
	free(cfg);
	return nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void write_file(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static inline int load_text(const char *text)
{
	write_file(conf_path, text, strlen(text));
	return config_load(conf_path, cfg, err, sizeof(err));
}

/* Config text made from fmt: in one buffer, large enough for lines of
 * twice the longest path, and overwritten by the next call. */
static inline const char *textf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline const char *textf(const char *fmt, ...)
{
	static char text[3 * ARENA_PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof(text));
	return text;
}

/* Whether one line of err (config_load's problems, one a line) starts
 * with prefix and contains want. */
static inline bool error_has(const char *prefix, const char *want)
{
	for (const char *line = err; *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char one[sizeof(err)];
		memcpy(one, line, len);
		one[len] = '\0';
		if (strncmp(one, prefix, strlen(prefix)) == 0 && strstr(one, want))
			return true;
		line += len + (end ? 1 : 0);
	}
	return false;
}

/* Loads text, expects -EINVAL and, among the problems reported, one
 * "conf_path:line: " followed by a message containing want. */
static inline void expect_error(const char *text, int line, const char *want)
{
	char prefix[PATH_MAX + 64];
	int ret = load_text(text);
	snprintf(prefix, sizeof(prefix), "%s:%d: ", conf_path, line);
	if (ret != -EINVAL || !error_has(prefix, want))
		fail_msg("config:\n%s\nreturned %d, message: %s\nexpected -EINVAL, \"%s\" and \"%s\"",
			 text, ret, err, prefix, want);
}

#endif
