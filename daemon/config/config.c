/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config: reads loaderd's INI file into struct config (config.h). Every key
 * accepted is documented in docs/config.md; the two change together. This
 * file reads the file and tracks the sections, the top of the parser:
 * config_values.c parses each value, config_check.c checks what involves
 * several keys (config_impl.h says which file does what).
 *
 * inih splits "key = value" lines and strips comments; the rest is done
 * here, because inih's own bookkeeping is too coarse for the errors we
 * promise ("FILE:LINE: message" for every bad line, where inih reports
 * the first):
 *  - config_read_line() is the reader given to ini_parse_stream. It returns
 *    exactly one physical line per call, so inih's line count and ours
 *    agree. It strips leading whitespace, so inih never sees a continuation
 *    line (indentation is free, multi-line values do not exist). It handles
 *    section headers itself: inih calls the handler only for keys, so an
 *    empty or misspelt section would pass unnoticed, and it truncates
 *    section names to 49 bytes. A key line longer than inih's fixed line
 *    buffer (200 bytes, too short for a data path) reaches inih without its
 *    value; the value travels in struct config_parse instead. A line that
 *    is no key, header or comment is reported here and reaches inih empty.
 *  - config_on_key() is the handler: one key, looked up in its section's
 *    table, parsed and range-checked (config_set_value).
 *  - checks that involve several keys (required keys, keys of the other
 *    source kind, token widths, default_depth <= max_depth) run when a
 *    section or the file ends (config_pipeline_end, config_finish).
 * Every problem is recorded (config_fail.c) and the parse goes on to the
 * end of the file.
 */
#include "daemon/config/config_impl.h"

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/position.h"
#include "common/regfile.h"
#include "common/suggest.h"

/* A position token carries the pipeline's name: every name is one it can. */
#define PIPELINE_NAME_MAX POSITION_NAME_MAX
_Static_assert(POSITION_NAME_MAX < PROTO_NAME_MAX, "a pipeline name fits HELLO's field");


static void config_section_end(struct config_parse *p)
{
	if (p->section == CONFIG_SECTION_PIPELINE)
		config_pipeline_end(p);
	p->section = CONFIG_SECTION_NONE;
	p->pipeline = NULL;
	p->bad = NULL;
}

static void config_pipeline_begin(struct config_parse *p, const char *name, size_t len)
{
	struct config *c = p->c;
	/* A section that cannot be one of the config's pipelines is still
	 * read, into scratch, for the problems of its keys. */
	struct pipeline_cfg *pl = &p->scratch;
	p->bad = &p->scratch_bad;
	if (!position_name_valid(name, len)) {
		config_fail(p, p->lineno, "invalid pipeline name \"%.*s\" (1 to %d characters "
			    "of A-Z a-z 0-9 _ . -)", (int)len, name, PIPELINE_NAME_MAX);
	} else {
		size_t i = 0;
		while (i < c->n_pipelines && (strlen(c->pipelines[i].name) != len ||
					      memcmp(c->pipelines[i].name, name, len) != 0))
			i++;
		if (i < c->n_pipelines)
			config_fail(p, p->lineno, "duplicate pipeline \"%.*s\" (first defined on line "
				    "%d): give this one another name", (int)len, name,
				    c->pipelines[i].line);
		else if (c->n_pipelines == ARENA_PIPELINES_MAX)
			config_fail(p, p->lineno, "too many pipelines (at most %d)",
				    ARENA_PIPELINES_MAX);
		else {
			p->bad = &p->pipeline_bad[c->n_pipelines];
			pl = &c->pipelines[c->n_pipelines++];
		}
	}
	*p->bad = 0;
	p->suggested = 0;
	memset(pl, 0, sizeof(*pl));
	memcpy(pl->name, name, len < sizeof(pl->name) ? len : sizeof(pl->name) - 1);
	pl->line = p->lineno;
	config_pipeline_defaults(pl);
	p->pipeline = pl;
	p->section = CONFIG_SECTION_PIPELINE;
	snprintf(p->label, sizeof(p->label), "[pipeline.%s]", pl->name);
	p->keys = config_pipeline_keys;
	p->n_keys = CONFIG_PK_COUNT;
	p->pipeline_key_line = pl->key_line; /* zeroed with pl */
	p->key_line = p->pipeline_key_line;
	p->base = pl;
}

