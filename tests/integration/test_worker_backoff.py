#!/usr/bin/env python3
"""Workers that die at start are retried with back-off; fatal ones are not.

1. worker_program is a script that exits 1 at once (after answering the
   start-up `--probe` as the real worker does). The daemon must stay
   up and answer status, showing its workers in state backoff with
   last_exit "exit code 1", and restarts must not come faster than
   exponential back-off allows: once a worker has 3 restarts, its 4th (and
   5th) must come at least 0.4 s after the one before. Status is polled;
   the interval between restarts is bounded from above by the poll times
   around both changes, so slow polling can never make a fast daemon pass.
2. worker_program runs the real worker, except that worker 0 exits 64 (the
   fatal usage code). Worker 0 must show state failed, last_exit "exit code
   64", and stay failed (never respawned), while worker 1 runs and serves a
   consumer with correct data.
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


def failing_workers(env, data):
    script = write_script(env.path("exit1.sh"),
                          '#!/bin/sh\n# answers the start-up probe, then fails as a worker\n'
                          'if [ "$1" = --probe ]; then exec "%s" "$@"; fi\nexit 1\n'
                          % harness.binary("loaderd-worker"))
    cfg = env.config("bo", {"p": {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}},
                     workers=2, worker_program=script)
    d = env.start_daemon(cfg, wait_ready=False)
    samples = poll_status(d, lambda s: all(w["restarts"] >= 5 for w in s[-1][2]["workers"]), 30,
                          "waiting for both failing workers to reach 5 restarts")
    states = set(w["state"] for _, _, st in samples for w in st["workers"])
    check("backoff" in states, "workers that exit at once were never in state backoff (seen: %s)" % states)
    check(states <= {"starting", "backoff", "running"}, "unexpected worker states %s" % states)
    for _, _, st in samples:
        for w in st["workers"]:
            if w["state"] == "backoff":
                check(w["last_exit"] == "exit code 1" and w["retry_in_ms"] is not None,
                      "a worker in backoff shows %s, expected last_exit \"exit code 1\" and retry_in_ms" % w)
    for worker in range(2):
        for k in (3, 4):
            most = restart_interval_max(samples, worker, k)
            check(most >= 0.4, "worker %d: restart %d came at most %.3f s after restart %d; back-off "
                  "should hold it for at least 0.4 s" % (worker, k + 1, most, k))
        print("worker %d: restarts 3->4 within %.3f s, 4->5 within %.3f s"
              % (worker, restart_interval_max(samples, worker, 3), restart_interval_max(samples, worker, 4)))
    check(not any(n == "READY=1" for n in d.notes), "READY=1 sent although no worker ever started")
    d.stop()


def fatal_worker(env, data):
    real = harness.binary("loaderd-worker")
    script = write_script(env.path("fatal0.sh"),
                          '#!/bin/sh\n# worker 0 exits with the fatal usage code\n'
                          'if [ "$1" = --index ] && [ "$2" = 0 ]; then exit 64; fi\n'
                          'exec "%s" "$@"\n' % real)
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
    failing_workers(env, data)
    fatal_worker(env, data)


if __name__ == "__main__":
    harness.run_test("test_worker_backoff", body)
