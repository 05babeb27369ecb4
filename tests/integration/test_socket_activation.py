#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""loaderd serves the listening socket systemd passes (loaderd.socket).

systemd-socket-activate plays systemd's part: it binds and listens on the
socket, and starts loaderd (with $LISTEN_FDS and $LISTEN_PID) only when
the first client connects. That client, `loaderctl status`, connected
before the daemon even started: it must wait in the backlog and then be
served; the status and the log must say the socket came from systemd, and
the daemon must leave the socket file (systemd's) in place when it stops,
and warn that socket_mode, set in its file, does not apply to that socket.
A stream socket (ListenStream=) instead of a SOCK_SEQPACKET one, and a
socket bound to another path than the configuration's, are refused at
start (exit 1), saying what was passed.

Skipped (exit 77) where systemd-socket-activate is not installed.
"""

import os
import shutil
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

# What systemd-socket-activate passes on: it gives its child only the
# variables it is told to.
PASSED = ["NOTIFY_SOCKET", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "PATH"]


def activate(listen, seqpacket=True):
    cmd = ["systemd-socket-activate", "-l", listen]
    if seqpacket:
        cmd.append("--seqpacket")
    for name in PASSED:
        cmd += ["-E", name]  # the value it has in the wrapper's environment
    return cmd


def listening(d, path):
    """Waits until systemd-socket-activate listens on path (it says so
    once listen() returned; the file exists from bind() on)."""
    harness.wait_for(lambda: "Listening on %s as 3." % path in d.log(), 10,
                     "systemd-socket-activate to listen on %s" % path)


def expect_refused(env, cfg, listen, seqpacket, want, what):
    d = env.start_daemon(cfg, wait_ready=False, wrapper=activate(listen, seqpacket))
    listening(d, listen)
    kind = socket.SOCK_SEQPACKET if seqpacket else socket.SOCK_STREAM
    poke = socket.socket(socket.AF_UNIX, kind)
    poke.connect(listen)  # starts the daemon
    try:
        rc = d.proc.wait(timeout=30)
    finally:
        poke.close()
    check(rc == 1, "%s: loaderd exited %s, expected 1\n%s" % (what, rc, d.log()))
    check(want in d.log(), "%s: the log does not say %r:\n%s" % (what, want, d.log()))


def body(env):
    if shutil.which("systemd-socket-activate") is None:
        raise harness.TestSkip("systemd-socket-activate is not installed")
    data = env.make_raw("data.bin", 100, 128)
    pipes = {"p": {"source": "raw:" + data, "record_bytes": 128, "batch_size": 10}}
    cfg = env.config("sa", pipes, socket_mode="0660")
    sock = env.path("sa.sock")
    d = env.start_daemon(cfg, wait_ready=False, wrapper=activate(sock))
    listening(d, sock)
    check(not d.notes and "loaderd:" not in d.log(), "loaderd started before a client connected")

    # Connects while nothing accepts: it waits in the backlog, starts the
    # daemon, and is answered once the daemon accepts.
    early = env.spawn_loaderctl(["--socket", sock, "status"])
    out, err = early.communicate(timeout=60)
    check(early.returncode == 0, "loaderctl status, connected before loaderd started, exited %d: %s"
          % (early.returncode, err))
    st = harness.parse_status(out)
    check(st["pid"] == d.proc.pid, "status names pid %d, loaderd is %d" % (st["pid"], d.proc.pid))
    check(st["connections"]["socket"] == "systemd",
          "status says the socket is %r, expected systemd's" % st["connections"]["socket"])
    d.wait_ready(20)
    log = d.log()
    check("socket %s: from systemd (socket activation)" % sock in log
          and "listening on %s (socket from systemd)" % sock in log,
          "the log does not say the socket came from systemd:\n%s" % log)
    check(d.status()["connections"]["socket"] == "systemd", "a second status disagrees")
    check("socket_group and socket_mode apply only to a socket loaderd binds itself" in log,
          "the log does not say socket_mode (set in the file) is not applied:\n%s" % log)

    d.proc.send_signal(signal.SIGTERM)
    rc = d.proc.wait(timeout=20)
    check(rc == 0, "loaderd exited %d after SIGTERM" % rc)
    check(os.path.exists(sock), "loaderd removed %s, systemd's socket" % sock)
    d.check_log_clean()

    # A daemon that binds its own says so too.
    own = env.start_daemon(env.config("own", pipes))
    check(own.status()["connections"]["socket"] == "bound", "its own socket is not 'bound'")
    own.stop()

    expect_refused(env, env.config("stream", pipes), env.path("stream.sock"), False,
                   "is an AF_UNIX SOCK_STREAM (ListenStream=) socket; loaderd serves an "
                   "AF_UNIX SOCK_SEQPACKET one", "a stream socket")
    other = env.path("other.sock")
    expect_refused(env, env.config("elsewhere", pipes), other, True,
                   "the socket from systemd is bound to %s, but" % other, "another path")


if __name__ == "__main__":
    harness.run_test("test_socket_activation", body)
