#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The staging slot of an image pipeline that may decode on the GPU, and
host clients of it.

One imagefolder pipeline (batch 64, `center_crop(16)`, uint8 NHWC: 768
bytes a row) on three daemons that differ only in `decode`:
- `decode = cpu`: a slot holds the tensors (images and labels), rounded up
  to a page;
- `decode = auto` (no GPU here, but the config still lays out for one):
  also a descriptor per row (72 bytes), the JPEGs travelling in the rows
  themselves;
- `decode = auto` with `max_image_bytes = 64K`, more than a row: also 64 x
  64 KiB for the JPEGs after the descriptors.
Status gives the slot size of each, which must be exactly that. A host
client of each delivers the same batches (the dumps are equal): host
clients always decode on the CPU, whatever `decode` says, and status has
no decode line without device delivery.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BATCH, SIDE, N = 64, 16, 70  # 64 descriptors: more than a page, so the slot must grow
PAGE = 4096
TENSOR_ALIGN = 256  # daemon/source/source.h


def aligned(v, a):
    return (v + a - 1) // a * a


def body(env):
    root = env.path("tree")
    mkjpeg = harness.binary("mkjpeg")
    for i in range(N):
        d = os.path.join(root, "c%d" % (i % 2))
        os.makedirs(d, exist_ok=True)
        subprocess.run([mkjpeg, os.path.join(d, "i%02d.jpg" % i), "--width", str(40 + i),
                        "--height", str(30 + i), "--seed", str(i)], check=True)
    base = {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": 2,
            "transform": "center_crop(%d)" % SIDE, "layout": "nhwc"}
    row = SIDE * SIDE * 3
    # The tensors (each aligned as source.c aligns them), then the descriptors.
    tensors = aligned(aligned(BATCH * row, TENSOR_ALIGN) + BATCH * 8, TENSOR_ALIGN)
    descriptors = aligned(tensors + BATCH * 72, TENSOR_ALIGN)
    check(aligned(descriptors, PAGE) > aligned(tensors, PAGE), "the test's sizes cannot tell the "
          "layouts apart")
    cases = [
        ("cpu", {"decode": "cpu"}, tensors),
        ("auto", {"decode": "auto"}, descriptors),
        ("auto-64k", {"decode": "auto", "max_image_bytes": "64K"}, descriptors + BATCH * 65536),
    ]
    dumps = []
    for name, keys, need in cases:
        d = harness.Daemon(env, env.config(name, {"p": dict(base, **keys)}, workers=2))
        env.daemons.append(d)
        d.start()
        d.wait_ready(30)
        st = d.status()
        check(st["slot_bytes"] == aligned(need, PAGE),
              "decode %s: staging slots of %d bytes, expected %d (%d rounded up to a page)"
              % (name, st["slot_bytes"], aligned(need, PAGE), need))
        # a decode line per GPU the daemon sees, for a pipeline that may decode there
        want = [] if keys["decode"] == "cpu" else [("p", g["index"]) for g in st["gpus"]]
        check([(x["pipeline"], x["gpu"]) for x in st["decode"]] == want,
              "decode %s: status lists GPU decoding %s with %d GPUs" % (name, st["decode"],
                                                                       len(st["gpus"])))
        dump = env.path("%s.dump" % name)
        r = subprocess.run([harness.binary("loaderctl")] +
                           harness.consume_args(d.socket, "p", epochs=2, dump=dump,
                                                extra=["--quiet"]),
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "decode %s: consume exited %d: %s" % (name, r.returncode, r.stderr))
        dumps.append((name, harness.read_text(dump)))
        d.stop()
    for name, text in dumps[1:]:
        i = harness.first_difference(dumps[0][1].splitlines(), text.splitlines())
        check(i is None, "host delivery with decode = %s differs from decode = cpu from line %s on"
              % (name, None if i is None else i + 1))
    print("slots: %s; host dumps equal" % ", ".join("%s %d" % (n, aligned(b, PAGE))
                                                    for n, _, b in cases))


if __name__ == "__main__":
    harness.run_test("test_decode_layout", body)
