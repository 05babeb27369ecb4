#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_image_peer: torchvision's ImageFolder and a DataLoader feeding one
GPU, and torchvision's JPEG decoding on one core: the peers
bench/image_bench.py compares loaderd's image pipelines with.

    torch_image_peer.py --root ROOT --workers W [--batch-size 256] [--size 224]
                        [--device 0] [--seconds 15] [--epochs E]
                        [--warmup-batches K] [--host]
    torch_image_peer.py --decode-only [--seconds 2] FILE...
    torch_image_peer.py --gpu-decode --root ROOT [--batch-size 256] [--size 224]
                        [--device 0] [--seconds 15]

Loader mode: what a training script does with an ImageFolder tree and
nothing but PyTorch: torchvision.datasets.ImageFolder(ROOT,
transform=Compose([RandomResizedCrop(size), RandomHorizontalFlip(),
PILToTensor()])) (PIL decodes each file in full, then crops and resizes
with antialiasing; uint8 CHW, as loaderd's uint8 NCHW); DataLoader(
batch_size, shuffle=True, num_workers=W, pin_memory=True,
persistent_workers=True, prefetch_factor=4, drop_last=True); each batch's
images and labels moved with .to(device, non_blocking=True). The first K
batches (workers starting, queues filling; default max(8, W)) are not
timed; the timed part runs for E epochs' worth of batches or until
--seconds have passed, whichever comes first, and torch.cuda.synchronize()
ends it, so every timed copy has landed. With --host the batches stay in
host memory (no pin_memory, no copy) and no GPU is needed.

Threads: torch's intra-op pool in this process is reported as found
(torch.get_num_threads()); the DataLoader's workers already call
torch.set_num_threads(1) (torch/utils/data/_utils/worker.py), and the
worker_init_fn here calls it again, so that holds whatever the torch
version, and reports what worker 0 sees. The DataLoader adds its main
process (this one) and a pin-memory thread to the W workers, as loaderd
adds its master and its GPU threads: no loader is pinned to fewer
cores; both run W workers on the same machine.

GPU-decode mode: what a torchvision user can write today to decode on the
GPU: the ImageFolder's files read (torchvision.io.read_file) in batches of
--batch-size in shuffled order, decoded together with
torchvision.io.decode_jpeg(list, device="cuda") (nvJPEG, its hardware
decoder where the GPU has one), then RandomResizedCrop(size) and
RandomHorizontalFlip() of torchvision.transforms.v2 on each decoded image
on the GPU, stacked into a uint8 batch; one untimed batch, then batches
until --seconds, torch.cuda.synchronize() at the end. One process, no
workers (decode_jpeg on the GPU takes no worker processes).

