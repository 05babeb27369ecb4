#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The package installs with pip and finds its library.

- `pip install $BUILD/python` into a fresh virtual environment (with the
  system's site packages and the test's numpy, offline: --no-index
  --no-build-isolation) gives a package that carries libloaderd_client.so
  next to itself; run from
  another directory with no PYTHONPATH, it attaches to a daemon, delivers a
  whole epoch, and the library mapped into the process is the installed one;
- $LOADERD_CLIENT_LIB wins over the library next to the package.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

PROBE = r"""
import sys, loaderd
x = loaderd.Loader("p", socket=sys.argv[1], device="cpu", framework="numpy")
rows = sum(b.rows for b in x)
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libloaderd_client" in line})
print(loaderd.__file__)
print(rows)
print("\n".join(libs))
"""


def run(python, sock, env, cwd):
    r = subprocess.run([python, "-c", PROBE, sock], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)
    check(r.returncode == 0, "%s: the probe exited %d: %s" % (python, r.returncode, r.stderr[-800:]))
    lines = r.stdout.split("\n")
    return lines[0], int(lines[1]), [x for x in lines[2:] if x]


def body(env):
    ch.import_loaderd()
    staged = os.path.join(harness.build_dir(), "python")
    data = env.make_raw("data.bin", 100, 4, seed=1)
    d = env.start_daemon(env.config("py", {"p": {"source": "raw:" + data, "record_bytes": 4, "batch_size": 10}}))
    venv = env.path("venv")
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise ch.TestSkip("cannot make a virtual environment (python3-venv missing?): %s" % r.stderr[-300:])
    python = os.path.join(venv, "bin", "python")
    # The venv sees the system's packages; where numpy comes from somewhere
    # else (another venv, a user site), it is pointed there as well.
    import numpy
    r = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "the venv's python does not run: %s" % r.stderr)
    with open(os.path.join(r.stdout.strip(), "test-parent.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(os.path.abspath(numpy.__file__))) + "\n")
    r = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
                        "--quiet", staged], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "pip install %s exited %d: %s" % (staged, r.returncode, r.stdout + r.stderr))
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOADERD_CLIENT_LIB")}
    where, rows, libs = run(python, d.socket, clean, env.dir)
    check(where.startswith(venv), "the venv imported loaderd from %s" % where)
    installed = os.path.join(os.path.dirname(where), "libloaderd_client.so")
    check(os.path.exists(installed), "the installed package has no %s" % installed)
    check(rows == 100, "the installed package delivered %d rows, want 100" % rows)
    check(libs == [installed], "the installed package mapped %s, want %s" % (libs, installed))

    other = os.path.join(harness.build_dir(), "lib", "libloaderd_client.so.0")
    check(os.path.exists(other), "%s is missing" % other)
    _, _, libs = run(python, d.socket, dict(clean, LOADERD_CLIENT_LIB=other), env.dir)
    check([os.path.realpath(x) for x in libs] == [os.path.realpath(other)],
          "with LOADERD_CLIENT_LIB=%s the process mapped %s" % (other, libs))


if __name__ == "__main__":
    harness.run_test("test_py_install", body)
