#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""More idle connections than the daemon has descriptors for: the daemon
stays answerable, idle, quiet, and serves data once they are gone.

Two daemons, each with RLIMIT_NOFILE 128 (soft and hard, so the daemon
cannot raise it) and handshake_timeout_ms 2000, get 400 connections that
never send a frame (more than the limit allows):

- "cap": max_handshakes 16, so the daemon closes the oldest idle
  connection whenever a 17th waits (ERROR EBUSY);
- "descriptors": max_handshakes 4096, so it is the descriptors that run
  out (accept fails with EMFILE) and the oldest idle connection makes room.

While they are open, for each: `loaderctl status` answers; the daemon's CPU
time (/proc/PID/stat) grows by well under a core over the seconds the
checks take; at most max_handshakes (or the descriptors) wait at once.
Then every idle connection is closed by the daemon, those left waiting
after the timeout (ERROR ETIMEDOUT) and no earlier; the log stays small,
with one "similar messages suppressed" line for the closings and no
"Too many open files" flood; status counts what happened; and a data
client attaches and consumes a few batches. At start each daemon warns that
128 descriptors are fewer than its configuration may need.

First, a daemon started with a soft limit of 100 under a hard one of 2048
raises its soft limit to 2048 and does not warn.
"""

import errno
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import rawconn  # noqa: E402
from harness import check  # noqa: E402

N_IDLE, FD_LIMIT, TIMEOUT_MS = 400, 128, 2000
N, RECORD, BATCH = 512, 64, 16
# The daemon's CPU time over the checks, as a share of one core: an idle
# loop uses next to nothing, a loop spinning on accept() uses all of it.
CPU_SHARE_MAX = 0.25
LOG_LINES_MAX = 160


def run(env, data, name, max_handshakes):
    cfg = env.config(name, {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH}},
                     workers=1, max_workers=1, max_handshakes=max_handshakes,
                     handshake_timeout_ms=TIMEOUT_MS)
    d = env.start_daemon(cfg, nofile=FD_LIMIT)
    need = 256 + max_handshakes + 2 * 1 + 64
    check("RLIMIT_NOFILE is %d (hard limit %d), below the %d descriptors loaderd may need: "
          "max_clients 256 + max_handshakes %d + 2 for each of max_workers 1 + 64"
          % (FD_LIMIT, FD_LIMIT, need, max_handshakes) in d.log(),
          "%s: no warning that the descriptor limit is low:\n%s" % (name, d.log()))
    cpu0, t0 = d.cpu_seconds(), time.monotonic()

    socks = rawconn.open_idle(d.socket, N_IDLE, 5)
    opened = time.monotonic()
    check(len(socks) == N_IDLE, "%s: only %d of %d idle connections could connect within 5 s: the "
          "daemon stopped accepting" % (name, len(socks), N_IDLE))
    watch = rawconn.Watch(socks)

    # (a) status answers while they are open, and few of them wait.
    for _ in range(3):
        r = env.loaderctl(["--socket", d.socket, "status"], timeout_s=5)
        check(r.returncode == 0, "%s: loaderctl status failed during the flood: %s" % (name, r.stderr))
        st = harness.parse_status(r.stdout)
        conns = st["connections"]
        check(conns["handshaking"] <= min(max_handshakes, FD_LIMIT),
              "%s: %d connections wait for a first frame" % (name, conns["handshaking"]))
        check(conns["max_handshakes"] == max_handshakes, "%s: status says %s" % (name, conns))

    # (e) every idle connection is closed by the daemon: the oldest to make
    # room (EBUSY), the rest when the timeout has passed (ETIMEDOUT).
    harness.wait_for(watch.poll, TIMEOUT_MS / 1000 + 8, "%s: the daemon to close all %d idle "
                     "connections" % (name, N_IDLE))
    codes = watch.codes()
    n_busy, n_timeout = codes.count(errno.EBUSY), codes.count(errno.ETIMEDOUT)
    check(n_busy + n_timeout == N_IDLE, "%s: idle connections closed with codes %s"
          % (name, sorted(set(map(str, codes)))))
    check(1 <= n_timeout <= max_handshakes, "%s: %d connections timed out" % (name, n_timeout))
    check(n_busy >= N_IDLE - max_handshakes, "%s: only %d closed to make room" % (name, n_busy))
    first_timeout = min(watch.closed_at[fd] for fd, frames in watch.got.items()
                        if frames[0][:2] == (rawconn.ERROR, errno.ETIMEDOUT))
    check(first_timeout >= t0 + TIMEOUT_MS / 1000 - 0.05, "%s: a connection timed out %.2f s after "
          "the first connect, before handshake_timeout_ms" % (name, first_timeout - t0))
    check(all("handshake_timeout_ms" in t for t in watch.texts(errno.ETIMEDOUT)),
          "%s: ETIMEDOUT texts: %s" % (name, watch.texts(errno.ETIMEDOUT)[:3]))

    # (b) the loop stayed idle.
    cpu1, t1 = d.cpu_seconds(), time.monotonic()
    share = (cpu1 - cpu0) / (t1 - t0)
    print("%s: %d connections in %.2f s; the daemon used %.2f s of CPU over %.2f s (%.0f%% of a "
          "core); %d closed to make room, %d timed out"
          % (name, N_IDLE, opened - t0, cpu1 - cpu0, t1 - t0, 100 * share, n_busy, n_timeout))
    check(share < CPU_SHARE_MAX, "%s: the daemon used %.0f%% of a core with idle connections open"
          % (name, 100 * share))

    # (c) the log: bounded, the closings summarised once their window ends.
    harness.wait_for(lambda: "similar messages suppressed: client pid" in d.log(), 10,
                     "%s: the log to summarise the suppressed lines" % name)
    lines = d.log().splitlines()
    check(len(lines) < LOG_LINES_MAX, "%s: the log has %d lines:\n%s"
          % (name, len(lines), "\n".join(lines[:40])))
    check(sum("Too many open files" in x for x in lines) <= 1,
          "%s: accept's EMFILE logged more than once" % name)

    st = d.status()
    conns = st["connections"]
    check(conns["handshaking"] == 0 and conns["timed_out"] == n_timeout and conns["evicted"] == n_busy
          and conns["accepting"] == "yes", "%s: status says %s; %d closed to make room, %d timed out"
          % (name, conns, n_busy, n_timeout))

    # (d) a data client is served.
    r = env.loaderctl(harness.consume_args(d.socket, "p", batches=5) + ["--quiet"], timeout_s=20)
    check(r.returncode == 0, "%s: consume after the flood failed: %s" % (name, r.stderr))
    summary, _ = harness.parse_consume_output(r.stdout)
    check(summary["batches"] == 5, "%s: consumed %d batches" % (name, summary["batches"]))
    d.stop()


def check_limit_raised(env, data):
    """The soft limit is raised to the hard one at start, without a warning
    when that is enough."""
    cfg = env.config("raise", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                     "batch_size": BATCH}}, workers=1, max_workers=1)
    d = env.start_daemon(cfg, nofile=(100, 2048))
    with open("/proc/%d/limits" % d.pid) as f:
        row = next(x for x in f if x.startswith("Max open files")).split()
    check(row[3:5] == ["2048", "2048"], "the daemon's open-file limits are %s, expected its soft "
          "limit raised to the hard 2048" % row[3:5])
    check("RLIMIT_NOFILE is" not in d.log(), "a warning with enough descriptors:\n%s" % d.log())
    d.stop()


def body(env):
    rawconn.raise_own_fd_limit(N_IDLE + 64)
    data = env.make_raw("data.bin", N, RECORD)
    check_limit_raised(env, data)
    run(env, data, "cap", 16)
    run(env, data, "descriptors", 4096)


if __name__ == "__main__":
    harness.run_test("test_fd_exhaustion", body)
