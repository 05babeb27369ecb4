#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Workers that die at start are retried with back-off; fatal ones are not;
a daemon none of whose workers can start exits, naming the program.

The scripts used as worker_program run the real loaderd-worker for every
call (its --probe, its zygote), with LOADERD_WORKER_FAULT in the zygote's
environment naming the workers that exit at start and their code: each
worker is a fork of the zygote (worker/zygote.h), so a failure at start is
one the worker itself reports, as the master sees it.

1. Worker 1 exits 1 at once; worker 0 runs. The daemon must stay up and
   answer status, showing worker 1 in state backoff with last_exit "exit
   code 1", and its restarts must not come faster than exponential
   back-off allows: once it has 3 restarts, its 4th (and 5th) must come at
   least 0.4 s after the one before. Status is polled; the interval
   between restarts is bounded from above by the poll times around both
   changes, so slow polling can never make a fast daemon pass. READY=1 is
   not sent while a worker cannot start.
2. Every worker exits 1 at once: the daemon exits 1 after each has failed
   5 times in a row, saying "no worker can run" with the program and its
   exit, and never sends READY=1.
3. Worker 0 exits 64 (the fatal usage code). Worker 0 must show state
   failed, last_exit "exit code 64", and stay failed (never respawned),
   while worker 1 runs and serves a consumer with correct data.
4. Every worker exits 64: the daemon exits 1 at once, naming the program
   and the fatal code.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def poll_status(d, until, timeout_s, what):
    """Polls status until until(samples) is true; returns the samples, each
    (time the request started, time it ended, status)."""
    samples = []
    deadline = time.monotonic() + timeout_s
    while True:
        check(d.alive(), "loaderd exited %s while %s" % (d.proc.returncode, what))
        t0 = time.monotonic()
        st = d.try_status()
        t1 = time.monotonic()
        if st is not None:
            samples.append((t0, t1, st))
            if until(samples):
                return samples
        check(t1 < deadline, "timed out after %d s while %s" % (timeout_s, what))
        time.sleep(0.01)


def restart_interval_max(samples, worker, k):
    """Upper bound on the time between a worker's k-th and (k+1)-th restart:
    from the start of the last poll that saw fewer than k, to the end of
    the first poll that saw at least k+1."""
    before_k = [t0 for t0, _, st in samples if st["workers"][worker]["restarts"] < k]
    after_k1 = [t1 for _, t1, st in samples if st["workers"][worker]["restarts"] >= k + 1]
    check(before_k and after_k1, "worker %d: restarts %d and %d were not both observed" % (worker, k, k + 1))
    return after_k1[0] - before_k[-1]


def failing_script(env, name, which, code):
    """A worker_program whose workers `which` (an index, or "all") exit
    `code` at start; the others run."""
    return write_script(env.path(name), '#!/bin/sh\nLOADERD_WORKER_FAULT=%s:%d exec "%s" "$@"\n'
                        % (which, code, harness.binary("loaderd-worker")))


def failing_worker(env, data):
    script = failing_script(env, "exit1.sh", "1", 1)
    cfg = env.config("bo", {"p": {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}},
                     workers=2, worker_program=script)
    d = env.start_daemon(cfg, wait_ready=False)
    samples = poll_status(d, lambda s: s[-1][2]["workers"][1]["restarts"] >= 5, 30,
                          "waiting for the failing worker to reach 5 restarts")
    states = set(st["workers"][1]["state"] for _, _, st in samples)
    check("backoff" in states, "a worker that exits at once was never in state backoff (seen: %s)" % states)
    check(states <= {"starting", "backoff"}, "unexpected worker states %s" % states)
    for _, _, st in samples:
        w = st["workers"][1]
        if w["state"] == "backoff":
            check(w["last_exit"] == "exit code 1" and w["retry_in_ms"] is not None,
                  "a worker in backoff shows %s, expected last_exit \"exit code 1\" and retry_in_ms" % w)
    check(samples[-1][2]["workers"][0]["state"] == "running", "worker 0 is not running: %s"
          % samples[-1][2]["workers"][0])
    for k in (3, 4):
        most = restart_interval_max(samples, 1, k)
        check(most >= 0.4, "worker 1: restart %d came at most %.3f s after restart %d; back-off "
              "should hold it for at least 0.4 s" % (k + 1, most, k))
    print("worker 1: restarts 3->4 within %.3f s, 4->5 within %.3f s"
          % (restart_interval_max(samples, 1, 3), restart_interval_max(samples, 1, 4)))
    d.drain_notes()
    check(not any(n == "READY=1" for n in d.notes), "READY=1 sent although a worker never started")
    d.stop()


def daemon_exits(env, name, script, expect):
    """Starts a daemon whose workers all fail: it must exit 1 by itself, with
    `expect` in its log and no READY=1."""
    cfg = env.config(name, {"p": {"source": "raw:" + env.path("data.bin"), "record_bytes": 64,
                                  "batch_size": 8}}, workers=2, worker_program=script)
    d = env.start_daemon(cfg, wait_ready=False)
    try:
        rc = d.proc.wait(timeout=30)
    except harness.subprocess.TimeoutExpired:
        raise harness.TestFailure("loaderd did not exit within 30 s although no worker can "
                                  "run") from None
    check(rc == 1, "loaderd exited %d, expected 1, when no worker can run" % rc)
    log = d.log()
    check(expect in log, "loaderd's log does not say %r:\n%s" % (expect, log))
    d.drain_notes()
    check(not any(n == "READY=1" for n in d.notes), "READY=1 sent although no worker can run")
    d.check_log_clean()


def fatal_worker(env, data):
    script = failing_script(env, "fatal0.sh", "0", 64)
    cfg = env.config("fa", {"p": {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}},
                     workers=2, worker_program=script)
    d = env.start_daemon(cfg, wait_ready=False)
    st = d.wait_status(lambda s: s["workers"][0]["state"] == "failed" and s["workers"][1]["state"] == "running",
                       15, "worker 0 failed and worker 1 running")
    w0 = st["workers"][0]
    check(w0["last_exit"] == "exit code 64", "the failed worker's last_exit is %r, expected \"exit code 64\""
          % w0["last_exit"])
    check(w0["pid"] == 0, "a failed worker shows pid %d" % w0["pid"])
    # Back-off starts at a fraction of a second: a respawn would show within 1.5 s.
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        now = d.status()["workers"][0]
        check(now["state"] == "failed" and now["restarts"] == w0["restarts"] and now["pid"] == 0,
              "a worker that exited 64 was respawned: %s" % now)
        time.sleep(0.05)
    crcs = harness.raw_sample_crcs(data, 64)
    (_, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1,
                                                         "dump": env.path("fatal.dump")}])
    harness.check_dump_crcs(rows, crcs, "consume with worker 0 failed")
    check(sorted(s for _, _, s, _ in rows) == list(range(len(crcs))),
          "consume with worker 0 failed did not deliver every sample once")
    d.stop()


def body(env):
    data = env.make_raw("data.bin", 200, 64)
    failing_worker(env, data)
    script = failing_script(env, "exit1all.sh", "all", 1)
    daemon_exits(env, "all1", script, "no worker can run: %s: exit code 1 right after start, "
                 "5 times in a row; exiting" % script)
    fatal_worker(env, data)
    script = failing_script(env, "fatalall.sh", "all", 64)
    daemon_exits(env, "all64", script, "no worker can run: %s exit code 64, a fatal code" % script)


if __name__ == "__main__":
    harness.run_test("test_worker_backoff", body)
