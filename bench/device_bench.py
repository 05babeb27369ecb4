#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""device_bench: batches per second of device delivery, from one to eight
clients on one GPU, with host delivery of the same daemon as the reference.

One loaderd (pin register, --workers workers, 64 staging slots, 8 device
slots) serves raw pipelines of 16 records a batch, in batches of 64 KiB,
256 KiB, 1 MiB, 4 MiB and 16 MiB (--sizes-kib; records of 4 KiB to 1 MiB),
each through staging and with `direct = on`. For every size, path (staging, direct, host) and number of
clients (--clients, default 1 2 4 8), that many `loaderctl consume
--stages` run at once for about --seconds, each its own process and its
own client of the daemon; a row gives the batches/s of one client (the
mean) and of all together, and the stage means (per batch, in us) that
the daemon logs when each client detaches (fill, order, gpu, held; for
device clients also the GPU thread's queue and copy) and the client's own
next / stream_wait / release from --stages. Also measured in the run: the
bus (loaderd-h2d-ceiling) at each size, and the client's next + release
with batches already waiting (one client, --step-ms, 256 KiB).

Goals (checked in the report): one device client at least 20,000 batches/s
up to 256 KiB; eight device clients together at least 6x one; 4 MiB direct
at least 0.85 of the bus; next + release under 50 us per batch.

    bench/device_bench.py [--build build] [--out DIR] [--workers N]
                          [--sizes-kib 64,256,1024,4096,16384] [--clients 1,2,4,8]
                          [--seconds 1.5] [--paths staging,direct,host] [--gpu-threads 1]
Exit codes: 0; 1 a measurement failed ("error: ..." in its cell); 77 no GPU.
"""

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import LoaderdDaemon, Log, StepError, failed_exit, last_line, publish  # noqa: E402
from gpu_bench import Failed, loaderd_gpus, nvidia_smi, raise_memlock, usable_cores  # noqa: E402
from gpu_bench import write_dataset  # noqa: E402
from host_bench import cpu_model  # noqa: E402

KIB = 1 << 10
MIB = 1 << 20
ROWS = 16                   # records per batch: a batch of B bytes has records of B/16
STAGING_SLOTS = 64
DEPTH = 8
EXIT_SKIP = 77
GOAL_ONE_CLIENT = 20000.0   # batches/s, up to GOAL_SMALL_KIB
GOAL_SMALL_KIB = 256
GOAL_SCALE = 6.0            # 8 clients together / 1 client
GOAL_BUS = 0.85             # 4 MiB direct / the bus
GOAL_CALL_US = 50.0         # next + release, batches waiting

SUMMARY_RE = re.compile(r"^consume: .* batches=(\d+) .* seconds=(\S+) batches_per_s=(\S+) .* "
                        r"device=(\S+) call_us=(\S+)$", re.M)
CLIENT_STAGES_RE = re.compile(r"^consume: stages next_us (\S+) stream_wait_us (\S+) release_us (\S+)",
                              re.M)
DETACH_RE = re.compile(r"client \d+ \(pid (\d+)\) detached after \d+ batches; per batch: fill_us (\S+) "
                       r"order_us (\S+) gpu_us (\S+) held_us (\S+)(?: gpu \S+ thread \S+ stream_depth \d+ "
                       r"bytes_moved \d+ path \S+ queue_us (\S+) copy_us (\S+))?")
H2D_RE = re.compile(r"^h2d: bytes=(\d+) GB_per_s=(\S+)$", re.M)
STAGES = ("fill", "order", "gpu", "queue", "copy", "held", "next", "stream_wait", "release")


def pipeline(kib, path):
    return "%s%dk" % ("d" if path == "direct" else "s", kib)


class Daemon(LoaderdDaemon):
    START_GOAL = "to start its GPU delivery"

    def __init__(self, ctx):
        super().__init__(ctx, "device", "device bench")

    def config_lines(self):
        a = self.ctx.args
        shm = (STAGING_SLOTS + 4) * max(a.sizes) * KIB + (256 << 20)
        lines = ["[daemon]", "socket = %s" % self.socket, "workers = %d" % a.workers,
                 "shm_bytes = %d" % shm, "staging_slots = %d" % STAGING_SLOTS, "max_depth = 16",
                 "max_clients = 64", "gpu = required", "pin = register",
                 "gpu_threads = %d" % a.gpu_threads,
                 "device_slots = %d" % DEPTH, "log_level = info", ""]
        for kib in a.sizes:
            for path in ("staging", "direct"):
                lines += ["[pipeline.%s]" % pipeline(kib, path), "source = raw:%s" % self.ctx.data,
                          "record_bytes = %d" % (kib * KIB // ROWS), "batch_size = %d" % ROWS,
                          "direct = %s" % ("on" if path == "direct" else "off"), ""]
        return lines


def consume_cmd(ctx, daemon, kib, path, batches, name, step_ms=0):
    cmd = [ctx.loaderctl, "--socket", daemon.socket, "consume", "--pipeline", pipeline(kib, path),
           "--batches", str(batches), "--depth", str(DEPTH), "--name", name, "--quiet", "--stages"]
    if path != "host":
        cmd += ["--device", str(ctx.args.device)]
    if step_ms:
        cmd += ["--step-ms", str(step_ms)]
    return cmd


def run_clients(ctx, daemon, kib, path, n, batches, step_ms=0):
    """n consumers at once; [(summary, client stages, pid)] in their order."""
    daemon.check_alive()
    procs = []
    for i in range(n):
        cmd = consume_cmd(ctx, daemon, kib, path, batches, "bench-%d" % i, step_ms)
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            raise StepError("a consumer did not finish within 300 s")
        ctx.log.write("$ consume %s %d KiB x%d -> %d\n%s%s" % (path, kib, n, p.returncode, so, se))
        if p.returncode != 0:
            raise StepError("consume exited %d: %s" % (p.returncode, last_line(se)))
        m, c = SUMMARY_RE.search(so), CLIENT_STAGES_RE.search(se)
        if not m or not c:
            raise StepError("no summary or stages line from loaderctl consume")
        if (path == "host") != (m.group(4) == "host"):
            raise StepError("delivered to %s" % m.group(4))
        out.append(({"batches": int(m.group(1)), "seconds": float(m.group(2)),
                     "per_s": float(m.group(3)), "call_us": float(m.group(5))},
                    [float(x) for x in c.groups()], p.pid))
    return out


def daemon_stages(daemon, pids):
    """Mean of the daemon's detach figures over these clients' pids."""
    want = set(pids)
    with open(daemon.log_path, errors="replace") as f:
        found = [m for m in DETACH_RE.finditer(f.read()) if int(m.group(1)) in want]
    sums = {}
    for m in found:
        for name, v in zip(("fill", "order", "gpu", "held", "queue", "copy"), m.groups()[1:]):
            if v is not None:
                sums.setdefault(name, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def cpu_seconds(pid):
    """CPU seconds (user + system) of the daemon's event loop (its main
    thread), of its GPU threads (loaderd-gpuN) and of its worker processes
    (its children), read from /proc."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat_cpu(path):
        try:
            with open(path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone since it was listed
            return 0.0, None
        return (int(fields[11]) + int(fields[12])) / tick, int(fields[1])

    got = {"loop": 0.0, "gpu": 0.0, "workers": 0.0}
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "comm")) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if int(tid) == pid:
            got["loop"] += stat_cpu(os.path.join(task_dir, tid, "stat"))[0]
        elif comm.startswith("loaderd-gpu"):
            got["gpu"] += stat_cpu(os.path.join(task_dir, tid, "stat"))[0]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            cpu, ppid = stat_cpu("/proc/%s/stat" % entry)
            if ppid == pid:
                got["workers"] += cpu
    return got


