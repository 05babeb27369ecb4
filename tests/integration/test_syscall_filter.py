#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""loaderd and its workers run under the installed unit's system-call
filter, and make no call outside it.

The filter is the installed loaderd.service's SystemCallFilter=, expanded
by `systemd-analyze syscall-filter` (so, as this machine's systemd defines
its groups), with its SystemCallErrorNumber= and RestrictAddressFamilies=.
Without systemd as PID 1 the unit itself cannot be started here; instead:

- Under strace -f (when installed): the daemon, the worker zygote and its
  workers serve an epoch of a raw (io_uring reads), a token and an
  ImageFolder pipeline, and a scrape of GET /metrics on a Unix path
  (metrics_listen), then stop; every system call strace counted must
  be in the filter's set. A failure lists the calls that are not.
- Under seccomp_exec.py (when the libseccomp binding, python3-seccomp, is
  installed): the same filter loaded with libseccomp, no_new_privs set,
  and socket() limited to the unit's family, then the same workload: every
  consumer gets its epoch, no worker restarts, the log has no sign of a
  refused call (io_uring falling back, setpriority refused), and the daemon
  exits 0 on SIGTERM. A daemon told to serve its metrics on a loopback
  port (metrics_listen) does not start there, and its log says why (the
  unit allows only AF_UNIX; docs/operations.md gives the drop-in).

The CUDA driver's calls are not covered here (no GPU on a build machine);
its ioctl, mmap, mbind and sched_setaffinity are in @system-service.
Skipped (exit 77) without systemd-analyze, or without both strace and the
libseccomp binding.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import installed  # noqa: E402
from harness import check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# Signs in the log that a call was refused.
REFUSED = ["io_uring is not available", "the workers run at nice", "Operation not permitted",
           "Address family not supported"]


# A file holding `systemd-analyze syscall-filter`'s listing of every group,
# for a machine without systemd-analyze (scripts/gpu-check.sh --fetch writes
# one on the machine that fetches, for the GPU machines).
GROUPS_ENV = "LOADERD_SYSCALL_GROUPS"


def parse_groups(text):
    """{"@group": [word, ...]} from `systemd-analyze syscall-filter`'s
    listing: a group's name at the start of a line, its members indented,
    comments after #."""
    groups, current = {}, None
    for line in text.splitlines():
        word = line.split("#", 1)[0].strip()
        if not word:
            continue
        if not line[0].isspace():
            current = groups.setdefault(word, []) if word.startswith("@") else None
        elif current is not None:
            current.append(word)
    return groups


def group_listing():
    """Every group's members: from the file $LOADERD_SYSCALL_GROUPS names,
    else from this machine's systemd-analyze (None when neither)."""
    path = os.environ.get(GROUPS_ENV)
    if path:
        with open(path) as f:
            return parse_groups(f.read())
    if shutil.which("systemd-analyze") is None:
        return None
    r = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, SYSTEMD_PAGER="cat"))
    check(r.returncode == 0, "systemd-analyze syscall-filter exited %d: %s" % (r.returncode, r.stderr))
    return parse_groups(r.stdout)


def expand(groups, name, seen=None):
    """The system calls of a SystemCallFilter= word (a call, or @group)."""
    if not name.startswith("@"):
        return {name}
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    check(name in groups, "the filter names %s, a group systemd-analyze does not list" % name)
    calls = set()
    for word in groups[name]:
        calls |= expand(groups, word, seen)
    return calls


def unit_filter(unit, groups):
    words = []
    for value in read_all(unit, "SystemCallFilter"):
        check(not value.startswith("~"), "%s: a deny list (%s) is not what this test reads" % (unit, value))
        words += value.split()
    calls = set()
    for w in words:
        calls |= expand(groups, w)
    check("io_uring_enter" in calls and "clone" in calls, "%s: the filter %s lacks io_uring_enter "
          "or clone" % (unit, words))
    return words, calls


def have_binding():
    """Whether seccomp_exec.py can load a filter: the libseccomp binding
    (python3-seccomp), or pyseccomp (the same API over ctypes; in the
    directory $LOADERD_PYSECCOMP names, or installed)."""
    if os.environ.get("LOADERD_PYSECCOMP"):
        sys.path.append(os.environ["LOADERD_PYSECCOMP"])
    for name in ("seccomp", "pyseccomp"):
        try:
            __import__(name)
            return True
        except (ImportError, RuntimeError):  # pyseccomp: RuntimeError without libseccomp
            pass
    return False


def read_all(unit, key):
    out = []
    with open(unit) as f:
        for line in f:
            m = re.match(r"\s*%s=(.*)$" % key, line)
            if m:
                out.append(m.group(1).strip())
    return out


def make_images(env):
    root = env.path("images")
    mkjpeg = harness.binary("mkjpeg")
    for c in range(2):
        os.makedirs(os.path.join(root, "c%d" % c))
        for i in range(6):
            subprocess.run([mkjpeg, os.path.join(root, "c%d" % c, "%d.jpg" % i), "--width", "64",
                            "--height", "48", "--seed", str(c * 10 + i)], check=True)
    return root


def pipelines(env):
    raw = env.make_raw("data.bin", 400, 512)
    tokens = env.make_tokens("tokens.bin", 20000, "uint16")
    return {
        "raw": {"source": "raw:" + raw, "record_bytes": 512, "batch_size": 16},
        "tok": {"source": "tokens:" + tokens, "token_dtype": "uint16", "seq_len": 64,
                "batch_size": 8},
        "img": {"source": "imagefolder:" + make_images(env), "batch_size": 4,
                "transform": "random_resized_crop(32) hflip(0.5)"},
    }


