#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""workers = auto: a real daemon starts at 1 worker and follows its client.

- An image pipeline (JPEG decode and random_resized_crop in the workers:
  the workers are the limit) and a consumer that takes 5 ms a batch, far
  faster than one worker decodes: the count rises (the log says which
  client waited for data, how much, and the node's idle cores; status
  shows "auto", the count, the bounds and that reason), and the
  consumer's wait per batch drops.
- Then a slow consumer (200 ms a batch): no client waits, and the count
  comes back down to min_workers, the reason in status and the log.
- The rows the first consumer received while the count rose (up to 32
  batches after the raise), and those the slow one received while it came
  down, are byte-identical (CRC-32C per row) to what a daemon with a fixed worker
  count delivers.

On a node whose CPU other processes keep busy, workers = auto rightly
adds no worker (or takes back one that found no CPU and made nothing
faster): the test then checks that status says why (the node's idle
cores, or the raise that did not help) against the idle CPU it measures
itself, checks the way down after a reload to `workers = 2` and back to
`auto`, and reports itself skipped, since the rise could not be seen. It runs alone (RUN_SERIAL): it measures the node's CPU.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BATCH = 16
FAST_STEP_MS, SLOW_STEP_MS = 5, 200


def node_cpu():
    """The node's CPU time, all and idle (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v), v[3] + v[4]


def idle_since(then):
    """The node's idle cores since node_cpu() gave `then`."""
    (t0, i0), (t1, i1) = then, node_cpu()
    return (i1 - i0) / max(1, t1 - t0) * os.cpu_count()


def client_wait(st, pid):
    for c in st["clients"]:
        if c["pid"] == pid:
            return c["released"], c["wait_ms"]
    return None


def wait_per_batch(d, pid, seconds):
    """The consumer's mean data wait per batch (ms) over `seconds`."""
    a = client_wait(d.status(), pid)
    time.sleep(seconds)
    b = client_wait(d.status(), pid)
    check(a is not None and b is not None and b[0] > a[0],
          "consumer %d released no batch in %.1f s (%s, %s)" % (pid, seconds, a, b))
    return (b[1] - a[1]) / (b[0] - a[0])


def make_config(env, name, workers, root, **extra):
    pipelines = {"img": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": 11,
                         "transform": "random_resized_crop(224) hflip(0.5)"}}
    return env.config(name, pipelines, workers=workers, max_workers=4, **extra)


def stop_consumer(p, what):
    p.send_signal(signal.SIGINT)
    rc, out, err = harness.finish(p, 15, what)
    check(rc == 0, "%s exited %d\nstdout: %s\nstderr: %s" % (what, rc, out, err))


