#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SIGTERM while a consumer is mid-epoch ends both cleanly.

A consumer steps slowly through an epoch; once it has released a few
batches the daemon gets SIGTERM. The consumer must exit 1 with "daemon
shutting down" on stderr (the daemon's ERROR text); the daemon must exit 0
and remove its socket.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


def body(env):
    data = env.make_raw("data.bin", 1000, 256)
    cfg = env.config("sd", {"p": {"source": "raw:" + data, "record_bytes": 256, "batch_size": 10}})
    d = env.start_daemon(cfg)
    c = env.spawn_loaderctl(harness.consume_args(d.socket, "p", epochs=1,
                                                 extra=["--step-ms", "50", "--quiet"]))
    d.wait_status(lambda st: any(x["pid"] == c.pid and x["released"] >= 3 for x in st["clients"]),
                  15, "the consumer to release 3 batches")
    check(c.poll() is None, "the consumer finished before the daemon was stopped")
    d.stop()  # exit 0, socket removed
    rc, out, err = harness.finish(c, 15, "the consumer after SIGTERM to the daemon")
    check(rc == 1, "the consumer exited %d when the daemon shut down, expected 1\nstderr: %s" % (rc, err))
    check("daemon shutting down" in err, "the consumer's stderr lacks \"daemon shutting down\": %r" % err)
    check(any(line.startswith("loaderctl: ") and "daemon shutting down" in line for line in err.splitlines()),
          "the shutdown message is not a \"loaderctl: \" error line: %r" % err)


if __name__ == "__main__":
    harness.run_test("test_shutdown", body)