/* An unknown section "[name]": what it may have meant. */
static void config_unknown_section(struct config_parse *p, const char *name, size_t len)
{
	static const char *const pipeline[] = {"pipeline", NULL}, *const daemon[] = {"daemon", NULL};
	const char *dot = memchr(name, '.', len);
	size_t head = dot ? (size_t)(dot - name) : len;
	if (head == 8 && memcmp(name, "pipeline", 8) == 0 && !dot)
		config_fail(p, p->lineno, "unknown section [%.*s]: a pipeline's section is "
			    "[pipeline.NAME], e.g. [pipeline.train]", (int)len, name);
	else if (dot && len > head + 1 && suggest_among(name, head, pipeline))
		config_fail(p, p->lineno, "unknown section [%.*s]; did you mean [pipeline%.*s]?",
			    (int)len, name, (int)(len - head), dot);
	else if (suggest_among(name, len, daemon) || (len == 6 && strncasecmp(name, "daemon", 6) == 0))
		config_fail(p, p->lineno, "unknown section [%.*s]; did you mean [daemon]?", (int)len,
			    name);
	else
		config_fail(p, p->lineno, "unknown section [%.*s] (sections are [daemon] and "
			    "[pipeline.NAME])", (int)len, name);
}

/* A "[name]" header on the current line: name is not NUL-terminated. */
static void config_section_begin(struct config_parse *p, const char *name, size_t len)
{
	config_section_end(p);
	if (len == 6 && memcmp(name, "daemon", 6) == 0) {
		if (p->daemon_line) {
			config_fail(p, p->lineno, "duplicate section [daemon] (first defined on line %d): "
				    "put its keys in the first one", p->daemon_line);
			p->section = CONFIG_SECTION_SKIP;
			return;
		}
		p->daemon_line = p->lineno;
		p->section = CONFIG_SECTION_DAEMON;
		snprintf(p->label, sizeof(p->label), "[daemon]");
		p->keys = config_daemon_keys;
		p->n_keys = CONFIG_DK_COUNT;
		p->key_line = p->daemon_key_line;
		p->base = p->c;
		p->bad = &p->daemon_bad;
	} else if (len >= 9 && memcmp(name, "pipeline.", 9) == 0) {
		config_pipeline_begin(p, name + 9, len - 9);
	} else {
		config_unknown_section(p, name, len);
		p->section = CONFIG_SECTION_SKIP;
	}
}

/* A key that is not one of its section's: the closest of them, or the
 * other section it belongs to. */
static void config_unknown_key(struct config_parse *p, const char *name)
{
	bool daemon = p->section == CONFIG_SECTION_DAEMON;
	const struct config_key *other = daemon ? config_pipeline_keys : config_daemon_keys;
	size_t n_other = daemon ? CONFIG_PK_COUNT : CONFIG_DK_COUNT;
	for (size_t i = 0; i < n_other; i++) {
		if (strcmp(other[i].name, name) == 0) {
			config_fail(p, p->lineno, "unknown key \"%s\" in %s: it is a key of %s", name,
				    p->label, daemon ? "a [pipeline.NAME] section" : "[daemon]");
			return;
		}
	}
	char hint[128];
	size_t which;
	config_key_did_you_mean(name, p->keys, p->n_keys, &which, hint, sizeof(hint));
	if (which < p->n_keys)
		p->suggested |= 1ull << which;
	config_fail(p, p->lineno, "unknown key \"%s\" in %s%s", name, p->label,
		    hint[0] ? hint : " (docs/config.md lists every key)");
}

static int config_on_key(void *user, const char *section, const char *name, const char *value)
{
	struct config_parse *p = user;
	/* section is inih's view, truncated to 49 bytes; the reader tracks the
	 * real one in p->section. Problems are recorded, never returned: inih
	 * would keep only the first line. */
	if (p->long_value_line == p->lineno)
		value = p->long_value;
	if (p->section == CONFIG_SECTION_SKIP)
		return 1;
	if (p->section == CONFIG_SECTION_NONE) {
		config_fail(p, p->lineno, "key \"%s\" is outside any section: put it under [daemon] "
			    "or a [pipeline.NAME] header", name);
		return 1;
	}
	size_t key = 0;
	while (key < p->n_keys && strcmp(p->keys[key].name, name) != 0)
		key++;
	if (key == p->n_keys) {
		config_unknown_key(p, name);
		return 1;
	}
	if (p->key_line[key]) {
		config_fail(p, p->lineno, "duplicate key \"%s\" in %s (first set on line %d): "
			    "keep one", name, p->label, p->key_line[key]);
		return 1;
	}
	p->key_line[key] = p->lineno;
	unsigned before = config_problem_count(p);
	config_set_value(p, &p->keys[key], p->base, value);
	if (config_problem_count(p) != before)
		*p->bad |= 1ull << key;
	return 1;
}

/* inih's rule for the end of a token: the first of chars (if any), or an
 * inline comment (';' after whitespace), or the end of the string. */
