#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU decoding of image pipelines (decode = gpu | auto | cpu).

A tree made with mkjpeg: 4 classes of baseline 4:2:0 photos, 150-420 px,
and in class 0 files the hardware decoder does not take (progressive,
4:1:1, CMYK: the workers decode them) and bad files (cut inside the scan,
a marker inside the scan: substituted, on_error = substitute, exactly as
on the CPU path). Three pipelines over it with the same seed and
transform, uint8 NHWC and float16 NCHW normalised: decode = gpu, decode =
auto with gpu_decode_percent 50, decode = cpu.

For each pipeline, two epochs through the Python package to GPU 0 and
two epochs of host delivery of the same pipeline (host clients always
decode on the CPU): the batches must hold the same samples and labels,
and every image must be within 1.0 level (mean absolute difference, uint8;
float16 compared after undoing the normalisation) of the CPU's; the largest
difference and how many images are byte-identical are printed. decode =
cpu must be byte-identical everywhere.

Two clients of decode = gpu at once get what one alone got; a second
daemon with 2 workers (and 2 decoding threads) delivers the same bytes as
the first with 4, for decode = gpu and auto.

A device client of a decoding pipeline is served by the GPU's decoding
thread (loaderd-dec0), one of a raw pipeline by loaderd-gpu0.

Status: the decode lines name the pipelines that may decode on the GPU;
after the runs, decode = gpu has images_gpu for every image the engines
take and images_cpu for the others; decode = auto has the workers' share
and at most half the engines' (its share follows the client's data wait);
none fell back. A client of a decode = gpu pipeline on a daemon whose nvjpeg_library
does not load is refused at attach with a message naming the GPU.
"""

import itertools
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import client_harness as ch  # noqa: E402

CLASSES, PER_CLASS, BATCH, SEED, EPOCHS = 4, 24, 16, 5, 2
TRANSFORM = "random_resized_crop(96) hflip(0.5)"
SPECIAL = [  # (name, mkjpeg arguments): the workers decode these
    ("progressive.jpg", ["--width", "200", "--height", "150", "--progressive"]),
    ("s411.jpg", ["--width", "160", "--height", "120", "--subsamp", "411"]),
    ("cmyk.jpg", ["--width", "120", "--height", "96", "--cmyk"]),
]
BAD = [  # (name, mkjpeg arguments): bad files, substituted
    ("cut.jpg", ["--width", "200", "--height", "160", "--truncate", "3000"]),
    ("marker.jpg", ["--width", "200", "--height", "160", "--corrupt", "600"]),
]


def make_tree(env):
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 100, 150, 270)
    mkjpeg = harness.binary("mkjpeg")
    for name, args in SPECIAL + BAD:
        subprocess.run([mkjpeg, os.path.join(root, "class_0", name), "--seed", "7"] + args,
                       check=True)
    return root


def batches(loaderd, sock, pipeline, device, torch):
    """[(sample indices, labels, images as float32 0..255 on the CPU)] for
    EPOCHS epochs."""
    out = []
    x = loaderd.Loader(pipeline, socket=sock, device=device)
    for _ in range(EPOCHS):
        for b in x:
            img, lab = b["image"], b["label"]
            if img.dtype == torch.float16:  # undo (x / 255 - mean) / std
                mean = torch.tensor([0.485, 0.456, 0.406], device=img.device).view(1, 3, 1, 1)
                std = torch.tensor([0.229, 0.224, 0.225], device=img.device).view(1, 3, 1, 1)
                img = (img.float() * std + mean) * 255.0
            out.append((list(b.sample_indices()), lab.cpu().tolist(), img.float().cpu()))
    x.close()
    return out


def batches_two(loaderd, sock, pipeline, torch):
    """batches() for two clients of one pipeline at once on GPU 0, taking
    turns: both are decoded by the same GPU's decoder."""
    xs = [loaderd.Loader(pipeline, socket=sock, device=0) for _ in range(2)]
    out = [[], []]
    for _ in range(EPOCHS):
        its = [iter(x) for x in xs]
        # both to the end of the epoch (zip would leave the second's end unseen)
        for pair in itertools.zip_longest(*its):
            for k, b in enumerate(pair):
                if b is not None:
                    out[k].append((list(b.sample_indices()), b["label"].cpu().tolist(),
                                   b["image"].float().cpu()))
    for x in xs:
        x.close()
    return out


