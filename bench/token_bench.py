#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""token_bench: LLM token batches to one GPU (issue 16): loaderd's megatron
pipelines against megatron-core's GPTDataset through a DataLoader, and
against the bus, measured in one run on one machine.

  (a) dataset: a Megatron-LM indexed dataset, PREFIX.bin / PREFIX.idx
      (MMIDIDX version 1, uint16 tokens, vocabulary 50257, as megatron-core
      writes it: tools/make_dataset.py's write_megatron_index) of --gib GiB,
      documents of lognormal length (median 600 tokens, sigma 1, 8 to 32768
      tokens, seed 1234; about 990 tokens on average), each ending with the
      end-of-document token 50256, which appears nowhere else;
  (b) loaderd: one daemon, one megatron pipeline per case: seq_len
      (--seq-lens, default 4096,8192) x batch (--batches, default 8,32) x
      delivery: `tokens` (outputs = tokens, staging), `documents` (outputs
      = tokens positions cu_seqlens loss_mask, eod_mask_loss) and `direct`
      (tokens, `direct = on`, document_shuffle off, as docs/config.md
      requires); shuffled, drop_last. Each case: a warm-up `loaderctl
      consume --device D --batches N --quiet`, then a timed one of about
      --seconds; tokens/s = rows x seq_len / seconds of its summary;
      the daemon's CPU per batch = CPU seconds of loaderd and its workers
      (from /proc) over the timed consume / its batches; the client's own
      cost per batch (next + stream wait + release, consume's call_us) with
      --step-ms so that batches are always ready (gpu_bench.call_cost);
  (c) ceiling: loaderd-h2d-ceiling at each case's batch size in bytes (as
      consume measured it), as tokens/s, and loaderd / ceiling;
  (d) peer: bench/megatron_peer.py in its own process, megatron-core
      0.16.1's GPTDataset (reset_position_ids, reset_attention_mask and
      eod_mask_loss on for `documents`) through a DataLoader with as many
      workers and the same batch, pinned, each batch moved to the GPU.
      megatron-core comes from the wheels in --wheels (default .gpu/wheels,
      which `scripts/gpu-check.sh --fetch` fills), installed with `pip
      install --no-deps --target` into a directory of this run that is put
      on the peer's PYTHONPATH, never into the system; without them, the
      megatron-core Python finds;
  (e) training: examples/train_tokens.py (--train-steps steps, JSON) on a
      pipeline of its own like the `documents` one of seq_len 4096 batch 8,
      with int64 tokens (it takes no uint16), for its data wait; the
      loaderd Python package comes from BUILD/python.
It prints a markdown table, the machine, the date and a line per goal of
the issue; --out DIR keeps the table, every command's output and loaderd's
log.

--host measures host delivery instead (consume without --device; no
ceiling, no peer; the `direct` pipelines serve host clients through
staging, as they always do; training on the CPU): what runs before the
GPU, checked on a machine without one.

Exit codes: 0 (all measured), 1 (some measurement failed: "error: ..." in
its cell), 77 (no GPU: loaderd --version reports none, without --host).

    bench/token_bench.py [--build build] [--out DIR] [--data-dir DIR] [--gib 2]
                         [--workers N] [--seq-lens 4096,8192] [--batches 8,32]
                         [--seconds 2] [--device 0] [--skip-peer] [--host]
                         [--wheels DIR] [--train-steps 100]
