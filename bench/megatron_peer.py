#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""megatron_peer: megatron-core's GPTDataset through a torch DataLoader,
moving token batches to one GPU: the peer bench/token_bench.py compares
loaderd's token delivery with.

    megatron_peer.py --prefix PREFIX --seq-len L --batch-size B --workers W
                     [--documents] [--cache DIR] [--device 0]
                     [--seconds 2 | --batches N] [--warmup-batches K]
                     [--seed 1234] [--vocab 50257] [--eod 50256] [--check]

What Megatron-LM's pretraining does with an indexed dataset PREFIX.bin /
PREFIX.idx: a GPTDatasetConfig (sequence_length L, random_seed, blend
[[PREFIX], None], split "100,0,0": every document is train; with
--documents reset_position_ids, reset_attention_mask and eod_mask_loss on,
the document-aware case, else off; create_attention_mask off, since a
packed-sequence model takes the documents' bounds, not an [L, L] mask),
and a tokenizer that gives the vocabulary size and the end-of-document
token; BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], ...)
builds the train split, one epoch, its indices cached in --cache. Each
sample is GPTDataset's dict (tokens, labels, loss_mask, position_ids:
[L] each). DataLoader(batch_size=B, shuffle=False: GPTDataset shuffles by
its own index, as Megatron's sampler takes it in order, num_workers=W,
pin_memory=True, persistent_workers=True, prefetch_factor=4); every
tensor of every batch moved with .to(device, non_blocking=True). The first
K batches are not timed; torch.cuda.synchronize() ends the timing, so
every timed copy has landed. Prints one line on stdout:

    megatron: seq_len=L batch=B documents=0|1 batches=N seconds=S tokens_per_s=X

(tokens/s = batches x B x L / seconds) and the details on stderr.

--check builds the dataset only (no GPU needed) and prints its version,
its sample count and the first sample's first tokens, its length and its
first position ids, so that a first run on a new machine can be judged.

