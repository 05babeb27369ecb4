#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a training process does beside the client's own decoding thread
(client/decode.h), each made to happen while the thread decodes: none may
deadlock, fail, or change a batch.

One process trains ResNet-18 (bf16, channels_last) on batches of a
decode = gpu pipeline that the client decodes, in phases:
- torch.cuda.synchronize() after every step (with nvJPEG's hardware
  decode on another thread of the process this once deadlocked within
  seconds);
- torch.cuda.empty_cache() after every step;
- torchvision's own decode_jpeg on the GPU, of eight of the files, every
  step;
- a CUDA graph of the model's forward captured (PyTorch's default, global
  capture mode, on its own side stream) every fifth step, and replayed;
- no next() for IDLE seconds (default 125, LOADERD_TEST_IDLE_S), then
  training on.
Every batch's samples are checked against the pipeline's order (a
reference run of the same epochs), and each phase has a deadline: a hang
dumps every thread's stack and fails the test.
"""

import faulthandler
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import client_harness as ch  # noqa: E402

CLASSES, PER_CLASS, BATCH, SEED = 8, 64, 64, 11
STEPS = 40          # per phase
PHASES = 4          # before the idle one
PHASE_DEADLINE_S = 120


def body(env):
    gpu_harness.require_gpus()
    torch = gpu_harness.torch_cuda()
    try:
        import torchvision
        from torchvision.io import decode_jpeg
    except ImportError as e:
        raise harness.TestSkip("torchvision is not installed: %s" % e)
    idle_s = float(os.environ.get("LOADERD_TEST_IDLE_S", "125"))
    os.environ["LOADERD_CLIENT_DECODE"] = "1"
    loaderd = ch.import_loaderd()
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 21, 300, 300)
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)[:8]
    datas = [torchvision.io.read_file(f) for f in files]
    pipelines = {"p": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
                       "transform": "random_resized_crop(160) hflip(0.5)", "decode": "gpu",
                       "layout": "nchw", "max_image_bytes": "256K"}}
    cfg = gpu_harness.gpu_config(env, "hazards", pipelines, workers=4, device_slots=4,
                                 staging_slots=8)
    d = gpu_harness.start_daemon(env, cfg)
    gpu_harness.check_delivery(d, "register")

    # The order to expect: a host client of the same pipeline.
    ref = loaderd.Loader("p", socket=d.socket, device="cpu")
    per_epoch = len(ref)
    order = []
    need = 10 + (PHASES + 1) * STEPS
    for _ in range(-(-need // per_epoch)):
        order.extend(list(b.sample_indices()) for b in ref)
    ref.close()

    dev = torch.device("cuda:0")
    model = torchvision.models.resnet18(num_classes=CLASSES).to(dev).to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = loaderd.Loader("p", socket=d.socket, device=0)
    state = {"k": 0, "it": iter(x)}

    def next_batch():
        while True:
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = iter(x)

    def step():
        b = next_batch()
        k = state["k"]
        check(list(b.sample_indices()) == order[k], "batch %d holds samples other than the "
              "pipeline's order" % k)
        state["k"] += 1
        img = b["image"].float().div_(255).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(img), b["label"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    graph_model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU()).to(dev)
    static_in = torch.zeros(BATCH, 3, 160, 160, device=dev)

    def capture():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                graph_model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            graph_model(static_in)
        g.replay()

    phases = [
        ("torch.cuda.synchronize() every step", lambda i: torch.cuda.synchronize()),
        ("torch.cuda.empty_cache() every step", lambda i: torch.cuda.empty_cache()),
        ("torchvision decode_jpeg on the GPU every step",
         lambda i: decode_jpeg(datas, device="cuda")),
        ("a CUDA graph captured every fifth step", lambda i: capture() if i % 5 == 0 else None),
    ]
    for _ in range(10):  # warm-up
        step()
    for name, extra in phases:
        faulthandler.dump_traceback_later(PHASE_DEADLINE_S, exit=True)
        t0 = time.monotonic()
        for i in range(STEPS):
            step()
            extra(i)
        torch.cuda.synchronize()
        faulthandler.cancel_dump_traceback_later()
        print("%s: %d steps in %.1f s" % (name, STEPS, time.monotonic() - t0), flush=True)

    # The training stops asking for minutes, the decoding thread idle.
    time.sleep(idle_s)
    faulthandler.dump_traceback_later(PHASE_DEADLINE_S, exit=True)
    for i in range(STEPS):
        step()
    torch.cuda.synchronize()
    faulthandler.cancel_dump_traceback_later()
    print("no next() for %.0f s, then %d steps" % (idle_s, STEPS), flush=True)
    st = x.stats()
    print("stats: %s" % st)
    check(st["decoding"] and st["images_gpu"] > 0 and st["images_bad"] == 0,
          "the client's decoding stats: %s" % st)
    x.close()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_client_decode_hazards", body)
