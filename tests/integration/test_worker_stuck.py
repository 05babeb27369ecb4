#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stopped, stuck and storm-killed workers never hang a client.

1. A worker is SIGSTOPped, then a consumer starts (worker_timeout_ms
   1000): the stopped worker is given items it never works on; the
   watchdog kills it, logs its pid, the items it held and the sample and
   file it was last on, and re-issues the items; the consumer ends with
   every sample exactly once and byte for byte, and status shows the
   worker restarted with last_exit "killed: no progress for ...".
2. Every worker is SIGSTOPped: the same, for all of them.
3. A kill storm: a worker SIGKILLed every 100 ms for 3 s while a consumer
   reads. Killed workers are respawned at once, never held in back-off,
   and the consumer keeps going: it ends with exact coverage, and no
   worker is in back-off afterwards.
4. Items that take a while (images of about 0.1 s of decoding each, one
   per item), and every worker seen holding one is stopped: after
   SCHED_ITEM_STRIKES (3) kills of the workers holding it, the batch fails
   with an error naming its sample's file and how the workers ended,
   instead of killing workers forever; the daemon stays up and serves the
   next client once the stopping ends.
"""

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 4096, 512, 32
TIMEOUT_MS = 1000


def worker_pids(st):
    return [w["pid"] for w in st["workers"] if w["pid"] > 0]


def check_once(rows, crcs, epochs, what):
    harness.check_dump_crcs(rows, crcs, what)
    for e in range(epochs):
        harness.check_permutation([s for _, s in harness.epoch_rows(rows, e)], N,
                                  "%s epoch %d" % (what, e))


def stop_holding(env, d, data, crcs, which):
    """Stops workers (which(status) -> pids), then runs a consumer, which
    gives them items; checks the watchdog's recovery."""
    stopped = which(d.status())
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    dump = env.path("stop%d.dump" % len(env.procs))
    p = env.spawn_loaderctl(harness.consume_args(d.socket, "p", epochs=1, dump=dump,
                                                 extra=["--quiet"]))
    rc, out, err = harness.finish(p, 30, "consumer with stopped workers")
    check(rc == 0, "the consumer failed with stopped workers (%d): %s" % (rc, err))
    check_once(harness.read_dump(dump), crcs, 1, "consumer with stopped workers")
    st = d.status()
    for pid in stopped:
        check(pid not in worker_pids(st), "stopped worker pid %d is still a worker:\n%s"
              % (pid, d.status_text()))
        check(re.search(r"worker \d+ \(pid %d\) made no progress for \d+\.\d s while holding \d+ "
                        r"items? \(worker_timeout_ms = %d\), the first epoch 0 batch \d+ rows "
                        r"\d+\.\.\d+ of client \d+ \(pid %d\), from pipeline \"p\" sample \d+: "
                        r"%s bytes \d+\.\.\d+(; it was last on pipeline \"p\" sample \d+: [^;]*)?; killing it"
                        % (pid, TIMEOUT_MS, p.pid, re.escape(data)),
                        d.log()),
              "no watchdog line naming pid %d, its items, sample and file:\n%s" % (pid, d.log()))
    killed = [w for w in st["workers"] if (w["last_exit"] or "").startswith("killed: no progress")]
    check(len(killed) >= len(stopped), "status shows %d workers killed for no progress, expected %d:"
          "\n%s" % (len(killed), len(stopped), d.status_text()))
    print("%d stopped worker(s) recovered from in %.1f s" % (len(stopped), time.monotonic() - t0))


