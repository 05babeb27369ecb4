# SPDX-License-Identifier: Apache-2.0
"""ddp: one rank of a torchrun job, for train_resnet.py and train_tokens.py.

Started by torchrun (LOCAL_RANK, RANK and WORLD_SIZE in the environment),
an example runs as one rank of a DistributedDataParallel job:

    torchrun --nproc-per-node N examples/train_resnet.py --loader loaderd \\
        --pipeline train [--one-gpu-per-rank] ...

  device   cuda:LOCAL_RANK; with --one-gpu-per-rank the rank first narrows
           CUDA_VISIBLE_DEVICES to its own GPU (the LOCAL_RANK-th entry of
           the list it inherited, or LOCAL_RANK itself when none) and uses
           cuda:0, as launchers that give every rank one visible device do.
           loaderd resolves either to the same GPU: clients name their GPU
           by UUID, whatever their CUDA_VISIBLE_DEVICES.
  group    torch.distributed with NCCL on a GPU (gloo on the CPU).
  model    wrapped in DistributedDataParallel (gradients all-reduced
           every step).
  data     loaderd.Loader takes rank and world size from torch.distributed:
           every rank gets its own shard of each epoch from one daemon.
           The DataLoader draws a random stream of its own per rank
           (seeded by rank).
  timing   the ranks meet at a barrier where the timed window opens, so
           every rank times the same steps; rank 0 gathers every rank's
           figures (all_gather_object) and prints them with the node's:
           node images/s = world x steps x batch / the longest rank's
           window; data wait: each rank's, and the largest.

Without torchrun the examples run as a single process, as before.
"""

import os

VISIBLE = "CUDA_VISIBLE_DEVICES"


class Job:
    """Where this process stands: rank, world, local_rank, distributed."""

    def __init__(self):
        self.distributed = "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ
        env = os.environ.get
        self.rank = int(env("RANK", "0")) if self.distributed else 0
        self.world = int(env("WORLD_SIZE", "1")) if self.distributed else 1
        self.local_rank = int(env("LOCAL_RANK", "0")) if self.distributed else 0
        self.visible = None  # what --one-gpu-per-rank left visible

    def device_name(self, requested, one_gpu_per_rank):
        """The --device to use: `requested` outside torchrun; else this
        rank's GPU (narrowing CUDA_VISIBLE_DEVICES first when asked; this
        must run before the process's first CUDA call)."""
        if not self.distributed or requested == "cpu":
            return requested
        if requested not in (None, "cuda"):
            raise ValueError("under torchrun each rank takes its GPU from LOCAL_RANK; leave --device out "
                             "(got %s)" % requested)
        if one_gpu_per_rank:
            listed = [x.strip() for x in os.environ.get(VISIBLE, "").split(",") if x.strip()]
            if listed and self.local_rank >= len(listed):
                raise ValueError("local rank %d, but %s=%s lists %d GPUs"
                                 % (self.local_rank, VISIBLE, os.environ[VISIBLE], len(listed)))
            self.visible = listed[self.local_rank] if listed else str(self.local_rank)
            os.environ[VISIBLE] = self.visible
            return "cuda:0"
        return "cuda:%d" % self.local_rank

    def start(self, torch, device):
        """Joins the process group (after the device is set)."""
        if self.distributed:
            torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")

    def wrap(self, torch, model, device):
        if not self.distributed:
            return model
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)

    def barrier(self, torch):
        if self.distributed:
            torch.distributed.barrier()

    def gather(self, torch, result, rate_key, per_step):
        """Rank 0: result with every rank's figures under "ranks" and the
        node's; other ranks: None. rate_key names the per-rank rate
        ("images_per_s", "tokens_per_s"); per_step is one rank's items a
        step."""
        if not self.distributed:
            return result
        mine = {"rank": self.rank, "device": result.get("device"), "gpu_uuid": result.get("gpu_uuid"),
                "visible": self.visible, "shard": result.get("shard"), rate_key: result[rate_key],
                "seconds": result["seconds"], "data_wait_fraction": result["data_wait_fraction"]}
        everyone = [None] * self.world
        torch.distributed.all_gather_object(everyone, mine)
        if self.rank != 0:
            return None
        out = dict(result)
        longest = max(r["seconds"] for r in everyone)
        out.update({"world": self.world, "ranks": everyone,
                    "node_" + rate_key: round(self.world * result["steps"] * per_step / longest, 1),
                    "data_wait_fraction_max": max(r["data_wait_fraction"] for r in everyone)})
        return out

    def close(self, torch):
        if self.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def gpu_uuid(torch, device):
    """"GPU-..." of a CUDA device as nvidia-smi and loaderd name it, or None."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return None if uuid is None else "GPU-%s" % uuid
