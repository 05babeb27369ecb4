#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`loaderctl peek`: a batch of an image pipeline as a PNG contact sheet.

A tree of 12 classes of one JPEG each (`mkjpeg --tree`), so sample i has
label i; pipelines of batch_size 6, shuffle off, `resize(40) center_crop(32)`
(2 batches per epoch), and a raw pipeline (no image tensor).

- uint8 NCHW: `peek --batch 1` writes a PNG whose every pixel is the sheet
  expected from batch 1 as `consume --dump-data` delivers it in the same
  daemon: the geometry client/peek.h states (3x2 tiles of 32x32, gaps of 4,
  label strips of 18), each tile's pixels, each label drawn from a copy of
  peek.c's 5x7 glyph table (labels 6..11: one and two digits), and the
  background. Batch 0 (the default) with --columns 4 gives 4x2 tiles and
  labels 0..5; the strips of labels 0 and 1 differ.
- uint8 NHWC of 10x10 images: labels at x2, at x1 and clipped.
- float32 NHWC and float16 NCHW with mean/std: the same geometry; each
  channel is mapped from the batch's min..max of that channel to 0..255,
  computed here from the delivered floats (within 1 level: rounding of a
  float computed in another order); not constant.
- Errors exit 1 with a "loaderctl: " message naming the thing: an unknown
  pipeline, the raw pipeline (no image tensor), --out in a missing
  directory, --batch 2 (beyond the epoch); none leaves a PNG or a
  .tmp- file behind, and every peek detaches. Usage errors exit 2.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

np, Image = harness.import_or_fail("test_peek", "numpy", "PIL.Image")

CLASSES = 12
BATCH = 6
SIDE = 32
TINY = 10  # "6" fits at x2 (10 pixels), "11" not even at x1 (11): clipped
TRANSFORM = "resize(40) center_crop(%d)" % SIDE
MEAN, STD = "0.485,0.456,0.406", "0.229,0.224,0.225"

# client/peek.h
GAP, LABEL_PAD, LABEL_HEIGHT, BACKGROUND = 4, 2, 18, 32
# client/peek.c's glyphs: 5x7, a row per value, bit 4 the leftmost column
GLYPHS = {
    "0": (0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e),
    "1": (0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e),
    "2": (0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f),
    "3": (0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e),
    "4": (0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02),
    "5": (0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e),
    "6": (0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e),
    "7": (0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e),
    "9": (0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c),
    "-": (0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00),
}
_OUT_RE = re.compile(r"^peek: pipeline (\S+) batch (\d+): (\d+) images (\d+)x(\d+) -> (.+) "
                     r"\((\d+)x(\d+) tiles\)$")


def label_strip(label, width):
    """The strip under a tile of `width` pixels, as peek.h describes it."""
    strip = np.full((LABEL_HEIGHT, width, 3), BACKGROUND, np.uint8)
    text = str(label)
    scale = 2 if len(text) * 12 - 2 <= width else 1
    text_w = len(text) * 6 * scale - scale
    top = LABEL_PAD + (14 - 7 * scale) // 2
    left = (width - text_w) // 2 if text_w < width else 0
    for c, ch in enumerate(text):
        for gy, bits in enumerate(GLYPHS[ch]):
            for gx in range(5):
                if bits & (0x10 >> gx):
                    x = left + (c * 6 + gx) * scale
                    strip[top + gy * scale:top + (gy + 1) * scale, x:x + scale] = 255
    return strip[:, :width]