def same(a, b, what):
    check(len(a) == len(b), "%s: %d batches against %d" % (what, len(a), len(b)))
    for k, ((ai, al, aimg), (bi, bl, bimg)) in enumerate(zip(a, b)):
        check(ai == bi and al == bl and bool((aimg == bimg).all()),
              "%s: batch %d differs" % (what, k))


def compare(torch, dev, host, what, exact):
    check(len(dev) == len(host), "%s: %d device batches, %d host" % (what, len(dev), len(host)))
    worst, identical, n = 0.0, 0, 0
    for k, ((di, dl, dimg), (hi, hl, himg)) in enumerate(zip(dev, host)):
        check(di == hi and dl == hl, "%s: batch %d: samples or labels differ between device and "
              "host delivery" % (what, k))
        for r in range(dimg.shape[0]):
            mad = float((dimg[r] - himg[r]).abs().mean())
            n += 1
            identical += mad == 0.0
            worst = max(worst, mad)
            limit = 0.02 if exact else 1.0  # float16 round trip: a hundredth of a level
            check(mad <= limit, "%s: batch %d row %d (sample %d): mean absolute difference %.3f "
                  "levels from the CPU's decode (limit %.2f)" % (what, k, r, di[r], mad, limit))
    print("%s: %d images, largest mean absolute difference %.3f levels, %d identical to the CPU's"
          % (what, n, worst, identical))
    return identical


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]
    torch = gpu_harness.torch_cuda()
    loaderd = ch.import_loaderd()
    root = make_tree(env)
    base = {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
            "transform": TRANSFORM}
    f16 = {"dtype": "float16", "layout": "nchw", "mean": "0.485,0.456,0.406",
           "std": "0.229,0.224,0.225"}
    pipelines = {
        # 96 x 96 x 3 bytes a row: room for JPEGs up to 256 KiB beside the rows
        "gpu": dict(base, decode="gpu", layout="nhwc", max_image_bytes="256K"),
        "gpu16": dict(base, decode="gpu", max_image_bytes="256K", **f16),
        "auto": dict(base, decode="auto", gpu_decode_percent=50, layout="nhwc",
                     max_image_bytes="256K"),
        "cpu": dict(base, decode="cpu", layout="nhwc"),
    }
    raw = env.make_raw("raw.bin", 64, 4096, seed=9)
    cfg = gpu_harness.gpu_config(env, "decode", dict(pipelines, raw={
        "source": "raw:" + raw, "record_bytes": 4096, "batch_size": 8}), workers=4, device_slots=4)
    d = gpu_harness.start_daemon(env, cfg)
    st = gpu_harness.check_delivery(d, "register")
    names = sorted(x["pipeline"] for x in st["decode"] if x["gpu"] == 0)
    check(names == ["auto", "gpu", "gpu16"], "status decode lines for %s; expected auto, gpu, gpu16"
          % names)
    check(st["decode_library"] == "nvJPEG", "status says decode: (%s)" % st["decode_library"])

    # A decoding client has the GPU's decoding thread; a raw client another.
    xs = [loaderd.Loader(name, socket=d.socket, device=0) for name in ("gpu", "raw")]
    its = [iter(x) for x in xs]
    for it in its:
        next(it)
    threads = {c["pipeline"]: c["thread"] for c in d.status()["clients"]}
    check(threads == {"gpu": "loaderd-dec0", "raw": "loaderd-gpu0"},
          "clients' threads %s; expected gpu on loaderd-dec0 and raw on loaderd-gpu0" % threads)
    for x in xs:
        x.close()
    d.wait_status(lambda s: not s["clients"], 15, "no client left")

    n_images = CLASSES * PER_CLASS + len(SPECIAL) + len(BAD)
    results, device_runs = {}, {}
    for name in pipelines:
        dev = batches(loaderd, d.socket, name, 0, torch)
        host = batches(loaderd, d.socket, name, "cpu", torch)
        results[name] = compare(torch, dev, host, "decode %s" % name, exact=name == "cpu")
        device_runs[name] = dev
    # Two clients at once share the GPU's decoder: each gets what one alone got.
    for k, run in enumerate(batches_two(loaderd, d.socket, "gpu", torch)):
        same(run, [(i, lab, img) for i, lab, img in device_runs["gpu"]],
             "two clients of decode = gpu at once, client %d, against one alone" % (k + 1))

    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    by = {x["pipeline"]: x for x in st["decode"] if x["gpu"] == 0}  # the clients' GPU
    for name in ("gpu", "gpu16", "auto"):
        x = by[name]
        print("status, %s: engines %d images_gpu %d images_cpu %d images_fallback %d" %
              (name, x["engines"], x["images_gpu"], x["images_cpu"], x["images_fallback"]))
        check(x["engines"] > 0, "%s: status gives the GPU no engines" % name)
        check(x["images_fallback"] == 0, "%s: %d images fell back to the GPU thread's CPU"
              % (name, x["images_fallback"]))
        # At least every image delivered (the daemon may have prepared more)
        check(x["images_gpu"] + x["images_cpu"] >= EPOCHS * n_images,
              "%s: images_gpu + images_cpu = %d, fewer than the %d images delivered"
              % (name, x["images_gpu"] + x["images_cpu"], EPOCHS * n_images))
    for name in ("gpu", "gpu16"):
        # The special files and the bad ones' replacements: the workers.
        check(by[name]["images_cpu"] >= EPOCHS * len(SPECIAL),
              "%s: images_cpu %d, expected at least the %d the engines do not take"
              % (name, by[name]["images_cpu"], EPOCHS * len(SPECIAL)))
        check(by[name]["images_gpu"] >= EPOCHS * (CLASSES * PER_CLASS - 2 * BATCH),
              "%s: only %d images decoded on the GPU" % (name, by[name]["images_gpu"]))
    # auto: the engines take a share only while a client waits for data
    # (docs/config.md), so how many they took here depends on the machine;
    # at most gpu_decode_percent of those the engines take.
    check(by["auto"]["images_cpu"] > EPOCHS * len(SPECIAL) and
          by["auto"]["images_gpu"] <= by["gpu"]["images_gpu"] * 0.5 + 2 * BATCH,
          "auto (gpu_decode_percent 50): images_gpu %d images_cpu %d; expected the workers' "
          "share and at most half the engines' of decode = gpu (%d)"
          % (by["auto"]["images_gpu"], by["auto"]["images_cpu"], by["gpu"]["images_gpu"]))
    log = harness.read_text(d.log_path)
    check("JPEG decoding on" in log and "hardware engines" in log,
          "the daemon log does not say the decoder opened:\n%s" % log[-3000:])
    d.stop()

    # Another run, another worker count: the same bytes on the GPU.
    cfg = gpu_harness.gpu_config(env, "decode2", {n: pipelines[n] for n in ("gpu16", "auto")},
                                 workers=2, device_slots=2, gpu_decode_threads=2)
    d = gpu_harness.start_daemon(env, cfg)
    for name in ("gpu16", "auto"):
        same(batches(loaderd, d.socket, name, 0, torch), device_runs[name],
             "decode %s with 2 workers and 2 decoding threads against 4 and 4" % name)
    print("decode gpu16 and auto: the same bytes with 2 workers as with 4, and two clients at once "
          "as one alone")
    d.stop()

    # No nvJPEG: decode = gpu refused at attach naming the GPU; auto decodes on the CPU.
    cfg = gpu_harness.gpu_config(env, "nodecode", {"gpu": pipelines["gpu"], "auto": pipelines["auto"]},
                                 workers=2, nvjpeg_library=env.path("no-such-libnvjpeg.so"))
    d = gpu_harness.start_daemon(env, cfg)
    st = d.status()
    check(st["decode_library"] and "unavailable" in st["decode_library"],
          "status says decode: (%s) with a missing nvjpeg_library" % st["decode_library"])
    try:
        x = loaderd.Loader("gpu", socket=d.socket, device=0)
        next(iter(x))
        raise harness.TestFailure("decode = gpu without nvJPEG: a device client was not refused")
    except loaderd.LoaderdError as e:
        check(uuid in str(e) and "decode = gpu" in str(e),
              "decode = gpu without nvJPEG: refused with %r; expected the GPU %s named" % (str(e), uuid))
        print("decode = gpu without nvJPEG: refused: %s" % e)
    dev = batches(loaderd, d.socket, "auto", 0, torch)
    host = batches(loaderd, d.socket, "auto", "cpu", torch)
    compare(torch, dev, host, "decode auto without nvJPEG", exact=True)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_decode", body)
