#!/usr/bin/env python3
"""Bad images that pass the workers' checks, through decode = gpu.

The workers send every damaged JPEG they can see (cut short, a marker
inside the scan) to the CPU path; these are damaged where they cannot
see: a run of bytes in the middle of the entropy-coded data overwritten
with bytes that are not 0xFF (bad Huffman codes, no marker), in six
patterns. The files are made from mkjpeg photos beside 32 good ones.

(a) Host delivery of the pipeline (the CPU path) names, in the daemon's
    log, which of them libjpeg refuses: those are the bad ones.
(b) decode = gpu, on_error = substitute, two epochs to GPU 0: the client
    gets every batch, full; status counts images_bad (at least one of the
    bad files the engines refused and the GPU thread's CPU decoder then
    refused too: otherwise the path is not reached and the test fails,
    saying so); each such file is logged at most once, and is one of the
    damaged files; every substituted row is a copy, image and label, of
    another row of its batch; a second run delivers the same bytes.
(c) decode = gpu, on_error = fail: the client gets an error naming one of
    the damaged files, "bad image" and "(on_error = fail)".
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
PATTERNS = [bytes([0xFE]) * 48, bytes([0xAA, 0x55]) * 24, bytes([0x00]) * 48,
            bytes([0xF0, 0x0F]) * 24, bytes(range(0x80, 0xB0)), bytes([0xFE, 0x00, 0x7F]) * 16]


def entropy_range(data):
    """(start, end) of the first scan's entropy-coded data of a JPEG."""
    at = 2
    while at + 4 <= len(data):
        check(data[at] == 0xFF, "mkjpeg wrote a JPEG whose segment at %d is not a marker" % at)
        marker, length = data[at + 1], int.from_bytes(data[at + 2:at + 4], "big")
        if marker == 0xDA:
            return at + 2 + length, len(data) - 2
        at += 2 + length
    raise harness.TestFailure("mkjpeg wrote a JPEG without a scan")


def make_tree(env):
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 300, 150, 120)
    mkjpeg = harness.binary("mkjpeg")
    damaged = []
    for i, pattern in enumerate(PATTERNS):
        path = os.path.join(root, "class_%d" % (i % CLASSES), "huff_%d.jpg" % i)
        subprocess.run([mkjpeg, path, "--width", "240", "--height", "180", "--seed", str(40 + i)],
                       check=True)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        start, end = entropy_range(data)
        at = start + (end - start) // 2
        data[at:at + len(pattern)] = pattern
        with open(path, "wb") as f:
            f.write(data)
        damaged.append(path)
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
    base = {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
            "transform": tgd.TRANSFORM, "layout": "nhwc", "decode": "gpu"}
    pipelines = {"sub": dict(base), "fail": dict(base, on_error="fail")}
    cfg = gpu_harness.gpu_config(env, "bad", pipelines, workers=2, device_slots=4, staging_slots=8)
    d = gpu_harness.start_daemon(env, cfg)

    # (a) the CPU path names what libjpeg refuses
    tgd.batches(loaderd, d.socket, "sub", "cpu", torch)
    log = harness.read_text(d.log_path)
    cpu_bad = sorted(p for p in damaged if re.search(re.escape(p) + r": .*replaced by another sample", log))
    print("the CPU path refuses %d of the %d damaged files: %s"
          % (len(cpu_bad), len(damaged), ", ".join(os.path.basename(p) for p in cpu_bad)))
    check(cpu_bad, "libjpeg took every damaged file: the test's damage is not damage")

    # (b) substitute on the GPU thread
    first = tgd.batches(loaderd, d.socket, "sub", 0, torch)
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    x = {y["pipeline"]: y for y in st["decode"] if y["gpu"] == 0}["sub"]
    print("decode = gpu: images_gpu %d images_cpu %d images_fallback %d images_bad %d"
          % (x["images_gpu"], x["images_cpu"], x["images_fallback"], x["images_bad"]))
    log = harness.read_text(d.log_path)
    gpu_lines = [ln for ln in log.splitlines() if "replaced by another image of its batch" in ln]
    print("\n".join(gpu_lines))
    check(x["images_bad"] > 0,
          "images_bad 0: the GPU's engines decoded every damaged file without an error "
          "(images_fallback %d), so no file reached on_error on the GPU thread" % x["images_fallback"])
    named = [p for p in damaged for ln in gpu_lines if p + ":" in ln]
    check(len(named) == len(gpu_lines) and len(set(named)) == len(named),
          "the GPU thread's bad-image lines do not each name a different damaged file:\n%s"
          % "\n".join(gpu_lines))
    check(set(named) <= set(cpu_bad), "the GPU thread substituted %s, which the CPU path took"
          % sorted(set(named) - set(cpu_bad)))
    dups = duplicated_rows(torch, first)
    check(dups >= x["images_bad"], "%d bad images substituted, but only %d rows are copies of "
          "another row of their batch" % (x["images_bad"], dups))
    second = tgd.batches(loaderd, d.socket, "sub", 0, torch)
    tgd.same(first, second, "decode = gpu with bad images, run 1 and 2")

    # (c) fail
    try:
        tgd.batches(loaderd, d.socket, "fail", 0, torch)
        raise harness.TestFailure("on_error = fail: the client got every batch")
    except loaderd.LoaderdError as e:
        text = str(e)
        print("on_error = fail: %s" % text)
        check("bad image" in text and "(on_error = fail)" in text
              and any(p + ":" in text for p in cpu_bad),
              "on_error = fail: the error does not name a damaged file, the bad image and the "
              "policy: %s" % text)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_decode_bad", body)
