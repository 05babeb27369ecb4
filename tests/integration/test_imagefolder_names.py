#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""imagefolder labels and sample order on names that are not plain UTF-8,
against torchvision's own ImageFolder on the same tree.

ImageFolder sorts what os.scandir and os.walk give: str names decoded from
UTF-8 with surrogateescape (a byte outside a well-formed sequence becomes
U+DC00 + byte), compared by code point. The tree's classes are the three
names whose byte order differs from that (a stray 0xff, U+E000, an emoji),
the ill-formed kinds (an encoded surrogate, an overlong NUL, a sequence
cut short, a lone continuation byte) beside well-formed neighbours (U+D7FF,
U+20AC, ASCII), and random byte names from a fixed seed. Each class holds
JPEGs with such names at its top and in subdirectories with such names
(two and three levels down), so directory paths and file names are sorted
too.

Every file is a solid colour no other file has (PIL, quality 95, no chroma
subsampling). A shuffle-off pipeline of `resize(8) center_crop(8)` is
consumed for one epoch; each delivered row must carry, for its sample
number, the label ImageFolder gives and the colour of the file ImageFolder
lists at that number.
"""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

np, Image, datasets = harness.import_or_fail("test_imagefolder_names", "numpy", "PIL.Image",
                                             "torchvision.datasets")

SIDE = 8
LEVELS = (20, 80, 140, 200, 250)  # 125 colours, far apart after JPEG rounding
CLASSES = [
    b"\xff", "\ue000".encode(), "\U0001f600".encode(),
    b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xc0\x80x", b"\xe2\x82", b"\xe2\x82\xac", b"\x80",
    b"plain", b"Plain \xf4\x90\x80\x80",
]
RANDOM_CLASSES = 6


def random_name(rng):
    pieces = [b"a", b"Z", b"_", b" ", b"\xff", b"\x80", b"\xc3", b"\xc3\xa9", b"\xee\x80\x80",
              b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"\xef\xbf\xbf"]
    name = b""
    while len(name) == 0 or name in (b".", b".."):
        name = b"".join(rng.choice(pieces) if rng.random() < 0.7 else
                        bytes([rng.randrange(0x80, 0x100)]) for _ in range(rng.randrange(1, 5)))
    return name


def make_tree(root, rng):
    """Writes the tree; returns {file path (bytes): colour}."""
    colours = [(r, g, b) for r in LEVELS for g in LEVELS for b in LEVELS]
    rng.shuffle(colours)
    classes = list(CLASSES)
    while len(classes) < len(CLASSES) + RANDOM_CLASSES:
        name = random_name(rng)
        if name not in classes:
            classes.append(name)
    files = {}
    for cls in classes:
        dirs = [os.path.join(root, cls)]
        for _ in range(rng.randrange(0, 3)):
            sub = os.path.join(rng.choice(dirs), random_name(rng))
            if sub not in dirs:
                dirs.append(sub)
        dirs.append(os.path.join(dirs[0], b"\xe2\x82", b"\xe2\x82\xac"))  # three levels down
        for d in dirs:
            os.makedirs(d, exist_ok=True)
            for _ in range(rng.randrange(1, 3)):
                path = os.path.join(d, random_name(rng) + rng.choice([b".jpg", b".JPEG"]))
                if path in files:
                    continue
                files[path] = colours.pop()
                with open(path, "wb") as f:
                    Image.new("RGB", (16, 16), files[path]).save(f, "JPEG", quality=95,
                                                                  subsampling=0)
    return files


def body(env):
    root = env.path("tree").encode()
    files = make_tree(root, random.Random(7))
    ref = datasets.ImageFolder(os.fsdecode(root))
    n = len(ref.samples)
    check(n == len(files), "ImageFolder lists %d files, the tree has %d" % (n, len(files)))
    print("%d classes, %d files; ImageFolder's classes: %s"
          % (len(ref.classes), n, [ascii(c) for c in ref.classes]))

    pipelines = {"names": {"source": "imagefolder:" + os.fsdecode(root), "batch_size": 1,
                           "shuffle": "false", "transform": "resize(%d) center_crop(%d)"
                           % (SIDE, SIDE)}}
    d = env.start_daemon(env.config("names", pipelines))
    st = d.status()
    check(st["pipelines"][0]["samples"] == n, "status gives %s, expected %d samples"
          % (st["pipelines"], n))
    dump, data = env.path("names.dump"), env.path("names.data")
    r = env.loaderctl(harness.consume_args(d.socket, "names", epochs=1, dump=dump,
                                           extra=["--dump-data", data]), timeout_s=60)
    check(r.returncode == 0, "consume exited %d: %s" % (r.returncode, r.stderr))
    d.stop()
    rows = harness.read_dump(dump)
    with open(data, "rb") as f:
        raw = f.read()
    row = 3 * SIDE * SIDE + 8
    check(len(raw) == len(rows) * row and sorted(s for _, _, s, _ in rows) == list(range(n)),
          "%d rows (%d bytes) delivered, expected each of the %d samples once"
          % (len(rows), len(raw), n))
    wrong = []
    for k, (_, _, sample, _) in enumerate(rows):
        pixels = np.frombuffer(raw, np.uint8, 3 * SIDE * SIDE, k * row).reshape(3, -1)
        label = int(np.frombuffer(raw, np.int64, 1, k * row + row - 8)[0])
        colour = tuple(int(round(c)) for c in pixels.mean(axis=1))
        path, want = ref.samples[sample]
        expected = files[os.fsencode(path)]
        if label != want or max(abs(a - b) for a, b in zip(colour, expected)) > 12:
            got = [p for p, c in files.items()
                   if max(abs(a - b) for a, b in zip(colour, c)) <= 12]
            wrong.append("sample %d: label %d, file %s; ImageFolder: label %d (%s), file %s"
                         % (sample, label, ascii(os.fsdecode(got[0])) if got else colour,
                            want, ascii(ref.classes[want]), ascii(path)))
    check(not wrong, "%d of %d samples differ from ImageFolder's:\n  %s"
          % (len(wrong), n, "\n  ".join(wrong[:20])))


if __name__ == "__main__":
    harness.run_test("test_imagefolder_names", body)
