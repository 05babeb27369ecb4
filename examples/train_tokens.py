#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""train_tokens: a small causal transformer language model trained on a
loaderd tokens pipeline, timed the way train_resnet.py times its loop.

    train_tokens.py --pipeline NAME [--socket PATH] [--vocab 65536]
                    [--d-model 256] [--layers 4] [--heads 4] [--steps 100]
                    [--warmup 10] [--device cuda|cuda:N|cpu]
                    [--amp auto|bf16|fp16|off] [--lr 3e-4] [--json]
    torchrun --nproc-per-node N train_tokens.py ... [--one-gpu-per-rank]

The pipeline (`source = tokens:FILE`, `seq_len = L`, `token_dtype`) hands
out rows of L+1 tokens; each row is one training sequence: input = row[:-1],
target = row[1:], cross-entropy over the vocabulary. Deliver the tokens as
`token_output = int64` (or int32): torch before 2.3 has no uint16/uint32
tensors, so a pipeline delivering those is refused with that advice. The
batch size and L come from the pipeline; the model is built for that L
after the first batch arrives.

The model, torch.nn only: token embedding plus a learned position
embedding, --layers pre-norm nn.TransformerEncoderLayer blocks (--heads
heads, feed-forward 4 x d_model, GELU, no dropout) under a causal mask, a
final LayerNorm and an output layer tied to the embedding. AdamW; autocast
as train_resnet.py (bf16 on a GPU that has it, else fp16 with a GradScaler;
off on the CPU unless --amp asks). Every token of the first batch must be
below --vocab (checked once, in the warm-up); the default 65536 holds any
uint16 token.

