#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""loaderd speaks the sd_notify protocol and shuts down cleanly.

READY=1 (and a STATUS= line) must arrive on $NOTIFY_SOCKET, and only once
every worker runs (status right after READY shows them all running).
SIGTERM must produce STOPPING=1, exit code 0, the socket file removed, and
no worker process left behind.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

WORKERS = 3


def body(env):
    data = env.make_raw("data.bin", 100, 128)
    cfg = env.config("nt", {"p": {"source": "raw:" + data, "record_bytes": 128, "batch_size": 10}},
                     workers=WORKERS)
    d = env.start_daemon(cfg)  # returns once READY=1 arrived
    d.wait_note(lambda x: x.startswith("STATUS="), 5, "a STATUS= line")

    st = d.status()
    check(st["pid"] == d.pid, "status names pid %d, the daemon is %d" % (st["pid"], d.pid))
    states = [w["state"] for w in st["workers"]]
    check(len(states) == WORKERS and all(s == "running" for s in states),
          "right after READY=1 the workers are %s, expected %d running" % (states, WORKERS))
    pids = [w["pid"] for w in st["workers"]]
    check(all(p > 0 and harness.pid_alive(p) for p in pids), "worker pids %s are not all alive" % pids)
    check(os.path.exists(d.socket), "the socket %s does not exist while the daemon runs" % d.socket)
    mode = os.stat(d.socket).st_mode & 0o777
    check(mode == 0o660, "the socket's mode is %o, expected 660" % mode)

    d.stop()  # exit 0 and socket removed
    d.wait_note(lambda x: x == "STOPPING=1", 2, "STOPPING=1")
    check(d.notes.index("STOPPING=1") > d.notes.index("READY=1"), "STOPPING=1 came before READY=1")
    harness.wait_for(lambda: not any(harness.pid_alive(p) for p in pids), 5,
                     "the workers %s to exit after the daemon" % pids)


if __name__ == "__main__":
    harness.run_test("test_notify", body)
