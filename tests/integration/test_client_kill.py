#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A client killed mid-stream takes nothing with it.

Two pipelines on one daemon with few staging slots: consumer A steps slowly
through pipeline "a" holding batches; consumer B runs several epochs of
pipeline "b". A is SIGKILLed while both stream. B must still finish, with
exit 0 and a correct dump, within its deadline; afterwards status lists no
client of A, and once B is done the arena's "in use" count returns to 0
(the slots A held were given back).
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 1001, 256, 32
B_EPOCHS = 4


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=4)
    crcs = harness.raw_sample_crcs(data, RECORD)
    common = {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH}
    cfg = env.config("ck", {"a": dict(common, seed=1), "b": dict(common, seed=2)},
                     staging_slots=6, workers=2)
    d = env.start_daemon(cfg)

    a = env.spawn_loaderctl(harness.consume_args(
        d.socket, "a", epochs=3, extra=["--step-ms", "200", "--depth", "4", "--name", "A", "--quiet"]))
    d.wait_status(lambda st: any(c["pid"] == a.pid and c["released"] >= 1 for c in st["clients"]),
                  15, "consumer A to release a batch")

    b_dump = env.path("b.dump")
    b = env.spawn_loaderctl(harness.consume_args(
        d.socket, "b", epochs=B_EPOCHS, dump=b_dump,
        extra=["--step-ms", "10", "--depth", "2", "--name", "B", "--quiet"]))
    d.wait_status(lambda st: any(c["pid"] == b.pid and c["released"] >= 2 for c in st["clients"]),
                  15, "consumer B to release 2 batches")
    check(a.poll() is None and b.poll() is None, "a consumer ended before A could be killed")
    os.kill(a.pid, signal.SIGKILL)
    a.wait()

    d.wait_status(lambda st: all(c["pid"] != a.pid for c in st["clients"]), 10,
                  "status to drop the killed client A")
    rc, out, err = harness.finish(b, 30, "consumer B")
    check(rc == 0, "consumer B exited %d after A was killed\nstdout: %s\nstderr: %s" % (rc, out, err))
    summary, _ = harness.parse_consume_output(out)
    rows = harness.read_dump(b_dump)
    harness.check_dump_crcs(rows, crcs, "consumer B")
    for epoch in range(B_EPOCHS):
        samples = sorted(s for e, _, s, _ in rows if e == epoch)
        check(samples == list(range(N)), "consumer B epoch %d: %d samples, not each of %d once"
              % (epoch, len(samples), N))
    check(summary["epochs"] == B_EPOCHS, "consumer B's summary: %s" % summary)

    st = d.wait_status(lambda s: s["in_use"] == 0 and not s["clients"], 10,
                       "the arena's staging slots to be all free with no client attached")
    check(st["slots"] == 6, "status shows %d staging slots, configured 6" % st["slots"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_client_kill", body)
