#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""beside_training: what another process's training does to GPU JPEG
decoding on the same GPU, and what the decoding does to the training, with
and without CUDA MPS.

  training  a ResNet (--model, default resnet18) trained on random data on
            GPU --device in a process of its own (batch 256, 224x224, 100
            classes, channels_last, bf16 autocast where the GPU has it,
            SGD), as node_bench's synthetic loader trains; it reports its
            images/s every 10 steps;
  wait      `loaderd-bus-probe --wait-only`: a 4 KiB copy to the GPU and a
            wait for it, 300 times (the percentiles of how long a process
            waits on its own small GPU work);
  decode    --processes P (default 1,2,4): P `loaderd-nvjd-bench` processes
            at once (--nvjd-args, default `--batch 256 --threads 1 --depth
            2`), whole images, one pass over the image benchmark's tree
            (bench/image_bench.py's make_tree(): --images JPEGs of 300-600
            px, in --data-dir); their images/s summed;
  loaderd   with --loaderd-helpers H[,H]: a loaderd (4 workers, decode =
            gpu, gpu_decode_threads 4, gpu_decode_helpers H, image_bench's
            pipeline on the same tree) and `loaderctl consume --device N`
            of 6 epochs in another process: the daemon's whole GPU path
            (decode, shrink, resize, copies) beside the training, without
            the training process being the daemon's client.

