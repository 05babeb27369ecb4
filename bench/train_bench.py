#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""train_bench: end-to-end training throughput of a ResNet on one GPU, fed
by loaderd, by torchvision's ImageFolder and DataLoader, and by random data
already on the GPU (the ceiling), measured in one run on one machine.

  dataset  the image benchmark's set, made by bench/image_bench.py's own
           make_tree() (`mkjpeg --tree`, 100 classes, 300-600 px, quality
           90, seed --seed) in --data-dir (default the image benchmark's,
           /dev/shm/loaderd-image-bench), reused when its stamp says it was
           made with the same parameters, removed at the end unless --keep;
  loaderd  one daemon (workers = --workers, default 15; 16 staging slots)
           with the image benchmark's pipeline: shuffle, batch_size 256,
           drop_last, `random_resized_crop(224) hflip(0.5)`, uint8, but
           `layout = nhwc` (the example's recommendation: the batch is then
           channels_last without a copy), decode = --decode (default auto:
           the GPU's hardware JPEG decoder and the workers);
  runs     examples/train_resnet.py, one process per (model, loader), for
           model in --models (default resnet18,resnet50) and loader in
           synthetic, loaderd, torch: --steps timed steps after --warmup
           untimed ones, batch 256, 224x224, --classes 100, autocast as the
           example picks it (bf16 on an H100), channels_last, SGD; loaderd
           through the daemon's pipeline "train" delivered to --device;
           torch with ImageFolder + DataLoader(--workers workers,
           pin_memory, persistent_workers, drop_last), non-blocking copies.
           Each prints one JSON line (--json): images/s and the data-wait
           fraction, measured as the example's docstring says.

Why these step counts: the timed window should be long against what a
loader holds ready when it opens (the DataLoader's 2 batches per worker, 30
at 15 workers; loaderd's device ring and staging slots), which a
data-bound run would otherwise count as if made at the loader's pace, and
the warm-up long enough for cuDNN's search and for those buffers to start
draining. Defaults: --warmup 50, --steps 200, so six runs of 64,000 images
each. Sized for a 16-core H100 host: the slowest runs, the DataLoader's
(2,762-2,885 images/s at 15 workers in bench/RESULTS.md) and ResNet-50's
(of the same order on an H100), take 20-25 s of steps plus their start,
and mkjpeg makes the 10,000 files in about a minute: about 5 minutes in
all.

The loaderd daemon stays up, idle, during the synthetic and torch runs
(its workers only work for an attached client). Cores: the DataLoader's
workers and loaderd's share the machine's cores with the training process,
neither pinned.

It prints the machine, the date, the setup, a markdown table with one row
per model (images/s of each loader, the data-wait fractions of loaderd
and torch, loaderd / synthetic and loaderd / torch) and the goal line
(loaderd >= 0.97x synthetic for every model).
--out DIR keeps the table (table.md), every command's output (bench.log),
each run's JSON line (runs.jsonl), the daemon's config and log. Exit codes:
0 (all measured), 1 (a run failed: "error: ..." in its cell), 77 (no GPU:
loaderd --version reports none; or torch or torchvision missing).

    bench/train_bench.py --build BUILD [--out DIR] [--data-dir DIR] [--keep]
                         [--images 10000] [--steps 200] [--warmup 50]
                         [--models resnet18,resnet50]
                         [--loaders synthetic,loaderd,torch] [--workers 15]
                         [--device 0]
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_bench  # noqa: E402  (this directory)
from bench_daemon import StepError, failed_exit, last_line, publish  # noqa: E402
from gpu_bench import (EXIT_SKIP, Failed, Notes, loaderd_gpus, nvidia_smi, raise_memlock,  # noqa: E402
                       ratio, run)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
EXAMPLE = os.path.join(ROOT, "examples", "train_resnet.py")
MODELS = ("resnet18", "resnet50", "vit_b_16")  # any of these; the first two by default
LOADERS = ("synthetic", "loaderd", "torch")
PIPELINE = "train"
GOAL_SYNTHETIC = 0.97
MIN_TRAIN_RATE = 200.0   # images/s below which a run is taken to be stuck
START_TIMEOUT_S = 180    # a run's start: torch, CUDA, cuDNN's search, the loader


# ---------------------------------------------------------------- loaderd

class Daemon(image_bench.Daemon):
    """The image benchmark's daemon and pipeline, delivering NHWC."""

    def config_lines(self):
        lines = super().config_lines()
        if "layout = nchw" not in lines:
            raise StepError("image_bench's pipeline has no 'layout = nchw' line to make nhwc")
        return ["layout = nhwc" if ln == "layout = nchw" else ln for ln in lines]


# ---------------------------------------------------------------- runs

def example_command(ctx, model, loader, socket):
    a = ctx.args
    cmd = [sys.executable, EXAMPLE, "--model", model, "--loader", loader, "--steps", str(a.steps),
           "--warmup", str(a.warmup), "--batch-size", str(image_bench.BATCH), "--size", str(image_bench.SIZE),
           "--classes", str(image_bench.CLASSES), "--device", "cuda:%d" % a.device, "--json"]
    if loader == "loaderd":
        cmd += ["--pipeline", PIPELINE, "--socket", socket]
    elif loader == "torch":
        cmd += ["--data", ctx.tree, "--workers", str(a.workers)]
    return cmd


def parse_run(ctx, r, model, loader):
    """The figures of one run's JSON line, checked against what was asked;
    raises StepError."""
    if r.returncode != 0:
        raise StepError("exited %d: %s" % (r.returncode, last_line(r.stderr).replace("train_resnet: ", "")))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise StepError("no JSON line on stdout")
    try:
        f = json.loads(lines[-1])
    except ValueError as e:
        raise StepError("unreadable JSON line (%s)" % e)
    a = ctx.args
    size = [image_bench.SIZE, image_bench.SIZE]
    if f.get("model") != model or f.get("loader") != loader or f.get("steps") != a.steps:
        raise StepError("the run reports %s/%s/%s steps" % (f.get("model"), f.get("loader"), f.get("steps")))
    if f.get("size") != size or f.get("batch_size") != image_bench.BATCH:
        raise StepError("the run had batch %s of %s images" % (f.get("batch_size"), f.get("size")))
    if loader == "loaderd" and f.get("layout") != "nhwc":
        raise StepError("the pipeline delivered %s, not nhwc" % f.get("layout"))
    if not isinstance(f.get("images_per_s"), (int, float)) or f["images_per_s"] <= 0:
        raise StepError("images_per_s %r" % f.get("images_per_s"))
    return f


def measure(ctx, daemon, model, loader):
    """One run's figures (a dict), or a Failed."""
    a = ctx.args
    what = "%s, %s" % (model, loader)
    timeout_s = START_TIMEOUT_S + int((a.warmup + a.steps) * image_bench.BATCH / MIN_TRAIN_RATE)
    try:
        if loader == "loaderd":
            daemon.check_alive()
        r = run(ctx.log, what, example_command(ctx, model, loader, daemon.socket), timeout_s)
        f = parse_run(ctx, r, model, loader)
    except StepError as e:
        if loader == "loaderd" and daemon.proc is not None and daemon.proc.poll() is not None:
            e = StepError("%s; %s" % (e, daemon.log_tail()))
        ctx.log.say("%s: %s" % (what, e))
        return Failed("error: %s" % e)
    ctx.log.say("%s: %.1f images/s, data wait %.1f%% (%s, amp %s, %.1f s timed)"
                % (what, f["images_per_s"], 100 * f["data_wait_fraction"], f.get("device"), f.get("amp"),
                   f.get("seconds", 0)))
    st = f.get("loader_stats")
    if st:  # the whole run, warm-up included
        ctx.log.say("%s: the client %s; %d images decoded on the GPU in the training's process, %d on "
                    "its CPU; its decoding thread: %.2f s of CPU, %.2f s submitting; the training waited "
                    "%.2f s for data: %.2f s for its own decoding of batches read earlier (the engines "
                    "behind), %.2f s for that of batches that waited in the socket until next() (their "
                    "decoding began late), the rest for the workers"
                    % (what, "decoded its GPU's JPEGs" if st["decoding"] else
                       "did not decode (%s)" % (st["decode_why_not"] or "no GPU decoding"),
                       st["images_gpu"], st["images_cpu"], st["decode_thread_cpu_s"], st["submit_s"],
                       st["wait_s"], st.get("decode_wait_s", 0.0), st.get("decode_late_s", 0.0)))
    ctx.runs.append(f)
    return f


# ---------------------------------------------------------------- report

def rate(v):
    return v if isinstance(v, Failed) else v["images_per_s"]


def wait(v):
    return v if isinstance(v, Failed) else 100 * v["data_wait_fraction"]


def goal_line(ctx, res):
    ratios, missing = [], []
    for m in ctx.args.model_list:
        lo, syn = res[m].get("loaderd"), res[m].get("synthetic")
        if lo is None or syn is None or isinstance(lo, Failed) or isinstance(syn, Failed):
            missing.append(m)
        else:
            ratios.append((m, lo["images_per_s"] / syn["images_per_s"]))
    figures = ", ".join("%.3fx %s" % (r, m) for m, r in ratios)
    head = "goal: loaderd >= %gx the synthetic ceiling for every model: " % GOAL_SYNTHETIC
    if missing:
        return head + "not determined (no figure for %s%s)" % (", ".join(missing),
                                                               "; " + figures if figures else "")
    met = all(r >= GOAL_SYNTHETIC for _, r in ratios)
    return head + "%s (%s)" % ("met" if met else "missed", figures)


def setup_line(ctx):
    a = ctx.args
    f = ctx.runs[0] if ctx.runs else {}
    return ("each run: examples/train_resnet.py --steps %d --warmup %d, batch %d, %dx%d, %d classes, "
            "channels_last, amp %s, torch %s, on %s; loaderd: %d workers, pipeline `%s`, uint8 NHWC, "
            "%d staging slots, decode = %s; torch: ImageFolder + DataLoader(%d workers, pin_memory, persistent_workers, "
            "drop_last), the same transform, PILToTensor"
            % (a.steps, a.warmup, image_bench.BATCH, image_bench.SIZE, image_bench.SIZE, image_bench.CLASSES,
               f.get("amp", "?"), f.get("torch", "?"), f.get("device", "cuda:%d" % a.device), a.workers,
               image_bench.TRANSFORM, image_bench.STAGING_SLOTS,
               a.decode + (" (gpu_decode_percent %d)" % a.gpu_decode_percent if a.decode == "auto" else ""),
               a.workers))


def report(ctx, res):
    a = ctx.args
    out = image_bench.head_lines(ctx) + [
        setup_line(ctx),
        "",
        "| model | synthetic images/s | loaderd images/s | loaderd data wait | torch images/s "
        "| torch data wait | loaderd / synthetic | loaderd / torch |",
        "|---|---|---|---|---|---|---|---|"]
    notes = Notes()
    skipped = Failed("skipped: not in --loaders")
    for m in a.model_list:
        syn, lo, t = (res[m].get(x, skipped) for x in LOADERS)
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |"
                   % (m, notes.cell(rate(syn), "%.1f"), notes.cell(rate(lo), "%.1f"),
                      notes.cell(wait(lo), "%.1f%%"), notes.cell(rate(t), "%.1f"),
                      notes.cell(wait(t), "%.1f%%"),
                      ratio(rate(lo), rate(syn), "%.3fx"), ratio(rate(lo), rate(t), "%.2fx")))
    if notes.messages:
        out += [""] + notes.lines()
    out += ["", "data wait: the share of the timed window the training loop spent inside next() on its "
            "batch iterator (examples/train_resnet.py says exactly what)", "", goal_line(ctx, res)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    image_bench.add_tree_args(ap, "loaderd's log", ", as image_bench")
    ap.add_argument("--steps", type=int, default=200, help="timed steps of every run (default 200)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed steps before them (default 50)")
    ap.add_argument("--models", default="resnet18,resnet50", help="of %s (default resnet18,resnet50)" % ",".join(MODELS))
    ap.add_argument("--loaders", default=",".join(LOADERS), help="default %s" % ",".join(LOADERS))
    ap.add_argument("--workers", type=int, default=15,
                    help="loaderd's workers and the DataLoader's (default 15)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--decode", choices=("cpu", "gpu", "auto"), default="auto",
                    help="the loaderd pipeline's decode (default auto, loaderd's default)")
    ap.add_argument("--gpu-decode-percent", type=int, default=100,
                    help="its gpu_decode_percent with --decode auto (default 100, the config's)")
    a = ap.parse_args()
    a.model_list = [x.strip() for x in a.models.split(",") if x.strip()]
    a.loader_list = [x.strip() for x in a.loaders.split(",") if x.strip()]
    bad = [x for x in a.model_list if x not in MODELS] + [x for x in a.loader_list if x not in LOADERS]
    if bad or not a.model_list or not a.loader_list:
        ap.error("--models from %s, --loaders from %s (got %s)"
                 % (",".join(MODELS), ",".join(LOADERS), ", ".join(bad) or "an empty list"))
    if a.images < image_bench.CLASSES or a.images % image_bench.CLASSES:
        ap.error("--images: a positive multiple of %d, please" % image_bench.CLASSES)
    if a.images < image_bench.BATCH:
        ap.error("--images: at least one batch (%d)" % image_bench.BATCH)
    if a.steps < 1 or a.warmup < 0 or not 1 <= a.workers <= 256 or a.seed < 0 or a.device < 0:
        ap.error("--steps >= 1, --warmup >= 0, --workers 1..256, --seed >= 0, --device >= 0")
    a.data_dir = os.path.abspath(a.data_dir)
    a.host = False  # image_bench's daemon and set maker read it
    return a


def setup(a, bindir):
    ctx = image_bench.new_context(a, bindir, "train_bench")
    ctx.runs = []
    return ctx


def python_package(build):
    """Puts the build's staged loaderd package on the examples' PYTHONPATH."""
    staged = os.path.join(build, "python")
    if not os.path.isfile(os.path.join(staged, "loaderd", "__init__.py")):
        sys.exit("train_bench: %s has no staged loaderd package; build first" % staged)
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = staged + (os.pathsep + path if path else "")


def torch_missing():
    """Why torch and torchvision cannot be imported here, or None."""
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
        return str(e)
    return None


def main():
    a = parse_args()
    build = os.path.abspath(a.build)
    bindir = os.path.join(build, "bin")
    for exe in ("loaderd", "loaderd-worker", "loaderctl", "mkjpeg"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("train_bench: %s/%s is missing; build first (cmake -S . -B build "
                     "-DCMAKE_BUILD_TYPE=Release && cmake --build build -j)" % (bindir, exe))
    python_package(build)
    version, gpus, (uuid, name) = loaderd_gpus(bindir, a.device)
    if not gpus:
        print("train_bench: skipped: %s --version %s"
              % (os.path.join(bindir, "loaderd"), "reports gpus: 0" if gpus == 0 else "has no 'gpus:' line"))
        return EXIT_SKIP
    if uuid is None:
        sys.exit("train_bench: loaderd --version lists no gpu %d:\n%s" % (a.device, version))
    why = torch_missing()
    if why:
        print("train_bench: skipped: torch and torchvision are needed (%s)" % why)
        return EXIT_SKIP

    ctx = setup(a, bindir)
    ctx.log.write("loaderd --version:\n%s" % version)
    ctx.gpu_desc = nvidia_smi(ctx.log, uuid) or ('"%s"' % name if name else "")
    raise_memlock(ctx.log)
    res = {m: {} for m in a.model_list}
    daemon = Daemon(ctx, a.workers, a.decode)
    try:
        try:
            files = image_bench.make_tree(ctx)
        except (StepError, OSError) as e:  # nothing can be measured without the files
            ctx.log.say("making the dataset: %s" % e)
            return 1
        image_bench.describe_files(ctx, files)
        daemon_error = None
        if "loaderd" in a.loader_list:
            try:
                daemon.start()
            except StepError as e:
                ctx.log.say("loaderd: %s" % e)
                daemon_error = Failed("error: %s" % e)
        for m in a.model_list:
            for loader in LOADERS:
                if loader not in a.loader_list:
                    continue
                if loader == "loaderd" and daemon_error:
                    res[m][loader] = daemon_error
                    continue
                res[m][loader] = measure(ctx, daemon, m, loader)
    finally:
        daemon.stop()
        if not a.keep:
            image_bench.remove_tree(ctx)
        shutil.rmtree(ctx.workdir, ignore_errors=True)  # the socket; with no --out, the logs too

    publish(ctx.log, a.out, report(ctx, res))
    if a.out:
        with open(os.path.join(a.out, "runs.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in ctx.runs)
    return failed_exit([v for r in res.values() for v in r.values()])


if __name__ == "__main__":
    sys.exit(main())
