#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The workers run below normal priority (worker_nice), the daemon at its own.

1. worker_nice = 7: every worker, and the zygote they are forks of, runs at
   nice 7 (field 19 of /proc/PID/stat); the daemon's own process keeps the
   nice it was started with. A worker killed and forked again gets it too.
2. Left out: 10. A daemon started at a nice above worker_nice keeps its
   workers at its own (the daemon never raises their priority).
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 256, 64, 16


def nice_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    # after "pid (comm) ": state is field 3, nice field 19
    return int(stat[stat.rindex(")") + 2:].split()[19 - 3])


def zygote_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def running_workers(d, n):
    st = d.wait_status(lambda s: len(s["workers"]) == n and
                       all(w["state"] == "running" and w["pid"] for w in s["workers"]), 15,
                       "%d workers running" % n)
    return [w["pid"] for w in st["workers"]]


def check_workers(d, n, want, what):
    pids = running_workers(d, n)
    for pid in pids:
        check(nice_of(pid) == want, "%s: worker %d runs at nice %d, expected %d"
              % (what, pid, nice_of(pid), want))
    zygote = zygote_of(pids[0])
    check(nice_of(zygote) == want, "%s: the zygote %d runs at nice %d, expected %d"
          % (what, zygote, nice_of(zygote), want))
    own = os.getpriority(os.PRIO_PROCESS, 0)
    check(nice_of(d.main_pid()) == own, "%s: the daemon runs at nice %d, not at the nice it "
          "was started with (%d)" % (what, nice_of(d.main_pid()), own))
    return pids


def body(env):
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if own > 7:
        print("test_worker_nice: this test runs at nice %d, above the values it checks" % own)
        sys.exit(77)
    data = env.make_raw("data.bin", N, RECORD, seed=3)
    pipelines = {"p": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH}}
    d = env.start_daemon(env.config("seven", pipelines, workers=3, worker_nice=7))
    pids = check_workers(d, 3, 7, "worker_nice = 7")
    os.kill(pids[1], signal.SIGKILL)
    d.wait_status(lambda s: s["workers"][1]["state"] == "running" and
                  s["workers"][1]["pid"] not in (0, pids[1]), 15, "worker 1 to come back")
    check_workers(d, 3, 7, "worker_nice = 7, a worker forked again")
    d.stop()
    d.check_log_clean()

    d = env.start_daemon(env.config("default", pipelines, workers=2))
    check_workers(d, 2, 10 if own <= 10 else own, "worker_nice left out")
    d.stop()
    d.check_log_clean()

    # A daemon started at nice 12 leaves its workers there (it never raises them).
    d = env.start_daemon(env.config("started", pipelines, workers=2, worker_nice=5),
                         wrapper=["nice", "-n", str(12 - own)])
    pids = running_workers(d, 2)
    for pid in pids:
        check(nice_of(pid) == 12, "a daemon started at nice 12 with worker_nice = 5: worker %d "
              "at nice %d, expected 12" % (pid, nice_of(pid)))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_worker_nice", body)
