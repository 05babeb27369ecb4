/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errtext: how loaderd's modules say why a call failed. A function that
 * can fail returns 0 or -errno (docs/style.md, habit 2) and, when its caller passes a
 * buffer, writes there one line naming the object at fault; errtext is the
 * one way that line is written, in every library.
 */
#ifndef LDR_COMMON_ERRTEXT_H
#define LDR_COMMON_ERRTEXT_H

#include <stdarg.h>
#include <stddef.h>

/* Formats the text into buf[0..cap) (nothing when buf is NULL or cap is
 * 0; always NUL-terminated otherwise, truncated to fit) and returns code,
 * so that `return errtext(err, cap, -EINVAL, "...", ...);` reads as what
 * it does. */
int errtext(char *buf, size_t cap, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int verrtext(char *buf, size_t cap, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif
