#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gpu_bench: how close loaderd's GPU delivery comes to the bus, and how it
compares with a framework DataLoader, measured in one run on one machine.

For raw batches of 1 MiB records (--sizes-mib, default 4, 16 and 64 MiB):
  (a) ceiling: pinned host-to-device cudaMemcpyAsync rate of this bus
      (build/bin/loaderd-h2d-ceiling, median of repeats);
  (b) loaderd's delivered GB/s to one client, in each mode: pin register,
      pin copy, and direct (pin register with `direct = on` pipelines:
      straight from the page-locked file, daemon/gpu/direct.h): one daemon per
      mode with one shuffled raw pipeline per batch size on the same file; `loaderctl consume --device D --batches N
      --quiet` after a warm-up consume; MB_per_s of its summary;
  (c) (b) / (a);
  (d) the client's own cost per batch (ldr_next + ldr_stream_wait +
      ldr_release, call_us) with --step-ms so that batches are always
      ready: two runs of different lengths, whose difference cancels the
      first batch's wait;
  (e) a torch DataLoader on the same records with as many workers
      (bench/torch_peer.py, in its own process), and loaderd / DataLoader,
      with the bound no loader can pass here: ceiling / DataLoader.
It prints a markdown table, the machine, the date and a goal line; --out DIR
keeps the table, every command's output and loaderd's logs. Exit codes: 0
(all measured), 1 (some measurement failed: "error: ..." in its cell), 77
(no GPU: loaderd --version reports none).

    bench/gpu_bench.py [--build build] [--out DIR] [--data-dir DIR] [--gib 8]
                       [--workers N] [--sizes-mib 4,16,64] [--batches N]
                       [--skip-torch]
"""

import argparse
import concurrent.futures
import datetime
import math
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import LoaderdDaemon, Log, StepError, failed_exit, last_line, publish  # noqa: E402  (this directory)
from host_bench import cpu_model, read_file_gbps  # noqa: E402  (this directory)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TORCH_PEER = os.path.join(ROOT, "bench", "torch_peer.py")
MIB = 1 << 20
GIB = 1 << 30
RECORD_BYTES = MIB
MODES = ("register", "copy", "direct")
EXIT_SKIP = 77

WRITE_BLOCK = 16 << 20      # bytes of os.urandom per write
STAGING_SLOTS = 16
WARMUP_BYTES = 2 << 30      # per warm-up consume, at least MIN_BATCHES batches
MIN_BATCHES = 16
MAX_BATCHES = 1000000
CALL_STEP_MS = 2            # the simulated step of the per-batch cost runs
CALL_SECONDS = 1.5          # length of the longer of those two runs
GOAL_CEILING = 0.85
GOAL_DATALOADER = 20.0
GOAL_FROM_MIB = 16

SUMMARY_RE = re.compile(r"^consume: .* batches=(\d+) samples=\d+ bytes=(\d+) seconds=(\S+) "
                        r"batches_per_s=\S+ samples_per_s=\S+ MB_per_s=(\S+) device=(\S+) call_us=(\S+)$",
                        re.M)
H2D_RE = re.compile(r"^h2d: bytes=(\d+) GB_per_s=(\S+)$", re.M)
TORCH_RE = re.compile(r"^torch: batch_bytes=(\d+) GB_per_s=(\S+)$", re.M)


class Failed(str):
    """A cell that holds why there is no figure."""


def decode(out):
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def run(log, what, cmd, timeout_s):
    """Runs cmd to completion within timeout_s; its output goes to the log."""
    log.write("\n$ %s    # %s, timeout %d s\n" % (shlex.join(cmd), what, timeout_s))
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        log.write("timed out\n--- stdout\n%s--- stderr\n%s" % (decode(e.stdout), decode(e.stderr)))
        raise StepError("%s timed out after %d s" % (what, timeout_s))
    except OSError as e:
        raise StepError("%s: %s" % (what, e))
    log.write("exit %d after %.1f s\n--- stdout\n%s--- stderr\n%s"
              % (r.returncode, time.monotonic() - start, r.stdout, r.stderr))
    return r


# ---------------------------------------------------------------- machine

def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def loaderd_gpus(bindir, device):
    """(loaderd --version text, GPU count or None, (uuid, name) of `device`)."""
    try:
        r = subprocess.run([os.path.join(bindir, "loaderd"), "--version"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit("gpu_bench: loaderd --version: %s" % e)
    if r.returncode != 0:
        sys.exit("gpu_bench: loaderd --version exited %d: %s" % (r.returncode, last_line(r.stderr)))
    m = re.search(r"^gpus: (\d+)$", r.stdout, re.M)
    gpu = re.search(r"^  gpu %d (GPU-\S+) \"([^\"]*)\"" % device, r.stdout, re.M)
    return r.stdout, int(m.group(1)) if m else None, gpu.groups() if gpu else (None, None)


def nvidia_smi(log, uuid):
    """name, driver, PCIe generation and width of the GPU, or '' when unknown."""
    cmd = ["nvidia-smi", "--query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max",
           "--format=csv,noheader"] + (["-i", uuid] if uuid else [])
    try:
        r = run(log, "nvidia-smi", cmd, 30)
    except StepError as e:
        log.write("%s\n" % e)
        return ""
    fields = [f.strip() for f in last_line(r.stdout).split(",")] if r.returncode == 0 else []
    if len(fields) != 4:
        return ""
    return "%s (driver %s, PCIe gen %s x%s max)" % tuple(fields)


def raise_memlock(log):
    """Page-locked memory is what GPU delivery is made of; give loaderd the
    hard limit, the most a process may take without privileges."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
        except (ValueError, OSError) as e:
            log.write("RLIMIT_MEMLOCK: cannot raise %d to %d: %s\n" % (soft, hard, e))
    log.write("RLIMIT_MEMLOCK: %s\n" % (resource.getrlimit(resource.RLIMIT_MEMLOCK),))


