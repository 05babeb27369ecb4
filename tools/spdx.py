#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""spdx: the license header of every source file.

    tools/spdx.py [--check] [ROOT]

Every C source and header, CUDA source, Python file, CMake file and shell
script under ROOT (default: the tree this file is in) starts with
`SPDX-License-Identifier: Apache-2.0` in its own comment syntax:

    /* SPDX-License-Identifier: Apache-2.0 */      .c .h .cu .cuh
    # SPDX-License-Identifier: Apache-2.0          .py .sh .cmake CMakeLists.txt,
                                                   and scripts whose #! names sh or bash

as the first line, or the line after a `#!` line (and after a Python
encoding declaration that must stay on line 1 or 2). Without --check the
header is added where it is missing; a file that has one is left as it is,
so running it again changes nothing. --check changes nothing and exits 1,
listing the files without the header (or with another identifier); the
test unit.spdx runs it.

The files are those git knows (tracked, or untracked and not ignored)
when ROOT is a git checkout, else every file under ROOT outside build
directories; directories whose name starts with a dot (.git, .deps) are
never looked at.
"""

import argparse
import os
import re
import subprocess
import sys

LICENSE = "Apache-2.0"
TAG = "SPDX-License-Identifier:"
C_LIKE = (".c", ".h", ".cu", ".cuh")
HASH = (".py", ".sh", ".cmake")
SHEBANG_SHELL = re.compile(r"^#!.*\b(sh|bash|dash)\b")
ENCODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")
HEAD_LINES = 5  # where an existing identifier is looked for


def comment_style(path, first_line):
    """'c', 'hash', or None for a file that is not a source file here."""
    name = os.path.basename(path)
    if name.endswith(C_LIKE):
        return "c"
    if name.endswith(HASH) or name == "CMakeLists.txt":
        return "hash"
    if "." not in name and SHEBANG_SHELL.match(first_line):
        return "hash"
    return None


def header(style):
    return "/* %s %s */\n" % (TAG, LICENSE) if style == "c" else "# %s %s\n" % (TAG, LICENSE)


def files(root):
    """Relative paths of the candidate files under root."""
    if os.path.isdir(os.path.join(root, ".git")) or os.path.isfile(os.path.join(root, ".git")):
        r = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, timeout=60)
        if r.returncode == 0:
            names = sorted(set(n for n in r.stdout.decode().split("\0") if n))
            return [n for n in names
                    if not any(part.startswith(".") for part in n.split("/")[:-1])
                    and os.path.isfile(os.path.join(root, n))]
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("build"))
        out += [os.path.relpath(os.path.join(d, n), root) for n in sorted(names)]
    return out


def insert_at(lines, style):
    """The index of the line the header goes before."""
    at = 0
    if lines and lines[0].startswith("#!"):
        at = 1
    if style == "hash" and at < len(lines) and at < 2 and ENCODING.match(lines[at]):
        at += 1
    return at


def examine(root, rel):
    """(state, new text or None): state is 'ok', 'missing', 'other'
    (another identifier) or None (not a source file)."""
    path = os.path.join(root, rel)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError:
        return None, None
    lines = text.splitlines(keepends=True)
    style = comment_style(rel, lines[0] if lines else "")
    if style is None:
        return None, None
    for line in lines[:HEAD_LINES]:
        if TAG in line:
            return ("ok" if re.search(re.escape(TAG) + r"\s*" + re.escape(LICENSE) + r"\b", line)
                    else "other"), None
    at = insert_at(lines, style)
    if at > 0 and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    lines.insert(at, header(style))
    return "missing", "".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Adds (or checks) the SPDX license header of every source file.")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file lacks the header")
    ap.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    missing, other, ok = [], [], 0
    for rel in files(root):
        state, text = examine(root, rel)
        if state == "ok":
            ok += 1
        elif state == "other":
            other.append(rel)
        elif state == "missing":
            missing.append(rel)
            if not args.check:
                path = os.path.join(root, rel)
                mode = os.stat(path).st_mode
                with open(path, "w", encoding="utf-8", newline="") as f:
                    f.write(text)
                os.chmod(path, mode)
    for rel in other:
        print("%s: has an SPDX-License-Identifier other than %s: left as it is" % (rel, LICENSE),
              file=sys.stderr)
    if args.check:
        for rel in missing:
            print("%s: no SPDX-License-Identifier: %s header (tools/spdx.py adds it)" % (rel, LICENSE),
                  file=sys.stderr)
        print("spdx: %d files with the header, %d without, %d with another identifier"
              % (ok, len(missing), len(other)))
        return 1 if missing or other else 0
    print("spdx: added the header to %d files; %d had it" % (len(missing), ok))
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())
