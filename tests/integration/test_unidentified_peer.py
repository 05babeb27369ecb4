#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A peer the daemon cannot identify is refused.

loaderd runs in a new pid namespace (`unshare --pid --fork --mount-proc`,
as root); this test connects from outside it, so SO_PEERCRED gives the
daemon pid 0 for it: the daemon could neither name it in its logs nor
watch it exit. STATUS_REQ, HELLO and RELOAD_REQ from outside must each get
ERROR EPERM saying the process is not visible in loaderd's pid namespace
(with its uid), and the reload must not happen; `loaderctl status` from
outside must fail with that message. Positive control: `loaderctl status`
run inside the daemon's pid namespace (nsenter) is answered, and counts
the refused peers. The daemon logs the refusals and stops cleanly.

(A failing getsockopt, and a short answer from it, are refused by the same
decision function, checked in tests/unit/test_server.c.)

Skipped (exit 77) where a pid namespace cannot be made (not root, or
unshare/nsenter missing or not permitted).
"""

import errno
import os
import shutil
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import rawconn  # noqa: E402
from harness import check  # noqa: E402

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
N, RECORD, BATCH = 256, 32, 8


def hello_payload(pipeline):
    name = pipeline.encode()
    return struct.pack("<IIII", 0, 0, 1, 0) + bytes(16) + struct.pack("<H", len(name)) + name + \
        struct.pack("<HHHH", 0, 0, 0, 0) + struct.pack("<II", 1, 0) + bytes(4)


def refused(got, what):
    check(got and got[0][0] == rawconn.ERROR and got[0][1] == errno.EPERM,
          "%s from outside the daemon's pid namespace got %s, expected ERROR EPERM" % (what, got))
    text = got[0][2]
    check("not visible in loaderd's pid namespace" in text and "uid %d" % os.getuid() in text,
          "%s: the ERROR text does not say why: %r" % (what, text))


def exchange(path, packet):
    s = harness.wait_for(lambda: rawconn.connect(path), 5, "room in the backlog")
    try:
        s.send(packet)
    except (BrokenPipeError, ConnectionResetError):
        pass
    fd = s.fileno()
    w = rawconn.Watch([s])
    harness.wait_for(w.poll, 5, "the daemon's answer")
    return w.got.get(fd, [])


def body(env):
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            raise harness.TestSkip("%s (util-linux) is not installed" % tool)
    probe = subprocess.run(UNSHARE + ["true"], capture_output=True, text=True, timeout=20)
    if probe.returncode != 0:
        raise harness.TestSkip("cannot make a pid namespace here (%s exited %d: %s)"
                               % (" ".join(UNSHARE), probe.returncode, probe.stderr.strip()))
    data = env.make_raw("data.bin", N, RECORD)
    cfg = env.config("ns", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH}}, workers=1)
    d = env.start_daemon(cfg, wrapper=UNSHARE)
    pid = d.main_pid()

    refused(exchange(d.socket, rawconn.frame(rawconn.STATUS_REQ)), "STATUS_REQ")
    refused(exchange(d.socket, rawconn.frame(rawconn.HELLO, hello_payload("p"))), "HELLO")
    refused(exchange(d.socket, rawconn.frame(rawconn.RELOAD_REQ)), "RELOAD_REQ")
    r = env.loaderctl(["--socket", d.socket, "status"], timeout_s=10)
    check(r.returncode != 0 and "not visible in loaderd's pid namespace" in r.stderr,
          "loaderctl status from outside exited %d: %s" % (r.returncode, r.stderr))

    # Inside the namespace the same client is identified and served. Its
    # mount namespace too, whose /proc is the pid namespace's: a sanitized
    # loaderctl reads /proc/PID/task at exit by the pid it has in there.
    r = subprocess.run(["nsenter", "--target", str(pid), "--pid", "--mount", "--",
                        harness.binary("loaderctl"), "--socket", d.socket, "status"],
                       capture_output=True, text=True, timeout=20)
    check(r.returncode == 0, "loaderctl status inside the daemon's pid namespace exited %d: %s"
          % (r.returncode, r.stderr))
    st = harness.parse_status(r.stdout)
    check(st["pid"] == 1, "inside its namespace the daemon is pid %d, expected 1" % st["pid"])
    check(st["connections"]["unidentified"] == 4 and st["config"]["reloads"] == 0
          and st["config"]["refused"] == 0, "status: %s, config %s" % (st["connections"], st["config"]))

    log = d.log()
    check(log.count("connection refused: the connecting process (uid %d) is not visible" % os.getuid())
          == 4, "the log does not name the 4 refusals:\n%s" % log)
    check("asks for a reload" not in log, "a reload was taken from an unidentified peer:\n%s" % log)

    os.kill(pid, signal.SIGTERM)
    try:
        rc = d.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        raise harness.TestFailure("loaderd did not exit within 15 s of SIGTERM") from None
    check(rc == 0, "loaderd (under unshare) exited %d after SIGTERM" % rc)
    check(not os.path.exists(d.socket), "loaderd left its socket behind")
    d.check_log_clean()


if __name__ == "__main__":
    harness.run_test("test_unidentified_peer", body)
