/* SPDX-License-Identifier: Apache-2.0 */
/* escape: untrusted bytes as printable ASCII (escape.h). */
#include "common/escape.h"

#include <stdint.h>
#include <string.h>

char *escape_bytes(const void *src, size_t len, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = src;
	size_t at = 0;
	if (cap == 0)
		return out;
	for (size_t i = 0; i < len; i++) {
		char esc[4];
		size_t n = 0;
		uint8_t b = p[i];
		if (b == '"' || b == '\\') {
			esc[n++] = '\\';
			esc[n++] = (char)b;
		} else if (b == '\n' || b == '\r' || b == '\t') {
			esc[n++] = '\\';
			esc[n++] = b == '\n' ? 'n' : b == '\r' ? 'r' : 't';
		} else if (b >= 0x20 && b <= 0x7e) {
			esc[n++] = (char)b;
		} else {
			esc[n++] = '\\';
			esc[n++] = 'x';
			esc[n++] = hex[b >> 4];
			esc[n++] = hex[b & 0xf];
		}
		if (n > cap - 1 - at) /* the whole escape, or nothing of it */
			break;
		memcpy(out + at, esc, n);
		at += n;
	}
	out[at] = '\0';
	return out;
}

char *escape_str(const char *src, char *out, size_t cap)
{
	return escape_bytes(src, strlen(src), out, cap);
}
