#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU decoding within gpu_decode_memory, and beyond what the GPU has.

(a) gpu_decode_memory = 16M, the smallest the config takes: each of the
    decoding thread's two buffer sets holds about 2.7 MB of decoded
    pixels, so a batch of 16 images of 150-330 px is decoded in several
    parts that take the sets in turn, and the 4 images of 1800 x 1400
    px (7.6 MB decoded) fit no set at all: the GPU thread decodes those on
    its CPU (images_fallback). Two epochs to GPU 0 against two epochs of
    host delivery of the same pipeline: the same samples and labels,
    every image within 1 level (mean absolute difference) of the CPU's,
    and status counts every large image as a fallback and the decoder's
    buffers in the GPU's decode_bytes (at most the 16M).
(b) gpu_decode_memory = 1T, more than any GPU has free: a client of a
    decode = gpu pipeline is refused at attach, the message naming the
    GPU and gpu_decode_memory; a client of a decode = auto pipeline is
    served, its images decoded by the workers (byte-identical to host
    delivery), and status says why the GPU does not decode (decode_bytes 0).
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
import test_gpu_decode as tgd  # noqa: E402  (its batches() and compare())
from harness import check  # noqa: E402

CLASSES, PER_CLASS, BIG = 3, 20, 4
BATCH, SEED = tgd.BATCH, 11


def make_tree(env):
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 500, 150, 180)
    mkjpeg = harness.binary("mkjpeg")
    for i in range(BIG):
        subprocess.run([mkjpeg, os.path.join(root, "class_%d" % (i % CLASSES), "big_%d.jpg" % i),
                        "--width", "1800", "--height", "1400", "--seed", str(900 + i)], check=True)
    return root


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]
    torch = gpu_harness.torch_cuda()
    loaderd = tgd.ch.import_loaderd()
    root = make_tree(env)
    base = {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
            "transform": tgd.TRANSFORM, "layout": "nhwc", "max_image_bytes": "1536K"}
    pipelines = {"gpu": dict(base, decode="gpu"), "auto": dict(base, decode="auto", gpu_decode_percent=100)}

    cfg = gpu_harness.gpu_config(env, "small", {"gpu": pipelines["gpu"]}, workers=4, device_slots=4,
                                 staging_slots=8, gpu_decode_memory="16M")
    d = gpu_harness.start_daemon(env, cfg)
    gpu_harness.check_delivery(d, "register")
    dev = tgd.batches(loaderd, d.socket, "gpu", 0, torch)
    host = tgd.batches(loaderd, d.socket, "gpu", "cpu", torch)
    tgd.compare(torch, dev, host, "decode gpu in 16M", exact=False)
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    x = {y["pipeline"]: y for y in st["decode"] if y["gpu"] == 0}["gpu"]
    print("16M: images_gpu %d images_cpu %d images_fallback %d" % (x["images_gpu"], x["images_cpu"],
                                                                   x["images_fallback"]))
    check(x["images_fallback"] >= tgd.EPOCHS * BIG,
          "images_fallback %d: the %d images too large for 16M, %d epochs, should all be counted"
          % (x["images_fallback"], BIG, tgd.EPOCHS))
    check(x["images_gpu"] >= tgd.EPOCHS * (CLASSES * PER_CLASS - BATCH),
          "only %d images decoded on the GPU" % x["images_gpu"])
    held = st["gpus"][0]["decode_bytes"]
    check(0 < held <= 16 << 20, "status gives GPU 0 decode_bytes %d with gpu_decode_memory = 16M" % held)
    d.stop()

    cfg = gpu_harness.gpu_config(env, "huge", pipelines, workers=2, device_slots=2,
                                 staging_slots=8, gpu_decode_memory="1T")
    d = gpu_harness.start_daemon(env, cfg)
    try:
        x = loaderd.Loader("gpu", socket=d.socket, device=0)
        next(iter(x))
        raise harness.TestFailure("gpu_decode_memory = 1T: a decode = gpu client was not refused")
    except loaderd.LoaderdError as e:
        check(uuid in str(e) and "gpu_decode_memory" in str(e),
              "gpu_decode_memory = 1T: refused with %r; expected GPU %s and gpu_decode_memory named"
              % (str(e), uuid))
        print("gpu_decode_memory = 1T, decode = gpu: refused: %s" % e)
    dev = tgd.batches(loaderd, d.socket, "auto", 0, torch)
    host = tgd.batches(loaderd, d.socket, "auto", "cpu", torch)
    tgd.compare(torch, dev, host, "decode auto with gpu_decode_memory = 1T", exact=True)
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    x = {y["pipeline"]: y for y in st["decode"] if y["gpu"] == 0}["auto"]
    check(x["images_gpu"] == 0 and x["unavailable"] and "gpu_decode_memory" in x["unavailable"],
          "decode = auto beyond the GPU's memory: status says %s" % x)
    check(st["gpus"][0]["decode_bytes"] == 0, "no decoder opened, but GPU 0's decode_bytes is %d"
          % st["gpus"][0]["decode_bytes"])
    print("gpu_decode_memory = 1T, decode = auto: the workers decode; status: %s" % x["unavailable"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_decode_memory", body)
