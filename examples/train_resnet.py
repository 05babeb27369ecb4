#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""train_resnet: a torchvision ResNet trained on an image folder, fed by
loaderd, by torchvision's ImageFolder and DataLoader, or by random data
already on the GPU; the same training loop for all three, timed.

    train_resnet.py --loader loaderd --pipeline train [--socket PATH]
    train_resnet.py --loader torch --data ROOT [--workers W]
    train_resnet.py --loader synthetic
        [--model resnet18|resnet50] [--batch-size 256] [--size 224]
        [--steps 100] [--warmup 20] [--device cuda|cuda:N|cpu]
        [--classes C] [--amp auto|bf16|fp16|off] [--lr 0.1] [--json]
    torchrun --nproc-per-node N train_resnet.py ... [--one-gpu-per-rank]

The loaders (each yields uint8 images [B, 3, H, W] and int64 labels on the
training device):

  torch      torchvision.datasets.ImageFolder(ROOT) with Compose([
             RandomResizedCrop(size), RandomHorizontalFlip(), PILToTensor()])
             and DataLoader(batch_size, num_workers=W, pin_memory=True (on
             CUDA), persistent_workers=True, drop_last=True; prefetch_factor
             left at its default, 2 batches per worker); every batch
             moved with .to(device, non_blocking=True). The sampler is a
             RandomSampler drawing (warmup + steps) batches as successive
             shuffled passes over the set, so the run is one long epoch:
             on a small benchmark set (39 batches an epoch at 10,000
             images) the DataLoader's refill at every epoch's start, when
             all its workers begin a new batch at once, would weigh far
             more than it does on an ImageNet-sized epoch. loaderd streams
             from one epoch into the next without a gap, so neither loader
             pays for epoch ends.
  loaderd    loaderd.Loader(PIPELINE, socket=PATH, device=...): the daemon
             decodes and transforms (the pipeline should say `transform =
             random_resized_crop(SIZE) hflip(0.5)`, `dtype = uint8`,
             `layout = nhwc`) and delivers each batch into a ring on this
             process's GPU; the tensors are zero-copy views of it (with
             --device cpu, of the daemon's shared memory, read-only: the
             step only ever reads them). With
             `layout = nhwc` the batch is [B, H, W, 3] and
             x.permute(0, 3, 1, 2) is an NCHW tensor whose memory is
             already channels_last, the layout the model runs in, so the
             step makes no layout copy; an `nchw` pipeline works too, at
             the price of one (a uint8 one) per step. Float pipelines are
             refused: normalisation belongs to the step (below), the same
             for every loader. The pipeline sets the batch size, which
             must equal --batch-size, and the image size (reported).
  synthetic  one batch of random uint8 pixels and labels made on the device
             at start and handed out every step: no loading at all, the
             ceiling the other two are measured against.

--classes (the model's outputs) defaults to the data's class count:
ImageFolder's for torch; for loaderd, the subdirectories of the
imagefolder root the daemon's status names (1000 when it names none, a tar
pipeline); 1000 for synthetic. A label the model cannot take stops the run
at the first batch with a message.

The step, identical for all three: images converted to channels_last (a
no-op when they already are), to float32, normalised with ImageNet's mean
and std (x - 255 mean) / (255 std) on the device; forward under
torch.autocast (bf16 on a GPU that has it, else fp16 with a GradScaler;
none on the CPU unless --amp asks), cross-entropy, backward, SGD with
momentum 0.9 and weight decay 1e-4. The model is in channels_last; cuDNN
picks its algorithms (cudnn.benchmark) during the warm-up. loss.item() is
read every 50 steps and at the end only, so the host never waits for the
GPU otherwise and the loop stays asynchronous.

