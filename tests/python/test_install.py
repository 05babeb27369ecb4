#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`cmake --install` into a prefix of the test's own puts a daemon that
runs from there, and the installed tree is what the service and the
Python package use.

- The install (installed.py) puts the binaries, the worker and every other
  program loaderd starts (loaderd-decoder where it is built) under
  libexec/loaderd, the client library and header, the unit, the sysusers
  entry, the configuration and its example, and the Python package (its
  libloaderd_client.so a relative link to the installed library).
- Installed again over itself, it keeps the configuration as edited.
- The tree is then moved elsewhere, and everything runs from the new
  place: the installed configuration, its commented-out ImageFolder
  pipeline uncommented and pointed at a generated tree (socket and workers
  set for the test), passes `--check-config` and serves; the daemon's
  workers are the moved tree's loaderd-worker (their /proc/PID/exe); the
  installed loaderctl consumes an epoch of every image; the installed
  Python package (PYTHONPATH only) delivers the same epoch through the
  installed library, as its mapped file shows.
- The installed configuration itself, as it is, passes `--check-config`
  (no pipeline: the service starts as installed).
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness  # noqa: E402,F401  (puts tests/integration on the path)
import harness  # noqa: E402
import installed  # noqa: E402
from harness import check  # noqa: E402

CLASSES, PER_CLASS = ("ant", "bee", "cat"), 4

PROBE = r"""
import sys, loaderd
x = loaderd.Loader("train", socket=sys.argv[1], device="cpu", framework="numpy")
labels = sorted(int(v) for b in x for v in b["label"])
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libloaderd_client" in line})
print(loaderd.__file__)
print(" ".join(map(str, labels)))
print("\n".join(libs))
"""


def check_files(prefix):
    programs = ["loaderd-worker"]
    if os.path.exists(os.path.join(harness.build_dir(), "bin", "loaderd-decoder")):
        programs.append("loaderd-decoder")
    want = [os.path.join(installed.BIN, "loaderd"), os.path.join(installed.BIN, "loaderctl")]
    want += [os.path.join(installed.PROGRAMS, p) for p in programs]
    for rel in want:
        check(os.access(os.path.join(prefix, rel), os.X_OK), "the install has no program %s" % rel)
    for rel in [installed.UNIT, installed.SYSUSERS, installed.CONFIG, installed.CONFIG_EXAMPLE,
                os.path.join("include", "loaderd.h"), os.path.join(installed.PYTHON, "loaderd", "loader.py")]:
        check(os.path.isfile(os.path.join(prefix, rel)), "the install has no %s" % rel)
    libs = [n for n in os.listdir(os.path.join(prefix, "lib")) if n.startswith("libloaderd_client.so")]
    check("libloaderd_client.so.0" in libs, "the install's lib/ has %s, no libloaderd_client.so.0" % libs)
    link = os.path.join(prefix, installed.PYTHON, "loaderd", "libloaderd_client.so")
    check(os.path.islink(link) and not os.path.isabs(os.readlink(link)),
          "%s is not a relative link (%s)" % (link, os.path.islink(link) and os.readlink(link)))
    with open(os.path.join(prefix, installed.UNIT)) as f:
        left = re.findall(r"@[A-Z_]+@", f.read())  # not @system-service, a syscall set
        check(not left, "the installed unit has placeholders left: %s" % left)


def make_tree(env):
    root = env.path("tree")
    mkjpeg = harness.binary("mkjpeg")
    for c in CLASSES:
        os.makedirs(os.path.join(root, c))
        for i in range(PER_CLASS):
            subprocess.run([mkjpeg, os.path.join(root, c, "%d.jpg" % i), "--width", "64", "--height", "48",
                            "--seed", str(i)], check=True)
    return root


def uncomment_pipeline(text, name, values):
    """The configuration text with [pipeline.NAME]'s commented-out lines
    (';' then no space, up to the next blank line) uncommented, and the keys
    in values replaced."""
    out, inside, found = [], False, set()
    for line in text.split("\n"):
        if line == ";[pipeline.%s]" % name:
            inside = True
        elif not line.strip():
            inside = False
        if inside and re.match(r";\S", line):
            line = line[1:]
            key = line.split("=", 1)[0].strip()
            if key in values:
                line = "%s = %s" % (key, values[key])
                found.add(key)
        out.append(line)
    check(found == set(values), "the installed configuration's [pipeline.%s] has no %s"
          % (name, ", ".join(sorted(set(values) - found))))
    return "\n".join(out)