def measure(ctx, daemon, kib, path, n):
    """{per_client, total, stages, busy} for n clients of one size and
    path; busy: the cores the daemon's loop, GPU thread and workers kept
    busy during the run."""
    probe = run_clients(ctx, daemon, kib, path, 1, 100)
    rate = probe[0][0]["per_s"]
    batches = max(200, int(ctx.args.seconds * rate))
    before, t0 = cpu_seconds(daemon.proc.pid), time.perf_counter()
    runs = run_clients(ctx, daemon, kib, path, n, batches)
    after, wall = cpu_seconds(daemon.proc.pid), time.perf_counter() - t0
    busy = {k: (after[k] - before[k]) / wall for k in after}
    # Together: all batches over the longest client's time.
    total = sum(r[0]["batches"] for r in runs) / max(r[0]["seconds"] for r in runs)
    stages = daemon_stages(daemon, [r[2] for r in runs])
    for k, name in enumerate(("next", "stream_wait", "release")):
        stages[name] = sum(r[1][k] for r in runs) / len(runs)
    return {"per_client": total / n, "total": total, "stages": stages, "busy": busy}


def measure_ceiling(ctx):
    exe = os.path.join(ctx.bindir, "loaderd-h2d-ceiling")
    cmd = [exe, "--device", str(ctx.args.device)] + [str(kib * KIB) for kib in ctx.args.sizes]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    ctx.log.write("$ %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    found = {int(b) // KIB: float(g) for b, g in H2D_RE.findall(r.stdout)}
    return {kib: found.get(kib, Failed("error: h2d ceiling: %s" % last_line(r.stderr)))
            for kib in ctx.args.sizes}


def measure_call(ctx, daemon):
    """next + release per batch (us) with batches always waiting: one
    client of 256 KiB batches stepping 1 ms, direct and staging."""
    kib = min(ctx.args.sizes, key=lambda k: abs(k - GOAL_SMALL_KIB))
    res = {}
    for path in ("staging", "direct"):
        try:
            (s, c, _), = run_clients(ctx, daemon, kib, path, 1, 1000, step_ms=1)
            res[path] = c[0] + c[1] + c[2]
        except StepError as e:
            res[path] = Failed("error: %s" % e)
    return kib, res


def fmt(v, f="%.0f"):
    return v if isinstance(v, str) else f % v


def report(ctx, res, ceiling, call):
    a = ctx.args
    lines = ["machine: GPU %s; CPU %s, %d cores (%d usable)"
             % (ctx.gpu_desc, cpu_model(), os.cpu_count() or 0, usable_cores()),
             "date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "command: bench/device_bench.py %s" % " ".join(sys.argv[1:]),
             "loaderd: %d workers, pin register, gpu_threads %d, %d staging slots, depth %d, "
             "%d records a batch" % (a.workers, a.gpu_threads, STAGING_SLOTS, DEPTH, ROWS), ""]
    head = "| batch | clients | " + " | ".join(
        "%s per client | %s all" % (p, p) for p in a.paths) + " | bus GB/s |"
    lines += [head, "|" + "---|" * (3 + 2 * len(a.paths))]
    for kib in a.sizes:
        for n in a.clients:
            cells = []
            for p in a.paths:
                r = res.get((kib, p, n))
                cells += ([fmt(r), fmt(r)] if isinstance(r, str) else
                          [fmt(r["per_client"]), fmt(r["total"])])
            lines.append("| %d KiB | %d | %s | %s |" % (kib, n, " | ".join(cells),
                                                        fmt(ceiling[kib], "%.1f")))
    lines += ["", "stage means per batch, us (one client; daemon: fill, order, gpu, queue, copy, "
              "held; client: next, stream_wait, release)", "",
              "| batch | path | " + " | ".join(STAGES) + " |", "|" + "---|" * (2 + len(STAGES))]
    for kib in a.sizes:
        for p in a.paths:
            r = res.get((kib, p, 1))
            if isinstance(r, dict):
                lines.append("| %d KiB | %s | %s |" % (kib, p, " | ".join(
                    fmt(r["stages"].get(s, "-"), "%.1f") for s in STAGES)))
    lines += ["", "cores kept busy during the run (CPU seconds / wall seconds): the daemon's "
              "event loop, its GPU threads, its workers", "",
              "| batch | path | clients | batches/s all | loop | GPU thread | workers |",
              "|---|---|---|---|---|---|---|"]
    for kib in a.sizes:
        for p in a.paths:
            for n in sorted({min(a.clients), max(a.clients)}):
                r = res.get((kib, p, n))
                if isinstance(r, dict):
                    b = r["busy"]
                    lines.append("| %d KiB | %s | %d | %.0f | %.2f | %.2f | %.2f |"
                                 % (kib, p, n, r["total"], b["loop"], b["gpu"], b["workers"]))
    lines += ["", "goals:"]
    for p in ("staging", "direct"):
        if p not in a.paths:
            continue
        for kib in a.sizes:
            r1 = res.get((kib, p, 1))
            if kib <= GOAL_SMALL_KIB and isinstance(r1, dict):
                lines.append("  one %s client, %d KiB: %.0f batches/s (goal >= %.0f): %s"
                             % (p, kib, r1["per_client"], GOAL_ONE_CLIENT,
                                "met" if r1["per_client"] >= GOAL_ONE_CLIENT else "missed"))
            r8 = res.get((kib, p, max(a.clients)))
            if isinstance(r1, dict) and isinstance(r8, dict):
                x = r8["total"] / r1["total"]
                lines.append("  %d %s clients / one, %d KiB: %.2fx (goal >= %.1fx): %s"
                             % (max(a.clients), p, kib, x, GOAL_SCALE,
                                "met" if x >= GOAL_SCALE else "missed"))
    r4 = res.get((4096, "direct", 1))
    if isinstance(r4, dict) and not isinstance(ceiling.get(4096), str) and 4096 in ceiling:
        gbps = r4["per_client"] * 4 * MIB / 1e9
        x = gbps / ceiling[4096]
        lines.append("  4 MiB direct: %.1f GB/s, %.2f of the bus (goal >= %.2f): %s"
                     % (gbps, x, GOAL_BUS, "met" if x >= GOAL_BUS else "missed"))
    kib, calls = call
    for p, v in calls.items():
        lines.append("  next + release, %s, %d KiB, batches waiting: %s us (goal < %.0f): %s"
                     % (p, kib, fmt(v, "%.1f"), GOAL_CALL_US,
                        "-" if isinstance(v, str) else "met" if v < GOAL_CALL_US else "missed"))
    return "\n".join(lines) + "\n"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--out", help="directory for the table, the log and loaderd's log")
    ap.add_argument("--workers", type=int, default=max(1, usable_cores() - 1))
    ap.add_argument("--sizes-kib", default="64,256,1024,4096,16384")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--paths", default="staging,direct,host")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--gpu-threads", type=int, default=1, help="the daemon's gpu_threads")
    a = ap.parse_args()
    a.sizes = [int(x) for x in a.sizes_kib.split(",")]
    a.clients = [int(x) for x in a.clients.split(",")]
    a.paths = [x for x in a.paths.split(",") if x]
    if min(a.sizes) < 64 or any(k % 64 for k in a.sizes) or max(a.sizes) > 16384 or \
            min(a.clients) < 1 or not set(a.paths) <= {"staging", "direct", "host"}:
        ap.error("sizes are multiples of 64 KiB up to 16384, clients >= 1, paths among "
                 "staging,direct,host")
    return a