static const char *config_find_chars_or_comment(const char *s, const char *chars)
{
	bool was_space = false;
	while (*s && !(chars && strchr(chars, *s)) && !(was_space && *s == ';')) {
		was_space = isspace((unsigned char)*s);
		s++;
	}
	return s;
}

/* A line that does not fit inih's buffer: hand inih "KEY=" and keep the
 * value, trimmed the way inih trims values, for config_on_key. */
static char *config_read_long_pair(struct config_parse *p, const char *s, char *str, int num)
{
	const char *sep = config_find_chars_or_comment(s, "=:");
	size_t key_len = (size_t)(sep - s);
	if (key_len + 3 > (size_t)num) {
		config_fail(p, p->lineno, "syntax error: a key of %zu bytes", key_len);
		memcpy(str, "\n", 2);
		return str;
	}
	const char *value = sep + 1;
	const char *end = config_find_chars_or_comment(value, NULL);
	while (value < end && isspace((unsigned char)*value))
		value++;
	while (end > value && isspace((unsigned char)end[-1]))
		end--;
	memcpy(p->long_value, value, (size_t)(end - value));
	p->long_value[end - value] = '\0';
	p->long_value_line = p->lineno;
	memcpy(str, s, key_len);
	memcpy(str + key_len, "=\n", 3);
	return str;
}

/* The ini_reader: see the top of this file. */
static char *config_read_line(char *str, int num, void *stream)
{
	struct config_parse *p = stream;
	if (num < 3)
		return NULL;
	size_t len = 0;
	bool too_long = false, has_nul = false;
	int ch;
	errno = 0;
	while ((ch = getc(p->f)) != EOF && ch != '\n') {
		if (ch == '\0')
			has_nul = true;
		if (len < CONFIG_LINE_MAX)
			p->line[len++] = (char)ch;
		else
			too_long = true;
	}
	if (ch == EOF && ferror(p->f)) {
		p->read_errno = errno ? errno : EIO;
		return NULL;
	}
	if (ch == EOF && len == 0)
		return NULL;
	p->line[len] = '\0';
	p->lineno++;
	if (too_long || has_nul) {
		if (too_long)
			config_fail(p, p->lineno, "line is longer than %d bytes", CONFIG_LINE_MAX);
		else
			config_fail(p, p->lineno, "line contains a NUL byte");
		memcpy(str, "\n", 2);
		return str;
	}
	char *s = p->line;
	if (p->lineno == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
		s += 3; /* UTF-8 byte order mark */
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '\0' || *s == ';' || *s == '#') {
		memcpy(str, "\n", 2);
		return str;
	}
	if (*s == '[') {
		char *close = strchr(s + 1, ']');
		const char *rest = close ? close + 1 : "";
		while (isspace((unsigned char)*rest))
			rest++;
		if (!close || (*rest && *rest != ';' && *rest != '#')) {
			config_fail(p, p->lineno, "syntax error: %s", !close ? "a section header without "
				    "its \"]\"" : "text after a section header's \"]\" (a key goes on "
				    "a line of its own)");
			config_section_end(p);
			p->section = CONFIG_SECTION_SKIP;
		} else if (p->declaration) {
			config_fail(p, p->lineno, "a declaration is the keys of one pipeline, without "
				    "a section header");
		} else {
			config_section_begin(p, s + 1, (size_t)(close - s - 1));
		}
		memcpy(str, "\n", 2);
		return str;
	}
	const char *sep = config_find_chars_or_comment(s, "=:");
	if (*sep != '=' && *sep != ':') { /* inih's syntax error, reported here */
		config_fail(p, p->lineno, "syntax error: expected \"key = value\", a [section] "
			    "header or a comment");
		memcpy(str, "\n", 2);
		return str;
	}
	size_t n = strlen(s);
	if (n + 2 > (size_t)num)
		return config_read_long_pair(p, s, str, num);
	memcpy(str, s, n);
	memcpy(str + n, "\n", 2);
	return str;
}

