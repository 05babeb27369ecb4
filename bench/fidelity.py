#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fidelity: how far loaderd's image samples are from torchvision's, per
chroma subsampling, image size and DCT scale, under decode_scale = fast
and full.

  images     made by `BUILD/bin/mkjpeg` (photo pattern, quality 90,
             4:3 landscape) in a temporary directory: for each shorter
             edge in --sizes and each kind in --kinds (444, 422, 420, 440,
             411: those chroma subsamplings, baseline; gray; prog:
             progressive 4:2:0), --images files of different seeds;
  loaderd    `BUILD/bin/loaderd-sample-dump` (the workers' per-sample code:
             jd_decode_box, then the antialiased resize) with seed 0, for
             each transform and decode_scale; it gives each sample's crop
             box and the DCT scale it was decoded at;
  reference  torchvision.io.decode_jpeg(mode RGB) on the same bytes (the
             same libjpeg-turbo, at full size), then for
             `resize(256) center_crop(224)` F.resize(256, antialias=True)
             and F.center_crop(224), and for `random_resized_crop(224)`
             F.resized_crop with the box loaderd drew (--crops samples of
             each file) and antialias=True, all on uint8 tensors.

For each sample: the mean absolute difference over every value of the
224 x 224 x 3 output, in levels of 255, and the largest single one. It
prints two markdown tables (cells: the average of the samples' means, in
brackets the worst sample's mean, and @S where fast decoded some of them
at another scale than the one that covers the output: 4:2:2, 4:4:0 and
4:1:1 files, image/jpeg.h), the largest single differences, and exits 0;
1 if a program failed. About a minute.

  /usr/bin/python3 bench/fidelity.py --build build
