#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""node_bench: one loaderd feeding every GPU of the node: a ResNet trained
with DistributedDataParallel under torchrun, one rank per GPU, fed by one
daemon, by a DataLoader in every rank, and by random data on the GPU (the
ceiling); the same at one rank, in the same run, for the scaling ratio.

  dataset  the image benchmark's set (bench/image_bench.py's make_tree(),
           --images JPEGs of 300-600 px in 100 classes), in --data-dir;
  loaderd  one daemon for the whole run (--workers workers, default the
           usable cores minus one per rank), the train benchmark's pipeline
           "train" (batch 256, `random_resized_crop(224) hflip(0.5)`,
           uint8 NHWC) with decode = --decode (default gpu: every GPU's own
           JPEG engines decode its rank's images); with --tokens also a
           tokens pipeline ("tokens": --token-file of random uint16 tokens,
           seq_len 1024, batch 16, int64) on the same daemon;
  runs     for each model of --models, each rank count of --ranks (default
           1 and every GPU) and each loader of --loaders:
           `torchrun --standalone --nproc-per-node N examples/train_resnet.py
           --one-gpu-per-rank --json ...` (each rank sees only its own GPU,
           as CUDA_VISIBLE_DEVICES; loaderd names GPUs by UUID), --steps
           timed steps after --warmup; torch: ImageFolder + DataLoader in
           every rank with --torch-workers workers each (default the usable
           cores / N - 1); with --tokens, examples/train_tokens.py on the
           tokens pipeline at every rank count.

Per run it records what rank 0 prints (examples/ddp.py: every rank's
images/s, GPU UUID, loaderd shard and data-wait fraction; the node's
images/s) and, for loaderd runs, what the daemon used: CPU seconds of the
daemon and its workers over the run (from /proc) per image consumed
(warm-up and timed steps of every rank), and as cores busy at the node's
rate (that CPU per image x node images/s), and the largest device memory
status showed on each GPU (the rings and the JPEG decoder's buffers) and
the arena (the page-locked shared memory every GPU's copies read).

--mps runs everything under a private CUDA MPS control daemon (its pipe
and log directories in a temporary directory, quit at the end): loaderd
and the training ranks then share each GPU at once instead of taking
turns in time slices, which is what decoding on the GPU beside training
needs (docs/config.md, "GPU decoding beside training: MPS"). The report
says whether the daemon's status showed its GPUs under MPS (`mps 1`).

It prints a markdown table (one row per model, rank count and loader),
the scaling of each loader (node images/s over N x its one-rank figure)
and the goal lines: loaderd's node images/s at least 0.95 x N x its
one-rank figure, data wait under 3% on every rank, and the daemon's CPU
per image no more than 1.1x its one-rank figure. --out DIR keeps the
table (table.md), every command's output (bench.log), each run's JSON
(runs.jsonl) and the daemon's config and log. Exit codes: 0; 1 a run
failed; 77 no GPU, or torch missing.

    bench/node_bench.py --build BUILD [--out DIR] [--ranks 1,2] [--models resnet50]
                        [--loaders synthetic,loaderd,torch] [--decode gpu] [--workers W]
                        [--steps 150] [--warmup 40] [--tokens] [--mps] [--keep]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_bench  # noqa: E402  (this directory)
import train_bench  # noqa: E402
from bench_daemon import MpsServer, StepError, failed_exit, last_line, publish  # noqa: E402
from gpu_bench import (EXIT_SKIP, Failed, Notes, int_list, loaderd_gpus, nvidia_smi, raise_memlock,  # noqa: E402
                       ratio, usable_cores)

ROOT = train_bench.ROOT
EXAMPLES = {"image": os.path.join(ROOT, "examples", "train_resnet.py"),
            "tokens": os.path.join(ROOT, "examples", "train_tokens.py")}
GOAL_SCALING, GOAL_WAIT, GOAL_CPU = 0.95, 0.03, 1.1
TOKENS_SEQ, TOKENS_BATCH, TOKENS_COUNT = 1024, 16, 64 << 20
STATUS_GPU_RE = re.compile(r"^  gpu (\d+) uuid (GPU-\S+) name .* clients (\d+) device_bytes (\d+) "
                           r"decode_bytes (\d+) mps (\d) decoders (\d+)$", re.M)
SLOTS_PER_CLIENT = 8      # staging slots for each rank, and as many for the daemon
STATUS_ARENA_RE = re.compile(r"^arena: (\d+) bytes", re.M)


class Daemon(train_bench.Daemon):
    """train_bench's daemon; with --tokens, a tokens pipeline beside it."""

    def config_lines(self):
        slots = SLOTS_PER_CLIENT * (max(self.ctx.args.rank_list) + 1)
        batch_bytes = image_bench.BATCH * (3 * image_bench.SIZE * image_bench.SIZE + 8)
        lines = [ln for ln in super().config_lines() if not ln.startswith(("staging_slots =", "shm_bytes ="))]
        at = lines.index("[daemon]") + 1
        lines[at:at] = ["staging_slots = %d" % slots, "shm_bytes = %d" % ((slots + 4) * batch_bytes + (256 << 20))]
        if self.ctx.args.gpu_decode_memory:
            lines.insert(at, "gpu_decode_memory = %s" % self.ctx.args.gpu_decode_memory)
        if self.ctx.args.depth:
            lines[at:at] = ["device_slots = %d" % self.ctx.args.depth, "default_depth = %d" % self.ctx.args.depth]
        if self.ctx.args.tokens:
            lines += ["[pipeline.tokens]", "source = tokens:%s" % self.ctx.token_file, "token_dtype = uint16",
                      "token_output = int64", "seq_len = %d" % TOKENS_SEQ, "batch_size = %d" % TOKENS_BATCH,
                      "shuffle = true", "drop_last = true", ""]
        return lines


class Watch:
    """Polls the daemon's status while a run goes: the largest device
    memory of every GPU, the arena's size, and the last decode lines (the
    decoding threads' counts and times, cumulative)."""

    def __init__(self, daemon):
        self.daemon, self.device_bytes, self.arena, self.decode = daemon, {}, 0, []
        self.mps = {}  # each GPU's `mps` in status
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop_event.wait(1.0):
            try:
                text = self.daemon.status() or ""
            except subprocess.TimeoutExpired:
                continue
            for m in STATUS_GPU_RE.finditer(text):
                used = int(m.group(4)) + int(m.group(5))  # the rings and the JPEG decoder's buffers
                self.device_bytes[m.group(2)] = max(self.device_bytes.get(m.group(2), 0), used)
                self.mps[m.group(2)] = int(m.group(6))
            m = STATUS_ARENA_RE.search(text)
            if m:
                self.arena = int(m.group(1))
            self.decode = image_bench.STATUS_DECODE_RE.findall(text) or self.decode

    def stop(self):
        self.stop_event.set()
        self.thread.join()


def command(ctx, kind, model, ranks, loader, socket):
    a = ctx.args
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
           EXAMPLES[kind], "--one-gpu-per-rank", "--json", "--steps", str(a.steps), "--warmup", str(a.warmup)]
    if kind == "tokens":
        return cmd + ["--pipeline", "tokens", "--socket", socket, "--d-model", "512", "--layers", "4",
                      "--heads", "8"]
    cmd += ["--model", model, "--loader", loader, "--batch-size", str(image_bench.BATCH),
            "--size", str(image_bench.SIZE), "--classes", str(image_bench.CLASSES)]
    if loader == "loaderd":
        cmd += ["--pipeline", train_bench.PIPELINE, "--socket", socket]
        if a.depth:
            cmd += ["--depth", str(a.depth)]
    elif loader == "torch":
        cmd += ["--data", ctx.tree, "--workers", str(a.torch_workers or max(1, usable_cores() // ranks - 1))]
    return cmd


def figures(r, ranks, rate_key):
    if r.returncode != 0:
        raise StepError("exited %d: %s" % (r.returncode, last_line(r.stderr)))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise StepError("no JSON line on stdout")
    f = json.loads(lines[-1])
    got = f.get("world", 1)
    if got != ranks or (ranks > 1 and len(f.get("ranks", [])) != ranks):
        raise StepError("the run reports world %s and %d ranks" % (got, len(f.get("ranks", []))))
    if ranks == 1:  # a one-rank torchrun job is a world of 1: its own figures are the node's
        f["node_" + rate_key] = f[rate_key]
        f["data_wait_fraction_max"] = f["data_wait_fraction"]
        f["ranks"] = [{"rank": 0, "gpu_uuid": f.get("gpu_uuid"), rate_key: f[rate_key],
                       "data_wait_fraction": f["data_wait_fraction"], "shard": f.get("shard")}]
    return f


def measure(ctx, daemon, kind, model, ranks, loader):
    """One run's figures, or a Failed."""
    a = ctx.args
    what = "%s, %d rank%s, %s" % (model, ranks, "" if ranks == 1 else "s", loader)
    rate_key = "tokens_per_s" if kind == "tokens" else "images_per_s"
    timeout_s = train_bench.START_TIMEOUT_S + int((a.warmup + a.steps) * 256 / train_bench.MIN_TRAIN_RATE)
    cmd = command(ctx, kind, model, ranks, loader, daemon.socket)
    uses_daemon = loader == "loaderd"
    ctx.log.write("\n$ %s    # %s, timeout %d s\n" % (" ".join(cmd), what, timeout_s))
    watch = None
    try:
        if uses_daemon:
            daemon.check_alive()
            cpu0, watch = image_bench.cpu_seconds(daemon.proc.pid), Watch(daemon)
        start = time.monotonic()
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout_s, env=dict(os.environ, OMP_NUM_THREADS="4"))
        except subprocess.TimeoutExpired:
            raise StepError("timed out after %d s" % timeout_s) from None
        wall = time.monotonic() - start
        ctx.log.write("exit %d after %.1f s\n--- stdout\n%s--- stderr\n%s" % (r.returncode, wall, r.stdout, r.stderr))
        f = figures(r, ranks, rate_key)
        if uses_daemon:
            cpu = image_bench.cpu_seconds(daemon.proc.pid) - cpu0
            items = (a.warmup + a.steps) * ranks * (TOKENS_BATCH if kind == "tokens" else image_bench.BATCH)
            f["daemon_cpu_us_per_sample"] = cpu / items * 1e6
            # cores busy at the rate delivered (the run's wall time also holds
            # torchrun's and cuDNN's start, when the daemon idles)
            per_s = f["node_" + rate_key] / (TOKENS_SEQ if kind == "tokens" else 1)  # samples
            f["daemon_cores"] = cpu / items * per_s
    except (StepError, ValueError) as e:
        if uses_daemon and daemon.proc.poll() is not None:
            e = StepError("%s; %s" % (e, daemon.log_tail()))
        ctx.log.say("%s: %s" % (what, e))
        return Failed("error: %s" % e)
    finally:
        if watch:
            watch.stop()
    if watch:
        f["device_bytes"], f["arena_bytes"], f["mps"] = watch.device_bytes, watch.arena, watch.mps
        for line in watch.decode:
            ctx.log.say("%s: decode pipeline %s" % (what, line))
    f.update({"kind": kind, "ranks_asked": ranks, "loader_name": loader})
    ctx.runs.append(f)
    ctx.log.say("%s: node %.1f %s, data wait at most %.1f%%%s; %s" % (
        what, f["node_" + rate_key], rate_key.split("_")[0] + "/s", 100 * f["data_wait_fraction_max"],
        ", daemon %.1f cores, %.0f us CPU per sample" % (f["daemon_cores"], f["daemon_cpu_us_per_sample"])
        if uses_daemon else "",
        "; ".join("rank %d on %s %.1f" % (x["rank"], x.get("gpu_uuid"), x[rate_key]) for x in f["ranks"])))
    return f


# ---------------------------------------------------------------- report

def node(v, key="node_images_per_s"):
    return v if isinstance(v, Failed) else v[key]


def memory_cell(v):
    if isinstance(v, Failed) or "device_bytes" not in v:
        return ""
    per_gpu = ", ".join("%.0f" % (b / 2**20) for _, b in sorted(v["device_bytes"].items()))
    return "%s MiB per GPU; arena %.0f MiB" % (per_gpu or "0", v["arena_bytes"] / 2**20)


def goal_lines(ctx, res):
    a, out = ctx.args, []
    top = max(a.rank_list)
    for m in a.model_list:
        one, many = res.get((m, 1, "loaderd")), res.get((m, top, "loaderd"))
        if top == 1 or one is None or many is None or isinstance(one, Failed) or isinstance(many, Failed):
            out.append("goal (%s): not determined (needs loaderd at 1 and %d ranks)" % (m, top))
            continue
        scale = many["node_images_per_s"] / (top * one["node_images_per_s"])
        waits = [x["data_wait_fraction"] for v in (one, many) for x in v["ranks"]]
        cpu = many["daemon_cpu_us_per_sample"] / one["daemon_cpu_us_per_sample"]
        out.append("goal (%s): node images/s >= %.2f x %d x one rank: %s (%.3f); data wait < %d%% on every rank: "
                   "%s (largest %.1f%%); daemon CPU per image <= %.1fx one rank's: %s (%.2fx)"
                   % (m, GOAL_SCALING, top, "met" if scale >= GOAL_SCALING else "missed", scale,
                      100 * GOAL_WAIT, "met" if max(waits) < GOAL_WAIT else "missed", 100 * max(waits),
                      GOAL_CPU, "met" if cpu <= GOAL_CPU else "missed", cpu))
    return out


def mps_line(ctx):
    """Whether the run asked for MPS, and what the daemon's status said."""
    seen = sorted({v for r in ctx.runs for v in r.get("mps", {}).values()})
    said = ("loaderd's status: mps %s" % "/".join(map(str, seen))) if seen else "no status seen"
    return "MPS: %s (%s)" % ("a private control daemon (--mps)" if ctx.args.mps else "off", said)


def report(ctx, res):
    a = ctx.args
    f0 = ctx.runs[0] if ctx.runs else {}
    out = image_bench.head_lines(ctx) + [
        "each run: torchrun --standalone --nproc-per-node N examples/train_resnet.py --one-gpu-per-rank, "
        "--steps %d --warmup %d, batch %d per rank, %dx%d, %d classes, channels_last, amp %s, torch %s; "
        "loaderd: one daemon, %d workers, decode = %s%s, uint8 NHWC; torch: a DataLoader in every rank"
        % (a.steps, a.warmup, image_bench.BATCH, image_bench.SIZE, image_bench.SIZE, image_bench.CLASSES,
           f0.get("amp", "?"), f0.get("torch", "?"), a.workers, a.decode,
           "".join(", %s = %s" % (k, v) for k, v in (("gpu_decode_memory", a.gpu_decode_memory),
                                                      ("gpu_decode_threads", a.gpu_decode_threads),
                                                      ("gpu_decode_helpers", a.gpu_decode_helpers)) if v)),
        mps_line(ctx), "",
        "| model | ranks | loader | node images/s | per rank | data wait (largest) | vs N x one rank "
        "| vs synthetic | loaderd cores | loaderd CPU us/image | loaderd memory |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = Notes()
    for m in a.model_list:
        for n in a.rank_list:
            syn = res.get((m, n, "synthetic"))
            for lo in a.loader_list:
                v = res.get((m, n, lo))
                one = res.get((m, 1, lo))
                per = "" if isinstance(v, Failed) else ", ".join("%.0f" % x["images_per_s"] for x in v["ranks"])
                scale = ratio(node(v), node(one) * n, "%.3f") if one is not None and not isinstance(
                    one, Failed) and n > 1 else ""
                out.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    m, n, lo, notes.cell(node(v), "%.1f"), per,
                    "" if isinstance(v, Failed) else "%.1f%%" % (100 * v["data_wait_fraction_max"]),
                    scale, ratio(node(v), node(syn), "%.3fx") if syn is not None and lo != "synthetic" else "",
                    "" if isinstance(v, Failed) or "daemon_cores" not in v else "%.1f" % v["daemon_cores"],
                    "" if isinstance(v, Failed) or "daemon_cores" not in v else "%.0f" % v["daemon_cpu_us_per_sample"],
                    memory_cell(v)))
    if a.tokens:
        out += ["", "| tokens pipeline | ranks | node tokens/s | per rank | data wait (largest) | vs N x one rank |",
                "|---|---|---|---|---|---|"]
        for n in a.rank_list:
            v, one = res.get(("tokens", n)), res.get(("tokens", 1))
            out.append("| transformer d512 x4, seq %d, batch %d | %d | %s | %s | %s | %s |" % (
                TOKENS_SEQ, TOKENS_BATCH, n, notes.cell(node(v, "node_tokens_per_s"), "%.0f"),
                "" if isinstance(v, Failed) else ", ".join("%.0f" % x["tokens_per_s"] for x in v["ranks"]),
                "" if isinstance(v, Failed) else "%.1f%%" % (100 * v["data_wait_fraction_max"]),
                ratio(node(v, "node_tokens_per_s"), node(one, "node_tokens_per_s") * n, "%.3f")
                if n > 1 and one is not None and not isinstance(one, Failed) else ""))
    if notes.messages:
        out += [""] + notes.lines()
    out += ["", "ranks on GPUs: " + "; ".join(
        "%s %d ranks: %s" % (r["loader_name"], r["ranks_asked"], ", ".join(
            "%d=%s (shard %s)" % (x["rank"], x.get("gpu_uuid"), x.get("shard")) for x in r["ranks"]))
        for r in ctx.runs if r["loader_name"] == "loaderd" and r["kind"] == "image" and r["ranks_asked"] > 1)]
    out += [""] + goal_lines(ctx, res)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def parse_args(gpus):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    image_bench.add_tree_args(ap, "loaderd's log", ", as image_bench")
    ap.add_argument("--ranks", default="", help="rank counts (default 1 and every GPU: 1,%d)" % gpus)
    ap.add_argument("--models", default="resnet50", help="from %s (default resnet50)" % ",".join(train_bench.MODELS))
    ap.add_argument("--loaders", default=",".join(train_bench.LOADERS), help="default %s" % ",".join(train_bench.LOADERS))
    ap.add_argument("--decode", choices=("cpu", "gpu", "auto"), default="gpu", help="loaderd's decode (default gpu)")
    ap.add_argument("--gpu-decode-percent", type=int, default=100, help="with --decode auto (default 100, the config's)")
    ap.add_argument("--gpu-decode-memory", help="loaderd's gpu_decode_memory (default: the daemon's)")
    ap.add_argument("--gpu-decode-threads", type=int, help="loaderd's gpu_decode_threads (default: the daemon's)")
    ap.add_argument("--gpu-decode-helpers", choices=("threads", "processes"),
                    help="loaderd's gpu_decode_helpers (default: the daemon's)")
    ap.add_argument("--workers", type=int, default=0, help="loaderd's workers (default: usable cores - ranks)")
    ap.add_argument("--depth", type=int, default=0,
                    help="each rank's depth and loaderd's device_slots (default: the daemon's, 4)")
    ap.add_argument("--torch-workers", type=int, default=0,
                    help="DataLoader workers per rank (default: usable cores / ranks - 1)")
    ap.add_argument("--steps", type=int, default=150, help="timed steps (default 150)")
    ap.add_argument("--warmup", type=int, default=40, help="untimed steps first (default 40)")
    ap.add_argument("--tokens", action="store_true", help="also train_tokens.py on a tokens pipeline")
    ap.add_argument("--mps", action="store_true", help="run everything under a private CUDA MPS control daemon")
    a = ap.parse_args()
    a.rank_list = int_list(ap, "--ranks", a.ranks or "1,%d" % gpus, "counts", gpus) if gpus else [1]
    a.rank_list = sorted(set(a.rank_list))
    a.model_list = [x for x in a.models.split(",") if x]
    a.loader_list = [x for x in a.loaders.split(",") if x]
    if not set(a.model_list) <= set(train_bench.MODELS) or not set(a.loader_list) <= set(train_bench.LOADERS):
        ap.error("--models from %s, --loaders from %s" % (train_bench.MODELS, train_bench.LOADERS))
    a.workers = a.workers or max(1, usable_cores() - max(a.rank_list))
    a.data_dir, a.host, a.device = os.path.abspath(a.data_dir), False, 0
    return a


def make_tokens(ctx):
    path = os.path.join(ctx.args.data_dir, "tokens-u16.bin")
    if not (os.path.exists(path) and os.path.getsize(path) == 2 * TOKENS_COUNT):
        os.makedirs(ctx.args.data_dir, exist_ok=True)
        with open(path, "wb") as f:
            for _ in range(2 * TOKENS_COUNT >> 24):
                f.write(os.urandom(1 << 24))
    return path


def main():
    build = os.path.abspath(sys.argv[sys.argv.index("--build") + 1]) if "--build" in sys.argv else \
        os.path.join(ROOT, "build")
    bindir = os.path.join(build, "bin")
    version, gpus, (uuid, name) = loaderd_gpus(bindir, 0)
    a = parse_args(gpus or 0)
    if not gpus:
        print("node_bench: skipped: loaderd --version reports no GPU")
        return EXIT_SKIP
    train_bench.python_package(os.path.abspath(a.build))
    why = train_bench.torch_missing()
    if why:
        print("node_bench: skipped: torch and torchvision are needed (%s)" % why)
        return EXIT_SKIP
    ctx = image_bench.new_context(a, bindir, "node_bench")
    ctx.runs, ctx.token_file = [], None
    ctx.log.write("loaderd --version:\n%s" % version)
    ctx.gpu_desc = "%d x %s" % (gpus, nvidia_smi(ctx.log, uuid) or name)
    raise_memlock(ctx.log)
    res = {}
    daemon = mps = None
    try:
        try:
            files = image_bench.make_tree(ctx)
            ctx.token_file = make_tokens(ctx) if a.tokens else None
        except (StepError, OSError) as e:
            ctx.log.say("making the dataset: %s" % e)
            return 1
        image_bench.describe_files(ctx, files)
        if a.mps:
            mps = MpsServer(ctx.log)
            try:
                mps.start()
            except StepError as e:
                ctx.log.say("--mps: %s" % e)
                return 1
        daemon = Daemon(ctx, a.workers, a.decode)
        daemon_error = None
        try:
            daemon.start()
        except StepError as e:
            daemon_error = Failed("error: %s" % e)
        for m in a.model_list:
            for n in a.rank_list:
                for lo in a.loader_list:
                    res[(m, n, lo)] = (daemon_error if lo == "loaderd" and daemon_error else
                                       measure(ctx, daemon, "image", m, n, lo))
        if a.tokens:
            for n in a.rank_list:
                res[("tokens", n)] = daemon_error or measure(ctx, daemon, "tokens", "transformer", n, "loaderd")
    finally:
        if daemon:
            daemon.stop()
        if mps:
            mps.stop()
        if not a.keep:
            if a.tokens and ctx.token_file:
                os.unlink(ctx.token_file)
            image_bench.remove_tree(ctx)
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    publish(ctx.log, a.out, report(ctx, res))
    if a.out:
        with open(os.path.join(a.out, "runs.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in ctx.runs)
    return failed_exit([v if isinstance(v, Failed) else "" for v in res.values()])


if __name__ == "__main__":
    sys.exit(main())