# ---------------------------------------------------------------- data

def free_bytes(path):
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def write_dataset(path, total_bytes, threads):
    """Random bytes (os.urandom releases the GIL, so blocks are made in
    parallel) written in place with pwrite."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    def fill(offset):
        data = memoryview(os.urandom(min(WRITE_BLOCK, total_bytes - offset)))
        while data:
            n = os.pwrite(fd, data, offset)
            data = data[n:]
            offset += n

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
            for _ in pool.map(fill, range(0, total_bytes, WRITE_BLOCK)):
                pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------- loaderd

def pipeline_name(mib):
    return "raw%dm" % mib


class Daemon(LoaderdDaemon):
    """One loaderd in one pin mode, with one pipeline per batch size."""

    START_GOAL = "to start its GPU delivery"

    def __init__(self, ctx, mode):
        super().__init__(ctx, mode, "mode %s" % mode)
        self.mode = mode
        self.pin = "register" if mode == "direct" else mode

    def config_lines(self):
        a = self.ctx.args
        max_batch = max(a.sizes) * RECORD_BYTES
        # The arena holds its rings and STAGING_SLOTS slots of the largest
        # batch; the margin covers the header and the rings.
        shm_bytes = (STAGING_SLOTS + 4) * max_batch + (256 << 20)
        lines = ["[daemon]",
                 "socket = %s" % self.socket,
                 "workers = %d" % a.workers,
                 "shm_bytes = %d" % shm_bytes,
                 "staging_slots = %d" % STAGING_SLOTS,
                 "max_depth = %d" % max(16, a.depth),
                 "gpu = required",
                 "pin = %s" % self.pin,
                 "device_slots = %d" % a.depth,
                 "log_level = info",
                 ""]
        for mib in a.sizes:
            lines += ["[pipeline.%s]" % pipeline_name(mib),
                      "source = raw:%s" % self.ctx.data,
                      "record_bytes = %d" % RECORD_BYTES,
                      "batch_size = %d" % (mib * MIB // RECORD_BYTES),
                      "direct = %s" % ("on" if self.mode == "direct" else "off"),
                      ""]
        return lines

    def check_started(self, status):
        m = re.search(r"^delivery: (.*)$", status, re.M)
        if m and "pin %s" % self.pin not in m.group(1):
            raise StepError("loaderd delivers %s, not to the GPU with pin %s" % (m.group(1), self.pin))
        if self.mode == "direct":
            with open(self.log_path, errors="replace") as f:
                refused = [ln for ln in f if "its device clients go through staging" in ln]
            if refused:
                raise StepError("direct delivery refused: %s" % refused[0].strip())


def consume(ctx, daemon, mib, batches, timeout_s, what, step_ms=0):
    """One `loaderctl consume` on the GPU; its summary line as a dict."""
    daemon.check_alive()
    cmd = [ctx.loaderctl, "--socket", daemon.socket, "consume", "--pipeline", pipeline_name(mib),
           "--device", str(ctx.args.device), "--batches", str(batches), "--depth", str(ctx.args.depth),
           "--name", "gpu-bench", "--quiet"]
    if step_ms:
        cmd += ["--step-ms", str(step_ms)]
    r = run(ctx.log, "%s, %d MiB, %s" % (what, mib, daemon.mode), cmd, timeout_s)
    if r.returncode != 0:
        raise StepError("consume exited %d: %s" % (r.returncode, last_line(r.stderr) or daemon.log_tail()))
    m = SUMMARY_RE.search(r.stdout)
    if not m:
        raise StepError("no summary line from loaderctl consume")
    s = {"batches": int(m.group(1)), "bytes": int(m.group(2)), "seconds": float(m.group(3)),
         "GB_per_s": float(m.group(4)) / 1e3, "device": m.group(5), "call_us": float(m.group(6))}
    if not s["device"].startswith("GPU-"):
        raise StepError("batches were delivered to %s, not to a GPU" % s["device"])
    if s["GB_per_s"] <= 0:
        raise StepError("consume reports no throughput")
    return s


def measure_loaderd(ctx, daemon, mib):
    """(delivered GB/s, client call cost in us) for one batch size; either
    is a Failed when its step failed."""
    batch_bytes = mib * MIB
    a = ctx.args
    try:
        warm = consume(ctx, daemon, mib, max(MIN_BATCHES, math.ceil(WARMUP_BYTES / batch_bytes)), 180,
                       "warm-up")
        rate = warm["GB_per_s"] * 1e9
        n = a.batches or min(MAX_BATCHES, max(MIN_BATCHES, math.ceil(a.seconds * rate / batch_bytes)))
        timed = consume(ctx, daemon, mib, n, int(60 + 5 * n * batch_bytes / rate), "timed")
        gbps = timed["GB_per_s"]
    except StepError as e:
        ctx.log.say("%d MiB, %s: %s" % (mib, daemon.mode, e))
        return Failed("error: %s" % e), Failed("error: no throughput figure")
    ctx.log.say("%d MiB, %s: %.2f GB/s (%d batches in %.2f s)"
                % (mib, daemon.mode, gbps, timed["batches"], timed["seconds"]))

    try:
        call_us, step_ms, runs = call_cost(
            lambda k, step_ms, timeout_s: consume(ctx, daemon, mib, k, timeout_s, "per-batch cost", step_ms),
            batch_bytes / (gbps * 1e9) * 1e3)
    except StepError as e:
        ctx.log.say("%d MiB, %s, per-batch cost: %s" % (mib, daemon.mode, e))
        return gbps, Failed("error: %s" % e)
    ctx.log.say("%d MiB, %s: next+release %.1f us per batch (step %d ms; call_us %.1f over %d, "
                "%.1f over %d batches)" % (mib, daemon.mode, call_us, step_ms, runs[0]["call_us"],
                                           runs[0]["batches"], runs[1]["call_us"], runs[1]["batches"]))
    return gbps, call_us


def call_cost(consume_for, batch_ms):
    """The client's own cost per batch (ldr_next + ldr_stream_wait +
    ldr_release: consume's call_us) with batches always ready.
    consume_for(batches, step_ms, timeout_s) runs one `loaderctl consume
    --step-ms` and returns its summary as a dict with "batches" and
    "call_us"; batch_ms is the time one batch takes to arrive when nothing
    waits for the client. Returns (call_us, step_ms, [short run, long run]);
    a StepError of a run passes through.

    A step well above batch_ms keeps the ring full, so call_us is the
    client's own cost, never waiting. The first batch of a consume is
    always waited for; the difference of a short and a long run cancels
    it."""
    step_ms = max(CALL_STEP_MS, math.ceil(1.5 * batch_ms))
    long_n = min(750, max(200, int(CALL_SECONDS * 1e3 / step_ms)))
    short_n = max(40, long_n // 5)
    runs = [consume_for(k, step_ms, int(60 + 3 * k * step_ms / 1e3)) for k in (short_n, long_n)]
    call_us = (long_n * runs[1]["call_us"] - short_n * runs[0]["call_us"]) / (long_n - short_n)
    return call_us, step_ms, runs


# ---------------------------------------------------------------- peers

def measure_ceiling(ctx):
    """{MiB: GB/s or Failed} from one loaderd-h2d-ceiling run."""
    exe = os.path.join(ctx.bindir, "loaderd-h2d-ceiling")
    sizes = ctx.args.sizes
    if not os.access(exe, os.X_OK):
        return {mib: Failed("error: %s missing (built only with the CUDA toolkit)" % os.path.basename(exe))
                for mib in sizes}
    cmd = [exe, "--device", str(ctx.args.device)] + [str(mib * MIB) for mib in sizes]
    try:
        r = run(ctx.log, "h2d ceiling", cmd, 120)
    except StepError as e:
        return {mib: Failed("error: %s" % e) for mib in sizes}
    found = {int(b) // MIB: float(g) for b, g in H2D_RE.findall(r.stdout)}
    why = "error: h2d_ceiling exited %d: %s" % (r.returncode,
                                                re.sub(r"^loaderd-h2d-ceiling: ", "", last_line(r.stderr)))
    return {mib: found.get(mib, Failed(why)) for mib in sizes}


def measure_torch(ctx, mib):
    a = ctx.args
    batch_bytes = mib * MIB
    cmd = [sys.executable, TORCH_PEER, "--data", ctx.data, "--record-bytes", str(RECORD_BYTES),
           "--batch-size", str(batch_bytes // RECORD_BYTES), "--workers", str(a.workers),
           "--device", str(a.device), "--seconds", str(a.seconds)]
    timeout_s = 180
    if a.batches:
        cmd += ["--batches", str(a.batches)]
        timeout_s += int(a.batches * batch_bytes / 0.2e9)  # a slow DataLoader moves 0.2 GB/s
    try:
        r = run(ctx.log, "torch DataLoader, %d MiB" % mib, cmd, timeout_s)
    except StepError as e:
        ctx.log.say("%d MiB, torch DataLoader: %s" % (mib, e))
        return Failed("error: %s" % e)
    m = TORCH_RE.search(r.stdout)
    if r.returncode != 0 or not m:
        detail = re.sub(r"^torch_peer: ", "", last_line(r.stderr))
        why = "%s: %s" % ("skipped" if r.returncode == EXIT_SKIP else
                          "error: torch_peer exited %d" % r.returncode, detail)
        ctx.log.say("%d MiB, torch DataLoader: %s" % (mib, why))
        return Failed(why)
    gbps = float(m.group(2))
    ctx.log.say("%d MiB, torch DataLoader: %.3f GB/s" % (mib, gbps))
    return gbps


# ---------------------------------------------------------------- report

def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


class Notes:
    """Why cells are empty: each message once, numbered, listed under the table."""

    def __init__(self):
        self.messages = []

    def cell(self, v, fmt):
        if not isinstance(v, Failed):
            return fmt % v
        text = str(v).replace("|", "/")
        if text not in self.messages:
            self.messages.append(text)
        short = text if len(text) <= 44 else text[:41] + "..."
        return "%s [%d]" % (short, self.messages.index(text) + 1)

    def lines(self):
        return ["[%d] %s" % (i + 1, text) for i, text in enumerate(self.messages)]


def ratio(a, b, fmt):
    if isinstance(a, Failed) or isinstance(b, Failed) or not b:
        return "-"
    return fmt % (a / b)


def report(ctx, res):
    a = ctx.args
    out = ["machine: GPU %s, %s; CPU %s, %d cores (%d usable), kernel %s"
           % (ctx.gpu_desc, ctx.gpu_uuid or "uuid unknown", cpu_model(), os.cpu_count() or 0,
              usable_cores(), platform.release()),
           "date: %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
           "command: %s" % shlex.join([sys.argv[0]] + sys.argv[1:]),
           "dataset: %.2f GiB in %s, 1 MiB records, shuffled; loaderd %s, depth %d, "
           "%d staging slots; DataLoader num_workers %d"
           % (ctx.data_bytes / GIB, ctx.data_dir_kind, plural(a.workers, "worker"), a.depth,
              STAGING_SLOTS, a.workers),
           "",
           "| batch MiB | ceiling GB/s | register GB/s | ratio | copy GB/s | ratio | direct GB/s "
           "| ratio | next+release us | DataLoader GB/s | register / DataLoader "
           "| direct / DataLoader | ceiling / DataLoader |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = Notes()
    for mib in a.sizes:
        c, t = res["ceiling"][mib], res["torch"][mib]
        cells = [notes.cell(c, "%.2f")]
        for mode in MODES:
            cells += [notes.cell(res[mode][mib], "%.2f"), ratio(res[mode][mib], c, "%.2f")]
        cells += [" / ".join(notes.cell(res["call_" + mode][mib], "%.1f") for mode in MODES),
                  notes.cell(t, "%.2f"), ratio(res["register"][mib], t, "%.1fx"),
                  ratio(res["direct"][mib], t, "%.1fx"), ratio(c, t, "%.1fx")]
        out.append("| %d | %s |" % (mib, " | ".join(cells)))
    out += [""] + notes.lines() + [
            "next+release us: register / copy / direct; ratio: to the ceiling of the same size; "
            "ceiling / DataLoader: the most any loader could deliver over the DataLoader here.",
            "",
            "goal: >= %d%% of ceiling and >= %dx DataLoader at %d MiB and above"
            % (GOAL_CEILING * 100, GOAL_DATALOADER, GOAL_FROM_MIB)]
    for mib in a.sizes:
        if mib < GOAL_FROM_MIB:
            continue
        verdicts = []
        for mode in MODES:
            c, r, t = res["ceiling"][mib], res[mode][mib], res["torch"][mib]
            missing = [name for name, v in (("ceiling", c), (mode, r), ("DataLoader", t))
                       if isinstance(v, Failed)]
            figures = ", ".join(f for f in (ratio(r, c, "%.2f of ceiling"), ratio(r, t, "%.1fx DataLoader"))
                                if f != "-")
            if missing:
                verdicts.append("%s n/a (no %s figure%s)"
                                % (mode, " or ".join(missing), "; " + figures if figures else ""))
                continue
            ok = r / c >= GOAL_CEILING and r / t >= GOAL_DATALOADER
            verdicts.append("%s %s (%s)" % (mode, "PASS" if ok else "MISS", figures))
        out.append("  %d MiB: %s" % (mib, "; ".join(verdicts)))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def int_list(ap, option, text, what, most):
    """The comma-separated integers of an option (image_bench.py's too),
    each in 1..most; ap.error() otherwise, `what` naming them."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error("%s: %r is not a list of integers" % (option, text))
    if not values or min(values) < 1 or max(values) > most:
        ap.error("%s: %s must be 1..%d" % (option, what, most))
    return values


def skip_without_gpu(prog, bindir, version, gpus, hint=""):
    """Says why prog measures nothing where loaderd --version lists no GPU
    (gpus: its count, or None without the line); EXIT_SKIP."""
    why = "reports gpus: 0" if gpus == 0 else "has no 'gpus:' line (a build without GPU delivery)"
    detail = [ln for ln in version.splitlines() if ln.startswith(("cuda:", "delivery:"))]
    print("%s: skipped: %s --version %s%s%s" % (prog, os.path.join(bindir, "loaderd"), why,
                                               ("; " + "; ".join(detail)) if detail else "", hint))
    return EXIT_SKIP


def bench_context(ctx, prog, a, bindir, version, uuid):
    """ctx with what a run of benchmark prog keeps: its arguments, the
    binaries, a work directory, where the logs go, its log (which starts
    with loaderd --version) and the GPU's UUID."""
    ctx.args = a
    ctx.bindir = bindir
    ctx.loaderctl = os.path.join(bindir, "loaderctl")
    ctx.workdir = tempfile.mkdtemp(prefix="loaderd-%s-" % prog.replace("_", "-"))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    ctx.logdir = a.out or ctx.workdir
    ctx.log = Log(prog, os.path.join(a.out, "bench.log") if a.out else None)
    ctx.log.write("loaderd --version:\n%s" % version)
    ctx.gpu_uuid = uuid
    return ctx


class Context:
    """What every step needs: options, paths, the log."""


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    ap.add_argument("--out", help="directory for the table, the logs and loaderd's logs")
    ap.add_argument("--data-dir", help="where the dataset is written (default: a temp dir in /dev/shm "
                    "if it has room, else in /tmp)")
    ap.add_argument("--gib", type=float, default=8.0, help="dataset size in GiB (default 8)")
    ap.add_argument("--workers", type=int, default=max(1, usable_cores() - 1),
                    help="loaderd workers and DataLoader num_workers (default: cores - 1)")
    ap.add_argument("--sizes-mib", default="4,16,64", help="batch sizes in MiB (default 4,16,64)")
    ap.add_argument("--batches", type=int, default=0,
                    help="batches per measurement (default: about --seconds worth)")
    ap.add_argument("--seconds", type=float, default=2.0, help="target length of a measurement (default 2)")
    ap.add_argument("--depth", type=int, default=8, help="client depth = device_slots (default 8)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal (default 0)")
    ap.add_argument("--skip-torch", action="store_true", help="leave out the DataLoader")
    a = ap.parse_args()
    a.sizes = int_list(ap, "--sizes-mib", a.sizes_mib, "sizes", 1024)
    if a.workers < 1 or a.batches < 0 or a.seconds <= 0 or not 1 <= a.depth <= 32:
        ap.error("--workers >= 1, --batches >= 0, --seconds > 0 and --depth 1..32, please")
    if int(a.gib * GIB) // RECORD_BYTES < max(a.sizes):
        ap.error("--gib %.3f holds fewer records than the largest batch" % a.gib)
    return a


def make_data(ctx):
    """Writes the dataset into a directory of its own; returns that directory."""
    a = ctx.args
    ctx.data_bytes = int(a.gib * GIB) // RECORD_BYTES * RECORD_BYTES
    # Besides the file, /dev/shm holds loaderd's arena and the DataLoader's
    # batches in flight.
    need = ctx.data_bytes + (STAGING_SLOTS + 4) * max(a.sizes) * MIB + a.workers * 4 * max(a.sizes) * MIB
    if a.data_dir:
        base = a.data_dir
    else:
        base = "/dev/shm" if free_bytes("/dev/shm") >= need + GIB else tempfile.gettempdir()
    ctx.data_dir_kind = base
    if free_bytes("/dev/shm") < need - ctx.data_bytes:
        ctx.log.say("warning: /dev/shm has %.1f GiB free; the arena and the DataLoader need about %.1f GiB"
                    % (free_bytes("/dev/shm") / GIB, (need - ctx.data_bytes) / GIB))
    d = tempfile.mkdtemp(prefix="loaderd-gpu-bench-data-", dir=base)
    ctx.data = os.path.join(d, "records.bin")
    start = time.perf_counter()
    try:
        write_dataset(ctx.data, ctx.data_bytes, max(1, usable_cores()))
    except OSError:
        shutil.rmtree(d, ignore_errors=True)
        raise
    ctx.log.say("wrote %.2f GiB of random records to %s in %.1f s"
                % (ctx.data_bytes / GIB, ctx.data, time.perf_counter() - start))
    ctx.log.say("sequential read of it: %.2f GB/s (now in the page cache)" % read_file_gbps(ctx.data))
    return d


def main():
    a = parse_args()
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    for exe in ("loaderd", "loaderd-worker", "loaderctl"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("gpu_bench: %s/%s is missing; build first (cmake -S . -B build "
                     "-DCMAKE_BUILD_TYPE=Release && cmake --build build -j)" % (bindir, exe))
    version, gpus, (uuid, name) = loaderd_gpus(bindir, a.device)
    if not gpus:
        return skip_without_gpu("gpu_bench", bindir, version, gpus)
    if uuid is None:
        sys.exit("gpu_bench: loaderd --version lists no gpu %d:\n%s" % (a.device, version))

    ctx = bench_context(Context(), "gpu_bench", a, bindir, version, uuid)
    ctx.gpu_desc = nvidia_smi(ctx.log, uuid) or '"%s"' % name
    raise_memlock(ctx.log)

    res = {k: {} for k in ("ceiling", "torch") + MODES + tuple("call_" + m for m in MODES)}
    data_dir = None
    daemon = None
    try:
        try:
            data_dir = make_data(ctx)
        except OSError as e:  # nothing can be measured without the file
            ctx.log.say("writing the dataset: %s" % e)
            return 1
        res["ceiling"] = measure_ceiling(ctx)
        for mib in a.sizes:
            c = res["ceiling"][mib]
            ctx.log.say("%d MiB, ceiling: %s" % (mib, c if isinstance(c, Failed) else "%.2f GB/s" % c))
        for mode in MODES:
            daemon = Daemon(ctx, mode)
            try:
                daemon.start()
                for mib in a.sizes:
                    res[mode][mib], res["call_" + mode][mib] = measure_loaderd(ctx, daemon, mib)
            except StepError as e:
                ctx.log.say("%s: %s" % (mode, e))
                for mib in a.sizes:
                    res[mode].setdefault(mib, Failed("error: %s" % e))
                    res["call_" + mode].setdefault(mib, Failed("error: %s" % e))
            finally:
                daemon.stop()
        for mib in a.sizes:
            res["torch"][mib] = Failed("skipped: --skip-torch") if a.skip_torch else measure_torch(ctx, mib)
    finally:
        if daemon is not None:
            daemon.stop()
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        # Sockets only; with no --out, also the configs and loaderd's logs.
        shutil.rmtree(ctx.workdir, ignore_errors=True)

    publish(ctx.log, a.out, report(ctx, res))
    return failed_exit([v for table in res.values() for v in table.values()])


if __name__ == "__main__":
    sys.exit(main())
