#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""image_bench: loaderd's image pipeline against torchvision's ImageFolder
and DataLoader on the same JPEGs, and single-core decoding against
torchvision's, measured in one run on one machine.

  dataset  an ImageNet-like tree made by `BUILD/bin/mkjpeg --tree ROOT
           --classes 100 --per-class N/100 --min-side 300 --max-side 600
           --seed S` (quality 90, mkjpeg's default; about 80 KB a file) in
           --data-dir (default /dev/shm/loaderd-image-bench, so no disk is
           measured), reused when a stamp file there says it was made with
           the same parameters, removed at the end unless --keep;
  loaderd  for each worker count W, one daemon (workers = W) with one
           imagefolder pipeline: shuffle, batch_size 256, drop_last (as the
           DataLoader), `random_resized_crop(224) hflip(0.5)`, uint8 NCHW,
           --staging-slots slots (16), decode = --decode (cpu: the workers decode
           every JPEG; gpu and auto: the GPU's hardware decoder takes them,
           or with auto --gpu-decode-percent of them); a warm-up
           `loaderctl consume --epochs 1`, then a
           timed `loaderctl consume --pipeline train --epochs E --device D
           --quiet` (host memory with --host); samples_per_s of its summary,
           and the cores each part of the daemon kept busy meanwhile (its
           threads by name, its workers, its decoder processes; the log);
  ceiling  with gpu or auto: loaderd-nvjd-bench on the same files, images
           given with their sizes as the workers give them, from threads
           and from processes started together (measure_ceiling);
  peer     bench/torch_image_peer.py in its own process: ImageFolder with
           Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
           PILToTensor()]), DataLoader(batch_size=256, shuffle=True,
           num_workers=W, pin_memory=True, persistent_workers=True,
           prefetch_factor=4, drop_last=True), every batch's images and
           labels .to("cuda", non_blocking=True); max(8, W) warm-up batches,
           then timed until E epochs or --seconds, torch.cuda.synchronize()
           at the end (with --host: no pinning, no copy);
  decode   single core (this process's third allowed CPU, else its last,
           set with os.sched_setaffinity before the child starts, so the
           child inherits it): `BUILD/bin/loaderd-decode-bench` on
           --decode-files files of the tree held in memory (full-size RGB
           with image/jpeg.h, then the worker's image_sample() with the
           same transform) against torch_image_peer.py --decode-only on the
           same files (torchvision.io.decode_jpeg, mode RGB, CPU,
           torch.set_num_threads(1); then PIL + the transforms above, what
           a DataLoader worker does per image).

Cores: neither loader is confined. Both run W worker processes on the same
machine, which has more cores than the largest W; loaderd adds its master
(event loop) and its GPU thread, the DataLoader its main process and its
pin-memory thread. The torch peer's docstring says what it does about
torch's threads (the workers run with torch.set_num_threads(1)).

E: --epochs, or else, for loaderd, enough epochs for about --seconds
(default 15) at the warm-up epoch's rate; the DataLoader runs for --seconds
(and at most --epochs when given). At 10,000 images, 4, 8 and 15 workers, a
run takes about 3-5 minutes on a 16-core machine, the dataset included.

It prints a markdown table, the decode lines, the machine, the date and a
goal line; --out DIR keeps the table (table.md), every command's output
(bench.log), the daemon configs and logs. Exit codes: 0 (all measured), 1
(a measurement failed: "error: ..." in its cell), 77 (no GPU and no --host:
loaderd --version reports none).

    bench/image_bench.py --build BUILD [--out DIR] [--data-dir DIR] [--keep]
                         [--images 10000] [--workers 4,8,15] [--epochs E]
                         [--seconds 15] [--skip-torch] [--host] [--device 0]
                         [--decode cpu|gpu|auto] [--gpu-decode-percent 70]