def kill_storm(env, d, crcs):
    dump = env.path("storm.dump")
    p = env.spawn_loaderctl(harness.consume_args(d.socket, "p", epochs=2, dump=dump,
                                                 extra=["--quiet", "--step-ms", "10"]))
    rng = random.Random(5)
    end = time.monotonic() + 3.0
    kills = 0
    while time.monotonic() < end and p.poll() is None:
        pids = worker_pids(d.status())
        if pids:
            try:
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills += 1
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    rc, out, err = harness.finish(p, 60, "consumer during a kill storm")
    check(rc == 0, "the consumer failed during a kill storm (%d): %s" % (rc, err))
    check_once(harness.read_dump(dump), crcs, 2, "consumer during a kill storm")
    st = d.wait_status(lambda s: all(w["state"] == "running" for w in s["workers"]), 5,
                       "every worker to run again after the storm")
    check(kills >= 10, "only %d kills in the storm" % kills)
    check("backing off" not in d.log(), "a worker killed from outside was put in back-off:\n%s"
          % d.log())
    print("kill storm: %d kills; restarts %s" % (kills, [w["restarts"] for w in st["workers"]]))


def strike_out(env):
    """Images that take about 0.1 s each to decode, one per item; every
    worker seen holding items is stopped, until the batch fails."""
    root = env.path("images")
    os.makedirs(os.path.join(root, "c"))
    for i in range(3):
        subprocess.run([harness.binary("mkjpeg"), os.path.join(root, "c", "%d.jpg" % i), "--width",
                        "2400", "--height", "2000", "--pattern", "noise", "--progressive",
                        "--seed", str(i)], check=True)
    cfg = env.config("strike", {"p": {"source": "imagefolder:" + root, "batch_size": 1, "chunk": 1,
                                      "shuffle": "false", "transform": "resize(16) center_crop(16)",
                                      "max_decode_ms": TIMEOUT_MS - 100}},
                     # at normal priority: at the default worker_nice, a machine busy with
                     # other tests can slow a 0.1 s decode past the 1 s watchdog
                     workers=2, worker_timeout_ms=TIMEOUT_MS, worker_nice=0)
    d = env.start_daemon(cfg)
    halt = threading.Event()
    stopped = set()

    def stopper():
        while not halt.is_set():
            st = d.try_status()
            for w in (st or {"workers": []})["workers"]:
                if w["inflight"] > 0 and w["pid"] > 0 and w["pid"] not in stopped:
                    try:
                        os.kill(w["pid"], signal.SIGSTOP)
                        stopped.add(w["pid"])
                    except ProcessLookupError:
                        pass
    t = threading.Thread(target=stopper, daemon=True)
    t.start()
    try:
        r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, extra=["--quiet"]),
                          timeout_s=60)
    finally:
        halt.set()
        t.join()
    check(r.returncode == 1, "a batch whose workers kept hanging: consume exited %d: %s"
          % (r.returncode, r.stderr))
    check(re.search(r"pipeline \"p\": epoch 0 batch 0 rows 0\.\.0 \(the first: pipeline \"p\" "
                    r"sample 0: %s\): 3 workers in a row died producing them, the last killed: "
                    r"no progress for \d+\.\d s" % re.escape(os.path.join(root, "c", "0.jpg")),
                    r.stderr),
          "the error does not name the samples and how the workers ended: %r" % r.stderr)
    check(len(stopped) >= 3, "only %d workers were stopped" % len(stopped))
    for pid in worker_pids(d.status()):  # anything still stopped goes on
        os.kill(pid, signal.SIGCONT)
    d.wait_status(lambda s: all(w["state"] == "running" for w in s["workers"]), 10,
                  "the workers to run again")
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, extra=["--quiet"]), timeout_s=60)
    check(r.returncode == 0, "consume after the strikes exited %d: %s" % (r.returncode, r.stderr))
    d.stop()


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=3)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("stuck", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                     "batch_size": BATCH, "chunk": 4}},
                     workers=3, worker_timeout_ms=TIMEOUT_MS)
    d = env.start_daemon(cfg)
    stop_holding(env, d, data, crcs, lambda st: worker_pids(st)[:1])
    stop_holding(env, d, data, crcs, worker_pids)
    kill_storm(env, d, crcs)
    d.stop()
    strike_out(env)


if __name__ == "__main__":
    harness.run_test("test_worker_stuck", body)
