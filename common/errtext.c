/* SPDX-License-Identifier: Apache-2.0 */
/* errtext: the error text of a failed call (errtext.h). */
#include "common/errtext.h"

#include <stdio.h>

int verrtext(char *buf, size_t cap, int code, const char *fmt, va_list ap)
{
	if (buf && cap > 0)
		vsnprintf(buf, cap, fmt, ap);
	return code;
}

int errtext(char *buf, size_t cap, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verrtext(buf, cap, code, fmt, ap);
	va_end(ap);
	return code;
}