"""

import argparse
import datetime
import importlib.util
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import LoaderdDaemon, Log, StepError, failed_exit, last_line, publish  # noqa: E402  (this directory)
from gpu_bench import (EXIT_SKIP, Failed, Notes, int_list, loaderd_gpus, nvidia_smi,  # noqa: E402
                       raise_memlock, ratio, run, usable_cores)
from host_bench import cpu_model  # noqa: E402  (this directory)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PEER = os.path.join(ROOT, "bench", "torch_image_peer.py")

CLASSES = 100
MIN_SIDE, MAX_SIDE, QUALITY = 300, 600, 90
MEAN_KB_LO, MEAN_KB_HI = 70, 110  # what an ImageNet-like set of this size should average
BATCH = 256
SIZE = 224
# (images per call, host threads) tried for the hardware decoder's ceiling
CEILING_RUNS = ((256, 1), (256, 2), (64, 4))
# and processes of one host thread each, 256 images a call, at once: nvJPEG
# takes one process's submissions one at a time (bench/RESULTS.md)
CEILING_PROCESSES = (2, 3, 4)
# Each image comes with its size and a checked scan, as the daemon's
# workers leave it: the host only submits (loaderd-nvjd-bench --checked).
CEILING_ARGS = ("--mode", "full", "--checked", "header", "--depth", "2", "--passes", "3")
CEILING_START_S = 10  # the processes' timed passes start together this long after launch
# the daemon's decode status lines of a GPU that has decoded (its decoding
# thread's counts and times, cumulative)
STATUS_DECODE_RE = re.compile(r"^  decode pipeline (.* parts [1-9].*)$", re.M)
TRANSFORM = "random_resized_crop(%d) hflip(0.5)" % SIZE
DATA_DIR = "/dev/shm/loaderd-image-bench"
STAGING_SLOTS = 16
MIN_RATE = 50.0            # images/s below which a run is taken to be stuck
MAX_EPOCHS = 1000
DECODE_SECONDS = 2.0
DECODE_CPU_INDEX = 2       # "taskset -c 2" where the machine has a third CPU
GOAL_DATALOADER = 3.0

SUMMARY_RE = re.compile(r"^consume: .* epochs=(\d+) batches=(\d+) samples=(\d+) bytes=\d+ seconds=(\S+) "
                        r"batches_per_s=\S+ samples_per_s=(\S+) MB_per_s=\S+ device=(\S+) call_us=\S+$",
                        re.M)
TORCH_RE = re.compile(r"^torch_images: images_per_s=(\S+)$", re.M)
DECODE_RE = re.compile(r"^decode: images_per_s=(\S+) megapixels_per_s=(\S+)$", re.M)
DECODE_TF_RE = re.compile(r"^decode\+transform: images_per_s=(\S+)$", re.M)
TORCH_DECODE_RE = re.compile(r"^torch_decode: images_per_s=(\S+) megapixels_per_s=(\S+)$", re.M)
TORCH_GPU_RE = re.compile(r"^torch_gpu_decode: images_per_s=(\S+)$", re.M)
TORCH_DECODE_TF_RE = re.compile(r"^torch_decode_transform: images_per_s=(\S+)$", re.M)


class Context:
    """What every step needs: options, paths, the log."""


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


# ---------------------------------------------------------------- dataset

def stamp_text(a):
    return ("mkjpeg --tree --classes %d --per-class %d --min-side %d --max-side %d --quality %d --seed %d\n"
            % (CLASSES, a.images // CLASSES, MIN_SIDE, MAX_SIDE, QUALITY, a.seed))


def jpeg_files(tree):
    """Every file of the tree, sorted (ImageFolder's order)."""
    found = []
    for d, dirs, files in os.walk(tree):
        dirs.sort()
        found += [os.path.join(d, f) for f in sorted(files)]
    return found


def make_tree(ctx):
    """Makes the tree, or reuses the one the stamp describes; its files."""
    a = ctx.args
    stamp = os.path.join(a.data_dir, "stamp")
    try:
        with open(stamp) as f:
            same = f.read() == stamp_text(a)
    except OSError:
        same = False
    if same and os.path.isdir(ctx.tree):
        files = jpeg_files(ctx.tree)
        if len(files) == a.images:
            ctx.log.say("reusing %s (%s)" % (ctx.tree, stamp_text(a).strip()))
            return files
    for path in (stamp, ctx.tree):  # only what this script makes there
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)
    os.makedirs(a.data_dir, exist_ok=True)
    cmd = [os.path.join(ctx.bindir, "mkjpeg"), "--tree", ctx.tree, "--classes", str(CLASSES),
           "--per-class", str(a.images // CLASSES), "--min-side", str(MIN_SIDE),
           "--max-side", str(MAX_SIDE), "--quality", str(QUALITY), "--seed", str(a.seed)]
    start = time.monotonic()
    r = run(ctx.log, "mkjpeg", cmd, 120 + a.images // 20)
    if r.returncode != 0:
        raise StepError("mkjpeg exited %d: %s" % (r.returncode, last_line(r.stderr)))
    ctx.log.say("mkjpeg: %s in %.1f s" % (last_line(r.stdout), time.monotonic() - start))
    with open(stamp, "w") as f:
        f.write(stamp_text(a))
    return jpeg_files(ctx.tree)


def remove_tree(ctx):
    """Removes what make_tree made, and the data directory if that empties it."""
    shutil.rmtree(ctx.tree, ignore_errors=True)
    try:
        os.unlink(os.path.join(ctx.args.data_dir, "stamp"))
        os.rmdir(ctx.args.data_dir)
    except OSError:
        pass


def finish(ctx, mps=None):
    """The end of a run on the tree: the MPS control daemon stopped (when
    there is one), the tree removed unless --keep, the working directory
    removed."""
    if mps:
        mps.stop()
    if not ctx.args.keep:
        remove_tree(ctx)
    shutil.rmtree(ctx.workdir, ignore_errors=True)


def describe_files(ctx, files):
    total = sum(os.path.getsize(f) for f in files)
    ctx.mean_kb = total / len(files) / 1e3
    ctx.log.say("%d files, %.1f MB, mean file size %.1f KB (KB = 1000 bytes)"
                % (len(files), total / 1e6, ctx.mean_kb))
    if not MEAN_KB_LO <= ctx.mean_kb <= MEAN_KB_HI:
        ctx.log.say("warning: mean file size %.1f KB is outside %d-%d KB, unlike ImageNet at this size"
                    % (ctx.mean_kb, MEAN_KB_LO, MEAN_KB_HI))


# ---------------------------------------------------------------- loaderd

class Daemon(LoaderdDaemon):
    """One loaderd with W workers and the one image pipeline, "train"."""

    def __init__(self, ctx, workers, decode="cpu"):
        super().__init__(ctx, "w%d-%s" % (workers, decode), "%d workers, decode %s" % (workers, decode))
        self.workers = workers
        self.decode = decode

    def error_name(self):
        return "loaderd"  # the row of the table says how many workers

    def config_lines(self):
        batch_bytes = BATCH * (3 * SIZE * SIZE + 8)  # the images and the int64 labels
        # The arena holds its rings, the file list and the staging slots;
        # the margin covers the header, the rings, the list and the GPU
        # decoding descriptors.
        slots = getattr(self.ctx.args, "staging_slots", STAGING_SLOTS)  # train_bench has none
        shm_bytes = (slots + 4) * batch_bytes + (256 << 20)
        lines = ["[daemon]",
                 "socket = %s" % self.socket,
                 "workers = %d" % self.workers,
                 "shm_bytes = %d" % shm_bytes,
                 "staging_slots = %d" % slots,
                 "gpu = %s" % ("off" if self.ctx.args.host else "required"),
                 "log_level = info"]
        threads = getattr(self.ctx.args, "gpu_decode_threads", None)  # train_bench has none
        if threads:
            lines.append("gpu_decode_threads = %d" % threads)
        helpers = getattr(self.ctx.args, "gpu_decode_helpers", None)
        if helpers:
            lines.append("gpu_decode_helpers = %s" % helpers)
        lines += ["",
                  "[pipeline.train]",
                  "source = imagefolder:%s" % self.ctx.tree,
                  "batch_size = %d" % BATCH,
                  "shuffle = true",
                  "drop_last = true",
                  "transform = %s" % TRANSFORM,
                  "dtype = uint8",
                  "layout = nchw",
                  "decode = %s" % self.decode]
        if self.decode == "auto":
            lines.append("gpu_decode_percent = %d" % self.ctx.args.gpu_decode_percent)
        lines.append("")
        return lines

    def check_started(self, status):
        m = re.search(r"^delivery: (.*)$", status, re.M)
        if not self.ctx.args.host and not (m and "device" in m.group(1)):
            raise StepError("loaderd offers no device delivery: %s" % (m.group(1) if m else "no delivery line"))


def consume(ctx, daemon, epochs, timeout_s, what):
    """One `loaderctl consume` of the train pipeline; its summary as a dict."""
    daemon.check_alive()
    cmd = [ctx.loaderctl, "--socket", daemon.socket, "consume", "--pipeline", "train",
           "--epochs", str(epochs), "--name", "image-bench", "--quiet"]
    if not ctx.args.host:
        cmd += ["--device", str(ctx.args.device)]
    r = run(ctx.log, "%s, %d workers" % (what, daemon.workers), cmd, timeout_s)
    if r.returncode != 0:
        raise StepError("consume exited %d: %s" % (r.returncode, last_line(r.stderr) or daemon.log_tail()))
    m = SUMMARY_RE.search(r.stdout)
    if not m:
        raise StepError("no summary line from loaderctl consume")
    s = {"epochs": int(m.group(1)), "batches": int(m.group(2)), "samples": int(m.group(3)),
         "seconds": float(m.group(4)), "rate": float(m.group(5)), "device": m.group(6)}
    if ctx.args.host != (s["device"] == "host"):
        raise StepError("batches were delivered to %s" % s["device"])
    if s["epochs"] != epochs or s["rate"] <= 0:
        raise StepError("consume delivered %d of %d epochs at %.1f images/s" % (s["epochs"], epochs, s["rate"]))
    return s


def read_stat(path):
    """(command name, CPU seconds (user + system), parent pid) of a /proc
    stat file: a process's (every thread's CPU), or one thread's, named as
    pthread_setname_np set it; (None, 0.0, None) where it is gone."""
    try:
        with open(path) as f:
            name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
    except OSError:
        return None, 0.0, None
    fields = rest.split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[1])


def proc_stat(pid):
    """(CPU seconds of every thread, parent pid) of process pid, or
    (0.0, None) where it is gone."""
    return read_stat("/proc/%s/stat" % pid)[1:]


def children(pid):
    """{pid: CPU seconds} of process pid's children (the workers, the
    decoder processes)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            cpu, ppid = proc_stat(entry)
            if ppid == pid:
                out[int(entry)] = cpu
    return out


def cpu_seconds(pid):
    """CPU seconds (user + system) of process pid, every thread, and of its
    children, from /proc."""
    return proc_stat(pid)[0] + sum(children(pid).values())


def cpu_parts(pid):
    """{part: (count, CPU seconds)} of process pid: its threads by name
    (the event loop, GPU threads, decode helpers) and its children by
    program (workers, decoder processes)."""
    out = {}

    def add(name, cpu):
        n, s = out.get(name, (0, 0.0))
        out[name] = (n + 1, s + cpu)

    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        tids = []
    for tid in tids:
        name, cpu, _ = read_stat("/proc/%d/task/%s/stat" % (pid, tid))
        if name is not None:
            add("loaderd: " + re.sub(r"\d+(\.\d+)?$", "N", name), cpu)
    for child, cpu in children(pid).items():
        name = read_stat("/proc/%d/stat" % child)[0]
        add(name or "child", cpu)
    return out


def cpu_parts_line(before, after, seconds):
    """The cores each part of cpu_parts kept busy between two readings,
    largest first, as one line."""
    rows = []
    for name, (n, cpu) in after.items():
        busy = (cpu - before.get(name, (0, 0.0))[1]) / seconds
        if busy >= 0.005:
            rows.append((busy, "%s%s %.2f" % (name, " x%d" % n if n > 1 else "", busy)))
    return ", ".join(r for _, r in sorted(rows, reverse=True))


def log_decode_status(ctx, daemon, what):
    """The daemon's decode lines of the GPUs that decoded, into the log."""
    try:
        text = daemon.status() or ""
    except subprocess.TimeoutExpired:
        text = ""
    for line in STATUS_DECODE_RE.findall(text):
        ctx.log.say("%s: decode pipeline %s" % (what, line))


def log_gpu_memory(ctx, pid, what):
    """The device memory of the daemon and of its children (decoder
    processes) that use the GPU, from nvidia-smi, into the log."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return
    mine = {pid} | set(children(pid))
    used = []
    for line in r.stdout.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 2 and f[0].isdigit() and int(f[0]) in mine:
            used.append("%s %s MiB" % ("loaderd" if int(f[0]) == pid else "child %s" % f[0], f[1]))
    if used:
        ctx.log.say("%s: GPU memory (nvidia-smi): %s" % (what, ", ".join(used)))


def measure_loaderd(ctx, workers, decode="cpu"):
    """(images/s, CPU us per image of the daemon and its workers) of one
    daemon with `workers` workers and the pipeline's `decode`, or a Failed."""
    a = ctx.args
    daemon = Daemon(ctx, workers, decode)
    what = "loaderd, %d workers, decode %s" % (workers, decode)
    try:
        daemon.start()
        warm = consume(ctx, daemon, 1, 60 + int(a.images / MIN_RATE), "warm-up")
        epochs = a.epochs or min(MAX_EPOCHS, max(1, math.ceil(a.seconds * warm["rate"] / a.images)))
        cpu0, parts0 = cpu_seconds(daemon.proc.pid), cpu_parts(daemon.proc.pid)
        timed = consume(ctx, daemon, epochs, 60 + int(3 * epochs * a.images / warm["rate"]), "timed")
        cpu = cpu_seconds(daemon.proc.pid) - cpu0
        ctx.log.say("%s: cores busy by part: %s"
                    % (what, cpu_parts_line(parts0, cpu_parts(daemon.proc.pid), timed["seconds"])))
        if decode != "cpu":
            log_decode_status(ctx, daemon, what)
            log_gpu_memory(ctx, daemon.proc.pid, what)
    except StepError as e:
        ctx.log.say("%s: %s" % (what, e))
        return Failed("error: %s" % e)
    finally:
        daemon.stop()
    per_image_us = cpu / max(1, timed["samples"]) * 1e6
    ctx.log.say("%s: %.1f images/s (%s, %d images in %.2f s; warm-up epoch %.1f images/s); "
                "%.0f us of CPU per image (daemon and workers), %.1f cores busy"
                % (what, timed["rate"], plural(timed["epochs"], "epoch"), timed["samples"],
                   timed["seconds"], warm["rate"], per_image_us, cpu / timed["seconds"]))
    return (timed["rate"], per_image_us)


def measure_ceiling(ctx):
    """The GPU's hardware JPEG decoder on the same files: loaderd-nvjd-bench,
    whole images given with their sizes (CEILING_ARGS), each host thread
    with two batches on the engines, the
    best of CEILING_RUNS in one process and of CEILING_PROCESSES processes
    at once (their timed passes started at one wall-clock time; all their
    images over the span from that start to the last one's end), or a
    Failed."""
    exe = os.path.join(ctx.bindir, "loaderd-nvjd-bench")
    if not os.path.exists(exe):
        return Failed("skipped: loaderd-nvjd-bench was not built (no nvjpeg.h)")
    best = Failed("error: no figure")
    for batch, threads in CEILING_RUNS:
        try:
            r = run(ctx.log, "hardware decoder, batch %d, %d threads" % (batch, threads),
                    [exe, "--dir", ctx.tree, "--batch", str(batch), "--threads", str(threads),
                     *CEILING_ARGS], 180)
        except StepError as e:
            return Failed("error: %s" % e)
        m = re.search(r"mode=full .*images_per_s=(\S+)", r.stdout)
        if r.returncode != 0 or not m:
            return Failed("error: %s" % (last_line(r.stderr) or "no figure"))
        ctx.log.say("hardware decoder, %d images per call, %d threads: %s images/s" % (batch, threads, m.group(1)))
        if isinstance(best, Failed) or float(m.group(1)) > best:
            best = float(m.group(1))
    for n in CEILING_PROCESSES:
        # Each loads the files into page-locked memory first (seconds): the
        # timed passes of all start at one wall-clock time.
        cmd = [exe, "--dir", ctx.tree, "--batch", "256", "--threads", "1", *CEILING_ARGS,
               "--start-at", "%.3f" % (time.time() + CEILING_START_S)]
        ctx.log.write("\n$ %s    # %d at once\n" % (shlex.join(cmd), n))
        procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(n)]
        spans = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                return Failed("error: loaderd-nvjd-bench timed out")
            ctx.log.write(out + err)
            m = re.search(r"mode=full .*started=(\S+) ended=(\S+) images=(\d+)", out)
            if p.returncode != 0 or not m:
                return Failed("error: %s" % (last_line(err) or "no figure"))
            spans.append((float(m.group(1)), float(m.group(2)), int(m.group(3))))
        late = max(s[0] for s in spans) - min(s[0] for s in spans)
        if late > 0.05:  # one was still loading at the start time
            return Failed("error: the %d processes started %.2f s apart" % (n, late))
        rate = sum(s[2] for s in spans) / (max(s[1] for s in spans) - min(s[0] for s in spans))
        ctx.log.say("hardware decoder, %d processes at once (256 images per call, 1 thread each): "
                    "%.1f images/s" % (n, rate))
        best = max(best, rate)
    ctx.log.say("hardware decoder ceiling: %.1f images/s" % best)
    return best


