#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_peer: a framework DataLoader moving raw records to one GPU, the peer
bench/gpu_bench.py compares loaderd's GPU delivery with.

    torch_peer.py --data FILE --record-bytes N --batch-size B --workers W
                  [--device 0] [--seconds 2 | --batches N] [--warmup-batches K]

What a training script does with a file of fixed-size records and nothing
but PyTorch: a Dataset whose item i is record i, read with one positioned
read (os.preadv straight into a numpy array: the best case, no extra copy)
and returned as torch.from_numpy (uint8 [record_bytes]);
DataLoader(batch_size=B, shuffle=True, num_workers=W, pin_memory=True,
persistent_workers=True, prefetch_factor=4); every batch moved with
.to(device, non_blocking=True). The first K batches (workers starting,
queues filling) are not timed; torch.cuda.synchronize() ends the timing, so
every timed copy has landed. Prints one line on stdout:

    torch: batch_bytes=B GB_per_s=X          (GB = 10^9 bytes)

and the details (batches, seconds, versions) on stderr. Exit codes: 0; 1 a
failure; 77 torch, numpy or a GPU is missing here.
"""

import argparse
import os
import sys
import time

try:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset
    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
    IMPORT_ERROR = e
    Dataset = object

EXIT_SKIP = 77
PREFETCH_FACTOR = 4
MIN_TIMED_BATCHES = 8


class RecordFile(Dataset):
    """Record i of a file of fixed-size records, as a uint8 tensor."""

    def __init__(self, path, record_bytes):
        self.path = path
        self.record_bytes = record_bytes
        self.records = os.path.getsize(path) // record_bytes
        self.fd = None  # opened lazily: once in each worker process

    def __len__(self):
        return self.records

    def __getitem__(self, i):
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        buf = np.empty(self.record_bytes, dtype=np.uint8)
        n = os.preadv(self.fd, [buf], i * self.record_bytes)
        if n != self.record_bytes:
            raise OSError("%s: record %d: read %d of %d bytes" % (self.path, i, n, self.record_bytes))
        return torch.from_numpy(buf)


def endless(loader):
    """Batches of one epoch after another (persistent workers carry over)."""
    while True:
        for batch in loader:
            yield batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="file of fixed-size records")
    ap.add_argument("--record-bytes", type=int, required=True, help="bytes per record")
    ap.add_argument("--batch-size", type=int, required=True, help="records per batch")
    ap.add_argument("--workers", type=int, required=True, help="DataLoader num_workers")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds (default 2)")
    ap.add_argument("--batches", type=int, default=0, help="timed batches instead of --seconds")
    ap.add_argument("--warmup-batches", type=int, default=0,
                    help="untimed batches first (default: 2 per worker, at least 8)")
    args = ap.parse_args()

    if IMPORT_ERROR is not None:
        print("torch_peer: no torch or numpy here (%s)" % IMPORT_ERROR, file=sys.stderr)
        return EXIT_SKIP
    if not torch.cuda.is_available():
        print("torch_peer: torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
        return EXIT_SKIP
    if args.record_bytes < 1 or args.batch_size < 1 or args.workers < 1:
        print("torch_peer: --record-bytes, --batch-size and --workers must be at least 1", file=sys.stderr)
        return 1
    dataset = RecordFile(args.data, args.record_bytes)
    if len(dataset) < args.batch_size:
        print("torch_peer: %s holds %d records, fewer than a batch of %d"
              % (args.data, len(dataset), args.batch_size), file=sys.stderr)
        return 1
    warmup = args.warmup_batches or max(8, 2 * args.workers)

    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)  # the pin-memory thread pins for the current device
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        pin_memory=True, persistent_workers=True, prefetch_factor=PREFETCH_FACTOR)
    batches = endless(loader)
    start = time.perf_counter()
    first = next(batches)
    pinned = first.is_pinned()
    dst = first.to(device, non_blocking=True)
    for _ in range(warmup - 1):
        dst = next(batches).to(device, non_blocking=True)
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - start

    timed = 0
    timed_bytes = 0
    start = time.perf_counter()
    while True:
        batch = next(batches)
        dst = batch.to(device, non_blocking=True)
        timed += 1
        timed_bytes += batch.numel() * batch.element_size()
        if args.batches:
            if timed >= args.batches:
                break
        elif timed >= MIN_TIMED_BATCHES and time.perf_counter() - start >= args.seconds:
            break
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    del dst
    batches.close()  # the persistent workers stop with the loader, not at interpreter exit
    del loader

    print("torch_peer: torch %s numpy %s, device %s, %d workers, batch %d x %d bytes, pinned %s; "
          "warm-up %d batches in %.2f s; timed %d batches, %d bytes in %.3f s"
          % (torch.__version__, np.__version__, torch.cuda.get_device_name(device), args.workers,
             args.batch_size, args.record_bytes, pinned, warmup, warmup_s, timed, timed_bytes, seconds),
          file=sys.stderr)
    print("torch: batch_bytes=%d GB_per_s=%.3f" % (args.batch_size * args.record_bytes,
                                                    timed_bytes / seconds / 1e9), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
