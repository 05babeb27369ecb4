/* SPDX-License-Identifier: Apache-2.0 */
/*
 * escape: untrusted bytes rendered as printable ASCII, for the status text
 * and log lines. A client chooses its name, the pipeline name and the resume
 * token it sends; shown raw, a newline in one of them would forge a status
 * or log line and an escape sequence would reach the operator's terminal.
 *
 * The rendering, byte by byte: 0x20..0x7e stay as they are, except `"` and
 * `\`, which become `\"` and `\\` (so a rendered string is safe between
 * double quotes); newline, carriage return and tab become `\n`, `\r`, `\t`;
 * every other byte (the other controls, DEL, every byte >= 0x80, UTF-8
 * included) becomes `\xNN` with two lower-case hex digits. The result never
 * holds a byte outside 0x20..0x7e, and it reads back unambiguously.
 */
#ifndef LDR_COMMON_ESCAPE_H
#define LDR_COMMON_ESCAPE_H

#include <stddef.h>

/* Bytes that always hold the rendering of n input bytes, with the NUL: an
 * input byte becomes at most four ("\xNN"). */
#define ESCAPE_SIZE(n) (4 * (size_t)(n) + 1)

/*
 * Renders the len bytes at src into out (cap bytes) and returns out, always
 * NUL-terminated when cap >= 1. When the rendering does not fit, it stops
 * before the first escape that would not fit whole: an escape is never cut
 * in half. Pure: no allocation, no I/O; safe from any thread.
 */
char *escape_bytes(const void *src, size_t len, char *out, size_t cap);

/* escape_bytes of a NUL-terminated string. */
char *escape_str(const char *src, char *out, size_t cap);

#endif