First the wait and one decoding process alone on the GPU, then the
training alone for --seconds, then, with the training running, the wait
and each process count. Every row gives the training's median images/s
over the time it ran beside (against its median alone), and, for a
decoding row, that loss divided by the thousands of images/s decoded: the
share of the training's rate that each 1,000 images/s decoded beside it
costs (a figure that carries over to another decoding rate, such as the
training's own pace when the decoding feeds it). --mps runs it all
under a private MPS control daemon (bench_daemon.MpsServer), as
node_bench.py --mps does; run the bench with and without it to compare.

    bench/beside_training.py --build BUILD [--out DIR] [--model resnet18]
                             [--processes 1,2,4] [--nvjd-args "..."]
                             [--seconds 8] [--mps] [--device 0] [--keep]
                             [--loaderd-helpers threads,processes]

Exit codes: 0; 1 a step failed; 77 no GPU, no nvJPEG, or no torch.
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_bench  # noqa: E402  (this directory)
from bench_daemon import MpsServer, StepError, last_line, publish, wait_for  # noqa: E402
from gpu_bench import EXIT_SKIP, int_list  # noqa: E402

TRAIN_BATCH, TRAIN_CLASSES, REPORT_EVERY = 256, 100, 10
WARMUP_S, TRAIN_START_TIMEOUT_S, STEP_TIMEOUT_S = 3.0, 180, 300


def train_loop(model, device):
    """The training process (--train-loop): prints `rate T X` (time.time(),
    images/s over the last REPORT_EVERY steps) until killed."""
    import torch
    import torchvision
    torch.cuda.set_device(device)
    m = getattr(torchvision.models, model)(num_classes=TRAIN_CLASSES).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(TRAIN_BATCH, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, TRAIN_CLASSES, (TRAIN_BATCH,), device="cuda")
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    last = time.time()
    while True:
        for _ in range(REPORT_EVERY):
            with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        now = time.time()
        print("rate %.3f %.1f" % (now, REPORT_EVERY * TRAIN_BATCH / (now - last)), flush=True)
        last = now


class Training:
    """The training process and the rates it reported, with their times."""

    def __init__(self, ctx):
        a = ctx.args
        self.cmd = [sys.executable, os.path.abspath(__file__), "--train-loop", a.model, "--device", str(a.device)]
        ctx.log.write("\n$ %s    # the training, in the background\n" % shlex.join(self.cmd))
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.rates, self.lock = [], threading.Lock()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for line in self.proc.stdout:
            f = line.split()
            if len(f) == 3 and f[0] == "rate":
                with self.lock:
                    self.rates.append((float(f[1]), float(f[2])))

    def wait_started(self):
        wait_for(lambda: self.proc.poll() is not None or len(self.rates) >= 3,
                             TRAIN_START_TIMEOUT_S, "the training's first rates")
        if self.proc.poll() is not None:
            raise StepError("the training exited %d: %s" % (self.proc.returncode,
                                                           last_line(self.proc.stderr.read())))

    def median(self, t0, t1):
        """The median of the rates reported from t0 to t1 and of the first
        one after t1 (its steps ran partly before t1: a short window gets
        one)."""
        with self.lock:
            r = [x for t, x in self.rates if t0 <= t <= t1]
            r += [x for t, x in self.rates if t > t1][:1]
        return statistics.median(r) if r else None

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def run(ctx, cmd, what):
    ctx.log.write("\n$ %s    # %s\n" % (shlex.join(cmd), what))
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise StepError("%s: timed out after %d s" % (what, STEP_TIMEOUT_S)) from None
    ctx.log.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise StepError("%s exited %d: %s" % (what, r.returncode, last_line(r.stderr)))
    return r.stdout


def wait_probe(ctx):
    """{'p50_us': ...} of loaderd-bus-probe --wait-only."""
    out = run(ctx, [os.path.join(ctx.bindir, "loaderd-bus-probe"), "--device", str(ctx.args.device),
                    "--wait-only"], "the wait probe")
    line = next((ln for ln in out.splitlines() if ln.startswith("wait:")), "")
    return dict((k, float(v)) for k, v in (f.split("=") for f in line.split()[1:]))


def decode(ctx, n):
    """{"decode": the summed images/s of n loaderd-nvjd-bench processes at
    once, "window": the wall-clock span of their timed passes}."""
    a = ctx.args
    cmd = [os.path.join(ctx.bindir, "loaderd-nvjd-bench"), "--dir", ctx.tree, "--device", str(a.device),
           "--mode", "full", "--passes", "1"] + shlex.split(a.nvjd_args)
    ctx.log.write("\n$ %s    # %d at once\n" % (shlex.join(cmd), n))
    procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    total, starts, ends = 0.0, [], []
    for p in procs:
        try:
            out, err = p.communicate(timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise StepError("loaderd-nvjd-bench: timed out after %d s" % STEP_TIMEOUT_S) from None
        ctx.log.write(out + err)
        if p.returncode != 0:
            raise StepError("loaderd-nvjd-bench exited %d: %s" % (p.returncode, last_line(err)))
        line = next((ln for ln in out.splitlines() if "mode=full" in ln), "")
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        total += float(f.get("images_per_s", "nan"))
        starts.append(float(f.get("started", "nan")))
        ends.append(float(f.get("ended", "nan")))
    return {"decode": total, "window": (min(starts), max(ends))}


def loaderd_decode(ctx, helpers):
    """{"decode": images/s of `loaderctl consume` from a loaderd that
    decodes on the GPU with `helpers`, over 6 epochs after one of warm-up,
    "window": the wall-clock span of those 6 epochs}: the training's rate
    is read over that span alone, not over the daemon's start."""
    a = ctx.args
    a.gpu_decode_threads, a.gpu_decode_helpers = 4, helpers
    daemon = image_bench.Daemon(ctx, 4, "gpu")
    try:
        daemon.start()
        image_bench.consume(ctx, daemon, 1, 120, "warm-up")
        t0 = time.time()
        rate = image_bench.consume(ctx, daemon, 6, STEP_TIMEOUT_S, "timed")["rate"]
        return {"decode": rate, "window": (t0, time.time())}
    finally:
        daemon.stop()


def row(ctx, rows, what, fn, training=None):
    """Runs fn() (a figure dict) into a table row, timing it against the
    training: over the span fn() ran, or the "window" (wall-clock start
    and end) it gives for the part it measured (not its processes' start)."""
    t0 = time.time()
    try:
        v = fn()
    except StepError as e:
        ctx.log.say("%s: %s" % (what, e))
        rows.append((what, "error: %s" % e))
        return
    t1 = time.time()
    t0, t1 = v.pop("window", (t0, t1))
    if training is not None:
        wait_for(lambda: training.median(t1, t1) is not None or training.proc.poll() is not None,
                             STEP_TIMEOUT_S, "the training's next rate")
        v["training"] = training.median(t0, t1)
    rows.append((what, v))
    ctx.log.say("%s: %s" % (what, ", ".join("%s %.1f" % (k, x) for k, x in v.items() if x is not None)))


def report(ctx, rows, alone):
    a = ctx.args
    out = image_bench.head_lines(ctx) + [
        "training: %s on random data, batch %d, 224x224, %d classes, channels_last, bf16 autocast, SGD; "
        "decoding: loaderd-nvjd-bench --mode full --passes 1 %s; MPS: %s"
        % (a.model, TRAIN_BATCH, TRAIN_CLASSES, a.nvjd_args,
           "a private control daemon (--mps)" if a.mps else "off"), "",
        "| what | wait p50 | wait p90 | decode images/s | training images/s | vs training alone "
        "| training lost per 1,000 images/s decoded |",
        "|---|---|---|---|---|---|---|"]
    for what, v in rows:
        if isinstance(v, str):
            out.append("| %s | %s | | | | | |" % (what, v))
            continue
        tr = v.get("training")
        per = (1 - tr / alone) * 1000 / v["decode"] if tr and alone and v.get("decode") else None
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            what, "%.1f us" % v["p50_us"] if "p50_us" in v else "",
            "%.1f us" % v["p90_us"] if "p90_us" in v else "",
            "%.0f" % v["decode"] if "decode" in v else "",
            "%.0f" % tr if tr else "", "%.3f" % (tr / alone) if tr and alone else "",
            "%.4f" % per if per is not None else ""))
    return "\n".join(out) + "\n"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    image_bench.add_tree_args(ap, "the tools' output")
    ap.add_argument("--model", default="resnet18", help="torchvision model trained (default resnet18)")
    ap.add_argument("--processes", default="1,2,4", help="decoding process counts (default 1,2,4)")
    ap.add_argument("--nvjd-args", default="--batch 256 --threads 1 --depth 2",
                    help="loaderd-nvjd-bench's options (default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=8.0, help="the training alone (default 8)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--mps", action="store_true", help="run everything under a private CUDA MPS control daemon")
    ap.add_argument("--loaderd-helpers", default="",
                    help="also loaderd decoding on the GPU with these gpu_decode_helpers (threads,processes)")
    a = ap.parse_args()
    a.process_counts = int_list(ap, "--processes", a.processes, "counts", 16)
    a.loaderd_helpers = [h for h in a.loaderd_helpers.split(",") if h]
    if any(h not in ("threads", "processes") for h in a.loaderd_helpers):
        ap.error("--loaderd-helpers: a list of threads and processes")
    a.host, a.epochs = False, 0
    a.data_dir = os.path.abspath(a.data_dir)
    return a


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--train-loop" and sys.argv[3] == "--device":
        train_loop(sys.argv[2], int(sys.argv[4]))
        return 0
    a = parse_args()
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    for exe in ("loaderd", "mkjpeg", "loaderd-bus-probe", "loaderd-nvjd-bench"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            print("beside_training: skipped: %s/%s is not built here (it needs the CUDA toolkit "
                  "and nvjpeg.h)" % (bindir, exe))
            return EXIT_SKIP
    ctx = image_bench.torch_context(a, bindir, "beside_training")
    if ctx == EXIT_SKIP:
        return ctx
    rows, alone, training, mps, code = [], None, None, None, 0
    try:
        files = image_bench.make_tree(ctx)
        image_bench.describe_files(ctx, files)
        if a.mps:
            mps = MpsServer(ctx.log)
            mps.start()
        row(ctx, rows, "alone: wait", lambda: wait_probe(ctx))
        row(ctx, rows, "alone: decode, 1 process", lambda: decode(ctx, 1))
        for h in a.loaderd_helpers:
            row(ctx, rows, "alone: loaderd, helper %s" % h, lambda: loaderd_decode(ctx, h))
        training = Training(ctx)
        training.wait_started()
        time.sleep(WARMUP_S)
        t0 = time.time()
        time.sleep(a.seconds)
        alone = training.median(t0, time.time())
        rows.append(("training alone", {"training": alone}))
        ctx.log.say("training alone: %.1f images/s" % (alone or 0))
        row(ctx, rows, "beside training: wait", lambda: wait_probe(ctx), training)
        for n in a.process_counts:
            row(ctx, rows, "beside training: decode, %d process%s" % (n, "" if n == 1 else "es"),
                lambda: decode(ctx, n), training)
        for h in a.loaderd_helpers:
            row(ctx, rows, "beside training: loaderd, helper %s" % h,
                lambda: loaderd_decode(ctx, h), training)
    except (StepError, OSError) as e:
        ctx.log.say("error: %s" % e)
        code = 1
    finally:
        if training:
            training.stop()
        image_bench.finish(ctx, mps)
    publish(ctx.log, a.out, report(ctx, rows, alone))
    return code or int(any(isinstance(v, str) for _, v in rows))


if __name__ == "__main__":
    sys.exit(main())