"""

import argparse
import datetime
import glob
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import LoaderdDaemon, StepError, failed_exit, last_line, publish  # noqa: E402  (this directory)
from gpu_bench import (EXIT_SKIP, Failed, Notes, bench_context, call_cost, free_bytes, int_list,  # noqa: E402
                       loaderd_gpus, nvidia_smi, plural, raise_memlock, ratio, run,
                       skip_without_gpu, usable_cores)
from host_bench import cpu_model, read_file_gbps  # noqa: E402
from image_bench import cpu_seconds  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_dataset  # noqa: E402  (tools/ is put on the path just above)

PEER = os.path.join(ROOT, "bench", "megatron_peer.py")
TRAIN = os.path.join(ROOT, "examples", "train_tokens.py")
WHEELS = os.path.join(ROOT, ".gpu", "wheels")
MEGATRON_WHEEL = "megatron_core-0.16.1-*.whl"
GIB = 1 << 30

# The corpus: GPT-2's vocabulary and end-of-text token, documents of
# lognormal length.
VOCAB = 50257
EOD = 50256
SEED = 1234
DOC_MEDIAN, DOC_SIGMA = 600, 1.0
DOC_MIN, DOC_MAX = 8, 32768
CHUNK_TOKENS = 16 << 20     # tokens generated and written at a time
# Random tokens are two random bytes each, the high byte folded below 196
# (196 x 256 = 50176 <= EOD): every token lies in [0, 50176), so EOD only
# ends documents; bytes.translate does it at memory speed.
HIGH_BYTE = bytes(b % 196 for b in range(256))

DELIVERIES = ("tokens", "documents", "direct")
OUTPUTS = {"tokens": "tokens", "documents": "tokens positions cu_seqlens loss_mask", "direct": "tokens"}
TRAIN_PIPELINE = "train"      # what examples/train_tokens.py trains on
STAGING_SLOTS = 16
DEPTH = 8                   # the client's depth = device_slots
WARMUP_BATCHES = 2000
MIN_BATCHES = 200
MAX_BATCHES = 2000000
TRAIN_WARMUP = 10
GOAL_TOKENS_PER_S = 1e9     # at seq_len 4096, batch 8
GOAL_SEQ, GOAL_BATCH = 4096, 8
GOAL_PEER = 10.0
GOAL_CALL_US = 50.0
GOAL_WAIT = 0.01            # "no data wait": under 1% of the training time

SUMMARY_RE = re.compile(r"^consume: .* batches=(\d+) samples=(\d+) bytes=(\d+) seconds=(\S+) "
                        r"batches_per_s=(\S+) samples_per_s=\S+ MB_per_s=\S+ device=(\S+) call_us=(\S+)$",
                        re.M)
H2D_RE = re.compile(r"^h2d: bytes=(\d+) GB_per_s=(\S+)$", re.M)
PEER_RE = re.compile(r"^megatron: .* batches=(\d+) seconds=(\S+) tokens_per_s=(\S+)$", re.M)


class Context:
    """What every step needs: options, paths, the log."""


class Case:
    """One pipeline: seq_len x batch x delivery."""

    def __init__(self, seq_len, batch, delivery):
        self.seq_len, self.batch, self.delivery = seq_len, batch, delivery
        self.name = "s%d-b%d-%s" % (seq_len, batch, delivery)

    def label(self):
        return "seq_len %d, batch %d, %s" % (self.seq_len, self.batch, self.delivery)


# ---------------------------------------------------------------- data

def document_lengths(total_tokens, rng):
    """Lengths (EOD included) of documents that hold total_tokens together:
    lognormal, clipped to DOC_MIN..DOC_MAX; the last one is cut to fit."""
    mu = math.log(DOC_MEDIAN)
    lengths = []
    left = total_tokens
    while left > 0:
        n = min(DOC_MAX, max(DOC_MIN, int(rng.lognormvariate(mu, DOC_SIGMA))), left)
        lengths.append(n)
        left -= n
    return lengths


def write_corpus(prefix, total_tokens):
    """PREFIX.bin and PREFIX.idx: documents of document_lengths() random
    tokens, each ending with EOD; returns the lengths. The tokens are made
    CHUNK_TOKENS at a time from random bytes, with no loop over tokens."""
    rng = random.Random(SEED)
    lengths = document_lengths(total_tokens, rng)
    eod = EOD.to_bytes(2, "little")
    with open(prefix + ".bin", "wb") as f:
        i = 0
        while i < len(lengths):
            j, n = i, 0
            while j < len(lengths) and n < CHUNK_TOKENS:
                n += lengths[j]
                j += 1
            buf = bytearray(rng.randbytes(2 * n))
            buf[1::2] = buf[1::2].translate(HIGH_BYTE)  # the high byte of each little-endian token
            end = 0
            for k in range(i, j):
                end += lengths[k]
                buf[2 * end - 2:2 * end] = eod
            f.write(buf)
            i = j
    make_dataset.write_megatron_index(prefix, lengths)
    return lengths


def make_data(ctx):
    """Writes the corpus into a directory of its own; returns that directory."""
    a = ctx.args
    total = int(a.gib * GIB) // 2
    ctx.data_bytes = 2 * total
    need = ctx.data_bytes + GIB  # and loaderd's arena beside it
    base = a.data_dir or ("/dev/shm" if free_bytes("/dev/shm") >= need else tempfile.gettempdir())
    ctx.data_dir_kind = base
    d = tempfile.mkdtemp(prefix="loaderd-token-bench-data-", dir=base)
    ctx.prefix = os.path.join(d, "corpus")
    start = time.perf_counter()
    try:
        lengths = write_corpus(ctx.prefix, total)
    except OSError:
        shutil.rmtree(d, ignore_errors=True)
        raise
    s = sorted(lengths)
    ctx.corpus = ("%d documents, %d tokens; document length median %d, mean %.0f, 99th percentile %d, "
                  "longest %d" % (len(s), total, s[len(s) // 2], total / len(s), s[len(s) * 99 // 100], s[-1]))
    ctx.log.say("wrote %.2f GiB of Megatron tokens to %s.{bin,idx} in %.1f s: %s"
                % (ctx.data_bytes / GIB, ctx.prefix, time.perf_counter() - start, ctx.corpus))
    ctx.log.say("sequential read of it: %.2f GB/s (now in the page cache)" % read_file_gbps(ctx.prefix + ".bin"))
    return d


# ---------------------------------------------------------------- loaderd

class Daemon(LoaderdDaemon):
    """One loaderd with one megatron pipeline per case."""

    START_GOAL = "to start"

    def __init__(self, ctx):
        super().__init__(ctx, "tokens", "%s" % plural(ctx.args.workers, "worker"))

    def config_lines(self):
        a = self.ctx.args
        # The largest batch: uint16 tokens, int64 positions, float32 loss
        # mask, int32 cu_seqlens (33) and num_documents per row.
        row = (max(a.seq_lens) + 1) * 2 + max(a.seq_lens) * 12 + 34 * 4
        max_batch = max(a.batch_sizes) * row
        # The arena holds its rings, STAGING_SLOTS slots of the largest batch
        # and each document-shuffled pipeline's document table (8 bytes a
        # document, about 1.1 M documents a GiB); the margin covers the
        # header and the rings.
        tables = (len(self.ctx.cases) + 1) * 8 * int(a.gib * 1.2e6)
        shm_bytes = (STAGING_SLOTS + 4) * max_batch + tables + (256 << 20)
        lines = ["[daemon]",
                 "socket = %s" % self.socket,
                 "workers = %d" % a.workers,
                 "shm_bytes = %d" % shm_bytes,
                 "staging_slots = %d" % STAGING_SLOTS,
                 "max_depth = %d" % max(16, DEPTH),
                 "gpu = %s" % ("off" if a.host else "required"),
                 "pin = register",
                 "device_slots = %d" % DEPTH,
                 "log_level = info",
                 ""]
        for c in self.ctx.cases:
            lines += ["[pipeline.%s]" % c.name,
                      "source = megatron:%s" % self.ctx.prefix,
                      "seq_len = %d" % c.seq_len,
                      "batch_size = %d" % c.batch,
                      "shuffle = true",
                      "seed = %d" % SEED,
                      "drop_last = true",
                      "outputs = %s" % OUTPUTS[c.delivery],
                      "eod_token = %d" % EOD]
            if c.delivery == "documents":
                lines.append("eod_mask_loss = true")
            if c.delivery == "direct":
                lines += ["direct = on", "document_shuffle = off"]
            lines.append("")
        if a.train_steps:
            # examples/train_tokens.py takes int64 (or int32) tokens.
            lines += ["[pipeline.%s]" % TRAIN_PIPELINE,
                      "source = megatron:%s" % self.ctx.prefix,
                      "seq_len = %d" % GOAL_SEQ,
                      "batch_size = %d" % GOAL_BATCH,
                      "shuffle = true",
                      "seed = %d" % SEED,
                      "drop_last = true",
                      "token_output = int64",
                      "outputs = %s" % OUTPUTS["documents"],
                      "eod_token = %d" % EOD,
                      "eod_mask_loss = true",
                      ""]
        return lines

    def check_started(self, status):
        m = re.search(r"^delivery: (.*)$", status, re.M)
        if not self.ctx.args.host and not (m and "device" in m.group(1)):
            raise StepError("loaderd offers no device delivery: %s" % (m.group(1) if m else "no delivery line"))

    def direct_refused(self, case):
        """The log's line saying that the case's pipeline could not be
        page-locked (its device clients then go through staging), or None."""
        with open(self.log_path, errors="replace") as f:
            for ln in f:
                if "its device clients go through staging" in ln and 'pipeline "%s"' % case.name in ln:
                    return ln.strip()
        return None


def consume(ctx, daemon, case, batches, timeout_s, what, step_ms=0):
    """One `loaderctl consume` of the case's pipeline; its summary as a dict."""
    daemon.check_alive()
    cmd = [ctx.loaderctl, "--socket", daemon.socket, "consume", "--pipeline", case.name,
           "--batches", str(batches), "--depth", str(DEPTH), "--name", "token-bench", "--quiet"]
    if not ctx.args.host:
        cmd += ["--device", str(ctx.args.device)]
    if step_ms:
        cmd += ["--step-ms", str(step_ms)]
    r = run(ctx.log, "%s, %s" % (what, case.label()), cmd, timeout_s)
    if r.returncode != 0:
        raise StepError("consume exited %d: %s" % (r.returncode, last_line(r.stderr) or daemon.log_tail()))
    m = SUMMARY_RE.search(r.stdout)
    if not m:
        raise StepError("no summary line from loaderctl consume")
    s = {"batches": int(m.group(1)), "samples": int(m.group(2)), "bytes": int(m.group(3)),
         "seconds": float(m.group(4)), "batches_per_s": float(m.group(5)), "device": m.group(6),
         "call_us": float(m.group(7))}
    if ctx.args.host != (s["device"] == "host"):
        raise StepError("batches were delivered to %s" % s["device"])
    if s["batches"] != batches or s["seconds"] <= 0:
        raise StepError("consume delivered %d of %d batches in %.3f s" % (s["batches"], batches, s["seconds"]))
    return s


