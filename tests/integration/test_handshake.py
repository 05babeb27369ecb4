#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A connection must send its first frame in time, and idle ones cannot
take the places of those that do.

Timeout (handshake_timeout_ms 600): three connections that send nothing
are closed with ERROR ETIMEDOUT naming handshake_timeout_ms, not before
600 ms; one that sends STATUS_REQ after 150 ms gets STATUS; a data client
that attaches is never closed for it, however long it then stays silent
(its session outlives two timeouts); status counts 3 timed out.

Eviction (max_handshakes 4, timeout 60 s): idle A..F connect in order;
E's arrival closes A, the oldest (ERROR EBUSY naming max_handshakes), F's
closes B, and C..F stay open. With four idle ones waiting, a STATUS_REQ
sent with the connect and `loaderctl status` are answered, twenty times
over. Status counts the evictions.

Frames first (max_handshakes 2): with the daemon stopped (SIGSTOP) while
the test acts, so that the daemon finds it all at once: a newcomer whose
STATUS_REQ came with its connect is answered and no idle one is closed;
the oldest idle connection whose STATUS_REQ came just as a newcomer pushed
it out is answered, not closed.
"""

import errno
import os
import select
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import rawconn  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 256, 32, 8


def pipelines(data):
    return {"p": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH}}


def readable(s):
    return bool(select.select([s], [], [], 0)[0])


def check_timeout(env, data):
    timeout_ms = 600
    d = env.start_daemon(env.config("timeout", pipelines(data), workers=1,
                                    handshake_timeout_ms=timeout_ms))
    # A data client first: once attached it may be silent for as long as it likes.
    client = env.spawn_loaderctl(harness.consume_args(d.socket, "p", batches=2)
                                 + ["--step-ms", str(2 * timeout_ms + 100), "--quiet"])
    d.wait_status(lambda st: len(st["clients"]) == 1, 10, "the consumer to attach")

    t0 = time.monotonic()
    idle = [rawconn.connect(d.socket) for _ in range(3)]
    late = rawconn.connect(d.socket)
    check(None not in idle and late is not None, "could not connect")
    harness.wait_for(lambda: time.monotonic() - t0 >= 0.15, 1, "150 ms")
    late.send(rawconn.frame(rawconn.STATUS_REQ))
    late_watch = rawconn.Watch([late])
    harness.wait_for(late_watch.poll, 5, "the answer to a STATUS_REQ sent after 150 ms")
    got = next(iter(late_watch.got.values()))
    check(got[0][0] == rawconn.STATUS, "a STATUS_REQ sent 150 ms after connecting got %s" % got)

    watch = rawconn.Watch(idle)
    harness.wait_for(watch.poll, 5, "the idle connections to be closed")
    elapsed = min(watch.closed_at.values()) - t0
    check(elapsed >= timeout_ms / 1000 - 0.02, "idle connections closed after %.3f s, before "
          "handshake_timeout_ms %d" % (elapsed, timeout_ms))
    check(watch.codes() == [errno.ETIMEDOUT] * 3, "idle connections closed with %s"
          % [rawconn.ECODES.get(c, c) for c in watch.codes()])
    text = watch.texts(errno.ETIMEDOUT)[0]
    check("within %d ms" % timeout_ms in text and "handshake_timeout_ms" in text,
          "ETIMEDOUT text: %r" % text)

    rc, out, err = harness.finish(client, 20, "the slow consumer")
    check(rc == 0, "a data client silent for %d ms between batches was cut off: %s"
          % (2 * timeout_ms + 100, err))
    st = d.status()
    check(st["connections"]["timed_out"] == 3 and st["connections"]["evicted"] == 0,
          "status: %s" % st["connections"])
    check("handshake_timeout_ms" in d.log(),
          "the log does not say why idle connections were closed:\n%s" % d.log())
    d.stop()


def frozen_status(d):
    return harness.parse_status(rawconn.status_frozen(d))["connections"]


def check_eviction(env, data):
    d = env.start_daemon(env.config("evict", pipelines(data), workers=1, max_handshakes=4,
                                    handshake_timeout_ms=60000))
    # Accepted in the order they connect (the backlog is a queue): E makes
    # five waiting and closes A, F closes B.
    conns = {name: rawconn.connect(d.socket) for name in "ABCDEF"}
    check(None not in conns.values(), "could not connect")
    ab = rawconn.Watch([conns["A"], conns["B"]])
    harness.wait_for(ab.poll, 5, "A and B, the oldest idle connections, to be closed")
    check(ab.codes() == [errno.EBUSY] * 2, "A and B were closed with %s" % ab.got)
    check(all("max_handshakes" in t for t in ab.texts(errno.EBUSY)), "EBUSY texts: %s"
          % ab.texts(errno.EBUSY))
    check(not any(readable(conns[x]) for x in "CDEF"), "C..F heard from the daemon")
    counts = frozen_status(d)
    check(counts["handshaking"] == 4 and counts["evicted"] == 2, "status: %s" % counts)

    # Status is answered with four idle connections waiting, whoever makes
    # room for it.
    for i in range(20):
        got = rawconn.status_or_error(d.socket)
        check(got and got[0][0] == rawconn.STATUS, "STATUS_REQ %d with 4 idle waiting got %s"
              % (i, got))
        r = env.loaderctl(["--socket", d.socket, "status"], timeout_s=5)
        check(r.returncode == 0, "loaderctl status %d with 4 idle waiting: %s" % (i, r.stderr))
        check(harness.parse_status(r.stdout)["connections"]["handshaking"] <= 4,
              "more than max_handshakes wait:\n%s" % r.stdout)
    d.stop()
    for s in conns.values():
        s.close()


def answer_on(sock, what):
    """The frames the daemon has sent on sock, once there are any."""
    w = rawconn.Watch([sock])
    harness.wait_for(w.poll, 5, what)
    return next(iter(w.got.values()))


def check_frames_read_first(env, data):
    """A frame that has come is handled before anything is closed for lack
    of room: the new connection's (read at accept), and the oldest
    waiting one's (looked for again before it is closed)."""
    d = env.start_daemon(env.config("served", pipelines(data), workers=1, max_handshakes=2,
                                    handshake_timeout_ms=60000))
    i1, i2 = rawconn.connect(d.socket), rawconn.connect(d.socket)
    # Status asked with the daemon stopped, so that the request is there when
    # its connection is accepted and never counts as a third idle one.
    harness.wait_for(lambda: frozen_status(d)["handshaking"] == 2, 5, "two idle connections")

    # Two wait; a third comes with its STATUS_REQ: answered, nobody closed.
    with rawconn.Frozen(d.main_pid()):
        x = rawconn.connect(d.socket)
        x.send(rawconn.frame(rawconn.STATUS_REQ, request_id=5))
    got = answer_on(x, "the answer to the newcomer's STATUS_REQ")
    check(got[0][0] == rawconn.STATUS, "a STATUS_REQ that came with the connect got %s" % got)
    check(not readable(i1) and not readable(i2), "an idle connection was closed to make room for "
          "a connection whose frame had come")

    # A fourth, idle, connects; then the oldest sends its STATUS_REQ: the
    # daemon, going on, takes the newcomer first and would close the
    # oldest, but finds its frame and answers it.
    with rawconn.Frozen(d.main_pid()):
        y = rawconn.connect(d.socket)
        i1.send(rawconn.frame(rawconn.STATUS_REQ, request_id=6))
    got = answer_on(i1, "an answer on the oldest connection")
    check(got[0][0] == rawconn.STATUS, "the oldest connection, whose STATUS_REQ had come, got %s"
          % got)
    check(not readable(i2) and not readable(y), "the others heard from the daemon")
    counts = frozen_status(d)
    check(counts["evicted"] == 0 and counts["handshaking"] == 2, "status: %s" % counts)
    d.stop()
    for s in (i2, y):
        s.close()


def body(env):
    data = env.make_raw("data.bin", N, RECORD)
    check_timeout(env, data)
    check_eviction(env, data)
    check_frames_read_first(env, data)


if __name__ == "__main__":
    harness.run_test("test_handshake", body)
