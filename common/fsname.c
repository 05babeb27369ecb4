/* SPDX-License-Identifier: Apache-2.0 */
/* fsname: file names in Python's sorted() order (fsname.h). */
#include "common/fsname.h"

#include <stdbool.h>
#include <string.h>

static bool fsname_is_cont(unsigned char c, unsigned char lo, unsigned char hi)
{
	return c >= lo && c <= hi;
}

uint32_t fsname_decode(const unsigned char *s, size_t len, size_t *used)
{
	unsigned char c = s[0];
	*used = 1;
	if (c < 0x80)
		return c;
	/* The bytes a well-formed sequence may have: its length and the range
	 * of its second byte (the others are 80..BF). */
	size_t n;
	unsigned char lo = 0x80, hi = 0xbf;
	uint32_t cp;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = c & 0x1fu;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = c & 0x0fu;
		if (c == 0xe0)
			lo = 0xa0; /* E0 80..9F: overlong */
		else if (c == 0xed)
			hi = 0x9f; /* ED A0..BF: a surrogate */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = c & 0x07u;
		if (c == 0xf0)
			lo = 0x90; /* F0 80..8F: overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* F4 90..BF: above U+10FFFF */
	} else {
		return 0xdc00u + c; /* a continuation byte, C0, C1, F5..FF */
	}
	if (len < n)
		return 0xdc00u + c;
	for (size_t i = 1; i < n; i++) {
		if (!fsname_is_cont(s[i], i == 1 ? lo : 0x80, i == 1 ? hi : 0xbf))
			return 0xdc00u + c;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	*used = n;
	return cp;
}

int fsname_cmp(const char *a, const char *b)
{
	const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
	size_t lx = strlen(a), ly = strlen(b), i = 0, k = 0;
	/* From the start in both: where a sequence begins depends on the
	 * bytes before it, so a common prefix cannot simply be skipped. */
	while (i < lx && k < ly) {
		size_t ui, uk;
		uint32_t cx = fsname_decode(x + i, lx - i, &ui);
		uint32_t cy = fsname_decode(y + k, ly - k, &uk);
		if (cx != cy)
			return cx < cy ? -1 : 1;
		i += ui;
		k += uk;
	}
	return (i < lx) - (k < ly);
}