int config_load_problems(const char *path, struct config *c, struct config_problems *pr)
{
	struct config_parse *p = NULL;
	int ret = 0;
	char text[PATH_MAX + 256];
	memset(pr, 0, sizeof(*pr));
	config_defaults(c);
	if (!path || !*path)
		return 0;
	if (strlen(path) >= sizeof(c->file)) {
		ret = -ENAMETOOLONG;
		goto report_errno;
	}
	snprintf(c->file, sizeof(c->file), "%s", path);
	p = calloc(1, sizeof(*p));
	if (!p) {
		ret = -ENOMEM;
		goto report_errno;
	}
	p->c = c;
	p->daemon_key_line = c->key_line;
	p->problems = pr;
	/* A regular file only: fopen of a FIFO would block (at start, and in
	 * the event loop on a reload) until a writer came. */
	struct stat st;
	int fd = regfile_open(AT_FDCWD, path, &st);
	if (fd == REGFILE_NOT_REGULAR) {
		free(p);
		errtext(text, sizeof(text), -EINVAL, "%s: not a regular file (%s)", path,
			regfile_kind(st.st_mode));
		pr->n = 1;
		pr->text[0] = strdup(text);
		pr->kept = pr->text[0] != NULL;
		return -EINVAL;
	}
	if (fd < 0) {
		ret = fd;
		goto free_parse;
	}
	p->f = fdopen(fd, "r");
	if (!p->f) {
		ret = -errno;
		close(fd);
		goto free_parse;
	}
	int bad_line = ini_parse_stream(config_read_line, p, config_on_key, p);
	if (p->read_errno)
		ret = -p->read_errno;
	else if (bad_line < 0) /* inih could not allocate its line buffer */
		ret = -ENOMEM;
	if (ret)
		goto close_file;
	if (bad_line > 0) /* not expected: config_read_line reports inih's syntax errors */
		config_fail(p, bad_line, "syntax error");
	config_section_end(p);
	config_finish(p);
	if (pr->n)
		ret = -EINVAL;
close_file:
	fclose(p->f);
free_parse:
	free(p);
	if (ret == 0 || ret == -EINVAL)
		return ret;
report_errno:
	/* The file could not be read: that is the one problem. */
	config_problems_free(pr);
	errtext(text, sizeof(text), ret, "%s: %s", path, strerror(-ret));
	pr->n = 1;
	pr->text[0] = strdup(text);
	pr->kept = pr->text[0] != NULL;
	return ret;
}

int config_load(const char *path, struct config *c, char *err, size_t err_cap)
{
	struct config_problems *pr = malloc(sizeof(*pr));
	if (!pr) {
		errtext(err, err_cap, -ENOMEM, "%s: %s", path ? path : "", strerror(ENOMEM));
		return -ENOMEM;
	}
	int ret = config_load_problems(path, c, pr);
	config_problems_text(pr, "\n", err, err_cap);
	config_problems_free(pr);
	free(pr);
	return ret;
}

int config_declare(const struct config *running, const char *name, const char *text, int pid,
		   struct pipeline_cfg *out, char *err, size_t err_cap)
{
	int ret = -ENOMEM;
	struct config *c = malloc(sizeof(*c));
	struct config_parse *p = calloc(1, sizeof(*p));
	struct config_problems *pr = calloc(1, sizeof(*pr));
	if (!c || !p || !pr)
		goto free_parse;
	/* the daemon's keys as they run, set on no line of this text */
	memcpy(c, running, offsetof(struct config, n_pipelines));
	memset(c->key_line, 0, sizeof(c->key_line));
	c->n_pipelines = 0;
	snprintf(c->file, sizeof(c->file), "declared by client pid %d, line", pid);
	p->c = c;
	p->daemon_key_line = c->key_line;
	p->problems = pr;
	p->declaration = true;
	if (err_cap)
		err[0] = '\0';
	p->f = fmemopen((void *)text, strlen(text), "r");
	if (!p->f) {
		ret = -errno;
		goto free_parse;
	}
	config_pipeline_begin(p, name, strlen(name));
	/* what concerns the whole section is said of its first line */
	if (p->pipeline)
		p->pipeline->line = 1;
	snprintf(p->label, sizeof(p->label), "[declared pipeline]");
	int bad_line = ini_parse_stream(config_read_line, p, config_on_key, p);
	ret = 0;
	if (p->read_errno)
		ret = -p->read_errno;
	else if (bad_line < 0)
		ret = -ENOMEM;
	if (ret == 0) {
		if (bad_line > 0)
			config_fail(p, bad_line, "syntax error");
		config_section_end(p);
		config_finish(p);
		if (pr->n) {
			ret = -EINVAL;
			config_problems_text(pr, "; ", err, err_cap);
			/* "declared by client pid N, line L: ...", not "line:L:" */
			for (char *at = err_cap ? strstr(err, ", line:") : NULL; at;
			     at = strstr(at + 7, ", line:"))
				at[6] = ' ';
		} else {
			*out = c->pipelines[0];
		}
	}
	fclose(p->f);
free_parse:
	if (pr)
		config_problems_free(pr);
	free(pr);
	free(p);
	free(c);
	if (ret == 0 || ret == -EINVAL)
		return ret;
	return errtext(err, err_cap, ret, "declared by client pid %d: %s", pid, strerror(-ret));
}