"""

import argparse
import collections
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
import torchvision.transforms.functional as F
from torchvision.io import ImageReadMode, decode_jpeg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CENTER = "resize(256) center_crop(224)"
RANDOM = "random_resized_crop(224)"
KIND_ARGS = {"444": ["--subsamp", "444"], "422": ["--subsamp", "422"], "420": ["--subsamp", "420"],
             "440": ["--subsamp", "440"], "411": ["--subsamp", "411"], "gray": ["--gray"],
             "prog": ["--subsamp", "420", "--progressive"]}
KIND_NAMES = {"444": "4:4:4", "422": "4:2:2", "420": "4:2:0", "440": "4:4:0", "411": "4:1:1",
              "gray": "gray", "prog": "4:2:0 progressive"}
SCALE_NAMES = {1: "1/8", 2: "1/4", 4: "1/2", 8: "1"}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    ap.add_argument("--sizes", default="300,512,640,800,1200,2000,2400",
                    help="shorter edges in pixels (default 300,512,640,800,1200,2000,2400)")
    ap.add_argument("--kinds", default="444,422,420,440,411,gray,prog",
                    help="subsamplings and kinds (default all: 444,422,420,440,411,gray,prog)")
    ap.add_argument("--images", type=int, default=2, help="files per size and kind (default 2)")
    ap.add_argument("--crops", type=int, default=4,
                    help="random_resized_crop samples per file (default 4)")
    return ap.parse_args()


def make_images(mkjpeg, tmp, sizes, kinds, per):
    """[(path, kind, short edge)]"""
    files = []
    for short in sizes:
        for kind in kinds:
            for k in range(per):
                path = os.path.join(tmp, "%s-%d-%d.jpg" % (kind, short, k))
                seed = short * 100 + k
                subprocess.run([mkjpeg, path, "--width", str(short * 4 // 3), "--height", str(short),
                                "--seed", str(seed)] + KIND_ARGS[kind], check=True)
                files.append((path, kind, short))
    return files


def loaderd_samples(dump, tmp, transform, scale, paths):
    """[(rgb HWC uint8, box (x, y, w, h), M)] for each path, in order."""
    out = os.path.join(tmp, "out.rgb")
    r = subprocess.run([dump, "--transform", transform, "--decode-scale", scale, "--out", out] + paths,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("loaderd-sample-dump exited %d: %s" % (r.returncode, r.stderr))
    data = np.fromfile(out, np.uint8)
    samples = []
    for i, line in enumerate(r.stdout.splitlines()):
        f = dict(kv.split("=") for kv in line.split()[3:])
        ow, oh = (int(v) for v in f["out"].split(":"))
        rgb = data[i * ow * oh * 3:(i + 1) * ow * oh * 3].reshape(oh, ow, 3)
        box = tuple(float(f[k]) for k in ("x", "y", "w", "h"))
        samples.append((rgb, box, int(f["scale"])))
    if len(samples) != len(paths):
        raise RuntimeError("loaderd-sample-dump gave %d samples for %d files" % (len(samples), len(paths)))
    return samples


def reference(img, transform, box):
    if transform == CENTER:
        t = F.center_crop(F.resize(img, 256, antialias=True), 224)
    else:
        x, y, w, h = box
        if not all(v == int(v) for v in box):
            raise RuntimeError("a random_resized_crop box %s is not whole pixels" % (box,))
        t = F.resized_crop(img, int(y), int(x), int(h), int(w), [224, 224], antialias=True)
    return t.permute(1, 2, 0).numpy()


def measure(a, bindir, tmp):
    sizes = [int(s) for s in a.sizes.split(",")]
    kinds = a.kinds.split(",")
    files = make_images(os.path.join(bindir, "mkjpeg"), tmp, sizes, kinds, a.images)
    decoded = {}
    # per (transform, decode_scale): [(kind, short, M, mean, max, box, M0)]
    results = collections.defaultdict(list)
    for transform in (CENTER, RANDOM):
        reps = 1 if transform == CENTER else a.crops
        run = [f for f in files for _ in range(reps)]
        for scale in ("fast", "full"):
            got = loaderd_samples(os.path.join(bindir, "loaderd-sample-dump"), tmp, transform, scale,
                                  [p for p, _, _ in run])
            for (path, kind, short), (rgb, box, m) in zip(run, got):
                if path not in decoded:
                    decoded[path] = decode_jpeg(torchvision.io.read_file(path), ImageReadMode.RGB)
                ref = reference(decoded[path], transform, box)
                d = np.abs(rgb.astype(np.int16) - ref.astype(np.int16))
                results[(transform, scale)].append((kind, short, m, float(d.mean()), int(d.max()),
                                                    box, luma_scale(box)))
    return sizes, kinds, results


def luma_scale(box, out=224):
    """M0 of jd_pick_scale: the smallest M/8 at which the box covers the output."""
    for m in (1, 2, 4):
        if box[2] * m / 8 >= out and box[3] * m / 8 >= out:
            return m
    return 8


def cell(values, m0=None):
    """The average of the samples' means (the worst in brackets), and @S when
    some were decoded at another scale than m0."""
    if not values:
        return ""
    means = [v[3] for v in values]
    text = "%.2f (%.2f)" % (sum(means) / len(means), max(means))
    other = sorted({v[2] for v in values if v[2] != m0}, reverse=True)
    if m0 is not None and other:
        text += " @%s" % ",".join(SCALE_NAMES[m] for m in other)
    return text


def print_tables(a, sizes, kinds, results):
    header = "| %s | " + " | ".join(KIND_NAMES[k] for k in kinds) + " |"
    rule = "|---|" + "---|" * len(kinds)
    print("`%s`, decode_scale = fast, by the image's shorter edge (4:3 images) and the "
          "scale that covers the output; @S: decoded at S instead:\n" % CENTER)
    print(header % "shorter edge, scale")
    print(rule)
    fast, full = results[(CENTER, "fast")], results[(CENTER, "full")]
    for short in sizes:
        row = [v for v in fast if v[1] == short]
        m0 = min(v[6] for v in row)
        print("| %d px, %s | %s |" % (short, SCALE_NAMES[m0], " | ".join(
            cell([v for v in row if v[0] == k], m0) for k in kinds)))
    print("| decode_scale = full, every size | %s |"
          % " | ".join(cell([v for v in full if v[0] == k]) for k in kinds))
    print()
    print("`%s`, %d crops per file of every size, against torchvision's resized_crop of "
          "the same box; decode_scale = fast by the scale that covers the output; @S: "
          "decoded at S instead; [samples]:\n" % (RANDOM, a.crops))
    print(header % "scale")
    print(rule)
    fast, full = results[(RANDOM, "fast")], results[(RANDOM, "full")]
    for m0 in (8, 4, 2, 1):
        cells = []
        for k in kinds:
            vals = [v for v in fast if v[0] == k and v[6] == m0]
            cells.append("%s [%d]" % (cell(vals, m0), len(vals)) if vals else "")
        print("| %s | %s |" % (SCALE_NAMES[m0], " | ".join(cells)))
    print("| decode_scale = full | %s |" % " | ".join(cell([v for v in full if v[0] == k]) for k in kinds))
    print()
    for scale in ("fast", "full"):
        print("largest single difference, decode_scale = %s: %s" % (scale, ", ".join(
            "%s %d" % (KIND_NAMES[k], max(v[4] for key, r in results.items() if key[1] == scale
                                        for v in r if v[0] == k)) for k in kinds)))
    print("torchvision %s, torch %s, %d files of each kind and size"
          % (torchvision.__version__, torch.__version__, a.images))


def main():
    a = parse_args()
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    for exe in ("mkjpeg", "loaderd-sample-dump"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("fidelity: %s/%s is missing; build first (cmake -S . -B build && "
                     "cmake --build build -j)" % (bindir, exe))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="loaderd-fidelity-") as tmp:
        try:
            sizes, kinds, results = measure(a, bindir, tmp)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            print("fidelity: %s" % e, file=sys.stderr)
            return 1
    print_tables(a, sizes, kinds, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
