#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The stages' latency histograms and the clients' data wait, on a real
daemon with real workers.

A known slow stage shows as that stage's latency: two image pipelines,
alike but for their JPEGs (64x64 against 1600x1600, both cropped and
resized to 32x32), count every image in read, decode and transform once
a client has taken an epoch of batches (the reads at least as many as
the decodes: batches of the next epoch the daemon began for the client
may be in flight), and the big images' CPU decode is
several times the small ones' (its median at least 5x) and longer than
their transform, which is alike for both (the same 32x32 output). Each
batch's staging wait is counted. (Their reads are not compared: on
a loaded machine an io_uring read waits for the CPU like anything else.)

The client's data wait (measured by its client library, reported in its
RELEASEs), between its 2nd batch and a later one: a consumer that takes
the big-image pipeline's batches as fast as it can, fed by one worker,
waits for data most of that time; one that sleeps 800 ms per batch, for
which the worker is fast enough (a batch takes it about 50 ms, 150 ms on
a loaded machine), waits almost never.

With [daemon] stage_timing = off the stages count nothing, and the
workers' busy shares are still there.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BATCH = 8
WORKER_STAGES = ("read", "decode", "transform")


def tree(env, name, side, per_class):
    root = env.path(name)
    subprocess.run([harness.binary("mkjpeg"), "--tree", root, "--classes", "2", "--per-class", str(per_class),
                    "--min-side", str(side), "--max-side", str(side)], check=True, stdout=subprocess.DEVNULL)
    return root


def pipeline(root):
    return {"source": "imagefolder:" + root, "batch_size": BATCH, "transform": "random_resized_crop(32)",
            "decode": "cpu"}


def client_of(st, pipeline_name):
    cs = [c for c in st["clients"] if c["pipeline"] == pipeline_name]
    return cs[0] if cs else None


def wait_share(d, first, last, what):
    """The data wait of the one client of pipeline "big" between its
    first-th and last-th released batch, and the time between: (s, s)."""
    def at(n):
        st = d.wait_status(lambda s: (client_of(s, "big") or {}).get("released", 0) >= n, 60,
                           "%s's %d batches" % (what, n))
        return time.monotonic(), client_of(st, "big")
    t1, c1 = at(first)
    t2, c2 = at(last)
    print("%s: batches %d -> %d, data wait %.3f s of %.3f s" % (what, c1["released"], c2["released"],
          c2["data_wait_s"] - c1["data_wait_s"], t2 - t1))
    return c2["data_wait_s"] - c1["data_wait_s"], t2 - t1, c2


def body(env):
    small = tree(env, "small", 64, 16)
    big = tree(env, "big", 1600, 16)
    cfg = env.config("st", {"small": pipeline(small), "big": pipeline(big)}, workers=1)
    d = env.start_daemon(cfg)

    # Each pipeline's whole epoch (32 images, 4 batches), one after the other.
    for name in ("small", "big"):
        r = env.loaderctl(harness.consume_args(d.socket, name, epochs=1, extra=["--quiet"]), timeout_s=60)
        check(r.returncode == 0, "consume %s exited %d: %s" % (name, r.returncode, r.stderr))
    st = d.status()
    stages = st["stages"]
    for name in ("small", "big"):
        s = stages[name]
        check(all(s.get(k, {}).get("count", 0) >= 32 for k in WORKER_STAGES),
              "pipeline %s: worker stages %s, expected every image counted" % (name, s))
        check(s["read"]["count"] >= s["decode"]["count"] == s["transform"]["count"],
              "pipeline %s: counts differ: %s" % (name, s))
        check(s.get("staging", {}).get("count", 0) >= 4, "pipeline %s: staging %s for 4 batches"
              % (name, s.get("staging")))
        check(not any(k in s for k in ("gpu_decode", "copy", "h2d")), "host delivery with GPU stages: %s" % s)
    sd, bd = stages["small"]["decode"]["p50_ms"], stages["big"]["decode"]["p50_ms"]
    print("decode p50: small %.3f ms, big %.3f ms" % (sd, bd))
    check(bd >= 5 * sd, "the big images' decode (p50 %.3f ms) is not 5x the small ones' (%.3f ms)" % (bd, sd))
    b = stages["big"]
    check(b["decode"]["p50_ms"] > 5 * b["transform"]["p50_ms"],
          "the big pipeline's decode is not well above its transform: %s" % b)
    # the JSON's histograms hold what the text's figures say
    doc = st["json"]
    for p in doc["pipelines"]:
        for name, h in p["stages"].items():
            check(len(h["buckets"]) == 23 and sum(h["buckets"]) == h["count"],
                  "pipeline %s stage %s: buckets %s, count %d" % (p["name"], name, h["buckets"], h["count"]))

    # The data wait, as the client library measured it.
    fast = env.spawn_loaderctl(harness.consume_args(d.socket, "big", epochs=1000, extra=["--quiet", "--name", "fast"]))
    waited, elapsed, c = wait_share(d, 2, 12, "the fast consumer")
    check(waited >= 0.5 * elapsed, "the fast consumer of a slow pipeline waited %.3f s of %.3f s"
          % (waited, elapsed))
    check(c["bytes"] == c["released"] * BATCH * (32 * 32 * 3 + 8), "bytes %d for %d batches" % (c["bytes"], c["released"]))
    fast.kill()
    fast.wait()
    d.wait_status(lambda s: client_of(s, "big") is None, 20, "the fast client gone")

    slow = env.spawn_loaderctl(harness.consume_args(d.socket, "big", epochs=1000,
                                                    extra=["--quiet", "--name", "slow", "--step-ms", "800"]))
    waited, elapsed, c = wait_share(d, 2, 5, "the slow consumer")
    check(waited <= 0.2 * elapsed, "the slow consumer waited %.3f s of %.3f s" % (waited, elapsed))
    slow.kill()
    slow.wait()
    d.stop()

    # stage_timing = off: nothing is timed; the workers' accounting stays.
    cfg = env.config("off", {"small": pipeline(small)}, workers=1, stage_timing="off")
    d = env.start_daemon(cfg)
    r = env.loaderctl(harness.consume_args(d.socket, "small", epochs=1, extra=["--quiet"]), timeout_s=60)
    check(r.returncode == 0, "consume exited %d: %s" % (r.returncode, r.stderr))
    st = d.status()
    check(st["stages"]["small"] == {}, "stage_timing = off, yet stages: %s" % st["stages"]["small"])
    check(all("busy" in w for w in st["workers"]), "workers without busy: %s" % st["workers"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_stage_timing", body)