def run_check_config(loaderd, config):
    r = subprocess.run([loaderd, "--check-config", "--config", config], capture_output=True, text=True,
                       timeout=60)
    harness.check_no_sanitizer_report(r.stderr, "loaderd --check-config")
    check(r.returncode == 0, "%s --check-config --config %s exited %d: %s"
          % (loaderd, config, r.returncode, r.stdout + r.stderr))
    return r.stdout


def worker_exes(pid):
    """The executables of pid's children."""
    exes = set()
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                exes.add(os.path.realpath("/proc/%s/exe" % entry))
        except (OSError, ValueError):
            continue
    return exes


def body(env):
    first = installed.install(env, "first")
    check_files(first)
    # Installed again over itself, the configuration an operator edited stays.
    edited = os.path.join(first, installed.CONFIG)
    with open(edited, "a") as f:
        f.write("; edited\n")
    installed.install(env, "first")
    with open(edited) as f:
        check(f.read().endswith("; edited\n"), "installing again overwrote the edited %s" % edited)
    prefix = env.path("moved")
    os.rename(first, prefix)
    loaderd = os.path.join(prefix, installed.BIN, "loaderd")

    out = run_check_config(loaderd, os.path.join(prefix, installed.CONFIG))
    check("0 pipelines" in out, "the installed configuration is not the one without pipelines: %s" % out)

    with open(os.path.join(prefix, installed.CONFIG)) as f:
        text = f.read()
    text = uncomment_pipeline(text, "train", {"source": "imagefolder:" + make_tree(env), "batch_size": 4})
    sock = env.path("installed.sock")
    text, n = re.subn(r"(?m)^socket = .*$", "socket = %s\nworkers = 2" % sock, text)
    check(n == 1, "the installed configuration has %d 'socket = ' lines, expected 1" % n)
    config = env.path("installed.conf")
    with open(config, "w") as f:
        f.write(text)
    out = run_check_config(loaderd, config)
    check("1 pipeline" in out, "--check-config: %s" % out)

    d = harness.Daemon(env, config)
    d.program = loaderd
    env.daemons.append(d)
    d.start()
    d.wait_ready(30)
    worker = os.path.realpath(os.path.join(prefix, installed.PROGRAMS, "loaderd-worker"))
    exes = harness.wait_for(lambda: worker_exes(d.pid) or None, 10, "loaderd's workers")
    check(exes == {worker}, "the installed loaderd runs %s, expected only %s" % (sorted(exes), worker))

    loaderctl = os.path.join(prefix, installed.BIN, "loaderctl")
    r = subprocess.run([loaderctl] + harness.consume_args(sock, "train", epochs=1), capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, "the installed loaderctl consume exited %d: %s" % (r.returncode, r.stderr))
    summary, _ = harness.parse_consume_output(r.stdout)
    n = len(CLASSES) * PER_CLASS
    check(summary["samples"] == n, "the installed loaderctl got %d samples, want %d" % (summary["samples"], n))

    env_py = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOADERD_CLIENT_LIB")}
    env_py["PYTHONPATH"] = os.path.join(prefix, installed.PYTHON)
    r = subprocess.run([sys.executable, "-c", PROBE, sock], capture_output=True, text=True, timeout=120,
                       env=env_py, cwd=env.dir)
    check(r.returncode == 0, "the installed Python package failed (%d): %s" % (r.returncode, r.stderr[-1500:]))
    where, labels, *libs = r.stdout.strip().split("\n")
    check(where.startswith(os.path.join(prefix, installed.PYTHON)), "imported loaderd from %s" % where)
    want = sorted(c for c in range(len(CLASSES)) for _ in range(PER_CLASS))
    check(list(map(int, labels.split())) == want, "the installed package's labels %s, want %s" % (labels, want))
    lib = os.path.realpath(os.path.join(prefix, "lib", "libloaderd_client.so.0"))
    check([os.path.realpath(x) for x in libs] == [lib], "the installed package mapped %s, want %s" % (libs, lib))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_install", body)