def measure_case(ctx, daemon, case):
    """{tokens_per_s, batch_bytes, gbps, cpu_us, call_us} of one case;
    a figure is a Failed where its step failed."""
    a = ctx.args
    f = {}
    try:
        warm = consume(ctx, daemon, case, WARMUP_BATCHES, 120, "warm-up")
        if case.delivery == "direct" and not a.host and daemon.direct_refused(case):
            raise StepError("direct delivery refused: %s" % daemon.direct_refused(case))
        rate = warm["batches_per_s"]
        n = a.batches_per_run or min(MAX_BATCHES, max(MIN_BATCHES, math.ceil(a.seconds * rate)))
        cpu0 = cpu_seconds(daemon.proc.pid)
        timed = consume(ctx, daemon, case, n, int(60 + 5 * n / rate), "timed")
        cpu = cpu_seconds(daemon.proc.pid) - cpu0
    except StepError as e:
        ctx.log.say("%s: %s" % (case.label(), e))
        return {k: Failed("error: %s" % e) for k in ("tokens_per_s", "batch_bytes", "gbps", "cpu_us", "call_us")}
    f["tokens_per_s"] = timed["samples"] * case.seq_len / timed["seconds"]
    f["batch_bytes"] = timed["bytes"] // timed["batches"]
    f["gbps"] = timed["bytes"] / timed["seconds"] / 1e9
    f["cpu_us"] = cpu / timed["batches"] * 1e6
    ctx.log.say("%s: %.3f G tokens/s, %.0f batches/s of %d bytes (%d batches in %.2f s); daemon and "
                "workers %.1f us of CPU per batch, %.2f cores busy"
                % (case.label(), f["tokens_per_s"] / 1e9, timed["batches_per_s"], f["batch_bytes"],
                   timed["batches"], timed["seconds"], f["cpu_us"], cpu / timed["seconds"]))
    try:
        f["call_us"], step_ms, runs = call_cost(
            lambda k, step_ms, timeout_s: consume(ctx, daemon, case, k, timeout_s, "per-batch cost", step_ms),
            1e3 / timed["batches_per_s"])
    except StepError as e:
        ctx.log.say("%s, per-batch cost: %s" % (case.label(), e))
        f["call_us"] = Failed("error: %s" % e)
        return f
    ctx.log.say("%s: next+release %.1f us per batch (step %d ms; call_us %.1f over %d, %.1f over %d batches)"
                % (case.label(), f["call_us"], step_ms, runs[0]["call_us"], runs[0]["batches"],
                   runs[1]["call_us"], runs[1]["batches"]))
    return f


