#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Out of descriptors with nothing to reclaim: the daemon refuses new
connections at once, pauses accepting instead of spinning, still answers
status, and says so once per episode.

Once the daemon is up, its RLIMIT_NOFILE is lowered (prlimit) to
the descriptors it has open, so that accept fails with EMFILE and no
connection waits for a first frame that could be closed to make room.
Then, for a second of connections that send nothing, each must be closed
promptly with ERROR EMFILE ("out of file descriptors") rather than left in
the backlog; a STATUS_REQ that came with its connect must be answered, and
`loaderctl status` must answer or fail with that reason, never hang; the
daemon's CPU time must grow by well under a core; the log must say
"Too many open files" once, not per accept. With the limit restored,
status answers, the log says accepting has resumed with the counts, status
counts the pause and the refused connections, and a data client is served.
"""

import errno
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import rawconn  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 256, 32, 8
CPU_SHARE_MAX = 0.25


def body(env):
    data = env.make_raw("data.bin", N, RECORD)
    cfg = env.config("pause", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                     "batch_size": BATCH}},
                     workers=1, max_workers=1, max_handshakes=4096, handshake_timeout_ms=60000)
    d = env.start_daemon(cfg)
    d.status()
    saved = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)
    # Counted once the status request's connection is closed: a descriptor
    # freed after the limit is set would take one idle connection, and the
    # next would evict it (EBUSY) instead of being refused.
    n_open = rawconn.settled_fds(d.pid)
    # The soft limit only: raising a hard limit back takes CAP_SYS_RESOURCE.
    resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (n_open, saved[1]))
    check(rawconn.open_fds(d.pid) == n_open, "the daemon's descriptors changed under the test")
    cpu0, t0 = d.cpu_seconds(), time.monotonic()

    refused = 0
    while time.monotonic() < t0 + 1.0:  # a second of connections, for the CPU reading
        socks = rawconn.open_idle(d.socket, 5, 5)
        check(len(socks) == 5, "the backlog stayed full: the daemon stopped taking connections")
        w = rawconn.Watch(socks)
        harness.wait_for(w.poll, 5, "idle connections to be refused while out of descriptors")
        check(w.codes() == [errno.EMFILE] * 5, "connections closed with %s, expected EMFILE"
              % [rawconn.ECODES.get(c, c) for c in w.codes()])
        check(all("out of file descriptors" in t for t in w.texts(errno.EMFILE)),
              "EMFILE texts: %s" % w.texts(errno.EMFILE)[:2])
        refused += 5
        text = rawconn.status_frozen(d)
        check(harness.parse_status(text)["connections"]["accepting"] in ("yes", "paused"),
              "status: %s" % text)
        r = env.loaderctl(["--socket", d.socket, "status"], timeout_s=5)
        check(r.returncode == 0 or "out of file descriptors" in r.stderr,
              "loaderctl status out of descriptors exited %d: %s" % (r.returncode, r.stderr))
    cpu1, t1 = d.cpu_seconds(), time.monotonic()
    share = (cpu1 - cpu0) / (t1 - t0)
    print("out of descriptors: %d connections refused; the daemon used %.2f s of CPU over %.2f s"
          % (refused, cpu1 - cpu0, t1 - t0))
    check(share < CPU_SHARE_MAX, "the daemon used %.0f%% of a core while out of descriptors"
          % (100 * share))
    lines = d.log().splitlines()
    check(sum("Too many open files" in x for x in lines) == 1,
          "EMFILE is not logged once for the episode:\n%s" % "\n".join(lines[-30:]))
    check(len(lines) < 40, "the log has %d lines" % len(lines))

    resource.prlimit(d.pid, resource.RLIMIT_NOFILE, saved)
    st = d.status()
    harness.wait_for(lambda: "accepting connections on %s again after" % d.socket in d.log(), 5,
                     "the log to say accepting resumed")
    check(" connections refused for want of a descriptor" in d.log(), "no counts:\n%s" % d.log())
    conns = st["connections"]
    check(conns["accept_pauses"] == 1 and conns["shed"] >= refused and conns["accepting"] == "yes"
          and conns["evicted"] == 0, "status: %s" % conns)
    r = env.loaderctl(harness.consume_args(d.socket, "p", batches=3) + ["--quiet"], timeout_s=20)
    check(r.returncode == 0, "consume after the episode failed: %s" % r.stderr)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_accept_pause", body)
