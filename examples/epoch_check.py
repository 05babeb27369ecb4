# SPDX-License-Identifier: Apache-2.0
"""epoch_check: every rank of a job, on any number of nodes, reads its
share of an epoch, and rank 0 checks that the job as a whole saw every
sample exactly once.

One loaderd runs per node; each rank attaches to its own node's daemon
(the default socket, or --socket / $LOADERD_SOCKET) and takes its global
rank and world size from torch.distributed, so the shards of the ranks of
all nodes are one DistributedSampler's. Nothing passes between the
daemons: a rank's batches depend only on the pipeline's data and seed, the
epoch, and its rank and world size.

    # on each of two nodes (node_rank 0 and 1), 8 ranks a node:
    torchrun --nnodes 2 --node-rank $NODE --nproc-per-node 8 \\
        --master-addr node0 --master-port 29500 \\
        examples/epoch_check.py --pipeline train

Prints on rank 0 one JSON line: world, samples seen, samples the epoch
has, duplicates and missing, the ranks' position tokens. Exits 1 when a
sample was seen twice or not at all beyond what DistributedSampler's
semantics give where the samples do not divide evenly: with `drop_last =
false` up to W - 1 samples repeated (its padding), with `drop_last = true`
up to W x batch_size - 1 left out (its tail), for each job of W ranks
that read a part of the epoch. Where they divide evenly, the check is
exact.

    --batches N   stop every rank after N batches and save the job's
                  position to --save FILE (rank 0 writes it)
    --resume FILE resume there (from a job of any world size: the rest of
                  the epoch is re-sharded over this job's ranks) and check
                  that the samples seen before (--seen FILE, written by the
                  first job) and now make the epoch exactly once
    --seen FILE   where rank 0 keeps the samples seen so far (JSON)

The process group is gloo (the check needs no GPU); each rank reads its
batches on the host (`--device cpu`, the default) or on its GPU (`--device
cuda`: cuda:LOCAL_RANK, through device delivery).
"""

import argparse
import collections
import json
import os
import sys

import torch
import torch.distributed as dist

import loaderd


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--socket", default=None, help="this node's daemon (default $LOADERD_SOCKET, "
                    "else the built-in default)")
    ap.add_argument("--batches", type=int, default=0, help="stop after this many batches a rank")
    ap.add_argument("--save", help="with --batches: write the job's position here (rank 0)")
    ap.add_argument("--resume", help="resume at the position saved in this file")
    ap.add_argument("--seen", help="samples seen so far: read it when resuming, write it after")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where batches are delivered: the host, or this rank's GPU (cuda:LOCAL_RANK)")
    return ap.parse_args(argv)


def read_share(args, loader):
    """This rank's sample indices, in the order it got them."""
    seen = []
    for k, batch in enumerate(loader):
        seen += [int(s) for s in batch.sample_indices()]
        if args.batches and k + 1 == args.batches:
            break
    return seen


def main(argv):
    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    state = None
    if args.resume:
        with open(args.resume) as f:
            state = json.load(f)
    device = "cpu" if args.device == "cpu" else "cuda:%s" % os.environ.get("LOCAL_RANK", "0")
    loader = loaderd.Loader(args.pipeline, socket=args.socket, device=device, state=state)
    batch_size = loader.batch_size
    mine = read_share(args, loader)
    position = loader.state_dict()
    loader.close()
    everyone = [None] * (dist.get_world_size() if distributed else 1)
    record = {"rank": loader.rank, "samples": mine, "position": position,
              "batch_size": batch_size}
    if distributed:
        dist.all_gather_object(everyone, record)
        dist.destroy_process_group()
    else:
        everyone = [record]
    if loader.rank != 0:
        return 0
    before, jobs = [], [len(everyone)]
    if args.resume and args.seen:
        with open(args.seen) as f:
            kept = json.load(f)
        before, jobs = kept["samples"], kept["jobs"] + jobs
    counts = collections.Counter(before)
    for r in everyone:
        counts.update(r["samples"])
    if args.seen:
        with open(args.seen, "w") as f:
            json.dump({"samples": sorted(counts.elements()), "jobs": jobs}, f)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(everyone[0]["position"], f)
    positions = sorted({r["position"]["position"] for r in everyone})
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    out = {"world": len(everyone), "seen": sum(counts.values()), "distinct": len(counts),
           "duplicates": duplicates, "positions": positions}
    # ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT]: N, the epoch's samples
    n = int(positions[0].split(":")[4])
    batch = max(r["batch_size"] for r in everyone)
    padding = sum(w - 1 for w in jobs)
    finished = not args.batches
    missing = sum(1 for s in range(n) if s not in counts) if finished else 0
    tail = sum(w * batch - 1 for w in jobs) if finished else 0
    out.update({"samples": n, "missing": missing, "allowed": {"duplicates": padding, "missing": tail}})
    print(json.dumps(out), flush=True)
    return 1 if duplicates > padding or missing > tail else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
