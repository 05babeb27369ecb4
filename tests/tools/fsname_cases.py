#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/unit/fsname_cases.h: byte names and what Python makes of
them, for tests/unit/test_fsname.c.

- fsname_decodes: byte strings of each kind of ill-formed UTF-8 (and the
  well-formed ones at each boundary) with the code points
  bytes.decode("utf-8", "surrogateescape") gives, as os.fsdecode does.
- fsname_sorted: random names (a fixed seed) in sorted() order of their
  decoded str, as torchvision sorts os.scandir and os.walk names.

Run it with the Python whose order the daemon follows, from the source
root: python3 tests/tools/fsname_cases.py > tests/unit/fsname_cases.h
"""

import random
import sys

DECODES = [
    b"A", b"\x7f", b"\xc2\x80", b"\xdf\xbf", b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xee\x80\x80",
    b"\xef\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf0\x9f\x98\x80", b"\xf4\x8f\xbf\xbf",
    b"\x80", b"\xbf", b"\xff", b"\xfe", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
    b"\xe0\x9f\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xed\xa0\x80",
    b"\xed\xbf\xbf", b"\xed\xb2\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xc2", b"\xc2A", b"\xe2\x82",
    b"\xe2\x82A", b"\xe2\x82\xe2\x82\xac", b"\xf0\x9f\x98", b"\xf0\x9f\x98A", b"\xf0\x9f",
    b"\xf1\x80\x80", b"\xc2\xc2\x80", b"\xe0\xa0\xc0", b"\xf4\x8f\xbf\xc0", b"a\xffb\xee\x80\x80c",
]

# Pieces names are made of: ASCII, any single byte >= 0x80, and sequences
# near each boundary of the decoder's table, whole or cut short.
CODE_POINTS = [0x41, 0x7f, 0x80, 0x7ff, 0x800, 0xfff, 0x1000, 0xd7ff, 0xe000, 0xfffd, 0xffff,
               0x10000, 0x1f600, 0x3ffff, 0x40000, 0xfffff, 0x100000, 0x10ffff]
ILL_FORMED = [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80",
              b"\xed\xbf\xbf", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
              b"\xf8\x88\x80\x80\x80"]


def piece(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return bytes([rng.choice(b"aAzZ09 ._-~")])
    if kind == 1:
        return bytes([rng.randrange(0x80, 0x100)])
    if kind == 2:
        cp = rng.choice(CODE_POINTS) if rng.random() < 0.5 else rng.randrange(0x80, 0x110000)
        if 0xd800 <= cp < 0xe000:
            cp = 0xe000
        return chr(cp).encode()
    if kind == 3:  # a well-formed sequence cut short
        cp = rng.randrange(0x80, 0x110000)
        if 0xd800 <= cp < 0xe000:
            cp = 0xd7ff
        enc = chr(cp).encode()
        return enc[:rng.randrange(1, len(enc))]
    if kind == 4:
        return rng.choice(ILL_FORMED)
    return bytes([rng.randrange(0x01, 0x80)]).replace(b"/", b"_")


def c_string(b):
    out = []
    for x in b:
        ch = chr(x)
        out.append(ch if x < 0x80 and (ch.isalnum() or ch in " ._-~") else "\\%03o" % x)
    return '"' + "".join(out) + '"'


def main():
    rng = random.Random(20240229)
    names = set()
    while len(names) < 600:
        names.add(b"".join(piece(rng) for _ in range(rng.randrange(1, 7))))
    # Shared prefixes make the decoder's state at the first difference matter.
    base = sorted(names)
    for _ in range(200):
        a = rng.choice(base)
        names.add(a[:rng.randrange(0, len(a) + 1)] + piece(rng))
    names.discard(b"")
    ordered = sorted(names, key=lambda b: b.decode("utf-8", "surrogateescape"))
    w = sys.stdout.write
    w("/* Written by tests/tools/fsname_cases.py (Python %d.%d); do not edit. */\n"
      % sys.version_info[:2])
    w("#ifndef LDR_TESTS_FSNAME_CASES_H\n#define LDR_TESTS_FSNAME_CASES_H\n\n"
      "#include <stddef.h>\n#include <stdint.h>\n\n")
    w("struct fsname_decode_case {\n\tconst char *bytes;\n\tsize_t n;\n\tuint32_t cps[8];\n};\n\n")
    w("static const struct fsname_decode_case fsname_decodes[] = {\n")
    for b in DECODES:
        cps = [ord(c) for c in b.decode("utf-8", "surrogateescape")]
        w("\t{%s, %d, {%s}},\n" % (c_string(b), len(cps), ", ".join("0x%x" % c for c in cps)))
    w("};\n\n")
    w("/* %d names in Python's sorted() order. */\n" % len(ordered))
    w("static const char *const fsname_sorted[] = {\n")
    for b in ordered:
        w("\t%s,\n" % c_string(b))
    w("};\n\n#endif\n")


if __name__ == "__main__":
    main()
