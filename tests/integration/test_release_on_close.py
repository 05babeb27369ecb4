#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A client's last RELEASEs count even when it hangs up right after them.

A client that closes its socket with READY frames still unread (it asked
for a deep prefetch and stopped early) leaves an error on the daemon's end
of the connection, which the kernel reports before the client's final
RELEASE and BYE frames. The daemon must still read and apply those frames:
for each of many short consumers (--batches 10, depth 8) its log must say
the client released all 10 batches.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, BATCHES, RUNS = 4096, 256, 16, 10, 25


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=3)
    d = env.start_daemon(env.config("roc", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                                   "batch_size": BATCH}}, workers=2, max_depth=8))
    for _ in range(RUNS):
        r = env.loaderctl(harness.consume_args(d.socket, "p", batches=BATCHES,
                                               extra=["--depth", "8", "--quiet"]))
        check(r.returncode == 0, "consume failed: %s" % r.stderr)
    d.wait_status(lambda st: not st["clients"], 10, "every client to be detached")
    counts = [int(m.group(1)) for m in re.finditer(r"detached after (\d+) batches", d.log())]
    check(len(counts) == RUNS, "the log shows %d detached clients, expected %d" % (len(counts), RUNS))
    short = [c for c in counts if c != BATCHES]
    check(not short, "clients detached with %s released batches instead of %d: their final "
          "RELEASEs were dropped" % (short, BATCHES))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_release_on_close", body)