What is measured. The first --warmup steps are not timed (cuDNN's search,
the loader's workers starting, queues filling). The timed window starts
after a torch.cuda.synchronize() that ends the warm-up and ends after
another one following the last step, so it holds exactly the GPU work of
--steps steps; images/s = steps * batch size / window. The data-wait time
is, on the host (time.perf_counter), the sum over the timed steps of the
time spent inside next() on the batch iterator: for torch that is waiting
for the DataLoader's next batch plus issuing its host-to-device copies;
for loaderd, waiting for the daemon's next batch (ldr_next) plus making
the tensors (from_dlpack, which also enqueues the stream's wait for the
daemon's copy: a GPU-side wait, no host block); for synthetic, nothing but
the call. The data-wait fraction is that sum over the window. Why it is the
loader's share: the host runs ahead of the GPU, enqueueing kernels, until
the launch queue is full or loss.item() waits; a loader that keeps up
returns at once, so the host's blocking all happens inside the step and
the fraction stays near 0. A loader that cannot keep up holds the host
inside next() instead, while the GPU drains what was queued and then idles
until the next step is enqueued. The fraction can overstate the cost when
the host was ahead (time waited while the GPU still had queued work costs
nothing), and a wait that happens only on the GPU (the stream waiting for
a copy still in flight) is not in it: images/s against the synthetic run
is the full measure of what a loader costs, the fraction says where.

Under torchrun (`torchrun --nproc-per-node N examples/train_resnet.py
...`) every process is one rank of a DistributedDataParallel job, on its
own GPU (with --one-gpu-per-rank, the only one it sees), fed by its own
shard of loaderd's pipeline, or by a DataLoader of its own;
examples/ddp.py says exactly how. Rank 0 prints the figures of every rank
and the node's: node images/s and the largest data-wait fraction.

Output: a summary on stdout (with --json, instead, one JSON line with
every figure: model, loader, images_per_s, data_wait_fraction, steps,
...); progress and notes on stderr. Exit codes: 0; 1 an error (the
message names it; for loaderd, the daemon's own); 2 bad arguments.
"""

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp  # noqa: E402  (this directory)

try:
    import torch
    import torch.nn.functional as F
    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
    IMPORT_ERROR = e

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
LOSS_EVERY = 50          # steps between loss.item() calls
DEFAULT_CLASSES = 1000   # when neither the data nor --classes says
MODELS = ("resnet18", "resnet50", "vit_b_16")


class ExampleError(Exception):
    """Something the user can fix; the message says what."""


def say(prog, text):
    print("%s: %s" % (prog, text), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- shared with train_tokens.py

def pick_device(name):
    """The torch.device of --device (default: cuda when available, else cpu)."""
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ExampleError("--device %r: %s" % (name, e)) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ExampleError("--device %s: torch %s sees no CUDA device" % (name, torch.__version__))
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.index >= torch.cuda.device_count():
            raise ExampleError("--device %s: this process sees %d CUDA device(s)"
                               % (name, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ExampleError("--device %s: expected cuda, cuda:N or cpu" % name)
    return device


def pick_amp(choice, device):
    """(autocast dtype or None, whether a GradScaler is needed, its name)."""
    if choice == "auto":
        if device.type != "cuda":
            choice = "off"
        else:
            choice = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if choice == "off":
        return None, False, "off"
    if choice == "fp16" and device.type != "cuda":
        raise ExampleError("--amp fp16 needs a CUDA device (the CPU autocasts to bf16 only)")
    return (torch.bfloat16 if choice == "bf16" else torch.float16), choice == "fp16", choice


def device_name(device):
    if device.type == "cuda":
        return "%s %s" % (device, torch.cuda.get_device_name(device))
    return "cpu (%d threads)" % torch.get_num_threads()


def import_loaderd():
    try:
        import loaderd
    except ImportError as e:
        raise ExampleError("cannot import the loaderd package (%s): put the build's staged package on "
                           "PYTHONPATH (PYTHONPATH=BUILD/python) or pip install BUILD/python" % e) from None
    return loaderd


def loaderd_errors():
    """The exceptions a Loader raises with the daemon's message."""
    loaderd = sys.modules.get("loaderd")
    return (loaderd.LoaderdError,) if loaderd is not None else ()


def timed_steps(batches, step, device, warmup, steps, loss_every=LOSS_EVERY, window_opens=None):
    """Runs warmup + steps steps of step(batch) -> loss tensor over the
    iterator `batches`; times the last `steps` as the module docstring
    says; window_opens(), when given, runs where the window opens (the
    ranks' barrier). Returns (seconds, data-wait seconds, last loss)."""
    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    start = time.perf_counter()
    wait_s = 0.0
    loss = None
    last_loss = float("nan")
    for i in range(warmup + steps):
        if i == warmup:
            synchronize()
            if window_opens is not None:
                window_opens()
            start = time.perf_counter()
            wait_s = 0.0
        fetch = time.perf_counter()
        batch = next(batches)
        wait_s += time.perf_counter() - fetch
        loss = step(batch)
        if (i + 1) % loss_every == 0:
            last_loss = loss.item()
    synchronize()
    seconds = time.perf_counter() - start
    if loss is not None:
        last_loss = loss.item()
    return seconds, wait_s, last_loss


def make_optimizer_step(model, optimizer, amp_dtype, use_scaler, device):
    """step(loss_fn) for one optimizer step of loss_fn() under autocast."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=use_scaler)

    def autocast():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=amp_dtype)

    def step(loss_fn):
        with autocast():
            loss = loss_fn()
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def run(prog, needs, train, summary, json_out, missing=()):
    """An example's main() around its train(): the figures as a summary
    line on stdout, or with json_out the summary on stderr and one JSON
    line on stdout. 0; 1 after the message when torch is missing (needs
    names what: "torch", "torch and torchvision"; so do the exceptions in
    `missing` that train() raises) or train() fails with an ExampleError, a
    timeout or the daemon's error."""
    if IMPORT_ERROR is not None:
        say(prog, "needs %s: %s" % (needs, IMPORT_ERROR))
        return 1
    try:
        result = train()
    except (ExampleError, TimeoutError) + loaderd_errors() as e:
        say(prog, str(e))
        return 1
    except missing as e:
        say(prog, "needs %s: %s" % (needs, e))
        return 1
    if result is None:  # a rank other than 0 of a torchrun job: rank 0 prints
        return 0
    if json_out:
        say(prog, summary(result))
        print(json.dumps(result), flush=True)
    else:
        print(summary(result), flush=True)
    return 0


# ---------------------------------------------------------------- loaders

def imagefolder_classes(root):
    """Classes torchvision's ImageFolder finds in root: its subdirectories."""
    try:
        return sum(1 for e in os.scandir(root) if e.is_dir())
    except OSError:
        return None


def pipeline_classes(loaderd, socket, pipeline):
    """The class count of an imagefolder pipeline, from the root the
    daemon's status names; None when it cannot be told (a tar pipeline)."""
    try:
        text = loaderd.status(socket)
    except loaderd.LoaderdError:
        return None
    m = re.search(r"^  pipeline %s source imagefolder:(\S+) " % re.escape(pipeline), text, re.M)
    return imagefolder_classes(m.group(1)) if m else None


def torch_batches(args, device, prog, job):
    """(iterator of (images, labels) on the device, classes, notes)."""
    from torch.utils.data import DataLoader, RandomSampler
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    try:
        dataset = datasets.ImageFolder(args.data, transform=tf)
    except (OSError, RuntimeError) as e:  # no such directory, or a class without images
        raise ExampleError("--data %s: %s" % (args.data, e)) from None
    if len(dataset) < args.batch_size:
        raise ExampleError("--data %s holds %d images, fewer than a batch of %d"
                           % (args.data, len(dataset), args.batch_size))
    pin = device.type == "cuda"
    sampler = RandomSampler(dataset, num_samples=(args.warmup + args.steps) * args.batch_size,
                            generator=torch.Generator().manual_seed(args.seed * 1000 + job.rank))
    extra = {}
    if args.workers > 0:
        extra = {"persistent_workers": True}  # prefetch_factor: the default, 2
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        pin_memory=pin, drop_last=True, **extra)

    def batches():
        for images, labels in loader:
            if pin:
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
            yield images, labels

    notes = {"workers": args.workers, "images_in_set": len(dataset)}
    say(prog, "torch: ImageFolder %s, %d images in %d classes, DataLoader with %d worker%s"
        % (args.data, len(dataset), len(dataset.classes), args.workers, "" if args.workers == 1 else "s"))
    return batches(), len(dataset.classes), notes


def nchw_view(images, notes):
    """A delivered image tensor as [B, 3, H, W], without a copy; records
    the layout it came in."""
    if images.dtype != torch.uint8:
        raise ExampleError("the pipeline delivers %s images; this example normalises on the device and "
                           "needs `dtype = uint8` in the pipeline" % images.dtype)
    if images.dim() == 4 and images.shape[3] == 3:
        notes.setdefault("layout", "nhwc")
        return images.permute(0, 3, 1, 2)
    if images.dim() == 4 and images.shape[1] == 3:
        notes.setdefault("layout", "nchw")
        return images
    raise ExampleError("image tensor of shape %s is neither [B, H, W, 3] nor [B, 3, H, W]"
                       % list(images.shape))


def loaderd_batches(args, device, prog):
    loaderd = import_loaderd()
    loader = loaderd.Loader(args.pipeline, socket=args.socket,
                            device="cpu" if device.type == "cpu" else device.index,
                            depth=args.depth, timeout=args.timeout, name="train_resnet")
    if loader.batch_size != args.batch_size:
        raise ExampleError("pipeline %r has batch_size %d, and --batch-size is %d: make them equal"
                           % (args.pipeline, loader.batch_size, args.batch_size))
    classes = None if args.classes else pipeline_classes(loaderd, args.socket, args.pipeline)
    notes = {"pipeline": args.pipeline, "images_in_set": loader.dataset_size,
             "shard": [loader.rank, loader.world_size]}

    def batches():
        try:
            while True:  # each `for` is one epoch; the daemon runs on into the next
                for batch in loader:
                    yield nchw_view(batch["image"], notes), batch["label"]
        finally:
            # what the loader did, for the JSON line: its data wait and, when
            # this process decoded its GPU's JPEGs, what that cost it
            st = loader.stats()
            notes["loader_stats"] = {k: (round(v, 4) if isinstance(v, float) else v)
                                     for k, v in st.items()}
            loader.close()

    say(prog, "loaderd: pipeline %s, %d images, batch %d, delivered to %s"
        % (args.pipeline, loader.dataset_size, loader.batch_size, loader.device))
    return batches(), classes, notes


def synthetic_batches(args, device, classes):
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    images = torch.randint(0, 256, (args.batch_size, args.size, args.size, 3), dtype=torch.uint8,
                           device=device, generator=gen).permute(0, 3, 1, 2)
    labels = torch.randint(0, classes, (args.batch_size,), device=device, generator=gen)

    def batches():
        while True:
            yield images, labels

    return batches(), {"layout": "nhwc"}


# ---------------------------------------------------------------- main

def train(args, prog="train_resnet"):
    job = ddp.Job()
    try:
        return train_rank(args, prog, job)
    finally:
        job.close(torch)


def train_rank(args, prog, job):
    import torchvision

    try:
        device = pick_device(job.device_name(args.device, args.one_gpu_per_rank))
    except ValueError as e:
        raise ExampleError(str(e)) from None
    amp_dtype, use_scaler, amp_name = pick_amp(args.amp, device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.zeros(1, device=device)  # the CUDA context exists before a loaderd attach
    job.start(torch, device)

    if args.loader == "torch":
        batches, classes, notes = torch_batches(args, device, prog, job)
    elif args.loader == "loaderd":
        batches, classes, notes = loaderd_batches(args, device, prog)
    else:
        batches, classes, notes = None, None, {}
    if args.classes:
        classes = args.classes
    elif classes is None:
        classes = DEFAULT_CLASSES
        if args.loader == "loaderd":
            say(prog, "the pipeline's class count is unknown (not an imagefolder source): %d classes; "
                "--classes sets it" % classes)
    if args.loader == "synthetic":
        batches, notes = synthetic_batches(args, device, classes)

    model = getattr(torchvision.models, args.model)(num_classes=classes)
    model = job.wrap(torch, model.to(device, memory_format=torch.channels_last).train(), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    optimizer_step = make_optimizer_step(model, optimizer, amp_dtype, use_scaler, device)
    mean = torch.tensor([255 * m for m in MEAN], device=device).view(1, 3, 1, 1)
    std = torch.tensor([255 * s for s in STD], device=device).view(1, 3, 1, 1)
    seen = {}

    def step(batch):
        images, labels = batch
        if not seen:  # the first batch, in the warm-up: check it once (this waits for the GPU)
            seen["size"] = list(images.shape[2:])
            top = int(labels.max())
            if top >= classes:
                raise ExampleError("label %d in the first batch, but the model has %d classes: set --classes"
                                   % (top, classes))
        x = images.contiguous(memory_format=torch.channels_last)
        x = (x.float() - mean) / std
        return optimizer_step(lambda: F.cross_entropy(model(x), labels))

    say(prog, "%s, %d classes, %s, amp %s, batch %d: %d warm-up steps, %d timed"
        % (args.model, classes, device_name(device), amp_name, args.batch_size, args.warmup, args.steps))
    seconds, wait_s, loss = timed_steps(batches, step, device, args.warmup, args.steps,
                                        window_opens=lambda: job.barrier(torch))
    batches.close()  # stops the DataLoader's workers, releases loaderd's last batch

    images = args.steps * args.batch_size
    result = {"model": args.model, "loader": args.loader, "device": device_name(device), "amp": amp_name,
              "batch_size": args.batch_size, "size": seen.get("size"), "classes": classes,
              "steps": args.steps, "warmup": args.warmup, "images": images,
              "seconds": round(seconds, 4), "images_per_s": round(images / seconds, 1),
              "data_wait_s": round(wait_s, 4), "data_wait_fraction": round(wait_s / seconds, 4),
              "loss": None if math.isnan(loss) else round(loss, 4), "torch": torch.__version__,
              "gpu_uuid": ddp.gpu_uuid(torch, device), "rank": job.rank, "world": job.world}
    result.update(notes)
    return job.gather(torch, result, "images_per_s", args.batch_size)


def summary(r):
    where = {"torch": "DataLoader, %s worker%s" % (r.get("workers"), "" if r.get("workers") == 1 else "s"),
             "loaderd": "pipeline %s, %s" % (r.get("pipeline"), r.get("layout")),
             "synthetic": "on the device"}[r["loader"]]
    text = ("%s, %s (%s), %s, amp %s, batch %d, %s: %d steps in %.2f s: %.1f images/s, "
            "data wait %.1f%% of the time; loss %s"
            % (r["model"], r["loader"], where, r["device"], r["amp"], r["batch_size"],
               "x".join(map(str, r["size"] or [])), r["steps"], r["seconds"], r["images_per_s"],
               100 * r["data_wait_fraction"], r["loss"]))
    if r.get("ranks"):
        text += "\nnode, %d ranks: %.1f images/s, data wait at most %.1f%%; " % (
            r["world"], r["node_images_per_s"], 100 * r["data_wait_fraction_max"]) + "; ".join(
            "rank %d on %s: %.1f images/s, data wait %.1f%%" % (
                x["rank"], x["gpu_uuid"] or x["device"], x["images_per_s"], 100 * x["data_wait_fraction"])
            for x in r["ranks"])
    return text


def default_workers():
    return max(1, len(os.sched_getaffinity(0)) - 1)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="resnet50", help="default resnet50")
    ap.add_argument("--loader", choices=("torch", "loaderd", "synthetic"), required=True)
    ap.add_argument("--data", help="torch: the ImageFolder tree")
    ap.add_argument("--workers", type=int, default=default_workers(),
                    help="torch: DataLoader workers (default: usable cores - 1, here %d)" % default_workers())
    ap.add_argument("--pipeline", help="loaderd: the pipeline's name")
    ap.add_argument("--socket", help="loaderd: the daemon's socket (default $LOADERD_SOCKET, else the "
                    "daemon's default)")
    ap.add_argument("--depth", type=int, default=0,
                    help="loaderd: batches prepared ahead (default: the daemon's)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="loaderd: seconds to wait for one batch before giving up (default 300)")
    ap.add_argument("--batch-size", type=int, default=256, help="images per step (default 256)")
    ap.add_argument("--size", type=int, default=224,
                    help="torch, synthetic: crop size (default 224; loaderd: the pipeline's)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps (default 100)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    ap.add_argument("--device", help="cuda, cuda:N or cpu (default cuda when available, else cpu)")
    ap.add_argument("--classes", type=int, default=0,
                    help="classes of the fc layer (default: the data's; synthetic: %d)" % DEFAULT_CLASSES)
    ap.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                    help="autocast dtype (default auto: bf16 on a GPU that has it, else fp16 with a "
                    "GradScaler; off on the CPU)")
    ap.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON line of figures instead of the summary")
    ap.add_argument("--one-gpu-per-rank", action="store_true",
                    help="under torchrun: each rank sees only its own GPU (CUDA_VISIBLE_DEVICES)")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or a.size < 8 or a.workers < 0 or a.classes < 0:
        ap.error("--steps >= 1, --warmup >= 0, --batch-size >= 1, --size >= 8, --workers >= 0, "
                 "--classes >= 0")
    if a.depth < 0 or a.timeout <= 0:
        ap.error("--depth >= 0 and --timeout > 0")
    if a.loader == "torch" and not a.data:
        ap.error("--loader torch needs --data ROOT (an ImageFolder tree)")
    if a.loader == "loaderd" and not a.pipeline:
        ap.error("--loader loaderd needs --pipeline NAME")
    return a


def main():
    args = parse_args()
    prog = "train_resnet"
    return run(prog, "torch and torchvision", lambda: train(args, prog), summary, args.json,
               missing=ImportError)


if __name__ == "__main__":
    sys.exit(main())
