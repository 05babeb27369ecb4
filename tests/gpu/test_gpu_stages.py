#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The stages the daemon's GPU path times, per pipeline (docs/operations.md,
"Stage latencies").

Device delivery of a raw pipeline, 2 epochs of a known number of batches:
- with pin = copy, `staging`, `copy` (into pinned memory) and `h2d` (the
  device copy) each count every batch once, `read` every sample (and the
  batches the daemon prepared ahead when the client left, at most the
  staging slots and the device ring), and their medians are above 0 and
  below a second;
- with pin = register, `copy` counts nothing (the copy is from the
  staging slot itself) and `h2d` every batch;
- an image pipeline with decode = gpu counts a `gpu_decode` per batch
  whose rows went to the engines (the daemon's decode, or the client's as
  its DECODEDs report it), at most one per batch, and at least one.
The metrics carry the same counts in loaderd_stage_seconds_count.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

RECORD, N, BATCH, EPOCHS = 64 << 10, 256, 16, 2
BATCHES = EPOCHS * N // BATCH
AHEAD = 16 + 4  # batches the daemon may prepare ahead: staging slots and device slots


def stages_of(d, pipeline):
    doc = d.status_json()
    return {p["name"]: p["stages"] for p in doc["pipelines"]}[pipeline]


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]
    raw = env.make_raw("raw.bin", N, RECORD, seed=5)
    for pin in ("copy", "register"):
        cfg = gpu_harness.gpu_config(env, "stages-" + pin, {
            "raw": {"source": "raw:" + raw, "record_bytes": RECORD, "batch_size": BATCH}}, pin=pin)
        d = gpu_harness.start_daemon(env, cfg)
        gpu_harness.check_delivery(d, pin)
        gpu_harness.consume(env, d.socket, "raw", env.path("raw-%s.dump" % pin), device=uuid, epochs=EPOCHS)
        # The daemon works ahead of the client: batches of a third epoch may
        # have been read, staged and copied when it detached (up to the
        # staging slots and the device ring).
        st = stages_of(d, "raw")
        print("pin %s: %s" % (pin, {k: (v["count"], v["p50_ms"]) for k, v in st.items()}))
        check(EPOCHS * N <= st["read"]["count"] <= EPOCHS * N + AHEAD * BATCH,
              "pin %s: read %d, expected %d to %d" % (pin, st["read"]["count"], EPOCHS * N,
                                                     EPOCHS * N + AHEAD * BATCH))
        for k in ("staging", "h2d") + (("copy",) if pin == "copy" else ()):
            check(BATCHES <= st[k]["count"] <= BATCHES + AHEAD, "pin %s: %s %d, expected %d to %d"
                  % (pin, k, st[k]["count"], BATCHES, BATCHES + AHEAD))
        if pin == "register":
            check(st["copy"]["count"] == 0, "pin register: copy %d" % st["copy"]["count"])
        for k in ("h2d",) + (("copy",) if pin == "copy" else ()):
            check(0 < st[k]["p50_ms"] < 1000, "pin %s: %s p50 %r ms" % (pin, k, st[k]["p50_ms"]))
        r = env.loaderctl(["--socket", d.socket, "metrics"], timeout_s=10)
        check(r.returncode == 0, "loaderctl metrics exited %d: %s" % (r.returncode, r.stderr))
        counts = {st["h2d"]["count"], stages_of(d, "raw")["h2d"]["count"]}
        wants = ['loaderd_stage_seconds_count{pipeline="raw",stage="h2d"} %d' % c for c in counts]
        check(any(w in r.stdout.splitlines() for w in wants), "metrics lack %r" % wants)
        d.stop()

    root = gpu_harness.make_jpeg_tree(env, 2, 32, 7, 200, 100)
    cfg = gpu_harness.gpu_config(env, "stages-decode", {
        "img": {"source": "imagefolder:" + root, "batch_size": BATCH, "transform": "random_resized_crop(64)",
                "decode": "gpu"}})
    d = gpu_harness.start_daemon(env, cfg)
    gpu_harness.check_delivery(d, "register")
    gpu_harness.consume(env, d.socket, "img", env.path("img.dump"), device=uuid, epochs=1)
    st = stages_of(d, "img")
    batches = 64 // BATCH
    print("decode = gpu: %s" % {k: (v["count"], v["p50_ms"]) for k, v in st.items()})
    check(1 <= st["gpu_decode"]["count"] <= st["h2d"]["count"], "gpu_decode %d for %d batches copied"
          % (st["gpu_decode"]["count"], st["h2d"]["count"]))
    check(batches <= st["h2d"]["count"] <= batches + AHEAD, "h2d %d for %d batches (and at most %d ahead)"
          % (st["h2d"]["count"], batches, AHEAD))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_stages", body)