def body(env):
    root = env.path("imgs")
    subprocess.run([harness.binary("mkjpeg"), "--tree", root, "--classes", "4", "--per-class", "32",
                    "--min-side", "300", "--max-side", "500", "--seed", "3"], check=True,
                   stdout=subprocess.DEVNULL)
    cfg = make_config(env, "auto", "auto", root, worker_cpu_budget="100%")
    d = env.start_daemon(cfg)
    st = d.status()
    auto = st["workers_auto"]
    check(auto is not None and auto["count"] == 1 and auto["min"] == 1 and len(st["workers"]) == 1,
          "status at start: workers line %s, %d workers (expected auto, 1)" % (auto, len(st["workers"])))
    check(st["config"]["workers"] == 1, "config line says %d workers" % st["config"]["workers"])

    # A consumer far faster than one worker: the count rises.
    fast_dump = env.path("fast.dump")
    fast = env.spawn_loaderctl(harness.consume_args(
        d.socket, "img", batches=100000, dump=fast_dump,
        extra=["--step-ms", str(FAST_STEP_MS), "--name", "fast", "--quiet"]))
    d.wait_status(lambda st: any(c["pid"] == fast.pid and c["released"] >= 4 for c in st["clients"]),
                  15, "the fast consumer to release 4 batches")
    cpu_then = node_cpu()
    before = wait_per_batch(d, fast.pid, 1.5)
    rose = True
    try:
        d.wait_status(lambda st: st["config"]["workers"] >= 2, 9, "the worker count to rise")
    except harness.TestFailure:
        rose = False
    idle_seen = idle_since(cpu_then)
    st = d.status()
    # the rows compared below: those up to the raise, and 32 batches more
    compared = (client_wait(st, fast.pid)[0] + 32) * BATCH
    auto = st["workers_auto"]
    if rose:
        check(auto["last_change"] is not None and "workers 1 -> " in auto["last_change"]
              and "client " in auto["last_change"] and "(pid %d) waited for data" % fast.pid
              in auto["last_change"] and "idle cores" in auto["last_change"],
              "status's last change after the raise: %r" % auto["last_change"])
        check("(pid %d) waited for data" % fast.pid in d.log(), "the log has no raise line:\n%s" % d.log())
        # the wait drops once the raise has settled (a 2 s window), while it is judged
        cpu_then = node_cpu()
        time.sleep(2.5)
        after = wait_per_batch(d, fast.pid, 2.0)
        time.sleep(1.0)
        auto = d.status()["workers_auto"]
        idle_judged = idle_since(cpu_then)
        if auto["count"] < 2:
            # Taken back: only right when the added worker found no CPU.
            check("did not make the clients faster" in (auto["last_change"] or "") and idle_judged < 1.2,
                  "the raise was taken back with %.1f idle cores measured here; status %s\n%s"
                  % (idle_judged, auto, d.log()))
            rose, idle_seen = False, idle_judged
        else:
            check(after < 0.8 * before, "the consumer waited %.1f ms a batch at 1 worker and %.1f at %d"
                  % (before, after, auto["count"]))
            print("wait per batch: %.1f ms at 1 worker, %.1f ms at %d" % (before, after, auto["count"]))
    else:
        # No raise: only right when the node had no CPU to spare.
        check(auto["held"] is not None and "idle cores" in auto["held"] and idle_seen < 1.2,
              "no raise in 9 s, with %.1f idle cores measured here meanwhile; status: %s"
              % (idle_seen, auto))
    stop_consumer(fast, "the fast consumer")

    if d.status()["config"]["workers"] < 2:  # the way down from 2, set by a reload
        make_config(env, "auto", 2, root, worker_cpu_budget="100%")
        r = env.loaderctl(["--socket", d.socket, "reload"])
        check(r.returncode == 0 and "workers auto 1 -> 2" in r.stdout, "reload to 2: %s %s"
              % (r.stdout, r.stderr))
        make_config(env, "auto", "auto", root, worker_cpu_budget="100%")
        r = env.loaderctl(["--socket", d.socket, "reload"])
        check(r.returncode == 0 and "workers 2 -> auto" in r.stdout, "reload to auto: %s %s"
              % (r.stdout, r.stderr))
    peak = d.status()["config"]["workers"]
    check(peak >= 2, "%d workers before the slow consumer" % peak)

    # A slow consumer: nobody waits, the count comes down.
    slow_dump = env.path("slow.dump")
    slow = env.spawn_loaderctl(harness.consume_args(
        d.socket, "img", batches=100000, dump=slow_dump,
        extra=["--step-ms", str(SLOW_STEP_MS), "--name", "slow", "--quiet"]))
    d.wait_status(lambda st: st["config"]["workers"] == 1 and len(st["workers"]) == 1, 15,
                  "the worker count to come down to 1")
    auto = d.status()["workers_auto"]
    check(auto["count"] == 1 and auto["last_change"] is not None
          and "-> 1: no client waited for data" in auto["last_change"],
          "status's last change after the lower: %r" % auto["last_change"])
    check("-> 1: no client waited for data" in d.log(), "the log has no lower line:\n%s" % d.log())
    stop_consumer(slow, "the slow consumer")

    # The rows received while the count changed (the slow consumer's saw it
    # come down, the fast one's go up), against a fixed count.
    runs = {"fast": harness.read_dump(fast_dump)[:compared], "slow": harness.read_dump(slow_dump)}
    for what, rows in runs.items():
        check(len(rows) >= 4 * BATCH, "the %s consumer dumped %d rows" % (what, len(rows)))
    d.stop()
    ref = env.start_daemon(make_config(env, "fixed", 3, root))
    ref_dump = env.path("ref.dump")
    longest = max(len(rows) for rows in runs.values())
    (_, _, ref_rows), = harness.consume_all(env, ref.socket, [
        {"pipeline": "img", "batches": (longest + BATCH - 1) // BATCH, "dump": ref_dump}])
    for what, rows in runs.items():
        n = len(rows)
        check(rows == ref_rows[:n], "the %s consumer's rows under workers = auto differ from 3 "
              "fixed workers': first at row %s" % (what, next((i for i in range(n)
                                                             if rows[i] != ref_rows[i]), None)))
    ref.stop()
    if not rose:
        raise harness.TestSkip("the node's CPU was busy with other processes (%.1f idle cores): "
                               "workers = auto rightly kept no added worker, so the rise could not "
                               "be seen; the way down and the bytes were checked" % idle_seen)


if __name__ == "__main__":
    harness.run_test("workers_auto", body)
