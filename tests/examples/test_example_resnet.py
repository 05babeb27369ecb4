#!/usr/bin/env python3
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

import json
import os
import subprocess
import sys

SOURCE_DIR = os.environ.get("LOADERD_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
import harness  # noqa: E402  (tests/integration is put on the path just above)
from harness import check  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "train_resnet.py")
CLASSES, PER_CLASS = 3, 8
SIZE, BATCH, STEPS = 32, 4, 4
RUN_TIMEOUT_S = 120


def require_torch(*modules):
    if os.environ.get("LOADERD_SANITIZE"):
        raise harness.TestSkip("sanitizer build (LOADERD_SANITIZE=%s): torch does not run under it"
                               % os.environ["LOADERD_SANITIZE"])
    for name in modules:
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
            raise harness.TestSkip("%s cannot be imported (%s): python3-torch and python3-torchvision"
                                   % (name, e)) from None


def run_example(args, what):
    cmd = [sys.executable, EXAMPLE] + args
    env = dict(os.environ, OMP_NUM_THREADS="2")  # CI runs tests side by side on few cores
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise harness.TestFailure("%s: did not finish within %d s; stderr: %s"
                                  % (what, RUN_TIMEOUT_S, e.stderr)) from None


def figures(r, what):
    """The JSON line of a run that must have succeeded."""
    check(r.returncode == 0, "%s exited %d:\n%s" % (what, r.returncode, r.stderr[-4000:]))
    lines = r.stdout.splitlines()
    check(len(lines) == 1, "%s printed %d lines on stdout, expected one JSON line:\n%s"
          % (what, len(lines), r.stdout))
    try:
        return json.loads(lines[0])
    except ValueError as e:
        raise harness.TestFailure("%s: stdout is not JSON (%s): %r" % (what, e, lines[0])) from None


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


def check_fails(r, what, needle):
    check(r.returncode != 0, "%s exited 0, expected an error; stdout: %s" % (what, r.stdout))
    check(needle in r.stderr, "%s: stderr does not say %r:\n%s" % (what, needle, r.stderr[-4000:]))


def body(env):
    require_torch("torch", "torchvision")
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
        f = figures(run_example(common + loaderd + ["--pipeline", pipeline], what), what)
        check_figures(f, what, "loaderd", CLASSES, layout)
        check(f.get("pipeline") == pipeline, "%s: pipeline %r" % (what, f.get("pipeline")))

    what = "train_resnet --loader torch"
    f = figures(run_example(common + ["--loader", "torch", "--data", root, "--workers", "1"], what), what)
    check_figures(f, what, "torch", CLASSES)

    what = "train_resnet --loader synthetic"
    f = figures(run_example(common + ["--loader", "synthetic", "--classes", "10"], what), what)
    check_figures(f, what, "synthetic", 10)

    what = "train_resnet --pipeline nosuch"
    check_fails(run_example(common + loaderd + ["--pipeline", "nosuch"], what), what,
                'unknown pipeline "nosuch"')
    what = "train_resnet --batch-size %d on a pipeline of %d" % (2 * BATCH, BATCH)
    bigger = common + loaderd + ["--pipeline", "train", "--batch-size", str(2 * BATCH)]
    check_fails(run_example(bigger, what), what, "batch_size %d" % BATCH)

    st = d.status()
    check(not st["clients"], "clients still attached after the examples exited: %r" % st["clients"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_example_resnet", body)
