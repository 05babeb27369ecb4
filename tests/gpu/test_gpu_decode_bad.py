#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Bad images that pass the workers' checks, through decode = gpu.

The workers send every damaged JPEG they can see (cut short, a marker
inside the scan) to the CPU path; these are damaged where they cannot
see: bytes cut out of a restart interval of the entropy-coded data (or,
in a file without restart markers, out of the middle of its scan), so
that the markers are all there and in order, and a decoder meets the next
one where it still needs data; six variants, each as a small photo (240 x
180) and as a large one (1800 x 1400), beside 32 good photos. (Bytes
overwritten in place are no good here: libjpeg-turbo decodes a bad
Huffman code without a word.)

gpu_decode_memory = 16M: the small images go to the GPU's engines; the
large ones fit no buffer set, so the GPU thread decodes them on its CPU
from the bytes the workers left, where libjpeg refuses them: the path on
which on_error applies on the GPU thread.

Whether libjpeg meets the damage depends on the crop (a region decode
may stop above it), which is the same per-sample randomness on both
paths, so the GPU thread refuses exactly the large files the CPU path
refuses.

(a) Host delivery of the pipeline (the CPU path) names, in the daemon's
    log, the damaged files it refused in two epochs: most of them.
(b) decode = gpu, on_error = substitute, two epochs to GPU 0: the client
    gets every batch; the GPU thread logs once each large damaged file the
    CPU path refused, and no other but small damaged files the engines
    refused; status counts images_bad, at least one per file logged;
    rows read include copies, image and label, of another row of their
    batch (the substitutes); a second run delivers the same samples in
    the same rows, and logs no file again. How many of the small damaged
    files the engines refused is printed: on an H200 none, they decoded
    them without an error (the damage nvJPEG does not promise to report,
    gpudecode/nvjd.h), and what they made of such a file differed between
    runs. So the second run must give the same bytes in every row but
    those of the damaged files (a large one's substitute may be a copy of
    a small one's row); rows that differ are printed (sample, file, mean
    absolute difference) either way.
(c) decode = gpu, on_error = fail: the client gets an error naming one of
    the large damaged files, "bad image" and "(on_error = fail)".
(d) decode = gpu, gpu_decode_check = entropy, on_error = substitute: the
    workers read every file's entropy-coded data before they leave it to
    the GPU, so every damaged file goes to the CPU path, which handles it
    as for any client: two runs give the same bytes in every row; the
    daemon's log names damaged files of pipeline "checked" in the CPU
    path's words ("replaced by another sample") and none in the GPU
    thread's; status counts no images_bad for it.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
import test_gpu_decode as tgd  # noqa: E402  (its batches() and same())
from harness import check  # noqa: E402

CLASSES, PER_CLASS, BATCH, SEED = 2, 16, 8, 3
# (restart interval in MCU rows, the interval cut, bytes of it kept);
# None: no restart markers, the middle two fifths of the scan cut out
VARIANTS = [(1, 0, 4), (1, 3, 2), (2, 1, 10), (None, None, None), (1, 5, 0), (4, 0, 1)]


def scan_bounds(data):
    """[start, end, start, end, ...] of the restart intervals of a JPEG's
    first scan: its data between SOS, the RSTn markers and EOI."""
    at = 2
    while at + 4 <= len(data):
        check(data[at] == 0xFF, "mkjpeg wrote a JPEG whose segment at %d is not a marker" % at)
        marker, length = data[at + 1], int.from_bytes(data[at + 2:at + 4], "big")
        at += 2 + length
        if marker == 0xDA:
            break
    bounds = [at]
    while True:
        at = data.index(0xFF, at)
        if 0xD0 <= data[at + 1] <= 0xD7:
            bounds += [at, at + 2]
        elif data[at + 1] == 0xD9:
            return bounds + [at]
        at += 2


def cut(data, interval, keep):
    """data with restart interval `interval` cut to its first `keep` bytes,
    or (interval None) the middle two fifths of the scan cut out; never
    between the two bytes of a stuffed FF 00."""
    bounds = scan_bounds(data)
    if interval is None:
        start, end = bounds[0], bounds[-1]
        a, b = start + (end - start) * 3 // 10, start + (end - start) * 7 // 10
    else:
        a, b = bounds[2 * interval] + keep, bounds[2 * interval + 1]
    while data[a - 1] == 0xFF:
        a += 1
    while data[b - 1] == 0xFF:
        b += 1
    return data[:a] + data[b:]


def make_tree(env):
    """The tree's root and its damaged files, small and large."""
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 300, 150, 120)
    mkjpeg = harness.binary("mkjpeg")
    damaged = {"small": [], "large": []}
    for size, (w, h) in (("small", (240, 180)), ("large", (1800, 1400))):
        for i, (rows, interval, keep) in enumerate(VARIANTS):
            path = os.path.join(root, "class_%d" % (i % CLASSES), "cut_%s_%d.jpg" % (size, i))
            args = [mkjpeg, path, "--width", str(w), "--height", str(h), "--seed", str(40 + i)]
            subprocess.run(args + (["--restart", str(rows)] if rows else []), check=True)
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(cut(data, interval, keep))
            damaged[size].append(path)
    return root, damaged


def duplicated_rows(torch, runs):
    """Rows whose image and label equal another row's of the same batch."""
    n = 0
    for _, labels, imgs in runs:
        for r in range(imgs.shape[0]):
            n += any(s != r and labels[s] == labels[r] and bool(torch.equal(imgs[s], imgs[r]))
                     for s in range(imgs.shape[0]))
    return n


