/*
 * config_fail: how the configuration parser records an error. The first
 * error recorded ends the parse and is the one reported, as
 * "FILE:LINE: message"; later ones are dropped. Every other file of the
 * parser records its errors here, and this file calls none of them: it is
 * the bottom of daemon/config/ (config_impl.h).
 */
#include "daemon/config/config_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "common/errtext.h"

void config_fail(struct config_parse *p, int line, const char *fmt, ...)
{
	if (p->err_line)
		return;
	p->err_line = line;
	if (p->err_cap == 0)
		return;
	/* The prefix first; a message that does not fit after it is dropped. */
	errtext(p->err, p->err_cap, -EINVAL, "%s:%d: ", p->c->file, line);
	size_t n = strlen(p->err);
	va_list ap;
	va_start(ap, fmt);
	verrtext(p->err + n, p->err_cap - n, -EINVAL, fmt, ap);
	va_end(ap);
}

void config_bad_value(struct config_parse *p, const struct config_key *k, const char *value,
			     const char *fmt, ...)
{
	char why[128];
	va_list ap;
	va_start(ap, fmt);
	verrtext(why, sizeof(why), -EINVAL, fmt, ap);
	va_end(ap);
	config_fail(p, p->lineno, "%s %s: \"%s\" %s", p->label, k->name, value, why);
}