def measure_train(ctx, daemon):
    """examples/train_tokens.py on the train pipeline (the documents
    outputs at seq_len 4096, batch 8, as int64 tokens): its JSON figures,
    or a Failed."""
    a = ctx.args
    if not a.train_steps:
        return Failed("skipped: --train-steps 0")
    device = "cpu" if a.host else "cuda:%d" % a.device
    warmup = 1 if a.host else TRAIN_WARMUP  # a step on the CPU takes seconds
    cmd = [sys.executable, TRAIN, "--pipeline", TRAIN_PIPELINE, "--socket", daemon.socket, "--vocab", str(VOCAB),
           "--steps", str(a.train_steps), "--warmup", str(warmup), "--device", device, "--json"]
    if a.host:
        cmd += ["--d-model", "64", "--layers", "1", "--heads", "1"]  # what the CPU's memory holds at 4096
    python_dir = os.path.join(ctx.build, "python")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [python_dir] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    timeout_s = 300 + (a.train_steps + warmup) * (60 if a.host else 2)
    ctx.log.write("\n$ PYTHONPATH=%s %s    # training, timeout %d s\n" % (env["PYTHONPATH"], shlex.join(cmd), timeout_s))
    try:
        daemon.check_alive()
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                           env=env)
    except subprocess.TimeoutExpired:
        ctx.log.say("training: timed out after %d s" % timeout_s)
        return Failed("error: train_tokens.py timed out after %d s" % timeout_s)
    except StepError as e:
        return Failed("error: %s" % e)
    ctx.log.write("exit %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr))
    try:
        f = json.loads(last_line(r.stdout))
        if not all(isinstance(f.get(k), (int, float)) for k in ("data_wait_fraction", "tokens_per_s")):
            raise ValueError("no figures")
    except (ValueError, AttributeError):
        why = "error: train_tokens.py exited %d: %s" % (r.returncode, last_line(r.stderr))
        ctx.log.say("training: %s" % why)
        return Failed(why)
    ctx.log.say("training (seq_len %d, batch %d, %s): %.0f tokens/s, data wait %.2f%% of the time"
                % (GOAL_SEQ, GOAL_BATCH, f.get("device"), f["tokens_per_s"], 100 * f["data_wait_fraction"]))
    return f


# ---------------------------------------------------------------- peers

def measure_ceiling(ctx, sizes):
    """{batch bytes: GB/s or Failed} from one loaderd-h2d-ceiling run."""
    exe = os.path.join(ctx.bindir, "loaderd-h2d-ceiling")
    if not sizes:
        return {}
    if not os.access(exe, os.X_OK):
        return {b: Failed("error: %s missing (built only with the CUDA toolkit)" % os.path.basename(exe))
                for b in sizes}
    cmd = [exe, "--device", str(ctx.args.device)] + [str(b) for b in sorted(sizes)]
    try:
        r = run(ctx.log, "h2d ceiling", cmd, 300)
    except StepError as e:
        return {b: Failed("error: %s" % e) for b in sizes}
    found = {int(b): float(g) for b, g in H2D_RE.findall(r.stdout)}
    why = "error: h2d_ceiling exited %d: %s" % (r.returncode,
                                                re.sub(r"^loaderd-h2d-ceiling: ", "", last_line(r.stderr)))
    for b in sorted(sizes):
        ctx.log.say("ceiling, %d bytes: %s" % (b, "%.2f GB/s" % found[b] if b in found else why))
    return {b: found.get(b, Failed(why)) for b in sizes}


def install_megatron(ctx):
    """The PYTHONPATH entry the peer imports megatron-core from: the wheels
    of --wheels installed (no dependencies, into a directory of this run);
    None when there are none (the peer then takes what Python finds). A
    failed install is a StepError."""
    wheels = sorted(glob.glob(os.path.join(ctx.args.wheels, MEGATRON_WHEEL)))
    if not wheels:
        ctx.log.say("megatron-core: no %s in %s (scripts/gpu-check.sh --fetch); the peer imports what "
                    "Python finds" % (MEGATRON_WHEEL, ctx.args.wheels))
        return None
    extra = sorted(glob.glob(os.path.join(ctx.args.wheels, "packaging-*.whl")))[-1:]  # megatron-core imports it
    target = os.path.join(ctx.workdir, "mcore")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
           "--target", target, wheels[-1]] + extra
    r = run(ctx.log, "megatron-core install", cmd, 300)
    if r.returncode != 0:
        raise StepError("pip install %s exited %d: %s"
                        % (os.path.basename(wheels[-1]), r.returncode, last_line(r.stderr)))
    ctx.log.say("megatron-core: %s installed into %s" % (", ".join(os.path.basename(w) for w in [wheels[-1]] + extra),
                                                          target))
    return target