def measure_gpu_peer(ctx):
    """torchvision's decode_jpeg on the GPU with v2 transforms there."""
    a = ctx.args
    what = "torchvision GPU decode"
    cmd = [sys.executable, PEER, "--gpu-decode", "--root", ctx.tree, "--batch-size", str(BATCH),
           "--size", str(SIZE), "--device", str(a.device), "--seconds", str(a.seconds)]
    return run_peer(ctx, what, cmd, 180 + int(2 * a.seconds), TORCH_GPU_RE)


# ---------------------------------------------------------------- peers

def peer_result(ctx, what, r, regex):
    """The figures regex finds in a peer's stdout, or a Failed (skipped: it
    exited 77, error: otherwise)."""
    m = regex.search(r.stdout)
    if r.returncode == 0 and m:
        return tuple(float(g) for g in m.groups())
    detail = re.sub(r"^[\w-]+: ", "", last_line(r.stderr))
    why = "%s: %s" % ("skipped" if r.returncode == EXIT_SKIP else "error: exited %d" % r.returncode, detail)
    ctx.log.say("%s: %s" % (what, why))
    return Failed(why)


def measure_torch(ctx, workers):
    a = ctx.args
    what = "DataLoader, %d workers" % workers
    cmd = [sys.executable, PEER, "--root", ctx.tree, "--workers", str(workers), "--batch-size", str(BATCH),
           "--size", str(SIZE), "--device", str(a.device), "--seconds", str(a.seconds)]
    timeout_s = 180 + int(2 * a.seconds)
    if a.epochs:
        cmd += ["--epochs", str(a.epochs)]
        timeout_s = 180 + int(a.epochs * a.images / MIN_RATE)
    if a.host:
        cmd.append("--host")
    return run_peer(ctx, what, cmd, timeout_s, TORCH_RE)