Exit codes: 0; 1 a failure; 77 torch, numpy, megatron-core or a GPU is
missing here (the reason on stderr).
"""

import argparse
import collections
import os
import sys
import time
import traceback

try:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader
    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
    IMPORT_ERROR = e

EXIT_SKIP = 77
PREFETCH_FACTOR = 4
MIN_TIMED_BATCHES = 8
PROG = "megatron_peer"


class Tokenizer:
    """What GPTDataset asks of a tokenizer when the tokens are already in
    the files: the vocabulary size (which picks the token dtype, uint16
    below 65,537), the end-of-document id (eod, and eos for the pad check),
    a pad id (-1, megatron-core's own for "none": no token of the data
    equals it) and unique_identifiers (hashed into the indices' cache
    names)."""

    def __init__(self, vocab_size, eod):
        self.vocab_size = vocab_size
        self.eod = eod
        self.eos = eod
        self.pad = -1
        self.unique_identifiers = collections.OrderedDict(
            [("class", "%s.Tokenizer" % PROG), ("vocab_size", vocab_size), ("eod", eod)])


def import_megatron():
    """The three names the peer builds with, or SystemExit(77) saying why
    megatron-core cannot be imported here."""
    try:
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    except Exception as e:  # noqa: BLE001  (an import error deep in megatron-core is as fatal)
        print("%s: megatron-core cannot be imported (%s: %s)" % (PROG, type(e).__name__, e), file=sys.stderr)
        raise SystemExit(EXIT_SKIP)
    return BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig


def megatron_version():
    try:
        from megatron.core import package_info
        return package_info.__version__
    except Exception:  # noqa: BLE001  (the version is only reported)
        return "unknown"


def build_dataset(args):
    """The train split of GPTDataset over --prefix, as the module docstring says."""
    builder, gpt_dataset, gpt_config = import_megatron()
    config = gpt_config(
        random_seed=args.seed,
        sequence_length=args.seq_len,
        blend=([args.prefix], None),
        split="100,0,0",
        path_to_cache=args.cache,
        mmap_bin_files=True,
        tokenizer=Tokenizer(args.vocab, args.eod),
        reset_position_ids=args.documents,
        reset_attention_mask=args.documents,
        eod_mask_loss=args.documents,
        create_attention_mask=False,
    )
    train, _, _ = builder(gpt_dataset, [None, None, None], lambda: True, config).build()
    if train is None:
        raise RuntimeError("BlendedMegatronDatasetBuilder built no train split of %s" % args.prefix)
    return train


def check(args):
    start = time.perf_counter()
    dataset = build_dataset(args)
    built_s = time.perf_counter() - start
    sample = dataset[0]
    tokens = sample["tokens"]
    print("%s: megatron-core %s, torch %s, numpy %s; %s over %s: %d samples of seq_len %d, built in %.1f s"
          % (PROG, megatron_version(), torch.__version__, np.__version__, type(dataset).__name__, args.prefix,
             len(dataset), args.seq_len, built_s))
    print("sample 0: keys %s; tokens %s %s, first %s; labels first %s; position_ids first %s; "
          "%d EOD inputs; loss_mask sum %.0f"
          % (sorted(sample), tokens.dtype, tuple(tokens.shape), tokens[:12].tolist(),
             sample["labels"][:12].tolist(), sample["position_ids"][:12].tolist(),
             int((tokens == args.eod).sum()), float(sample["loss_mask"].sum())))
    return 0


def endless(loader):
    """Batches of one epoch after another (persistent workers carry over)."""
    while True:
        for batch in loader:
            yield batch


def to_device(batch, device):
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def measure(args):
    if not torch.cuda.is_available():
        print("%s: torch %s sees no CUDA device" % (PROG, torch.__version__), file=sys.stderr)
        return EXIT_SKIP
    start = time.perf_counter()
    dataset = build_dataset(args)
    built_s = time.perf_counter() - start
    if len(dataset) < args.batch_size:
        print("%s: %s gives %d samples, fewer than a batch of %d"
              % (PROG, args.prefix, len(dataset), args.batch_size), file=sys.stderr)
        return 1
    warmup = args.warmup_batches or max(8, 2 * args.workers)

    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)  # the pin-memory thread pins for the current device
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
                        pin_memory=True, persistent_workers=True, prefetch_factor=PREFETCH_FACTOR,
                        drop_last=True)
    batches = endless(loader)
    start = time.perf_counter()
    first = next(batches)
    pinned = all(v.is_pinned() for v in first.values())
    shapes = ", ".join("%s %s %s" % (k, str(v.dtype).replace("torch.", ""), tuple(v.shape))
                       for k, v in sorted(first.items()))
    dst = to_device(first, device)
    for _ in range(warmup - 1):
        dst = to_device(next(batches), device)
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - start

    timed = 0
    start = time.perf_counter()
    while True:
        dst = to_device(next(batches), device)
        timed += 1
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

    print("%s: megatron-core %s, torch %s, numpy %s, device %s, %d workers; %d samples (built in %.1f s); "
          "batch %s; pinned %s; warm-up %d batches in %.2f s; timed %d batches in %.3f s"
          % (PROG, megatron_version(), torch.__version__, np.__version__, torch.cuda.get_device_name(device),
             args.workers, len(dataset), built_s, shapes, pinned, warmup, warmup_s, timed, seconds),
          file=sys.stderr)
    print("megatron: seq_len=%d batch=%d documents=%d batches=%d seconds=%.3f tokens_per_s=%.1f"
          % (args.seq_len, args.batch_size, int(args.documents), timed, seconds,
             timed * args.batch_size * args.seq_len / seconds), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", required=True, help="the indexed dataset, PREFIX.bin and PREFIX.idx")
    ap.add_argument("--seq-len", type=int, required=True, help="GPTDataset's sequence_length")
    ap.add_argument("--batch-size", type=int, default=8, help="samples per batch (default 8)")
    ap.add_argument("--workers", type=int, default=1, help="DataLoader num_workers (default 1)")
    ap.add_argument("--documents", action="store_true",
                    help="reset_position_ids, reset_attention_mask and eod_mask_loss on")
    ap.add_argument("--cache", help="GPTDataset's path_to_cache (default: PREFIX's directory/mcore-cache)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds (default 2)")
    ap.add_argument("--batches", type=int, default=0, help="timed batches instead of --seconds")
    ap.add_argument("--warmup-batches", type=int, default=0,
                    help="untimed batches first (default: 2 per worker, at least 8)")
    ap.add_argument("--seed", type=int, default=1234, help="GPTDataset's random_seed (default 1234)")
    ap.add_argument("--vocab", type=int, default=50257, help="the tokenizer's vocabulary size (default 50257)")
    ap.add_argument("--eod", type=int, default=50256, help="the end-of-document token (default 50256)")
    ap.add_argument("--check", action="store_true", help="build the dataset, print its first sample, exit")
    args = ap.parse_args()
    if args.seq_len < 1 or args.batch_size < 1 or args.workers < 1:
        ap.error("--seq-len, --batch-size and --workers must be at least 1")
    args.cache = args.cache or os.path.join(os.path.dirname(os.path.abspath(args.prefix)), "mcore-cache")

    if IMPORT_ERROR is not None:
        print("%s: no torch or numpy here (%s)" % (PROG, IMPORT_ERROR), file=sys.stderr)
        return EXIT_SKIP
    try:
        return check(args) if args.check else measure(args)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001  (any failure of megatron-core's ends the run, named)
        traceback.print_exc()
        print("%s: %s: %s" % (PROG, type(e).__name__, e), file=sys.stderr)  # the last line: the reason
        return 1


if __name__ == "__main__":
    sys.exit(main())