def measure_peer(ctx, seq_len, batch, documents):
    """megatron-core's GPTDataset through a DataLoader: tokens/s or a Failed."""
    a = ctx.args
    what = "megatron-core DataLoader, seq_len %d, batch %d%s" % (seq_len, batch, ", documents" if documents else "")
    if isinstance(ctx.peer_path, Failed):
        return ctx.peer_path
    cmd = [sys.executable, PEER, "--prefix", ctx.prefix, "--seq-len", str(seq_len), "--batch-size", str(batch),
           "--workers", str(a.workers), "--device", str(a.device), "--seconds", str(a.seconds),
           "--seed", str(SEED), "--vocab", str(VOCAB), "--eod", str(EOD),
           "--cache", os.path.join(ctx.workdir, "mcore-cache")]
    if documents:
        cmd.append("--documents")
    env = dict(os.environ)
    if ctx.peer_path:
        env["PYTHONPATH"] = os.pathsep.join([ctx.peer_path] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    ctx.log.write("\n$ PYTHONPATH=%s %s    # %s\n" % (env.get("PYTHONPATH", ""), shlex.join(cmd), what))
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, env=env)
    except subprocess.TimeoutExpired:
        ctx.log.say("%s: timed out after 900 s" % what)
        return Failed("error: megatron_peer timed out after 900 s")
    ctx.log.write("exit %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr))
    m = PEER_RE.search(r.stdout)
    if r.returncode != 0 or not m:
        # The peer's own last word; megatron-core may print after it as Python exits.
        said = [ln for ln in r.stderr.splitlines() if ln.startswith("megatron_peer: ")]
        why = "%s: %s" % ("skipped" if r.returncode == EXIT_SKIP else "error: megatron_peer exited %d" % r.returncode,
                          said[-1][len("megatron_peer: "):] if said else last_line(r.stderr))
        ctx.log.say("%s: %s" % (what, why))
        return Failed(why)
    ctx.log.say("%s: %.4f G tokens/s (%s batches in %s s)" % (what, float(m.group(3)) / 1e9, m.group(1), m.group(2)))
    return float(m.group(3))


# ---------------------------------------------------------------- report

def peer_of(res, case):
    return res["peer"].get((case.seq_len, case.batch, case.delivery == "documents"),
                           Failed("skipped: not measured"))


def ceiling_tokens(res, case):
    """The bus ceiling at the case's batch size, in tokens/s, or a Failed."""
    f = res["loaderd"][case.name]
    b = f["batch_bytes"]
    if isinstance(b, Failed):
        return Failed("error: no batch size measured")
    c = res["ceiling"].get(b, Failed("skipped: host delivery" if res["host"] else "error: not measured"))
    return c if isinstance(c, Failed) else c * 1e9 / b * case.batch * case.seq_len


def goals(ctx, res):
    a = ctx.args
    out = []
    by = {(c.seq_len, c.batch, c.delivery): res["loaderd"][c.name] for c in ctx.cases}

    def verdict(ok, text):
        return "%s (%s)" % ("met" if ok else "missed", text)

    goal = [(d, by[(GOAL_SEQ, GOAL_BATCH, d)]["tokens_per_s"]) for d in DELIVERIES
            if (GOAL_SEQ, GOAL_BATCH, d) in by]
    figures = ["%s %s" % (d, "n/a: " + v if isinstance(v, Failed) else
                          verdict(v >= GOAL_TOKENS_PER_S, "%.3f G tokens/s" % (v / 1e9))) for d, v in goal]
    out.append("goal: >= %.0f G tokens/s to one GPU at seq_len %d, batch %d: %s"
               % (GOAL_TOKENS_PER_S / 1e9, GOAL_SEQ, GOAL_BATCH, "; ".join(figures) or "n/a (case not run)"))

    ratios = []
    for c in ctx.cases:
        lo, peer = res["loaderd"][c.name]["tokens_per_s"], peer_of(res, c)
        if not isinstance(lo, Failed) and not isinstance(peer, Failed) and peer > 0:
            ratios.append((lo / peer, c))
    if ratios:
        worst, c = min(ratios, key=lambda x: x[0])
        text = "lowest %.1fx at %s; %d of %d cases measured" % (worst, c.label(), len(ratios), len(ctx.cases))
        out.append("goal: >= %.0fx the megatron-core DataLoader in every case: %s"
                   % (GOAL_PEER, verdict(worst >= GOAL_PEER, text)))
    else:
        out.append("goal: >= %.0fx the megatron-core DataLoader in every case: n/a (no DataLoader figure)" % GOAL_PEER)

    calls = [(res["loaderd"][c.name]["call_us"], c) for c in ctx.cases
             if not isinstance(res["loaderd"][c.name]["call_us"], Failed)]
    if calls:
        worst, c = max(calls, key=lambda x: x[0])
        out.append("goal: the client's next + release < %.0f us per batch in every case: %s"
                   % (GOAL_CALL_US, verdict(worst < GOAL_CALL_US, "highest %.1f us at %s; %d of %d cases measured"
                                            % (worst, c.label(), len(calls), len(ctx.cases)))))
    else:
        out.append("goal: the client's next + release < %.0f us per batch: n/a (not measured)" % GOAL_CALL_US)

    t = res["train"]
    if isinstance(t, Failed):
        out.append("goal: no data wait in examples/train_tokens.py: n/a (%s)" % t)
    else:
        out.append("goal: no data wait in examples/train_tokens.py (under %.0f%% of the time): %s"
                   % (100 * GOAL_WAIT, verdict(t["data_wait_fraction"] < GOAL_WAIT,
                                               "%.2f%% at %.0f tokens/s, %s of seq_len %d, batch %d on %s"
                                               % (100 * t["data_wait_fraction"], t["tokens_per_s"],
                                                  plural(t["steps"], "step"),
                                                  t["seq_len"], t["batch_size"], t["device"]))))
    if a.host:
        out.append("(host delivery: the goals are the GPU's; these figures only show the flow works)")
    return out


def report(ctx, res):
    a = ctx.args
    gpu = "none (host delivery)" if a.host else "%s, %s" % (ctx.gpu_desc, ctx.gpu_uuid or "uuid unknown")
    out = ["machine: GPU %s; CPU %s, %d cores (%d usable), kernel %s"
           % (gpu, cpu_model(), os.cpu_count() or 0, usable_cores(), platform.release()),
           "date: %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
           "command: %s" % shlex.join([sys.argv[0]] + sys.argv[1:]),
           "dataset: %.2f GiB of uint16 tokens in %s: %s" % (ctx.data_bytes / GIB, ctx.data_dir_kind, ctx.corpus),
           "loaderd: %s, %d staging slots, depth %d, pin register; megatron-core DataLoader: num_workers %d, "
           "pin_memory, %s" % (plural(a.workers, "worker"), STAGING_SLOTS, DEPTH, a.workers, ctx.peer_desc),
           "",
           "| seq_len | batch | outputs | delivery | loaderd G tokens/s | batch KiB | ceiling G tokens/s | "
           "vs ceiling | megatron-core DataLoader G tokens/s | loaderd / DataLoader | next+release us/batch "
           "| daemon CPU us/batch |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = Notes()
    for c in ctx.cases:
        f = res["loaderd"][c.name]
        ceiling, peer = ceiling_tokens(res, c), peer_of(res, c)
        if a.host:
            delivery = "host (direct pipeline)" if c.delivery == "direct" else "host"
        else:
            delivery = "direct" if c.delivery == "direct" else "staging"
        cells = [str(c.seq_len), str(c.batch), OUTPUTS[c.delivery].replace(" ", ", "), delivery,
                 notes.cell(f["tokens_per_s"] / 1e9 if not isinstance(f["tokens_per_s"], Failed)
                            else f["tokens_per_s"], "%.3f"),
                 notes.cell(f["batch_bytes"] / 1024 if not isinstance(f["batch_bytes"], Failed)
                            else f["batch_bytes"], "%.0f"),
                 notes.cell(ceiling / 1e9 if not isinstance(ceiling, Failed) else ceiling, "%.3f"),
                 ratio(f["tokens_per_s"], ceiling, "%.2f"),
                 notes.cell(peer / 1e9 if not isinstance(peer, Failed) else peer, "%.4f"),
                 ratio(f["tokens_per_s"], peer, "%.1fx"),
                 notes.cell(f["call_us"], "%.1f"),
                 notes.cell(f["cpu_us"], "%.1f")]
        out.append("| %s |" % " | ".join(cells))
    out += [""] + notes.lines() + [
        "tokens/s: rows x seq_len per second (each row carries seq_len + 1 tokens); ceiling: "
        "loaderd-h2d-ceiling at the batch's size in bytes, as tokens/s; the DataLoader's row: GPTDataset "
        "with reset_position_ids, reset_attention_mask and eod_mask_loss for `positions, cu_seqlens, "
        "loss_mask` rows, without them otherwise; daemon CPU: loaderd and its workers over the timed "
        "consume, per batch; direct pipelines have document_shuffle off (direct needs each window as one "
        "range of the file), the others on.", ""] + goals(ctx, res)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    ap.add_argument("--out", help="directory for the table, the logs and loaderd's log")
    ap.add_argument("--data-dir", help="where the dataset is written (default: a temp dir in /dev/shm "
                    "if it has room, else in /tmp)")
    ap.add_argument("--gib", type=float, default=2.0, help="dataset size in GiB (default 2)")
    ap.add_argument("--workers", type=int, default=max(1, usable_cores() - 1),
                    help="loaderd workers and DataLoader num_workers (default: cores - 1)")
    ap.add_argument("--seq-lens", default="4096,8192", help="sequence lengths (default 4096,8192)")
    ap.add_argument("--batches", default="8,32", help="batch sizes (default 8,32)")
    ap.add_argument("--batches-per-run", type=int, default=0,
                    help="batches per timed consume (default: about --seconds worth)")
    ap.add_argument("--seconds", type=float, default=2.0, help="target length of a measurement (default 2)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--skip-peer", action="store_true", help="leave out the megatron-core DataLoader")
    ap.add_argument("--host", action="store_true",
                    help="host delivery (no GPU needed): no ceiling, no peer")
    ap.add_argument("--wheels", default=WHEELS, help="directory of the megatron-core (and packaging) wheels "
                    "(default .gpu/wheels)")
    ap.add_argument("--train-steps", type=int,
                    help="timed steps of examples/train_tokens.py (default 100; with --host 0; 0 leaves it out)")
    a = ap.parse_args()
    if a.train_steps is None:
        a.train_steps = 0 if a.host else 100  # a step of seq_len 4096 takes about a minute on a CPU
    a.seq_lens = int_list(ap, "--seq-lens", a.seq_lens, "sequence lengths", 1 << 20)
    a.batch_sizes = int_list(ap, "--batches", a.batches, "batch sizes", 65536)
    if a.workers < 1 or a.batches_per_run < 0 or a.seconds <= 0 or a.train_steps < 0 or a.gib <= 0:
        ap.error("--workers >= 1, --batches-per-run >= 0, --seconds > 0, --train-steps >= 0 and --gib > 0, please")
    if int(a.gib * GIB) // 2 < 2 * max(a.batch_sizes) * (max(a.seq_lens) + 1):
        ap.error("--gib %.3f holds fewer tokens than two of the largest batches" % a.gib)
    return a


def main():
    a = parse_args()
    build = os.path.abspath(a.build)
    bindir = os.path.join(build, "bin")
    for exe in ("loaderd", "loaderd-worker", "loaderctl"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("token_bench: %s/%s is missing; build first (cmake -S . -B build "
                     "-DCMAKE_BUILD_TYPE=Release && cmake --build build -j)" % (bindir, exe))
    version, gpus, (uuid, name) = loaderd_gpus(bindir, a.device)
    if not a.host:
        if not gpus:
            return skip_without_gpu("token_bench", bindir, version, gpus,
                                    " (--host measures host delivery)")
        if uuid is None:
            sys.exit("token_bench: loaderd --version lists no gpu %d:\n%s" % (a.device, version))

    ctx = bench_context(Context(), "token_bench", a, bindir, version, uuid)
    ctx.build = build
    ctx.gpu_desc = "" if a.host else (nvidia_smi(ctx.log, uuid) or '"%s"' % name)
    if not a.host:
        raise_memlock(ctx.log)
    # With --host the direct pipelines serve through staging, as they do
    # any host client: their config is still checked by the daemon.
    ctx.cases = [Case(s, b, d) for s in a.seq_lens for b in a.batch_sizes for d in DELIVERIES]
    ctx.peer_desc = "not run (--host)" if a.host else ("not run (--skip-peer)" if a.skip_peer else
                                                       "GPTDataset of megatron-core")

    res = {"host": a.host, "loaderd": {}, "ceiling": {}, "peer": {}, "train": Failed("skipped: not run")}
    data_dir = None
    daemon = None
    try:
        try:
            data_dir = make_data(ctx)
        except OSError as e:  # nothing can be measured without the files
            ctx.log.say("writing the dataset: %s" % e)
            return 1
        daemon = Daemon(ctx)
        try:
            daemon.start()
            for c in ctx.cases:
                res["loaderd"][c.name] = measure_case(ctx, daemon, c)
            res["train"] = measure_train(ctx, daemon)
        except StepError as e:
            ctx.log.say("loaderd: %s" % e)
            for c in ctx.cases:
                res["loaderd"].setdefault(c.name, {k: Failed("error: %s" % e) for k in
                                                   ("tokens_per_s", "batch_bytes", "gbps", "cpu_us", "call_us")})
            if not isinstance(res["train"], dict):
                res["train"] = Failed("error: %s" % e)
        finally:
            daemon.stop()
        if not a.host:
            sizes = {f["batch_bytes"] for f in res["loaderd"].values() if not isinstance(f["batch_bytes"], Failed)}
            res["ceiling"] = measure_ceiling(ctx, sizes)
        if not a.host and not a.skip_peer:
            try:
                ctx.peer_path = install_megatron(ctx)
            except StepError as e:
                ctx.log.say("megatron-core: %s" % e)
                ctx.peer_path = Failed("error: megatron-core: %s" % e)
            for s in a.seq_lens:
                for b in a.batch_sizes:
                    for documents in (False, True):
                        res["peer"][(s, b, documents)] = measure_peer(ctx, s, b, documents)
            first = next(iter(res["peer"].values()), None)
            if isinstance(first, Failed) and all(isinstance(v, Failed) for v in res["peer"].values()):
                ctx.peer_desc = "GPTDataset of megatron-core: %s" % first
        else:
            why = Failed("skipped: %s" % ("--host" if a.host else "--skip-peer"))
            res["peer"] = {(s, b, d): why for s in a.seq_lens for b in a.batch_sizes for d in (False, True)}
    finally:
        if daemon is not None:
            daemon.stop()
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        # Sockets, the megatron-core install and its cache; with no --out,
        # also the config and loaderd's log.
        shutil.rmtree(ctx.workdir, ignore_errors=True)

    publish(ctx.log, a.out, report(ctx, res))
    cells = [v for f in res["loaderd"].values() for v in f.values()] + list(res["ceiling"].values()) + \
        list(res["peer"].values()) + [res["train"]]
    return failed_exit(cells)


if __name__ == "__main__":
    sys.exit(main())
