#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Bad images that pass the workers' checks, decoded by the client
(client/decode.h): on_error applies in the training's process as it does
on the daemon's GPU thread (test_gpu_decode_bad.py, whose damaged files
this test makes the same way).

gpu_decode_memory = 16M, which the client's decoder takes too: the large
damaged files fit no buffer set, so the client decodes them on its CPU
from the bytes the workers left, where libjpeg refuses them.

(a) on_error = substitute, two epochs: the client gets every batch; rows
    read include copies, image and label, of another row of their batch;
    Loader.stats() counts images_bad; the daemon, told by the client's
    DECODED, logs the bad images naming a damaged file; a second run gives
    the same samples and labels.
(b) on_error = fail: the client gets an error naming a damaged file,
    "bad image" and "(on_error = fail)"; the daemon and the next client
    are whole.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402
import test_gpu_decode as tgd  # noqa: E402
import test_gpu_decode_bad as tgb  # noqa: E402  (the damaged files)
from harness import check  # noqa: E402


def body(env):
    gpu_harness.require_gpus()
    torch = gpu_harness.torch_cuda()
    os.environ["LOADERD_CLIENT_DECODE"] = "1"
    loaderd = tgd.ch.import_loaderd()
    root, damaged = tgb.make_tree(env)
    base = {"source": "imagefolder:" + root, "batch_size": tgb.BATCH, "seed": tgb.SEED,
            "transform": tgd.TRANSFORM, "layout": "nhwc", "decode": "gpu",
            "max_image_bytes": "1536K"}
    pipelines = {"sub": dict(base), "fail": dict(base, on_error="fail")}
    cfg = gpu_harness.gpu_config(env, "cbad", pipelines, workers=2, device_slots=4,
                                 staging_slots=8, gpu_decode_memory="16M")
    d = gpu_harness.start_daemon(env, cfg)
    large = damaged["large"]

    # (a) substitute, in the client
    x = loaderd.Loader("sub", socket=d.socket, device=0)
    first = []
    for _ in range(2):
        for b in x:
            first.append((list(b.sample_indices()), b["label"].cpu().tolist(),
                          b["image"].float().cpu()))
    st = x.stats()
    x.close()
    print("substitute: stats %s" % st)
    check(st["decoding"] and st["images_bad"] > 0,
          "on_error = substitute: the client's stats %s; expected bad images it decoded" % st)
    dups = tgb.duplicated_rows(torch, first)
    check(dups > 0, "%d bad images, but no row read is a copy of another row of its batch"
          % st["images_bad"])
    log = harness.read_text(d.log_path)
    named = [p for p in large if re.search(r"bad images? in batch \d+ .*" + re.escape(p), log)]
    check(named, "the daemon's log names none of the large damaged files as a client's bad "
          "image:\n%s" % log[-3000:])
    second = tgd.batches(loaderd, d.socket, "sub", 0, torch)
    check([(i, lab) for i, lab, _ in second] == [(i, lab) for i, lab, _ in first],
          "a second run of on_error = substitute gave other samples or labels")

    # (b) fail, in the client
    x = loaderd.Loader("fail", socket=d.socket, device=0)
    try:
        for _ in range(tgd.EPOCHS):
            for b in x:
                pass
        raise harness.TestFailure("on_error = fail: the client got every batch")
    except loaderd.LoaderdError as e:
        text = str(e)
        print("on_error = fail: %s" % text)
        check("bad image" in text and "(on_error = fail)" in text
              and any(p + ":" in text for p in large),
              "on_error = fail: the error does not name a damaged file, the bad image and the "
              "policy: %s" % text)
    x.close()
    d.wait_status(lambda s: not s["clients"], 30, "the failed client to be gone")
    again = tgd.batches(loaderd, d.socket, "sub", 0, torch)
    check([(i, lab) for i, lab, _ in again] == [(i, lab) for i, lab, _ in first],
          "after a client failed on a bad image, the next one got other samples or labels")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_client_decode_bad", body)
