#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fed_training: what a training process loses when loaderd feeds it,
taken apart step by step.

A ResNet (--model, default resnet18) trains in a process of its own on
GPU --device (batch 256, 224x224, 100 classes, channels_last, bf16
autocast, SGD; the loss read every 20 steps), 30 steps of warm-up, then
--steps timed steps, in each of --modes:

  synthetic    one batch of random pixels made on the GPU, every step
  train        loaderd's batches: each step trains on the batch delivered
               (views of the daemon's device ring), as examples/
               train_resnet.py does
  ignore       each step takes loaderd's next batch (which releases the
               one before, on the training's stream) and trains on the
               synthetic batch
  ignore_free  the same, but each batch is released at once on a stream
               of its own with no work on it, so its slot is free at once
               and the daemon's next copy into it never waits for the
               training's stream
  clone        trains on a copy of each batch
  ipc_event    synthetic, and each step records an interprocess CUDA event
               opened from another process's handle, as a release does
  ipc_memory   trains on batches in another process's device memory (4 in
               turn, shared through CUDA IPC by torch.multiprocessing)
  paced        synthetic, while `loaderctl consume --device N --step-ms
               --paced-ms` in another process takes loaderd's batches at
               about the training's pace: the daemon's GPU work paced as
               when it feeds the training, with the training not its client