def body(env):
    gpu_harness.require_gpus()
    torch = gpu_harness.torch_cuda()
    loaderd = tgd.ch.import_loaderd()
    root, damaged = make_tree(env)
    small, large = damaged["small"], damaged["large"]
    base = {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
            "transform": tgd.TRANSFORM, "layout": "nhwc", "decode": "gpu",
            "max_image_bytes": "1536K"}
    pipelines = {"sub": dict(base), "fail": dict(base, on_error="fail"),
                 "checked": dict(base, gpu_decode_check="entropy")}
    cfg = gpu_harness.gpu_config(env, "bad", pipelines, workers=2, device_slots=4, staging_slots=8,
                                 gpu_decode_memory="16M")
    d = gpu_harness.start_daemon(env, cfg)

    # (a) what the CPU path refuses
    tgd.batches(loaderd, d.socket, "sub", "cpu", torch)
    log = harness.read_text(d.log_path)
    cpu_bad = [p for p in small + large
               if re.search(re.escape(p) + r": .*replaced by another sample", log)]
    print("the CPU path refused %d of the %d damaged files" % (len(cpu_bad), len(small + large)))
    check(len(cpu_bad) > len(small + large) // 2,
          "the CPU path refused only %s: the test's damage is not damage" % cpu_bad)

    # (b) substitute on the GPU thread
    first = tgd.batches(loaderd, d.socket, "sub", 0, torch)
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    x = {y["pipeline"]: y for y in st["decode"] if y["gpu"] == 0}["sub"]
    print("decode = gpu: images_gpu %d images_cpu %d images_fallback %d images_bad %d"
          % (x["images_gpu"], x["images_cpu"], x["images_fallback"], x["images_bad"]))
    log = harness.read_text(d.log_path)
    lines = [ln for ln in log.splitlines() if "replaced by another image of its batch" in ln]
    print("\n".join(lines))
    named = [p for p in small + large for ln in lines if p + ":" in ln]
    engines_refused = sorted(set(named) & set(small))
    print("the engines refused %d of the %d small damaged files (the others decoded without an "
          "error)" % (len(engines_refused), len(small)))
    want = sorted(set(large) & set(cpu_bad))
    check(len(named) == len(lines) and len(set(named)) == len(named)
          and sorted(set(named) & set(large)) == want,
          "the GPU thread's bad-image lines do not name once each of %s (the large damaged files "
          "the CPU path refused), and nothing else large:\n%s" % (want, "\n".join(lines)))
    check(x["images_bad"] >= len(named), "images_bad %d, but %d files were logged"
          % (x["images_bad"], len(named)))
    # images_bad also counts batches the client's prefetch asked for and
    # never read: the rows read must hold at least one copy
    dups = duplicated_rows(torch, first)
    check(dups > 0, "%d bad images substituted, but no row read is a copy of another row of "
          "its batch" % x["images_bad"])
    second = tgd.batches(loaderd, d.socket, "sub", 0, torch)
    names = [os.path.join(root, c, f) for c in sorted(os.listdir(root))
             for f in sorted(os.listdir(os.path.join(root, c)))]
    check(len(first) == len(second), "run 1 read %d batches, run 2 %d" % (len(first), len(second)))
    for k, ((ai, al, aimg), (bi, bl, bimg)) in enumerate(zip(first, second)):
        check(ai == bi and al == bl,
              "run 1 and 2: batch %d has other samples or labels" % k)
        for r in range(aimg.shape[0]):
            if bool(torch.equal(aimg[r], bimg[r])):
                continue
            path = names[ai[r]] if ai[r] < len(names) else "?"
            print("differs: batch %d row %d sample %d %s mad %.2f" % (
                k, r, ai[r], os.path.basename(path),
                float((aimg[r] - bimg[r]).abs().mean())))
            check(path in small + large, "run 1 and 2: batch %d row %d (%s, a good file) differs"
                  % (k, r, path))
    check(len([ln for ln in harness.read_text(d.log_path).splitlines()
               if "replaced by another image of its batch" in ln]) == len(lines),
          "the second run logged bad files again")

    # (c) fail
    try:
        tgd.batches(loaderd, d.socket, "fail", 0, torch)
        raise harness.TestFailure("on_error = fail: the client got every batch")
    except loaderd.LoaderdError as e:
        text = str(e)
        print("on_error = fail: %s" % text)
        check("bad image" in text and "(on_error = fail)" in text
              and any(p + ":" in text for p in named),
              "on_error = fail: the error does not name a damaged file, the bad image and the "
              "policy: %s" % text)

    # (d) the workers' entropy check
    runs = [tgd.batches(loaderd, d.socket, "checked", 0, torch) for _ in range(2)]
    tgd.same(runs[0], runs[1], "decode = gpu, gpu_decode_check = entropy, run 1 and 2")
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    x = {y["pipeline"]: y for y in st["decode"] if y["gpu"] == 0}["checked"]
    print("gpu_decode_check = entropy: images_gpu %d images_cpu %d images_fallback %d images_bad %d"
          % (x["images_gpu"], x["images_cpu"], x["images_fallback"], x["images_bad"]))
    log = harness.read_text(d.log_path)
    cpu_named = [p for p in small + large
                 if re.search(r'pipeline "checked": ' + re.escape(p) + r": .*replaced by another "
                              r"sample", log)]
    print("the CPU path refused %d of the damaged files for pipeline \"checked\"" % len(cpu_named))
    check(cpu_named, "gpu_decode_check = entropy: the CPU path named no damaged file")
    check(not re.search(r'pipeline "checked": .*replaced by another image of its batch', log),
          "gpu_decode_check = entropy: the GPU thread met a bad image")
    check(x["images_bad"] == 0, "gpu_decode_check = entropy: images_bad %d" % x["images_bad"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_decode_bad", body)
