#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""decode_scale: an image pipeline's samples against torchvision's, with
the workers decoding at full size (`full`) and at the smallest DCT scale
that covers the output (`fast`, the default).

The tree (mkjpeg photos, quality 90, 4:3) holds images whose shorter edge
is 800 and 1200 px in 4:4:4, 4:2:2 and 4:2:0, and 800 px ones in 4:4:0,
grayscale and progressive 4:2:0: under `resize(256) center_crop(224)`
fast decodes the 800 px ones at 1/2 and the 1200 px ones at 1/4 (4:2:2
and 4:4:0 one scale up). Two pipelines read it, uint8 NHWC, in order, one
with `decode_scale = full`, one without the key; each row is compared
with torchvision.io.decode_jpeg (mode RGB) + F.resize(256,
antialias=True) + F.center_crop(224) of the same file, as the mean
absolute difference over all its values (levels of 255):

- full: every image within 0.5 (measured: 0.00-0.01);
- fast: 4:2:2 files no worse than the 4:2:0 files of the same size (the
  average of each size's images): libjpeg-turbo keeps a 2x1-subsampled
  chroma at the luma's reduced scale and upsamples it, which once made
  4:2:2 the worst of the three (docs/config.md, "decode_scale").
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

np, torch, torchvision, F = harness.import_or_fail(
    "test_decode_scale", "numpy", "torch", "torchvision", "torchvision.transforms.functional")

SIDE = 224
FULL_LIMIT = 0.5
IMAGES = [  # (class, name, shorter edge, mkjpeg arguments)
    ("c0", "s444_800.jpg", 800, ["--subsamp", "444"]),
    ("c0", "s422_800.jpg", 800, ["--subsamp", "422"]),
    ("c0", "s420_800.jpg", 800, ["--subsamp", "420"]),
    ("c1", "s444_1200.jpg", 1200, ["--subsamp", "444"]),
    ("c1", "s422_1200.jpg", 1200, ["--subsamp", "422"]),
    ("c1", "s420_1200.jpg", 1200, ["--subsamp", "420"]),
    ("c2", "s440_800.jpg", 800, ["--subsamp", "440"]),
    ("c2", "sgray_800.jpg", 800, ["--gray"]),
    ("c2", "sprog_800.jpg", 800, ["--subsamp", "420", "--progressive"]),
]


def reference(path):
    img = torchvision.io.decode_jpeg(torchvision.io.read_file(path), torchvision.io.ImageReadMode.RGB)
    out = F.center_crop(F.resize(img, 256, antialias=True), SIDE)
    return out.permute(1, 2, 0).numpy()


def body(env):
    root = env.path("tree")
    mkjpeg = harness.binary("mkjpeg")
    for i, (cls, name, short, args) in enumerate(IMAGES):
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        # the same seed per size, so each subsampling encodes the same picture
        subprocess.run([mkjpeg, os.path.join(root, cls, name), "--width", str(short * 4 // 3),
                        "--height", str(short), "--seed", str(short)] + args, check=True)
    paths = sorted(os.path.join(root, cls, name) for cls, name, _, _ in IMAGES)
    base = {"source": "imagefolder:" + root, "batch_size": 3, "shuffle": "false",
            "transform": "resize(256) center_crop(%d)" % SIDE, "layout": "nhwc", "decode": "cpu"}
    d = env.start_daemon(env.config("scale", {"full": dict(base, decode_scale="full"),
                                              "fast": base}, workers=2))
    row = SIDE * SIDE * 3 + 8
    errors = {}
    for pipeline in ("full", "fast"):
        dump, data = env.path(pipeline + ".dump"), env.path(pipeline + ".data")
        r = env.loaderctl(harness.consume_args(d.socket, pipeline, epochs=1, dump=dump,
                                               extra=["--dump-data", data]), timeout_s=120)
        check(r.returncode == 0, "consume %s exited %d: %s" % (pipeline, r.returncode, r.stderr))
        rows = harness.read_dump(dump)
        with open(data, "rb") as f:
            raw = f.read()
        check(len(rows) == len(paths) and len(raw) == len(rows) * row,
              "%s: %d rows, %d bytes for %d images" % (pipeline, len(rows), len(raw), len(paths)))
        for k, (_, _, sample, _) in enumerate(rows):
            got = np.frombuffer(raw, np.uint8, SIDE * SIDE * 3, k * row).reshape(SIDE, SIDE, 3)
            diff = np.abs(got.astype(np.int16) - reference(paths[sample]).astype(np.int16))
            name = os.path.basename(paths[sample])
            errors[(pipeline, name)] = float(diff.mean())
            print("%s %s: mean abs diff %.3f, max %d" % (pipeline, name, diff.mean(), diff.max()))
    d.stop()

    for (pipeline, name), mean in sorted(errors.items()):
        if pipeline == "full":
            check(mean <= FULL_LIMIT, "decode_scale = full: %s is %.3f levels from torchvision "
                  "on average, over %.1f" % (name, mean, FULL_LIMIT))
    for short in (800, 1200):
        e422 = errors[("fast", "s422_%d.jpg" % short)]
        e420 = errors[("fast", "s420_%d.jpg" % short)]
        check(e422 <= e420, "decode_scale = fast, %d px: 4:2:2 is %.3f levels from torchvision "
              "on average, 4:2:0 %.3f" % (short, e422, e420))


if __name__ == "__main__":
    harness.run_test("test_decode_scale", body)
