#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The stages the daemon's GPU path times, per pipeline (docs/operations.md,
"Stage latencies").

Device delivery of a raw pipeline, 2 epochs of a known number of batches:
- with pin = copy, `staging`, `copy` (into pinned memory) and `h2d` (the
  device copy) each count every batch once, `read` every sample, and
  their medians are above 0 and below a second;
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
        st = stages_of(d, "raw")
        print("pin %s: %s" % (pin, {k: (v["count"], v["p50_ms"]) for k, v in st.items()}))
        check(st["read"]["count"] == EPOCHS * N, "pin %s: read %d, expected %d" % (pin, st["read"]["count"], EPOCHS * N))
        check(st["staging"]["count"] == BATCHES and st["h2d"]["count"] == BATCHES,
              "pin %s: staging %d, h2d %d, expected %d" % (pin, st["staging"]["count"], st["h2d"]["count"], BATCHES))
        check(st["copy"]["count"] == (BATCHES if pin == "copy" else 0),
              "pin %s: copy %d" % (pin, st["copy"]["count"]))
        for k in ("h2d",) + (("copy",) if pin == "copy" else ()):
            check(0 < st[k]["p50_ms"] < 1000, "pin %s: %s p50 %r ms" % (pin, k, st[k]["p50_ms"]))
        r = env.loaderctl(["--socket", d.socket, "metrics"], timeout_s=10)
        check(r.returncode == 0, "loaderctl metrics exited %d: %s" % (r.returncode, r.stderr))
        want = 'loaderd_stage_seconds_count{pipeline="raw",stage="h2d"} %d' % BATCHES
        check(want in r.stdout.splitlines(), "metrics lack %r" % want)
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
    check(1 <= st["gpu_decode"]["count"] <= batches, "gpu_decode %d for %d batches"
          % (st["gpu_decode"]["count"], batches))
    check(st["h2d"]["count"] == batches, "h2d %d for %d batches" % (st["h2d"]["count"], batches))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_stages", body)