def run_peer(ctx, what, cmd, timeout_s, regex):
    """A peer's images/s (the first figure regex finds), or a Failed."""
    try:
        r = run(ctx.log, what, cmd, timeout_s)
    except StepError as e:
        ctx.log.say("%s: %s" % (what, e))
        return Failed("error: %s" % e)
    res = peer_result(ctx, what, r, regex)
    if isinstance(res, Failed):
        return res
    ctx.log.say("%s: %.1f images/s" % (what, res[0]))
    return res[0]


class pinned_to:
    """This process (and so every child started meanwhile) on one CPU."""

    def __init__(self, cpu):
        self.cpu = cpu

    def __enter__(self):
        self.saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {self.cpu})

    def __exit__(self, *exc):
        os.sched_setaffinity(0, self.saved)


def decode_sample(files, n):
    """n files spread evenly over the tree (every class, small and large)."""
    step = max(1, len(files) // n)
    return files[::step][:n]


def decode_run(ctx, what, cmd, figures):
    """Runs one decode-only program; {key: tuple or Failed} for each (key, name, regex) of figures."""
    try:
        r = run(ctx.log, what, cmd, 180)
    except StepError as e:
        return {key: Failed("error: %s" % e) for key, _, _ in figures}
    return {key: peer_result(ctx, name, r, regex) for key, name, regex in figures}


def measure_decode(ctx, files):
    """{"loaderd": (images/s, MP/s), "loaderd_tf": (images/s,), "torch": ..., "torch_tf": ...},
    each a tuple or a Failed."""
    a = ctx.args
    exe = os.path.join(ctx.bindir, "loaderd-decode-bench")
    with pinned_to(ctx.decode_cpu):
        res = decode_run(ctx, "decode bench", [exe, "--seconds", str(DECODE_SECONDS), "--transform", TRANSFORM]
                         + files, [("loaderd", "loaderd-decode-bench", DECODE_RE),
                                   ("loaderd_tf", "loaderd-decode-bench", DECODE_TF_RE)])
        if a.skip_torch:
            res["torch"] = res["torch_tf"] = Failed("skipped: --skip-torch")
        else:
            res.update(decode_run(ctx, "torch decode", [sys.executable, PEER, "--decode-only", "--seconds",
                                                        str(DECODE_SECONDS), "--size", str(SIZE)] + files,
                                  [("torch", "torchvision decode_jpeg", TORCH_DECODE_RE),
                                   ("torch_tf", "PIL + transforms", TORCH_DECODE_TF_RE)]))
    for key, name in (("loaderd", "loaderd decode"), ("loaderd_tf", "loaderd decode+transform"),
                      ("torch", "torchvision decode_jpeg"), ("torch_tf", "PIL + transforms")):
        v = res[key]
        if not isinstance(v, Failed):
            ctx.log.say("%s, one core: %.1f images/s" % (name, v[0]))
    return res


# ---------------------------------------------------------------- report

def first(v):
    return v if isinstance(v, Failed) else v[0]


def machine_line(ctx):
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return ("machine: CPU %s, %d cores (%d usable), %.0f GiB, kernel %s; GPU %s"
            % (cpu_model(), os.cpu_count() or 0, usable_cores(), mem, platform.release(),
               ctx.gpu_desc or "none found"))


def rate_of(v):
    return v if isinstance(v, Failed) else v[0]


def goal_line(ctx, res):
    ratios, missing = [], []
    for w in ctx.args.worker_counts:
        lo, t = rate_of(res["loaderd"][(w, "cpu")]), res["torch"][w]
        if isinstance(lo, Failed) or isinstance(t, Failed):
            missing.append(w)
        else:
            ratios.append((w, lo / t))
    figures = ", ".join("%.2fx at %d" % (r, w) for w, r in ratios)
    head = "goal: decode = cpu >= %gx the DataLoader at every worker count: " % GOAL_DATALOADER
    if missing:
        return head + "not determined (no figure with %s workers%s)" % (
            ", ".join(map(str, missing)), "; " + figures if figures else "")
    met = all(r >= GOAL_DATALOADER for _, r in ratios)
    return head + "%s (%s)" % ("met" if met else "missed", figures)


def decode_lines(ctx, dec, notes):
    lo, t, lo_tf, t_tf = dec["loaderd"], dec["torch"], dec["loaderd_tf"], dec["torch_tf"]

    def rate(v):
        if isinstance(v, Failed):
            return notes.cell(v, "")
        return "%.1f images/s" % v[0] + (", %.1f megapixels/s" % v[1] if len(v) > 1 else "")

    return ["decode only, one thread pinned to CPU %d, %d files of the tree in memory, full-size RGB:"
            % (ctx.decode_cpu, len(ctx.decode_files)),
            "  loaderd (image/jpeg.h, DCT scale 1): %s" % rate(lo),
            "  torchvision.io.decode_jpeg (CPU, mode RGB, 1 thread): %s" % rate(t),
            "  loaderd / torchvision: %s" % ratio(first(lo), first(t), "%.2fx"),
            "decode+transform, the same files and core, %s, uint8 CHW:" % TRANSFORM,
            "  loaderd (the worker's image_sample(): region decode at a reduced DCT scale, resize, flip): %s"
            % rate(lo_tf),
            "  PIL open + convert(\"RGB\") + the torchvision transforms (a DataLoader worker's path): %s"
            % rate(t_tf),
            "  loaderd / PIL + torchvision: %s" % ratio(first(lo_tf), first(t_tf), "%.2fx")]


def head_lines(ctx):
    """The report's first lines, train_bench.py's too: the machine, the
    date, the command, the dataset."""
    a = ctx.args
    return [machine_line(ctx),
            "date: %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "command: %s" % shlex.join([sys.argv[0]] + sys.argv[1:]),
            "dataset: %d JPEGs in %d classes, %d-%d px, quality %d (mkjpeg --tree, seed %d), mean "
            "%.1f KB, in %s" % (a.images, CLASSES, MIN_SIDE, MAX_SIDE, QUALITY, a.seed, ctx.mean_kb,
                                a.data_dir)]


def report(ctx, res, dec):
    a = ctx.args
    where = "host memory (--host)" if a.host else "GPU %d" % a.device
    out = head_lines(ctx) + [
        "both loaders: batch %d, shuffled, drop_last, %s, uint8, delivered to %s; loaderd %d staging slots, "
        "decode = %s (auto: gpu_decode_percent %d), warm-up epoch, then %s; DataLoader: pin_memory %s, "
        "persistent workers, prefetch_factor 4, max(8, W) warm-up batches, then %s"
        % (BATCH, TRANSFORM, where, a.staging_slots, ", ".join(a.decodes), a.gpu_decode_percent,
           plural(a.epochs, "epoch") if a.epochs else "about %g s of epochs" % a.seconds,
           "off" if a.host else "on", "up to %s or %g s" % (plural(a.epochs, "epoch"), a.seconds) if a.epochs
           else "%g s" % a.seconds),
        "",
        "| workers | " + " | ".join("loaderd %s images/s | CPU us/image" % d for d in a.decodes) +
        " | DataLoader images/s | " + " | ".join("%s / DataLoader" % d for d in a.decodes) + " |",
        "|---|" + "---|---|" * len(a.decodes) + "---|" + "---|" * len(a.decodes)]
    notes = Notes()
    for w in a.worker_counts:
        t = res["torch"][w]
        cells = []
        for d in a.decodes:
            v = res["loaderd"][(w, d)]
            cells += [notes.cell(rate_of(v), "%.1f"),
                      notes.cell(v if isinstance(v, Failed) else v[1], "%.0f")]
        out.append("| %d | %s | %s | %s |"
                   % (w, " | ".join(cells), notes.cell(t, "%.1f"),
                      " | ".join(ratio(rate_of(res["loaderd"][(w, d)]), t, "%.2fx") for d in a.decodes)))
    if any(d != "cpu" for d in a.decodes):
        ceil, peer = res["ceiling"], res["gpu_peer"]
        out += ["", "the GPU's hardware JPEG decoder on the same files (loaderd-nvjd-bench, whole images "
                "given with their sizes, two batches on the engines per host thread, the best of %s images per call x host threads "
                "in one process and of %s processes at once): %s images/s"
                % (", ".join("%dx%d" % bt for bt in CEILING_RUNS),
                   ", ".join(str(n) for n in CEILING_PROCESSES), notes.cell(ceil, "%.0f")),
                "torchvision decode_jpeg(device=\"cuda\") + v2 RandomResizedCrop(%d) and "
                "RandomHorizontalFlip on the GPU, one process, batch %d: %s images/s"
                % (SIZE, BATCH, notes.cell(peer, "%.0f"))]
        for w in a.worker_counts:
            for d in a.decodes:
                if d == "cpu":
                    continue
                v = rate_of(res["loaderd"][(w, d)])
                out.append("  %d workers, decode %s: %s of the hardware decoder, %s the torchvision GPU "
                           "peer" % (w, d, ratio(v, ceil, "%.2f"), ratio(v, peer, "%.2fx")))
    out += [""] + decode_lines(ctx, dec, notes)
    if notes.messages:
        out += [""] + notes.lines()
    out += ["", goal_line(ctx, res)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def add_tree_args(ap, logs, data_dir_note=""):
    """The options of the build, the output and the JPEG tree, train_bench.py's
    too; logs says whose logs --out keeps, data_dir_note ends --data-dir's
    help."""
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    ap.add_argument("--out", help="directory for the table, the logs and %s" % logs)
    ap.add_argument("--data-dir", default=DATA_DIR,
                    help="where the JPEG tree is made (default %s%s)" % (DATA_DIR, data_dir_note))
    ap.add_argument("--keep", action="store_true", help="keep the tree for the next run")
    ap.add_argument("--images", type=int, default=10000,
                    help="images, a multiple of %d (default 10000)" % CLASSES)
    ap.add_argument("--seed", type=int, default=1, help="mkjpeg seed (default 1)")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_args(ap, "loaderd's logs")
    ap.add_argument("--workers", default="4,8,15", help="worker counts (default 4,8,15)")
    ap.add_argument("--epochs", type=int, default=0,
                    help="timed epochs (default: about --seconds worth for loaderd; the DataLoader "
                    "runs --seconds)")
    ap.add_argument("--seconds", type=float, default=15.0,
                    help="target length of a measurement in seconds (default 15)")
    ap.add_argument("--decode-files", type=int, default=256,
                    help="files of the decode-only runs (default 256)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--host", action="store_true",
                    help="deliver to host memory, no GPU needed (the DataLoader skips pinning and copies)")
    ap.add_argument("--skip-torch", action="store_true", help="leave out every torch measurement")
    ap.add_argument("--decode", default="cpu,gpu,auto",
                    help="the pipeline's decode values to measure, each a daemon of its own "
                    "(default cpu,gpu,auto; --host: cpu)")
    ap.add_argument("--gpu-decode-percent", type=int, default=100,
                    help="the pipeline's gpu_decode_percent, for --decode auto (default 100, the config's)")
    ap.add_argument("--gpu-decode-threads", type=int,
                    help="the daemon's gpu_decode_threads (default: the daemon's)")
    ap.add_argument("--gpu-decode-helpers", choices=("threads", "processes"),
                    help="the daemon's gpu_decode_helpers (default: the daemon's)")
    ap.add_argument("--staging-slots", type=int, default=STAGING_SLOTS,
                    help="the daemon's staging_slots (default %(default)s; one client holds at most "
                    "half of them)")
    a = ap.parse_args()
    a.worker_counts = int_list(ap, "--workers", a.workers, "counts", 256)
    a.decodes = [d for d in a.decode.split(",") if d]
    if a.host:
        a.decodes = ["cpu"]
    if not a.decodes or not set(a.decodes) <= {"cpu", "gpu", "auto"} or "cpu" not in a.decodes:
        ap.error("--decode: a list of cpu, gpu and auto that includes cpu")
    if a.images < CLASSES or a.images % CLASSES or a.images // CLASSES < 1:
        ap.error("--images: a positive multiple of %d, please" % CLASSES)
    if a.images // CLASSES > 100000 or a.epochs < 0 or a.seconds <= 0 or a.decode_files < 1 or a.seed < 0:
        ap.error("--images at most %d, --epochs >= 0, --seconds > 0, --decode-files >= 1, --seed >= 0"
                 % (CLASSES * 100000))
    if a.images < BATCH:
        ap.error("--images: at least one batch (%d)" % BATCH)
    if not 1 <= a.staging_slots <= 1024:
        ap.error("--staging-slots: 1..1024, as the daemon takes")
    a.data_dir = os.path.abspath(a.data_dir)
    return a


def new_context(a, bindir, name):
    """The context of a run of bench `name` (train_bench.py's too): the
    options, the binaries, the tree, --out made, a working directory, the
    log."""
    ctx = Context()
    ctx.args = a
    ctx.bindir = bindir
    ctx.loaderctl = os.path.join(bindir, "loaderctl")
    ctx.tree = os.path.join(a.data_dir, "tree")
    ctx.mean_kb = 0.0
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    ctx.workdir = tempfile.mkdtemp(prefix="loaderd-%s-" % name.replace("_", "-"))
    ctx.logdir = a.out or ctx.workdir
    ctx.log = Log(name, os.path.join(a.out, "bench.log") if a.out else None)
    return ctx


def torch_context(a, bindir, name, why="the training needs them"):
    """The context of bench `name` (new_context) where loaderd sees GPU
    a.device and torch and torchvision import; else the skip said and
    EXIT_SKIP."""
    version, gpus, (uuid, gpu_name) = loaderd_gpus(bindir, a.device)
    if not gpus or uuid is None:
        print("%s: skipped: loaderd --version lists no gpu %d" % (name, a.device))
        return EXIT_SKIP
    missing = [m for m in ("torch", "torchvision") if importlib.util.find_spec(m) is None]
    if missing:
        print("%s: skipped: %s not importable (%s)" % (name, " and ".join(missing), why))
        return EXIT_SKIP
    ctx = new_context(a, bindir, name)
    ctx.gpu_desc = nvidia_smi(ctx.log, uuid) or gpu_name
    return ctx


def setup(a, bindir):
    """The context, or an exit code when there is nothing to measure here."""
    ctx = new_context(a, bindir, "image_bench")
    cpus = sorted(os.sched_getaffinity(0))
    ctx.decode_cpu = cpus[DECODE_CPU_INDEX] if len(cpus) > DECODE_CPU_INDEX else cpus[-1]
    return ctx


def main():
    a = parse_args()
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    for exe in ("loaderd", "loaderd-worker", "loaderctl", "mkjpeg", "loaderd-decode-bench"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("image_bench: %s/%s is missing; build first (cmake -S . -B build "
                     "-DCMAKE_BUILD_TYPE=Release && cmake --build build -j)" % (bindir, exe))
    version, gpus, (uuid, name) = loaderd_gpus(bindir, a.device)
    if not a.host and not gpus:
        print("image_bench: skipped: %s --version %s (--host measures host delivery)"
              % (os.path.join(bindir, "loaderd"), "reports gpus: 0" if gpus == 0 else "has no 'gpus:' line"))
        return EXIT_SKIP
    if not a.host and uuid is None:
        sys.exit("image_bench: loaderd --version lists no gpu %d:\n%s" % (a.device, version))

    ctx = setup(a, bindir)
    ctx.log.write("loaderd --version:\n%s" % version)
    ctx.gpu_desc = nvidia_smi(ctx.log, uuid) or ('"%s"' % name if name else "")
    if not a.host:
        raise_memlock(ctx.log)
    res = {"loaderd": {}, "torch": {}, "ceiling": Failed("skipped"), "gpu_peer": Failed("skipped")}
    try:
        try:
            files = make_tree(ctx)
        except (StepError, OSError) as e:  # nothing can be measured without the files
            ctx.log.say("making the dataset: %s" % e)
            return 1
        describe_files(ctx, files)
        ctx.decode_files = decode_sample(files, a.decode_files)
        dec = measure_decode(ctx, ctx.decode_files)
        for w in a.worker_counts:
            for d in a.decodes:
                res["loaderd"][(w, d)] = measure_loaderd(ctx, w, d)
            res["torch"][w] = Failed("skipped: --skip-torch") if a.skip_torch else measure_torch(ctx, w)
        if any(d != "cpu" for d in a.decodes):
            res["ceiling"] = measure_ceiling(ctx)
            res["gpu_peer"] = (Failed("skipped: --skip-torch") if a.skip_torch else
                               measure_gpu_peer(ctx))
    finally:
        if not a.keep:
            remove_tree(ctx)
        # Sockets only; with no --out, also the configs and loaderd's logs.
        shutil.rmtree(ctx.workdir, ignore_errors=True)

    publish(ctx.log, a.out, report(ctx, res, dec))
    return failed_exit([rate_of(v) for v in res["loaderd"].values()] + list(res["torch"].values()) +
                       list(dec.values()) + [res["ceiling"], res["gpu_peer"]])


if __name__ == "__main__":
    sys.exit(main())
