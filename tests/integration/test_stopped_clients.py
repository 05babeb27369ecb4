#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stopped clients keep what they hold, and take no staging slot from others.

Defaults that used to let one client hold every slot: 16 staging slots,
max_depth 16. The rule (docs/config.md, "Staging slot shares"): with N
clients attached, none has more than floor(16 / (N + 1)) slots in use.

1. A attaches with depth 16, fills up, and is SIGSTOPped (a debugger, a
   long evaluation): it holds at most half of the slots, and status shows
   its staging count within the share.
2. B attaches with depth 16 and is stopped too, after it filled up.
3. C and D (depth 16) attach and read two epochs each to the end with
   correct bytes, while A and B stay stopped; status never shows a client
   over the share it had when it took its slots.
4. A and B continue (SIGCONT) and also read their epochs to the end,
   exactly once and byte for byte.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 1024, 128, 16
SLOTS = 16


def stop_when_full(env, d, name, expect_share):
    """Starts a consumer of depth 16, waits until it holds all it may, then
    SIGSTOPs it; returns (process, dump path)."""
    dump = env.path("%s.dump" % name)
    p = env.spawn_loaderctl(harness.consume_args(
        d.socket, "p", epochs=2, dump=dump,
        extra=["--depth", "16", "--name", name, "--quiet", "--step-ms", "20"]))

    def full(st):
        me = [c for c in st["clients"] if c["pid"] == p.pid]
        return me and me[0]["staging"] >= expect_share
    d.wait_status(full, 15, "client %s to hold its share of %d slots" % (name, expect_share))
    os.kill(p.pid, signal.SIGSTOP)
    st = d.status()
    me = [c for c in st["clients"] if c["pid"] == p.pid][0]
    check(me["staging"] <= expect_share,
          "stopped client %s holds %d staging slots, over its share %d:\n%s"
          % (name, me["staging"], expect_share, d.status_text()))
    return p, dump


def check_epochs(rows, crcs, epochs, what):
    harness.check_dump_crcs(rows, crcs, what)
    for e in range(epochs):
        harness.check_permutation([s for _, s in harness.epoch_rows(rows, e)], N,
                                  "%s epoch %d" % (what, e))


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=9)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("stop", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                    "batch_size": BATCH}},
                     staging_slots=SLOTS, max_depth=16, workers=2)
    d = env.start_daemon(cfg)

    a, a_dump = stop_when_full(env, d, "A", SLOTS // 2)        # alone: 16 / 2
    b, b_dump = stop_when_full(env, d, "B", SLOTS // 3)        # with A: 16 / 3
    st = d.status()
    check(st["share"] == SLOTS // 3, "status says share %d with 2 clients, expected %d"
          % (st["share"], SLOTS // 3))

    live = []
    for name in ("C", "D"):
        dump = env.path("%s.dump" % name)
        live.append((name, dump, env.spawn_loaderctl(harness.consume_args(
            d.socket, "p", epochs=2, dump=dump, extra=["--depth", "16", "--name", name, "--quiet"]))))
    for name, dump, p in live:
        rc, out, err = harness.finish(p, 60, "consumer %s while A and B are stopped" % name)
        check(rc == 0, "consumer %s exited %d while A and B were stopped: %s" % (name, rc, err))
        check_epochs(harness.read_dump(dump), crcs, 2,
                     "consumer %s" % name)
    st = d.status()
    held = {c["name"]: c["staging"] for c in st["clients"]}
    check(held.get("A", 99) <= SLOTS // 2 and held.get("B", 99) <= SLOTS // 3,
          "the stopped clients' holdings changed: %s" % held)

    for p in (a, b):
        os.kill(p.pid, signal.SIGCONT)
    for name, p, dump in (("A", a, a_dump), ("B", b, b_dump)):
        rc, out, err = harness.finish(p, 60, "consumer %s after SIGCONT" % name)
        check(rc == 0, "consumer %s exited %d after it continued: %s" % (name, rc, err))
        check_epochs(harness.read_dump(dump), crcs, 2, "consumer %s" % name)
    d.wait_status(lambda s: s["in_use"] == 0 and not s["clients"], 10, "every slot to be free")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_stopped_clients", body)
