#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tools/spdx.py on a tree of its own: the header in each kind of file's
own comment syntax, after a #! line and a Python encoding line; files that
are not sources left alone; a second run changing nothing; --check
failing on a missing header and on another identifier, passing once every
header is there. Exit 0 pass, 1 fail."""

import os
import shutil
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "spdx.py")
H_C = "/* SPDX-License-Identifier: Apache-2.0 */\n"
H_HASH = "# SPDX-License-Identifier: Apache-2.0\n"
CASES = {  # path: (content before, content after)
    "a/x.c": ("/* x: a file. */\nint x;\n", H_C + "/* x: a file. */\nint x;\n"),
    "a/x.h": ("#ifndef X_H\n", H_C + "#ifndef X_H\n"),
    "a/k.cu": ("__global__ void k(void) {}", H_C + "__global__ void k(void) {}"),
    "a/m.py": ('"""m: a module."""\n', H_HASH + '"""m: a module."""\n'),
    "a/run.py": ("#!/usr/bin/env python3\nprint(1)\n", "#!/usr/bin/env python3\n" + H_HASH + "print(1)\n"),
    "a/enc.py": ("#!/usr/bin/python3\n# -*- coding: utf-8 -*-\nx = 1\n",
                 "#!/usr/bin/python3\n# -*- coding: utf-8 -*-\n" + H_HASH + "x = 1\n"),
    "a/s.sh": ("#!/bin/sh\necho hi\n", "#!/bin/sh\n" + H_HASH + "echo hi\n"),
    "a/run": ("#!/usr/bin/env bash\nexit 0", "#!/usr/bin/env bash\n" + H_HASH + "exit 0"),
    "a/CMakeLists.txt": ("add_subdirectory(b)\n", H_HASH + "add_subdirectory(b)\n"),
    "a/f.cmake": ("set(X 1)\n", H_HASH + "set(X 1)\n"),
    "a/empty.py": ("", H_HASH),
    "a/notes.txt": ("not a source\n", "not a source\n"),
    "a/data": ("\x00\x01binary", "\x00\x01binary"),
    "a/README.md": ("# readme\n", "# readme\n"),
    "build/gen.c": ("int generated;\n", "int generated;\n"),
    ".deps/dep.c": ("int dep;\n", "int dep;\n"),
}


def run(*args):
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True, timeout=60)


def fail(why):
    print("test_spdx_tool: FAIL: %s" % why, file=sys.stderr)
    sys.exit(1)


def main():
    root = tempfile.mkdtemp(prefix="ldr-spdx-")
    try:
        for rel, (before, _) in CASES.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", newline="") as f:
                f.write(before)
        os.chmod(os.path.join(root, "a/s.sh"), 0o755)
        r = run("--check", root)
        if r.returncode != 1 or "a/x.c: no SPDX" not in r.stderr:
            fail("--check on a tree without headers: exit %d, %s" % (r.returncode, r.stderr))
        if run(root).returncode != 0:
            fail("adding the headers failed")
        for rel, (_, after) in CASES.items():
            with open(os.path.join(root, rel), newline="") as f:
                got = f.read()
            if got != after:
                fail("%s after the tool: %r, expected %r" % (rel, got, after))
        if not os.access(os.path.join(root, "a/s.sh"), os.X_OK):
            fail("the tool dropped a script's execute bit")
        r = run(root)
        if r.returncode != 0 or "added the header to 0 files" not in r.stdout:
            fail("a second run changed something: %s" % r.stdout)
        r = run("--check", root)
        if r.returncode != 0:
            fail("--check after the tool: exit %d, %s" % (r.returncode, r.stderr))
        with open(os.path.join(root, "a/y.c"), "w") as f:
            f.write("/* SPDX-License-Identifier: MIT */\n")
        r = run("--check", root)
        if r.returncode != 1 or "a/y.c: has an SPDX-License-Identifier other than" not in r.stderr:
            fail("--check with another identifier: exit %d, %s" % (r.returncode, r.stderr))
        with open(os.path.join(root, "a/y.c")) as f:
            if f.read() != "/* SPDX-License-Identifier: MIT */\n":
                fail("the tool changed a file with another identifier")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("test_spdx_tool: pass")


if __name__ == "__main__":
    main()
