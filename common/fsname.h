/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fsname: file names in the order Python sorts them, so that lists the
 * daemon builds from directories (imagefolder's classes and files) number
 * their entries as torchvision does on the same tree.
 *
 * Python sees a name os.scandir or os.walk returns as a str: the bytes
 * decoded with the file system encoding (UTF-8) and the surrogateescape
 * error handler, which turns each byte that is not part of a well-formed
 * UTF-8 sequence into the code point U+DC00 + byte (U+DC80..U+DCFF).
 * sorted() then compares code points. For valid UTF-8 that is the order of
 * the bytes, but an escaped byte lands between U+D7FF and U+E000, so a name
 * with a stray 0xff sorts before one with U+E000 or an emoji, whose bytes
 * (0xee.., 0xf0..) are smaller.
 *
 * Well-formed means what Python's decoder accepts (Unicode's table 3-7): a
 * sequence that is overlong (C0 80, E0 80 80), encodes a surrogate
 * (ED A0 80), lies above U+10FFFF (F4 90 80 80, F5..FF), is cut short
 * (E2 82 followed by a non-continuation byte or the end) or a lone
 * continuation byte is not; each of its bytes is escaped on its own and
 * decoding goes on at the next byte, as Python does.
 *
 * Pure functions of their arguments; safe from any thread.
 */
#ifndef LDR_COMMON_FSNAME_H
#define LDR_COMMON_FSNAME_H

#include <stddef.h>
#include <stdint.h>

/* The code point starting at s (len bytes, len >= 1) as Python decodes it;
 * *used gets the bytes it took (1 to 4). */
uint32_t fsname_decode(const unsigned char *s, size_t len, size_t *used);

/* <0, 0 or >0 as Python's str a sorts before, equal to or after b
 * (NUL-terminated names). */
int fsname_cmp(const char *a, const char *b);

#endif
