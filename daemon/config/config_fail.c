/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_fail: how the configuration parser records its problems. Every
 * problem is kept, as "FILE:LINE: message" (the first CONFIG_PROBLEMS_MAX
 * of them; the rest are counted), and the parse goes on, so that one run
 * of --check-config, a start or a reload lists all of them. Also the
 * close matches ("did you mean ...?") the messages suggest. Every other
 * file of the parser records its errors here, and this file calls none of
 * them: it is the bottom of daemon/config/ (config_impl.h).
 */
#include "daemon/config/config_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "common/suggest.h"

/* Longest message kept: a source path of ARENA_PATH_MAX bytes quoted, and
 * the words around it. */
#define CONFIG_PROBLEM_TEXT_MAX (PATH_MAX + ARENA_PATH_MAX + 512)

/* Adds text to pr in line order (after the problems of the same line). */
static void config_problems_add(struct config_problems *pr, int line, const char *text)
{
	pr->n++;
	if (pr->kept == CONFIG_PROBLEMS_MAX)
		return;
	char *copy = strdup(text);
	if (!copy)
		return; /* counted, not shown */
	unsigned at = pr->kept;
	while (at > 0 && pr->line[at - 1] > line) {
		pr->line[at] = pr->line[at - 1];
		pr->text[at] = pr->text[at - 1];
		at--;
	}
	pr->line[at] = line;
	pr->text[at] = copy;
	pr->kept++;
}

void config_fail(struct config_parse *p, int line, const char *fmt, ...)
{
	struct pipeline_cfg *first = p->c->pipelines;
	if (p->section == CONFIG_SECTION_PIPELINE && p->pipeline >= first &&
	    p->pipeline < first + ARENA_PIPELINES_MAX)
		p->problems->pipelines_with_problems |= 1ull << (p->pipeline - first);
	else if (p->section == CONFIG_SECTION_DAEMON)
		p->problems->daemon_with_problems = true;
	char *text = malloc(CONFIG_PROBLEM_TEXT_MAX);
	if (!text) {
		p->problems->n++;
		return;
	}
	errtext(text, CONFIG_PROBLEM_TEXT_MAX, -EINVAL, "%s:%d: ", p->c->file, line);
	size_t n = strlen(text);
	va_list ap;
	va_start(ap, fmt);
	verrtext(text + n, CONFIG_PROBLEM_TEXT_MAX - n, -EINVAL, fmt, ap);
	va_end(ap);
	config_problems_add(p->problems, line, text);
	free(text);
}

void config_bad_value(struct config_parse *p, const struct config_key *k, const char *value,
		      const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	verrtext(why, sizeof(why), -EINVAL, fmt, ap);
	va_end(ap);
	config_fail(p, p->lineno, "%s %s: \"%s\" %s", p->label, k->name, value, why);
}

const char *config_did_you_mean(const char *word, size_t len, const char *const *names, char *buf,
				size_t cap)
{
	const char *best = suggest_among(word, len, names);
	if (best)
		snprintf(buf, cap, "; did you mean \"%s\"?", best);
	else if (cap)
		buf[0] = '\0';
	return buf;
}

const char *config_key_did_you_mean(const char *word, const struct config_key *keys, size_t n,
				    size_t *which, char *buf, size_t cap)
{
	struct suggest s;
	suggest_init(&s, word, strlen(word));
	for (size_t i = 0; i < n; i++)
		suggest_offer(&s, keys[i].name);
	*which = n;
	for (size_t i = 0; i < n; i++)
		if (keys[i].name == suggest_best(&s))
			*which = i;
	if (suggest_best(&s))
		snprintf(buf, cap, "; did you mean \"%s\"?", suggest_best(&s));
	else if (cap)
		buf[0] = '\0';
	return buf;
}

void config_problems_free(struct config_problems *pr)
{
	for (unsigned i = 0; i < pr->kept; i++)
		free(pr->text[i]);
	memset(pr, 0, sizeof(*pr));
}

const char *config_problems_text(const struct config_problems *pr, const char *sep, char *buf,
				 size_t cap)
{
	if (cap == 0)
		return buf;
	buf[0] = '\0';
	size_t len = 0, sep_len = strlen(sep);
	unsigned shown = 0;
	char more[64];
	for (unsigned i = 0; i < pr->kept; i++) {
		size_t t = strlen(pr->text[i]);
		unsigned rest = pr->n - i - 1;
		/* room for this one, and for "and N more" after it unless it is the last */
		size_t tail = rest ? sep_len + (size_t)snprintf(more, sizeof(more), "and %u more", rest)
				   : 0;
		size_t need = (i ? sep_len : 0) + t + tail;
		if (len + need >= cap) {
			if (i == 0) { /* one too long for buf: cut, rather than none */
				snprintf(buf, cap, "%s", pr->text[0]);
				len = strlen(buf);
				shown = 1;
			}
			break;
		}
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? sep : "", pr->text[i]);
		shown++;
	}
	if (shown < pr->n) {
		snprintf(more, sizeof(more), "and %u more", pr->n - shown);
		if (len + sep_len + strlen(more) < cap)
			snprintf(buf + len, cap - len, "%s%s", shown ? sep : "", more);
	}
	return buf;
}