The loaderd modes run against one daemon with --workers workers serving
image_bench's tree (bench/image_bench.py's make_tree()) with
`random_resized_crop(--size) hflip(0.5)`, uint8 NHWC, `decode = --decode`
(with `gpu_decode_percent` --gpu-decode-percent for auto),
gpu_decode_threads --gpu-decode-threads and gpu_decode_helpers
--gpu-decode-helpers. Where a batch is not 224x224 (a small --size, to
take the decoding's cost away), the modes that train on it train on the
synthetic batch instead. --mps runs everything under a private MPS
control daemon (bench_daemon.MpsServer).

Each row gives the mean images/s over the timed steps, the percentiles
of one step's time on the GPU (between CUDA events recorded at the
steps' ends): a uniform slowdown moves the median, stalls of a few steps
the tail; and where the training process's host thread spent a step, on
average: taking the batch (the loader's next, which waits for the
daemon's message that it is ready), launching the step's work, and
waiting for the GPU (reading the loss, the final synchronize). A host
that never waits for the GPU is what bounds the step, not the GPU.

--profile N profiles N more steps of each mode after the timed ones
(torch.profiler, the training process's own GPU work): its kernels' time
a step, the time a step some kernel of it ran (their union), and the
kernels that took the most. Kernels slower than in `synthetic` mean
they share the GPU with other work; the same kernels with a longer step
mean the GPU waited between them.

Reading it: `ignore` against `synthetic` is what being fed costs the
training whatever it does with the data; `ignore_free` takes away the
daemon's waits on the training's stream; a --decode cpu run at a small
--size takes away the daemon's GPU work.

    bench/fed_training.py --build BUILD [--out DIR] [--model resnet18]
                          [--modes synthetic,train,paced,ignore,ignore_free,clone]
                          [--decode gpu] [--gpu-decode-percent 80] [--size 224] [--workers 15]
                          [--gpu-decode-threads 4] [--gpu-decode-helpers processes]
                          [--steps 200] [--mps] [--device 0] [--keep]
                          [--paced-ms 22] [--profile 0] [--daemon-env NAME=VALUE]

Exit codes: 0; 1 a step failed; 77 no GPU or no torch.
"""

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_bench  # noqa: E402  (this directory)
import train_bench  # noqa: E402
from bench_daemon import MpsServer, StepError, last_line, publish  # noqa: E402
from gpu_bench import EXIT_SKIP  # noqa: E402

MODES = ("synthetic", "train", "ignore", "ignore_free", "clone", "ipc_event", "ipc_memory", "paced")
LOADERD_MODES = ("train", "ignore", "ignore_free", "clone")  # the training is the daemon's client
PROFILE_TOP = 6
BATCH, CLASSES, WARMUP, LOSS_EVERY, RING = 256, 100, 30, 20, 4
CHILD_TIMEOUT_S = 300


def trainer(mode, model, device, steps, socket, handle, ring, profile, out):
    """The training process: puts (images/s, step percentiles) or an error
    text on out."""
    try:
        out.put(train(mode, model, device, steps, socket, handle, ring, profile))
    except Exception as e:  # the parent reports it in the mode's row
        out.put("error: %s: %s" % (type(e).__name__, e))


def kernel_profile(step, n):
    """The training process's own GPU work over n steps (torch.profiler):
    kernel ms a step, busy ms a step (the union of its kernels' times),
    and [(ms a step, name)] of the PROFILE_TOP kernels that took most."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    spans, names = [], {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA") and e.time_range.end > e.time_range.start:
            spans.append((e.time_range.start, e.time_range.end))
            names[e.name] = names.get(e.name, 0.0) + (e.time_range.end - e.time_range.start)
    if not spans:
        return None
    spans.sort()
    busy, end = 0.0, spans[0][0]
    for a, b in spans:
        busy += max(0.0, b - max(a, end))
        end = max(end, b)
    top = sorted(((us / 1e3 / n, name[:60]) for name, us in names.items()), reverse=True)[:PROFILE_TOP]
    return {"kernel": sum(b - a for a, b in spans) / 1e3 / n, "busy": busy / 1e3 / n,
            "span": (end - spans[0][0]) / 1e3 / n, "top": top}


def train(mode, model, device, steps, socket, handle, ring, profile=0):
    import torch
    import torchvision
    torch.cuda.set_device(device)
    m = getattr(torchvision.models, model)(num_classes=CLASSES).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    local = torch.randint(0, 256, (BATCH, 224, 224, 3), dtype=torch.uint8, device="cuda")
    ylocal = torch.randint(0, CLASSES, (BATCH,), device="cuda")
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    event = torch.cuda.Event.from_ipc_handle(device, handle) if mode == "ipc_event" else None
    loader, idle = None, torch.cuda.Stream()
    if mode in LOADERD_MODES:
        import loaderd
        loader = loaderd.Loader("train", socket=socket, device=device)

    def batches():
        i = 0
        while True:
            if loader is None:
                i += 1
                yield (ring[i % len(ring)] if ring else local), ylocal
                continue
            for b in loader:
                image, label = b["image"], b["label"]
                if mode == "ignore_free":
                    b.release(stream=idle.cuda_stream)
                if mode.startswith("ignore") or image.shape[1] != 224:
                    yield local, ylocal
                elif mode == "clone":
                    yield image.clone(), label.clone()
                else:
                    yield image, label

    it = batches()

    host = {"data": 0.0, "launch": 0.0, "sync": 0.0}

    def step():
        t0 = time.perf_counter()
        x, y = next(it)
        t1 = time.perf_counter()
        xx = (x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last).float() - mean) / 60
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(xx), y % CLASSES)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if event is not None:
            event.record()
        host["data"] += t1 - t0
        host["launch"] += time.perf_counter() - t1
        return loss

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    host.update(data=0.0, launch=0.0)
    # Each step's time on the GPU, between events at the steps' ends: a
    # uniform slowdown moves the median, stalls of some steps the tail.
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    ends[0].record()
    t0 = time.perf_counter()
    for i in range(steps):
        loss = step()
        ends[i + 1].record()
        if (i + 1) % LOSS_EVERY == 0:
            t1 = time.perf_counter()
            loss.item()
            host["sync"] += time.perf_counter() - t1
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    host["sync"] += time.perf_counter() - t1
    rate = steps * BATCH / (time.perf_counter() - t0)
    ms = sorted(ends[i].elapsed_time(ends[i + 1]) for i in range(steps))
    out = {"p50": ms[steps // 2], "p90": ms[steps * 9 // 10], "max": ms[-1]}
    out.update((k, v * 1e3 / steps) for k, v in host.items())
    if profile:
        out["profile"] = kernel_profile(step, profile)
    if loader is not None:
        loader.close()
    return rate, out


class Daemon(image_bench.Daemon):
    """image_bench's daemon, NHWC, at --size."""

    def config_lines(self):
        out = []
        for ln in super().config_lines():
            if ln == "layout = nchw":
                ln = "layout = nhwc"
            elif ln.startswith("transform ="):
                ln = "transform = random_resized_crop(%d) hflip(0.5)" % self.ctx.args.size
            out.append(ln)
        return out


class PacedConsumer:
    """`loaderctl consume --device N --step-ms MS` of the daemon's train
    pipeline in the background, until stopped (mode paced)."""

    def __init__(self, ctx, socket):
        a = ctx.args
        self.cmd = [ctx.loaderctl, "--socket", socket, "consume", "--pipeline", "train", "--device",
                    str(a.device), "--step-ms", str(a.paced_ms), "--epochs", "100000", "--name", "paced"]
        self.log = ctx.log
        self.log.write("\n$ %s    # in the background\n" % shlex.join(self.cmd))
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

    def stop(self):
        if self.proc.poll() is not None:
            out = self.proc.stdout.read()
            self.log.write(out)
            raise StepError("paced: loaderctl consume exited %d early: %s"
                            % (self.proc.returncode, last_line(out)))
        self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.log.write(out)


def run_mode(ctx, mode, socket, shared):
    """One training process in `mode`; its images/s."""
    import torch.multiprocessing as mp
    a = ctx.args
    spawn = mp.get_context("spawn")
    out = spawn.Queue()
    beside = PacedConsumer(ctx, socket) if mode == "paced" else None
    p = spawn.Process(target=trainer, args=(mode, a.model, a.device, a.steps,
                                            socket if mode in LOADERD_MODES else None, shared["handle"],
                                            shared["ring"] if mode == "ipc_memory" else None, a.profile,
                                            out))
    p.start()
    try:
        v = out.get(timeout=CHILD_TIMEOUT_S)
    except Exception:
        p.kill()
        raise StepError("%s: no figure within %d s" % (mode, CHILD_TIMEOUT_S)) from None
    finally:
        if beside:
            beside.stop()
    p.join()
    if isinstance(v, str):
        raise StepError("%s: %s" % (mode, v))
    ctx.log.say("%s: %.1f images/s; a step on the GPU: p50 %.2f ms, p90 %.2f ms, max %.2f ms; "
                "on the host: %.2f ms for the batch, %.2f ms launching, %.2f ms waiting for the GPU"
                % (mode, v[0], v[1]["p50"], v[1]["p90"], v[1]["max"], v[1]["data"], v[1]["launch"],
                   v[1]["sync"]))
    prof = v[1].get("profile")
    if a.profile:
        ctx.log.say("%s: profiled, a step: %s" % (mode, "no kernels seen" if not prof else
                    "kernels %.2f ms, some kernel running %.2f ms of %.2f ms; most: %s"
                    % (prof["kernel"], prof["busy"], prof["span"],
                       "; ".join("%.2f %s" % t for t in prof["top"]))))
    return v


def report(ctx, rows):
    a = ctx.args
    base = next((v[0] for m, v in rows if m == "synthetic" and not isinstance(v, str)), None)
    out = image_bench.head_lines(ctx) + [
        "training: %s, batch %d, 224x224, %d classes, channels_last, bf16 autocast, SGD, %d timed steps; "
        "loaderd: %d workers, random_resized_crop(%d) hflip(0.5), uint8 NHWC, decode = %s%s, "
        "gpu_decode_threads %d, gpu_decode_helpers %s; MPS: %s"
        % (a.model, BATCH, CLASSES, a.steps, a.workers, a.size, a.decode,
           " (gpu_decode_percent %d)" % a.gpu_decode_percent if a.decode == "auto" else "",
           a.gpu_decode_threads, a.gpu_decode_helpers, "a private control daemon (--mps)" if a.mps else "off"), "",
        "| mode | training images/s | vs synthetic | step on the GPU, p50 | p90 | max "
        "| host: batch | launch | waiting for the GPU |",
        "|---|---|---|---|---|---|---|---|---|"]
    for mode, v in rows:
        if isinstance(v, str):
            out.append("| %s | %s | | | | | | | |" % (mode, v))
        else:
            out.append("| %s | %.0f | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms |"
                       % (mode, v[0], "%.3f" % (v[0] / base) if base else "", v[1]["p50"], v[1]["p90"],
                          v[1]["max"], v[1]["data"], v[1]["launch"], v[1]["sync"]))
    return "\n".join(out) + "\n"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    image_bench.add_tree_args(ap, "the daemon's config and log")
    ap.add_argument("--model", default="resnet18", help="torchvision model trained (default resnet18)")
    ap.add_argument("--modes", default="synthetic,train,paced,ignore,ignore_free,clone",
                    help="of %s (default: %%(default)s)" % ",".join(MODES))
    ap.add_argument("--decode", choices=("cpu", "gpu", "auto"), default="gpu", help="loaderd's decode (default gpu)")
    ap.add_argument("--size", type=int, default=224, help="random_resized_crop's size (default 224)")
    ap.add_argument("--workers", type=int, default=15, help="loaderd's workers (default 15)")
    ap.add_argument("--gpu-decode-percent", type=int, default=100,
                    help="its gpu_decode_percent with --decode auto (default 100, the config's)")
    ap.add_argument("--gpu-decode-threads", type=int, default=4, help="default 4")
    ap.add_argument("--gpu-decode-helpers", choices=("threads", "processes"), default="processes",
                    help="default processes")
    ap.add_argument("--steps", type=int, default=200, help="timed steps of each mode (default 200)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--mps", action="store_true", help="run everything under a private CUDA MPS control daemon")
    ap.add_argument("--paced-ms", type=int, default=22,
                    help="mode paced: the consumer's --step-ms (default 22, ResNet-18's step)")
    ap.add_argument("--profile", type=int, default=0, help="steps of each mode profiled after the timed ones")
    ap.add_argument("--daemon-env", action="append", default=[], metavar="NAME=VALUE",
                    help="added to the daemon's environment (repeatable)")
    a = ap.parse_args()
    a.mode_list = [m for m in a.modes.split(",") if m]
    if not a.mode_list or any(m not in MODES for m in a.mode_list):
        ap.error("--modes: a list of %s" % ", ".join(MODES))
    a.host, a.epochs = False, 0
    a.data_dir = os.path.abspath(a.data_dir)
    return a


def main():
    a = parse_args()
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    ctx = image_bench.torch_context(a, bindir, "fed_training")
    if ctx == EXIT_SKIP:
        return ctx
    if any(m in LOADERD_MODES for m in a.mode_list):
        train_bench.python_package(os.path.abspath(a.build))  # the trainer imports loaderd
    rows, mps, daemon, code = [], None, None, 0
    try:
        image_bench.describe_files(ctx, image_bench.make_tree(ctx))
        if a.mps:
            mps = MpsServer(ctx.log)
            mps.start()
        import torch  # after MPS: the parent's context is a client of it too
        torch.cuda.set_device(a.device)
        event = torch.cuda.Event(interprocess=True)
        event.record()
        torch.cuda.synchronize()
        shared = {"handle": bytes(event.ipc_handle()),
                  "ring": [torch.randint(0, 256, (BATCH, 224, 224, 3), dtype=torch.uint8, device="cuda")
                           for _ in range(RING)]}
        if any(m in LOADERD_MODES or m == "paced" for m in a.mode_list):
            daemon = Daemon(ctx, a.workers, a.decode)
            if a.daemon_env:
                daemon.env = dict(os.environ, **dict(kv.split("=", 1) for kv in a.daemon_env))
                ctx.log.say("the daemon's environment adds %s" % " ".join(a.daemon_env))
            daemon.start()
        for mode in a.mode_list:
            try:
                rows.append((mode, run_mode(ctx, mode, daemon.socket if daemon else None, shared)))
            except StepError as e:
                ctx.log.say(str(e))
                rows.append((mode, "error: %s" % e))
    except (StepError, OSError) as e:
        ctx.log.say("error: %s" % e)
        code = 1
    finally:
        if daemon:
            daemon.stop()
        image_bench.finish(ctx, mps)
    publish(ctx.log, a.out, report(ctx, rows))
    return code or int(any(isinstance(v, str) for _, v in rows))


if __name__ == "__main__":
    sys.exit(main())