Decode-only mode: every FILE read into memory, then, with
torch.set_num_threads(1) on the CPU (the caller pins the process to one
core), one untimed pass and timed passes until --seconds of:
  torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB), full size;
  then the DataLoader worker's per-sample path on the same bytes:
  PIL.Image.open(BytesIO(data)).convert("RGB") (ImageFolder's loader)
  and the transform above.

Prints on stdout, details on stderr:

    torch_images: images_per_s=X                      (loader mode)
    torch_decode: images_per_s=X megapixels_per_s=Y   (decode-only mode)
    torch_decode_transform: images_per_s=X            (decode-only mode)

Exit codes: 0; 1 a failure; 77 torch or torchvision (or PIL) missing, or,
in loader mode without --host, no GPU.
"""

import argparse
import io
import os
import sys
import time

try:
    import torch
    import torchvision
    from PIL import Image
    from torch.utils.data import DataLoader
    from torchvision import transforms
    from torchvision.io import ImageReadMode, decode_jpeg
    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
    IMPORT_ERROR = e

EXIT_SKIP = 77
PREFETCH_FACTOR = 4
MIN_TIMED_BATCHES = 4


def say(text):
    print("torch_image_peer: " + text, file=sys.stderr, flush=True)


def train_transform(size):
    return transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                               transforms.PILToTensor()])


def worker_init(worker_id):
    """Runs in each DataLoader worker before its first item."""
    torch.set_num_threads(1)
    if worker_id == 0:
        say("worker 0: torch.get_num_threads() = %d" % torch.get_num_threads())


def endless(loader):
    """Batches of one epoch after another (persistent workers carry over)."""
    while True:
        for batch in loader:
            yield batch


def run_loader(args):
    if not args.host and not torch.cuda.is_available():
        say("torch %s sees no CUDA device" % torch.__version__)
        return EXIT_SKIP
    main_threads = torch.get_num_threads()
    dataset = torchvision.datasets.ImageFolder(args.root, transform=train_transform(args.size))
    if len(dataset) < args.batch_size:
        say("%s holds %d images, fewer than a batch of %d" % (args.root, len(dataset), args.batch_size))
        return 1
    device = None
    if not args.host:
        device = torch.device("cuda", args.device)
        torch.cuda.set_device(device)  # the pin-memory thread pins for the current device
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        pin_memory=not args.host, persistent_workers=True,
                        prefetch_factor=PREFETCH_FACTOR, drop_last=True, worker_init_fn=worker_init)
    per_epoch = len(loader)
    limit = args.epochs * per_epoch if args.epochs else 0
    warmup = args.warmup_batches or max(8, args.workers)
    batches = endless(loader)

    def take():
        images, labels = next(batches)
        if device is not None:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        return images, labels

    def synchronize():
        if device is not None:
            torch.cuda.synchronize(device)

    start = time.perf_counter()
    images, labels = take()
    shape, dtype = tuple(images.shape), images.dtype
    for _ in range(warmup - 1):
        images, labels = take()
    synchronize()
    warmup_s = time.perf_counter() - start

    timed = 0
    start = time.perf_counter()
    while True:
        images, labels = take()
        timed += 1
        if limit and timed >= limit:
            break
        if timed >= MIN_TIMED_BATCHES and time.perf_counter() - start >= args.seconds:
            break
    synchronize()
    seconds = time.perf_counter() - start
    del images, labels
    batches.close()  # the persistent workers stop with the loader, not at interpreter exit
    del loader

    say("torch %s torchvision %s, %s, %d images in %d classes, %d workers, batch %d %s %s, "
        "%d batches per epoch; torch threads in this process %d; warm-up %d batches in %.2f s; "
        "timed %d batches (%.2f epochs), %d images in %.3f s"
        % (torch.__version__, torchvision.__version__,
           "host memory" if device is None else "device %s" % torch.cuda.get_device_name(device),
           len(dataset), len(dataset.classes), args.workers, args.batch_size, list(shape), dtype,
           per_epoch, main_threads, warmup, warmup_s, timed, timed / per_epoch,
           timed * args.batch_size, seconds))
    print("torch_images: images_per_s=%.1f" % (timed * args.batch_size / seconds), flush=True)
    return 0


def run_gpu_decode(args):
    if not torch.cuda.is_available():
        say("torch %s sees no CUDA device" % torch.__version__)
        return EXIT_SKIP
    from torchvision.transforms import v2
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    dataset = torchvision.datasets.ImageFolder(args.root)
    paths = [p for p, _ in dataset.samples]
    transform = v2.Compose([v2.RandomResizedCrop(args.size, antialias=True),
                            v2.RandomHorizontalFlip()])
    order = torch.randperm(len(paths)).tolist()
    at = [0]

    def batch():
        if at[0] + args.batch_size > len(order):
            at[0] = 0
        names = [paths[i] for i in order[at[0]:at[0] + args.batch_size]]
        at[0] += args.batch_size
        datas = [torchvision.io.read_file(p) for p in names]
        images = torchvision.io.decode_jpeg(datas, mode=torchvision.io.ImageReadMode.RGB,
                                            device=device)
        return torch.stack([transform(img) for img in images])

    out = batch()
    torch.cuda.synchronize(device)
    n, start = 0, time.perf_counter()
    while n < MIN_TIMED_BATCHES or time.perf_counter() - start < args.seconds:
        out = batch()
        n += 1
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    say("torch %s torchvision %s, device %s, %d images, batch %d %s, decode_jpeg on the GPU and "
        "v2 transforms per image; timed %d batches, %d images in %.3f s"
        % (torch.__version__, torchvision.__version__, torch.cuda.get_device_name(device),
           len(paths), args.batch_size, list(out.shape), n, n * args.batch_size, seconds))
    print("torch_gpu_decode: images_per_s=%.1f" % (n * args.batch_size / seconds), flush=True)
    return 0


def timed_passes(items, seconds, fn):
    """One untimed pass, then passes until `seconds` have gone by (at least
    one); (images, passes, sum of fn's results, seconds)."""
    for item in items:
        fn(item)
    images = passes = total = 0
    start = time.perf_counter()
    elapsed = 0.0
    while passes == 0 or elapsed < seconds:
        for item in items:
            total += fn(item)
            images += 1
            elapsed = time.perf_counter() - start
            if passes and elapsed >= seconds:
                break
        passes += 1
    return images, passes, total, elapsed


def run_decode(args):
    torch.set_num_threads(1)
    blobs = []
    for path in args.files:
        with open(path, "rb") as f:
            blobs.append(f.read())
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    say("torch %s torchvision %s, torch threads %d, cpus %s; %d files, %d bytes in memory"
        % (torch.__version__, torchvision.__version__, torch.get_num_threads(),
           sorted(os.sched_getaffinity(0)), len(blobs), sum(len(b) for b in blobs)))

    def decode(data):
        img = decode_jpeg(data, mode=ImageReadMode.RGB)
        return img.shape[1] * img.shape[2]

    n, passes, pixels, seconds = timed_passes(tensors, args.seconds, decode)
    say("decode_jpeg: %d images (%d passes) in %.3f s" % (n, passes, seconds))
    print("torch_decode: images_per_s=%.1f megapixels_per_s=%.2f" % (n / seconds, pixels / seconds / 1e6),
          flush=True)

    tf = train_transform(args.size)

    def decode_transform(data):
        with Image.open(io.BytesIO(data)) as img:
            tf(img.convert("RGB"))
        return 0

    n, passes, _, seconds = timed_passes(blobs, args.seconds, decode_transform)
    say("PIL + transforms: %d images (%d passes) in %.3f s" % (n, passes, seconds))
    print("torch_decode_transform: images_per_s=%.1f" % (n / seconds), flush=True)
    return 0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decode-only", action="store_true", help="single-core decode of FILEs instead")
    ap.add_argument("--gpu-decode", action="store_true",
                    help="decode_jpeg on the GPU and v2 transforms there, instead of a DataLoader")
    ap.add_argument("files", nargs="*", metavar="FILE", help="--decode-only: JPEG files")
    ap.add_argument("--root", help="ImageFolder tree")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    ap.add_argument("--batch-size", type=int, default=256, help="images per batch (default 256)")
    ap.add_argument("--size", type=int, default=224, help="RandomResizedCrop size (default 224)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="timed seconds at most (default 15; --decode-only: 2)")
    ap.add_argument("--epochs", type=int, default=0, help="timed epochs at most (default: --seconds decides)")
    ap.add_argument("--warmup-batches", type=int, default=0, help="untimed batches first (default max(8, W))")
    ap.add_argument("--host", action="store_true", help="keep batches in host memory (no GPU needed)")
    a = ap.parse_args()
    if a.seconds is None:
        a.seconds = 2.0 if a.decode_only else 15.0
    if a.decode_only:
        if not a.files:
            ap.error("--decode-only needs FILEs")
    elif a.gpu_decode:
        if a.files or not a.root:
            ap.error("--gpu-decode needs --root and takes no FILE")
    elif a.files or not a.root or a.workers < 1:
        ap.error("loader mode needs --root and --workers >= 1 and takes no FILE")
    if a.seconds <= 0 or a.batch_size < 1 or a.size < 1 or a.epochs < 0 or a.warmup_batches < 0:
        ap.error("--seconds > 0, --batch-size >= 1, --size >= 1, --epochs >= 0, --warmup-batches >= 0")
    return a


def main():
    args = parse_args()
    if IMPORT_ERROR is not None:
        say("no torch, torchvision or PIL here (%s)" % IMPORT_ERROR)
        return EXIT_SKIP
    if args.gpu_decode:
        return run_gpu_decode(args)
    return run_decode(args) if args.decode_only else run_loader(args)


if __name__ == "__main__":
    sys.exit(main())