def expected_sheet(tiles, labels, columns):
    """tiles: uint8 [B, H, W, 3]; labels: ints or None."""
    b, h, w, _ = tiles.shape
    rows = -(-b // columns)
    cell_h = h + (LABEL_HEIGHT if labels is not None else 0)
    sheet = np.full((GAP + rows * (cell_h + GAP), GAP + columns * (w + GAP), 3), BACKGROUND,
                    np.uint8)
    for i in range(b):
        y, x = GAP + (i // columns) * (cell_h + GAP), GAP + (i % columns) * (w + GAP)
        sheet[y:y + h, x:x + w] = tiles[i]
        if labels is not None:
            sheet[y + h:y + cell_h, x:x + w] = label_strip(labels[i], w)
    return sheet


def delivered(env, d, pipeline, batch, dtype, nhwc, side=SIDE):
    """Images ([B, H, W, 3], delivered dtype) and labels of `batch`, through
    `consume --dump-data` (rows: the image bytes, then the int64 label)."""
    dump, data = env.path(pipeline + ".dump"), env.path(pipeline + ".data")
    r = env.loaderctl(harness.consume_args(d.socket, pipeline, batches=batch + 1, dump=dump,
                                           extra=["--dump-data", data, "--quiet"]))
    check(r.returncode == 0, "consume %s exited %d: %s" % (pipeline, r.returncode, r.stderr))
    rows = harness.read_dump(dump)
    with open(data, "rb") as f:
        raw = f.read()
    pixels = 3 * side * side
    row_bytes = pixels * np.dtype(dtype).itemsize + 8
    check(len(raw) == len(rows) * row_bytes, "%s: %d bytes of rows for %d rows"
          % (pipeline, len(raw), len(rows)))
    images, labels = [], []
    for k, (_, index, _, _) in enumerate(rows):
        if index != batch:
            continue
        image = np.frombuffer(raw, dtype, pixels, k * row_bytes)
        images.append(image.reshape(side, side, 3) if nhwc else
                      image.reshape(3, side, side).transpose(1, 2, 0))
        labels.append(int(np.frombuffer(raw, np.int64, 1, k * row_bytes + row_bytes - 8)[0]))
    check(len(images) == BATCH, "%s: consume gave %d rows of batch %d" % (pipeline, len(images), batch))
    return np.stack(images), labels


def peek(env, d, pipeline, out, extra=(), side=SIDE):
    """Runs peek; returns (sheet as uint8 [H, W, 3], (columns, rows))."""
    r = env.loaderctl(["--socket", d.socket, "peek", "--pipeline", pipeline, "--out", out]
                      + list(extra))
    check(r.returncode == 0, "peek %s %s exited %d: %s" % (pipeline, extra, r.returncode, r.stderr))
    m = _OUT_RE.match(r.stdout.strip())
    check(m is not None and len(r.stdout.splitlines()) == 1, "peek printed %r" % r.stdout)
    check(m.group(1) == pipeline and int(m.group(3)) == BATCH and m.group(4) == m.group(5) == str(side)
          and m.group(6) == out, "peek's line does not describe the run: %r" % r.stdout)
    check(not [n for n in os.listdir(os.path.dirname(out)) if ".tmp-" in n],
          "peek left a temporary file in %s" % os.path.dirname(out))
    with Image.open(out) as im:
        check(im.format == "PNG" and im.mode == "RGB", "%s is %s %s, expected an RGB PNG"
              % (out, im.format, im.mode))
        return np.asarray(im), (int(m.group(7)), int(m.group(8)))


def check_sheet(got, want, what, tolerance=0):
    check(got.shape == want.shape, "%s: the sheet is %dx%d, expected %dx%d"
          % (what, got.shape[1], got.shape[0], want.shape[1], want.shape[0]))
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    if diff.max() > tolerance:
        y, x, c = np.unravel_index(int(diff.argmax()), diff.shape)
        raise harness.TestFailure("%s: pixel (x %d, y %d) channel %d is %d, expected %d (%d pixels "
                                  "differ by more than %d)" % (what, x, y, c, got[y, x, c],
                                                               want[y, x, c], (diff > tolerance).sum(),
                                                               tolerance))


def stretch(images):
    """peek.h's float mapping: each channel from the batch's min..max."""
    f = images.astype(np.float64)
    lo, hi = f.min(axis=(0, 1, 2)), f.max(axis=(0, 1, 2))
    check((hi > lo).all(), "a float channel is constant: %s..%s" % (lo, hi))
    return np.clip(np.floor((f - lo) * 255.0 / (hi - lo) + 0.5), 0, 255).astype(np.uint8)


def check_error(env, d, args, out, needles, what):
    r = env.loaderctl(["--socket", d.socket, "peek"] + args + ["--out", out])
    check(r.returncode == 1 and r.stderr.startswith("loaderctl: ")
          and all(n in r.stderr for n in needles),
          "%s: exited %d, stderr %r; expected 1 and a message naming %s"
          % (what, r.returncode, r.stderr, needles))
    parent = os.path.dirname(out)
    left = [n for n in os.listdir(parent) if n.startswith(os.path.basename(out))] \
        if os.path.isdir(parent) else []
    check(left == [], "%s: left %s behind" % (what, left))


def body(env):
    root = env.path("tree")
    subprocess.run([harness.binary("mkjpeg"), "--tree", root, "--classes", str(CLASSES),
                    "--per-class", "1", "--min-side", "40", "--max-side", "90", "--seed", "5"],
                   check=True, stdout=subprocess.DEVNULL)
    image = {"source": "imagefolder:" + root, "batch_size": BATCH, "shuffle": "false",
             "transform": TRANSFORM}
    pipelines = {
        "u8": image,
        "f32": dict(image, layout="nhwc", dtype="float32", mean=MEAN, std=STD),
        "f16": dict(image, dtype="float16", mean=MEAN, std=STD),
        "tiny": dict(image, layout="nhwc", transform="resize(12) center_crop(%d)" % TINY),
        "raw": {"source": "raw:" + env.make_raw("data.bin", 64, 128), "record_bytes": 128,
                "batch_size": 8},
    }
    d = env.start_daemon(env.config("peek", pipelines))
    out_dir = env.path("out")
    os.mkdir(out_dir)

    images, labels = delivered(env, d, "u8", 1, np.uint8, nhwc=False)
    check(labels == list(range(BATCH, 2 * BATCH)), "batch 1 has labels %s" % labels)
    got, grid = peek(env, d, "u8", os.path.join(out_dir, "u8.png"), ["--batch", "1"])
    check(grid == (3, 2), "u8: %s tiles, expected 3x2 (ceil(sqrt(6)) columns)" % (grid,))
    check_sheet(got, expected_sheet(images, labels, 3), "u8 batch 1")

    images, labels = delivered(env, d, "u8", 0, np.uint8, nhwc=False)
    got, grid = peek(env, d, "u8", os.path.join(out_dir, "u8-0.png"), ["--columns", "4"])
    check(grid == (4, 2), "u8 --columns 4: %s tiles, expected 4x2" % (grid,))
    check_sheet(got, expected_sheet(images, labels, 4), "u8 batch 0 --columns 4")
    strip = GAP + SIDE  # the first row of label strips
    zero, one = (got[strip:strip + LABEL_HEIGHT, GAP + k * (SIDE + GAP):][:, :SIDE] for k in (0, 1))
    check((zero != BACKGROUND).any() and not np.array_equal(zero, one),
          "the strips of labels 0 and 1 are blank or equal")

    images, labels = delivered(env, d, "tiny", 1, np.uint8, nhwc=True, side=TINY)
    got, grid = peek(env, d, "tiny", os.path.join(out_dir, "tiny.png"), ["--batch", "1"], side=TINY)
    check_sheet(got, expected_sheet(images, labels, 3), "tiny (uint8 nhwc) batch 1")

    for name, dtype, nhwc in (("f32", np.float32, True), ("f16", np.float16, False)):
        images, labels = delivered(env, d, name, 1, dtype, nhwc)
        got, grid = peek(env, d, name, os.path.join(out_dir, name + ".png"), ["--batch", "1"])
        check(grid == (3, 2), "%s: %s tiles, expected 3x2" % (name, grid))
        check_sheet(got, expected_sheet(stretch(images), labels, 3), name + " batch 1", tolerance=1)
        check(got.min() == 0 and got.max() == 255, "%s: the sheet is not stretched" % name)

    missing = env.path("missing", "x.png")
    out = os.path.join(out_dir, "err.png")
    check_error(env, d, ["--pipeline", "nosuch"], out, ["nosuch"], "unknown pipeline")
    check_error(env, d, ["--pipeline", "raw"], out,
                ["pipeline raw has no image tensor; peek shows image pipelines"], "raw pipeline")
    check_error(env, d, ["--pipeline", "u8"], missing, [missing, "No such file or directory"],
                "--out in a missing directory")
    check_error(env, d, ["--pipeline", "u8", "--batch", "2"], out, ["pipeline u8", "batch 2"],
                "--batch beyond the epoch")
    for args in (["--pipeline", "u8"], ["--out", out], ["--pipeline", "u8", "--out", out, "--batch", "x"],
                 ["--pipeline", "u8", "--out", out, "--columns", "0"]):
        r = env.loaderctl(["--socket", d.socket, "peek"] + args)
        check(r.returncode == 2 and r.stderr.startswith("loaderctl: "),
              "peek %s: exited %d, stderr %r; expected a usage error (2)" % (args, r.returncode, r.stderr))
    d.wait_status(lambda st: not st["clients"], 10, "every peek client to detach")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_peek", body)