def scrape(path):
    """GET /metrics over the Unix socket at path: the response's bytes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return got


def workload(env, name, pipes, wrapper):
    """Starts loaderd under wrapper (serving GET /metrics on a Unix path,
    the unit's only address family), consumes an epoch of every pipeline
    and scrapes the metrics, checks the workers never restarted; returns
    the daemon (running)."""
    metrics = env.path(name + "-metrics.sock")
    d = env.start_daemon(env.config(name, pipes, workers=2, metrics_listen=metrics), wrapper=wrapper,
                         timeout_s=60)
    for p in ("raw", "tok", "img"):
        r = env.loaderctl(harness.consume_args(d.socket, p, epochs=1), timeout_s=120)
        check(r.returncode == 0, "%s: consume %s exited %d: %s" % (name, p, r.returncode, r.stderr))
    got = scrape(metrics)
    check(got.startswith(b"HTTP/1.0 200") or got.startswith(b"HTTP/1.1 200"),
          "%s: GET /metrics answered %r" % (name, got[:200]))
    check(b"\nloaderd_worker_items_total{" in got, "%s: GET /metrics has no worker items" % name)
    st = d.status()
    restarts = [w["restarts"] for w in st["workers"]]
    check(restarts and not any(restarts), "%s: workers restarted %s\n%s" % (name, restarts, d.log()))
    return d


def under_strace(env, pipes, calls):
    out = env.path("strace.txt")
    d = workload(env, "strace", pipes, ["strace", "-f", "-qq", "-c", "-o", out])
    os.kill(d.main_pid(), signal.SIGTERM)
    rc = d.proc.wait(timeout=30)
    check(rc == 0, "loaderd under strace exited %d after SIGTERM\n%s" % (rc, d.log()))
    made = set()
    with open(out) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
                made.add(fields[-1])
    check(len(made) > 20, "strace counted only %s" % sorted(made))
    print("loaderd and its workers made %d system calls: %s" % (len(made), " ".join(sorted(made))))
    outside = sorted(made - calls)
    check(not outside, "loaderd or its workers call %s, outside the unit's SystemCallFilter=: "
          "add them, or stop calling them" % outside)


def under_seccomp(env, pipes, words, calls, unit):
    errno_name = (read_all(unit, "SystemCallErrorNumber") or ["EPERM"])[-1]
    families = (read_all(unit, "RestrictAddressFamilies") or ["AF_UNIX"])[-1].split()
    check(len(families) == 1, "%s: RestrictAddressFamilies=%s: seccomp_exec.py takes one family"
          % (unit, families))
    listed = env.path("syscalls.txt")
    with open(listed, "w") as f:
        f.write("\n".join(sorted(calls)) + "\n")
    d = workload(env, "seccomp", pipes, [sys.executable, os.path.join(HERE, "seccomp_exec.py"), listed,
                                  errno_name, families[0]])
    d.stop()
    log = d.log()
    for sign in REFUSED:
        check(sign not in log, "under the filter (%s) the log says %r:\n%s" % (" ".join(words), sign, log))
    # A loopback port for the metrics needs the drop-in docs/operations.md
    # gives: without it the daemon does not start, and says why.
    cfg = env.config("tcp", {"raw": pipes["raw"]}, workers=1, metrics_listen="127.0.0.1:9")
    d = env.start_daemon(cfg, wait_ready=False, wrapper=[sys.executable, os.path.join(HERE, "seccomp_exec.py"),
                                                         listed, errno_name, families[0]])
    rc = d.proc.wait(timeout=60)
    want = "metrics_listen = 127.0.0.1:9: socket: Address family not supported by protocol"
    check(rc == 1 and want in d.log(), "metrics on a TCP port under RestrictAddressFamilies=%s: exit %d, log:\n%s"
          % (families[0], rc, d.log()))
    print("metrics on a TCP port under the filter: %s" % [x for x in d.log().splitlines() if want in x][0])


def body(env):
    groups = group_listing()
    if groups is None:
        raise harness.TestSkip("systemd-analyze is not installed (nor $%s set)" % GROUPS_ENV)
    have_strace = shutil.which("strace") is not None
    have_seccomp = have_binding()
    if not have_strace and not have_seccomp:
        raise harness.TestSkip("neither strace nor the libseccomp binding (python3-seccomp) is installed")
    # In a sanitized build, LeakSanitizer's exit check uses ptrace, which
    # works under neither strace nor the filter; the daemon's own calls are
    # what is checked here.
    os.environ["ASAN_OPTIONS"] = ":".join(x for x in [os.environ.get("ASAN_OPTIONS", ""),
                                                      "detect_leaks=0"] if x)
    unit = os.path.join(installed.install(env), installed.UNIT)
    words, calls = unit_filter(unit, groups)
    pipes = pipelines(env)
    if have_strace:
        under_strace(env, pipes, calls)
    else:
        print("strace is not installed: the calls made are not listed")
    if have_seccomp:
        under_seccomp(env, pipes, words, calls, unit)
    else:
        print("python3-seccomp is not installed: the daemon is not run under the filter")


if __name__ == "__main__":
    harness.run_test("test_syscall_filter", body)
