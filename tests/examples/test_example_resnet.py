#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""examples/train_resnet.py runs against a real loaderd, on the CPU.

A tree of 24 small JPEGs in 3 classes (`mkjpeg --tree`), one daemon with
two imagefolder pipelines on it, `random_resized_crop(32) hflip(0.5)`,
uint8, batch 4: "train" (layout nhwc, what the example recommends) and
"planar" (nchw). The example, as a subprocess with --device cpu --model
resnet18 --size 32 --batch-size 4 --steps 4 --warmup 1 --json, must exit
0 and print one JSON line whose figures match the run (steps 4, images/s
above 0, a data-wait fraction in [0, 1], 32x32 images, 3 classes found in
the data) for --loader loaderd on both pipelines, --loader torch on the
same tree (one worker) and --loader synthetic. A pipeline name the daemon
does not have, and a --batch-size other than the pipeline's, must make it
exit non-zero with the reason on stderr (the daemon's own message for the
first). Afterwards the daemon must still stop cleanly (no client left).

Skipped (77) when torch or torchvision cannot be imported, and in a
sanitizer build (torch's libraries are not built for AddressSanitizer).
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example_harness as eh  # noqa: E402
import harness  # noqa: E402  (example_harness put tests/integration on the path)
from harness import check  # noqa: E402

EXAMPLE = eh.example("train_resnet.py")
CLASSES, PER_CLASS = 3, 8
SIZE, BATCH, STEPS = 32, 4, 4


def check_figures(f, what, loader, classes, layout=None):
    check(f.get("loader") == loader, "%s: loader %r, expected %r" % (what, f.get("loader"), loader))
    check(f.get("steps") == STEPS and f.get("images") == STEPS * BATCH,
          "%s: %r steps and %r images, expected %d and %d" % (what, f.get("steps"), f.get("images"),
                                                              STEPS, STEPS * BATCH))
    check(isinstance(f.get("images_per_s"), (int, float)) and f["images_per_s"] > 0,
          "%s: images_per_s %r, expected > 0" % (what, f.get("images_per_s")))
    wait = f.get("data_wait_fraction")
    check(isinstance(wait, (int, float)) and 0 <= wait <= 1, "%s: data_wait_fraction %r" % (what, wait))
    check(f.get("size") == [SIZE, SIZE], "%s: images of %r, expected %dx%d"
          % (what, f.get("size"), SIZE, SIZE))
    check(f.get("classes") == classes, "%s: %r classes, expected %d" % (what, f.get("classes"), classes))
    if layout is not None:
        check(f.get("layout") == layout, "%s: layout %r, expected %r" % (what, f.get("layout"), layout))


def body(env):
    eh.require_modules("torch", "torchvision")
    root = env.path("tree")
    r = subprocess.run([harness.binary("mkjpeg"), "--tree", root, "--classes", str(CLASSES), "--per-class",
                        str(PER_CLASS), "--min-side", "40", "--max-side", "96", "--seed", "1"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "mkjpeg --tree exited %d: %s" % (r.returncode, r.stderr))
    image_keys = {"source": "imagefolder:" + root, "batch_size": BATCH, "drop_last": "true",
                  "transform": "random_resized_crop(%d) hflip(0.5)" % SIZE, "dtype": "uint8"}
    d = env.start_daemon(env.config("ex", {"train": dict(image_keys, layout="nhwc"),
                                           "planar": dict(image_keys, layout="nchw")}, gpu="off"))
    common = ["--device", "cpu", "--model", "resnet18", "--size", str(SIZE), "--batch-size", str(BATCH),
              "--steps", str(STEPS), "--warmup", "1", "--json"]
    loaderd = ["--loader", "loaderd", "--socket", d.socket]

    for pipeline, layout in (("train", "nhwc"), ("planar", "nchw")):
        what = "train_resnet --loader loaderd --pipeline %s" % pipeline
        f = eh.figures(eh.run_example(EXAMPLE, common + loaderd + ["--pipeline", pipeline], what), what)
        check_figures(f, what, "loaderd", CLASSES, layout)
        check(f.get("pipeline") == pipeline, "%s: pipeline %r" % (what, f.get("pipeline")))

    what = "train_resnet --loader torch"
    f = eh.figures(eh.run_example(EXAMPLE, common + ["--loader", "torch", "--data", root, "--workers", "1"], what), what)
    check_figures(f, what, "torch", CLASSES)

    what = "train_resnet --loader synthetic"
    f = eh.figures(eh.run_example(EXAMPLE, common + ["--loader", "synthetic", "--classes", "10"], what), what)
    check_figures(f, what, "synthetic", 10)

    what = "train_resnet --pipeline nosuch"
    eh.check_fails(eh.run_example(EXAMPLE, common + loaderd + ["--pipeline", "nosuch"], what), what,
                'unknown pipeline "nosuch"')
    what = "train_resnet --batch-size %d on a pipeline of %d" % (2 * BATCH, BATCH)
    bigger = common + loaderd + ["--pipeline", "train", "--batch-size", str(2 * BATCH)]
    eh.check_fails(eh.run_example(EXAMPLE, bigger, what), what, "batch_size %d" % BATCH)

    st = d.status()
    check(not st["clients"], "clients still attached after the examples exited: %r" % st["clients"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_example_resnet", body)