What is measured is exactly train_resnet.py's (its timed_steps() runs this
loop; its docstring says what the window holds and why the data-wait
fraction is the loader's share): --warmup untimed steps, then --steps
between two torch.cuda.synchronize() calls; tokens/s = steps x batch x L
/ window; data wait = host time inside next() (ldr_next, and the tensor's
from_dlpack, which orders this stream after the daemon's copy).

Packed documents: when the pipeline has `outputs` (docs/config.md,
"Document-aware outputs"), the step uses what it delivers, as
Megatron-LM's reset_position_ids, reset_attention_mask and eod_mask_loss
do: `positions` index the position embedding (restarting at every
document), `cu_seqlens` limit attention to the document (a block-diagonal
causal mask, one per row), and `loss_mask` weights the loss (0 at
end-of-document inputs with eod_mask_loss). Without them, one causal mask
over the whole row and a plain mean.

Under torchrun (`torchrun --nproc-per-node N examples/train_tokens.py
...`, with --one-gpu-per-rank if each rank should see only its GPU) every
process is one rank of a DistributedDataParallel job fed by its own shard
of the pipeline, as examples/ddp.py says; rank 0 prints every rank's
figures and the node's tokens/s.

Output: a summary on stdout (with --json, instead, one JSON line of the
figures); progress on stderr. Exit codes: 0; 1 an error (the message names
it; the daemon's own for loaderd's); 2 bad arguments.
"""

import argparse
import itertools
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp  # noqa: E402  (this directory)
from train_resnet import (IMPORT_ERROR, ExampleError, device_name, import_loaderd,  # noqa: E402
                          make_optimizer_step, pick_amp, pick_device, run, say, timed_steps)

if IMPORT_ERROR is None:
    import torch
    import torch.nn.functional as F
    from torch import nn

PROG = "train_tokens"
INT_DTYPES = ("torch.int32", "torch.int64")
Module = nn.Module if IMPORT_ERROR is None else object  # main() says torch is missing


class TinyLM(Module):
    """Causal transformer LM: embeddings, pre-norm encoder blocks under a
    causal mask, tied output layer."""

    def __init__(self, vocab, seq_len, d_model, layers, heads):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)
        block = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.embed.weight
        # -inf where attention is not allowed: each position sees itself and
        # the past (a float mask: DistributedDataParallel broadcasts buffers,
        # and gloo has no bool)
        self.register_buffer("mask", torch.full((seq_len, seq_len), float("-inf")).triu(1),
                             persistent=False)

    def forward(self, tokens, positions=None, mask=None):
        """tokens [B, L]; positions [B, L] (default 0..L-1); mask None (the
        causal mask) or [B * heads, L, L] of 0 and -inf."""
        pos = self.pos if positions is None else self.pos[0][positions]
        h = self.embed(tokens) + pos
        h = self.blocks(h, mask=self.mask if mask is None else mask)
        return self.head(self.norm(h))


def document_mask(cu_seqlens, seq_len, heads):
    """[B * heads, L, L]: 0 where input i may attend to input j (j <= i,
    both in one document of the row), -inf elsewhere. cu_seqlens [B, M+1]:
    the documents' ends, padded with L."""
    t = torch.arange(seq_len, device=cu_seqlens.device)
    doc = (t.view(1, 1, -1) >= cu_seqlens[:, 1:].long().unsqueeze(2)).sum(1)  # [B, L]: document of each input
    allowed = (doc.unsqueeze(2) == doc.unsqueeze(1)) & (t.view(1, -1, 1) >= t.view(1, 1, -1))
    mask = torch.zeros(allowed.shape, device=cu_seqlens.device).masked_fill_(~allowed, float("-inf"))
    return mask.repeat_interleave(heads, 0)


DOCUMENT_OUTPUTS = ("positions", "loss_mask", "cu_seqlens")


def token_batches(args, device):
    """(iterator of dicts on the device: "tokens" int64 [B, L+1] and
    whichever of DOCUMENT_OUTPUTS the pipeline delivers, the loader)."""
    loaderd = import_loaderd()
    loader = loaderd.Loader(args.pipeline, socket=args.socket,
                            device="cpu" if device.type == "cpu" else device.index,
                            depth=args.depth, timeout=args.timeout, name="train_tokens")

    def tokens_of(batch):
        try:
            t = batch["tokens"]
        except loaderd.LoaderdError as e:
            raise ExampleError("%s; set `token_output = int64` (or int32) in the pipeline" % e) from None
        except KeyError as e:
            raise ExampleError("pipeline %r is not a tokens pipeline: %s"
                               % (args.pipeline, e.args[0])) from None
        if str(t.dtype) not in INT_DTYPES:
            raise ExampleError("pipeline %r delivers %s tokens; set `token_output = int64` (or int32)"
                               % (args.pipeline, t.dtype))
        if t.dim() != 2 or t.shape[1] < 2:
            raise ExampleError("tokens tensor of shape %s: expected [B, seq_len + 1]" % list(t.shape))
        out = {"tokens": t.long()}  # int64 (a copy unless delivered so); nothing writes to it
        for name in DOCUMENT_OUTPUTS:
            if name in batch:
                out[name] = batch[name]
        return out

    def batches():
        try:
            while True:  # each `for` is one epoch; the daemon runs on into the next
                for batch in loader:
                    yield tokens_of(batch)
        finally:
            loader.close()

    say(PROG, "loaderd: pipeline %s, %d sequences, batch %d, delivered to %s"
        % (args.pipeline, loader.dataset_size, loader.batch_size, loader.device))
    return batches(), loader


def train(args):
    job = ddp.Job()
    try:
        return train_rank(args, job)
    finally:
        job.close(torch)


def train_rank(args, job):
    try:
        device = pick_device(job.device_name(args.device, args.one_gpu_per_rank))
    except ValueError as e:
        raise ExampleError(str(e)) from None
    amp_dtype, use_scaler, amp_name = pick_amp(args.amp, device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.zeros(1, device=device)  # the CUDA context exists before a loaderd attach
    job.start(torch, device)
    batches, loader = token_batches(args, device)
    batch_size = loader.batch_size

    first = next(batches)  # the model's length is the pipeline's
    seq_len = first["tokens"].shape[1] - 1
    used = [name for name in DOCUMENT_OUTPUTS if name in first]
    top = int(first["tokens"].max())
    if top >= args.vocab:
        raise ExampleError("token %d in the first batch, but --vocab is %d" % (top, args.vocab))
    model = TinyLM(args.vocab, seq_len, args.d_model, args.layers, args.heads).to(device).train()
    model = job.wrap(torch, model, device)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    optimizer_step = make_optimizer_step(model, optimizer, amp_dtype, use_scaler, device)

    def loss_of(b):
        tokens = b["tokens"]
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        mask = document_mask(b["cu_seqlens"], seq_len, args.heads) if "cu_seqlens" in b else None
        logits = model(inputs, b.get("positions"), mask).reshape(-1, args.vocab).float()
        if "loss_mask" not in b:
            return F.cross_entropy(logits, targets.reshape(-1))
        weight = b["loss_mask"].reshape(-1)
        losses = F.cross_entropy(logits, targets.reshape(-1), reduction="none")
        return (losses * weight).sum() / weight.sum().clamp(min=1.0)

    def step(b):
        return optimizer_step(lambda: loss_of(b))

    say(PROG, "transformer d_model %d, %d layers, %d heads, vocab %d, %.1fM parameters, %s, amp %s, "
        "batch %d x %d tokens%s: %d warm-up steps, %d timed"
        % (args.d_model, args.layers, args.heads, args.vocab, params / 1e6, device_name(device), amp_name,
           batch_size, seq_len, ", with " + " ".join(used) if used else "", args.warmup, args.steps))
    seconds, wait_s, loss = timed_steps(itertools.chain([first], batches), step, device, args.warmup,
                                        args.steps, window_opens=lambda: job.barrier(torch))
    del first
    batches.close()

    tokens = args.steps * batch_size * seq_len
    result = {"model": "transformer", "loader": "loaderd", "pipeline": args.pipeline,
            "device": device_name(device), "amp": amp_name, "d_model": args.d_model, "layers": args.layers,
            "heads": args.heads, "vocab": args.vocab, "parameters": params, "batch_size": batch_size,
            "seq_len": seq_len, "steps": args.steps, "warmup": args.warmup, "tokens": tokens,
            "outputs_used": used,
            "seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds, 1),
            "data_wait_s": round(wait_s, 4), "data_wait_fraction": round(wait_s / seconds, 4),
            "loss": None if math.isnan(loss) else round(loss, 4), "torch": torch.__version__,
            "gpu_uuid": ddp.gpu_uuid(torch, device), "rank": job.rank, "world": job.world,
            "shard": [loader.rank, loader.world_size]}
    return job.gather(torch, result, "tokens_per_s", batch_size * seq_len)


def summary(r):
    text = ("transformer (%.1fM parameters), pipeline %s, %s, amp %s, batch %d x %d: %d steps in %.2f s: "
            "%.1f tokens/s, data wait %.1f%% of the time; loss %s"
            % (r["parameters"] / 1e6, r["pipeline"], r["device"], r["amp"], r["batch_size"], r["seq_len"],
               r["steps"], r["seconds"], r["tokens_per_s"], 100 * r["data_wait_fraction"], r["loss"]))
    if r.get("ranks"):
        text += "\nnode, %d ranks: %.1f tokens/s, data wait at most %.1f%%; " % (
            r["world"], r["node_tokens_per_s"], 100 * r["data_wait_fraction_max"]) + "; ".join(
            "rank %d on %s: %.1f tokens/s" % (x["rank"], x["gpu_uuid"] or x["device"], x["tokens_per_s"])
            for x in r["ranks"])
    return text


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipeline", required=True, help="the tokens pipeline's name")
    ap.add_argument("--socket",
                    help="the daemon's socket (default $LOADERD_SOCKET, else the daemon's default)")
    ap.add_argument("--vocab", type=int, default=65536, help="vocabulary size (default 65536)")
    ap.add_argument("--d-model", type=int, default=256, help="model width (default 256)")
    ap.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps (default 100)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--device", help="cuda, cuda:N or cpu (default cuda when available, else cpu)")
    ap.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                    help="autocast dtype (default auto: bf16 on a GPU that has it, else fp16; "
                    "off on the CPU)")
    ap.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    ap.add_argument("--depth", type=int, default=0, help="batches prepared ahead (default: the daemon's)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds to wait for one batch before giving up (default 300)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON line of figures instead of the summary")
    ap.add_argument("--one-gpu-per-rank", action="store_true",
                    help="under torchrun: each rank sees only its own GPU (CUDA_VISIBLE_DEVICES)")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.vocab < 2 or a.layers < 1 or a.heads < 1 or a.d_model < 1:
        ap.error("--steps >= 1, --warmup >= 0, --vocab >= 2, --layers, --heads and --d-model >= 1")
    if a.d_model % a.heads:
        ap.error("--d-model %d is not a multiple of --heads %d" % (a.d_model, a.heads))
    if a.depth < 0 or a.timeout <= 0:
        ap.error("--depth >= 0 and --timeout > 0")
    return a


def main():
    args = parse_args()
    return run(PROG, "torch", lambda: train(args), summary, args.json)


if __name__ == "__main__":
    sys.exit(main())