class Context:
    pass


def main():
    a = parse_args()
    ctx = Context()
    ctx.args = a
    ctx.bindir = os.path.join(os.path.abspath(a.build), "bin")
    ctx.loaderctl = os.path.join(ctx.bindir, "loaderctl")
    version, gpus, (uuid, name) = loaderd_gpus(ctx.bindir, a.device)
    if not gpus or uuid is None:
        print("device_bench: skipped: loaderd reports no GPU %d" % a.device)
        return EXIT_SKIP
    ctx.workdir = tempfile.mkdtemp(prefix="loaderd-device-bench-")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    ctx.logdir = a.out or ctx.workdir
    ctx.log = Log("device_bench", os.path.join(a.out, "bench.log") if a.out else None)
    ctx.gpu_desc = nvidia_smi(ctx.log, uuid) or '"%s"' % name
    raise_memlock(ctx.log)
    base = "/dev/shm" if os.path.isdir("/dev/shm") else ctx.workdir
    data_dir = tempfile.mkdtemp(prefix="loaderd-device-bench-data-", dir=base)
    ctx.data = os.path.join(data_dir, "records.bin")
    res = {}
    daemon = Daemon(ctx)
    try:
        # A multiple of every record size (at most 1 MiB), 16 of the largest batches.
        write_dataset(ctx.data, max(256 * MIB, 16 * max(a.sizes) * KIB), max(1, usable_cores()))
        ceiling = measure_ceiling(ctx)
        daemon.start()
        for kib in a.sizes:
            for p in a.paths:
                for n in a.clients:
                    t0 = time.perf_counter()
                    try:
                        res[(kib, p, n)] = r = measure(ctx, daemon, kib, p, n)
                        ctx.log.say("%d KiB, %s, %d client%s: %.0f batches/s each, %.0f in all "
                                    "(%.1f s)" % (kib, p, n, "" if n == 1 else "s", r["per_client"],
                                                  r["total"], time.perf_counter() - t0))
                    except StepError as e:
                        res[(kib, p, n)] = Failed("error: %s" % e)
                        ctx.log.say("%d KiB, %s, %d clients: %s" % (kib, p, n, e))
        call = measure_call(ctx, daemon)
    finally:
        daemon.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(ctx.workdir, ignore_errors=True)
    publish(ctx.log, a.out, report(ctx, res, ceiling, call))
    return failed_exit(list(res.values()) + list(ceiling.values()) + list(call[1].values()))


if __name__ == "__main__":
    sys.exit(main())
