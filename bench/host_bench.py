#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""host_bench: how close loaderd's host delivery comes to reading the file.

In one run, on the machine it runs on:
  1. makes a raw dataset (or reuses --data), and reads it once so it sits in
     the page cache;
  2. measures the ceiling: a plain sequential read() of the file into a
     16 MiB buffer, best of 3, in GB/s (10^9 bytes);
  3. for each worker count in --workers, starts loaderd with one raw
     pipeline, runs `loaderctl consume --quiet` for --epochs epochs, and
     takes MB_per_s and batches_per_s from its summary line.
It prints a table (workers, GB/s, batches/s, ratio to the sequential read)
with the machine (cores, CPU model, kernel) and the command line, ready to
paste. Figures compare only within one run: machines and page caches differ.

    bench/host_bench.py [--gib 2] [--record-bytes 1048576] [--batch-size 16]
                        [--workers 1,2] [--epochs 3] [--data FILE] [--build DIR]
"""

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_dataset  # noqa: E402  (tools/ is put on the path just above)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_daemon  # noqa: E402  (bench/, put on the path just above)

READ_BUFFER = 16 << 20


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def read_file_gbps(path):
    """Reads the whole file with read() into one 16 MiB buffer; GB/s."""
    buf = bytearray(READ_BUFFER)
    view = memoryview(buf)
    total = 0
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            n = os.readv(fd, [view])
            if n == 0:
                break
            total += n
    finally:
        os.close(fd)
    return total / (time.perf_counter() - start) / 1e9


def wait_until_up(loaderctl, sock, proc, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError("loaderd exited with status %d during start" % proc.returncode)
        r = subprocess.run([loaderctl, "--socket", sock, "status"], capture_output=True, text=True)
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("loaderd did not answer within %d s: %s" % (timeout_s, r.stderr.strip()))
        time.sleep(0.05)


def run_loaderd(args, bindir, data, workers, tmp):
    """One daemon with `workers` workers; returns (MB/s, batches/s)."""
    sock = os.path.join(tmp, "bench-%d.sock" % workers)
    cfg = os.path.join(tmp, "bench-%d.ini" % workers)
    batch_bytes = args.batch_size * args.record_bytes
    shm_bytes = (args.staging_slots + 2) * batch_bytes + (64 << 20)
    with open(cfg, "w") as f:
        f.write("[daemon]\nsocket = %s\nworkers = %d\nstaging_slots = %d\nshm_bytes = %d\n"
                "log_level = warning\n\n[pipeline.bench]\nsource = raw:%s\nrecord_bytes = %d\n"
                "batch_size = %d\n" % (sock, workers, args.staging_slots, shm_bytes, data,
                                       args.record_bytes, args.batch_size))
    log = open(os.path.join(tmp, "loaderd-%d.log" % workers), "wb")
    proc = subprocess.Popen([os.path.join(bindir, "loaderd"), "--config", cfg],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        loaderctl = os.path.join(bindir, "loaderctl")
        wait_until_up(loaderctl, sock, proc)
        cmd = [loaderctl, "--socket", sock, "consume", "--pipeline", "bench", "--epochs", str(args.epochs),
               "--quiet"]
        if args.depth:
            cmd += ["--depth", str(args.depth)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
        m = re.search(r"batches_per_s=(\S+) samples_per_s=\S+ MB_per_s=(\S+)", r.stdout)
        if not m:
            raise RuntimeError("no summary line in loaderctl's output: %r" % r.stdout)
        return float(m.group(2)), float(m.group(1))
    finally:
        bench_daemon.stop_process(proc)
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=2.0, help="dataset size in GiB (default 2)")
    ap.add_argument("--record-bytes", type=int, default=1 << 20, help="bytes per sample (default 1 MiB)")
    ap.add_argument("--batch-size", type=int, default=16, help="samples per batch (default 16)")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per worker count (default 3)")
    ap.add_argument("--staging-slots", type=int, default=16, help="loaderd staging_slots (default 16)")
    ap.add_argument("--depth", type=int, default=0, help="consumer prefetch depth (0 = daemon default)")
    ap.add_argument("--data", help="reuse this raw file instead of writing one")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    args = ap.parse_args()

    bindir = os.path.join(os.path.abspath(args.build), "bin")
    for exe in ("loaderd", "loaderd-worker", "loaderctl"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("host_bench: %s/%s is missing; build first (cmake -B build -DCMAKE_BUILD_TYPE=Release)"
                     % (bindir, exe))
    workers = [int(x) for x in args.workers.split(",") if x]

    with tempfile.TemporaryDirectory(prefix="loaderd-bench-") as tmp:
        data = args.data
        if data is None:
            data = os.path.join(tmp, "bench.bin")
            records = int(args.gib * (1 << 30)) // args.record_bytes
            print("host_bench: writing %d records of %d bytes to %s" % (records, args.record_bytes, data),
                  flush=True)
            make_dataset.write_raw(data, records, args.record_bytes, seed=1)
        data = os.path.abspath(data)
        size = os.path.getsize(data)
        if size % args.record_bytes or size // args.record_bytes < args.batch_size:
            sys.exit("host_bench: %s (%d bytes) does not hold whole records of %d bytes for a batch of %d"
                     % (data, size, args.record_bytes, args.batch_size))
        read_file_gbps(data)  # into the page cache
        seq = max(read_file_gbps(data) for _ in range(3))
        print("host_bench: sequential read %.2f GB/s" % seq, flush=True)

        rows = []
        for w in workers:
            mbps, bps = run_loaderd(args, bindir, data, w, tmp)
            rows.append((w, mbps / 1e3, bps))
            print("host_bench: %d workers: %.2f GB/s, %.1f batches/s" % (w, mbps / 1e3, bps), flush=True)

    print()
    print("machine: %d cores, %s, kernel %s" % (os.cpu_count(), cpu_model(), platform.release()))
    print("command: %s" % " ".join(shlex.quote(a) for a in [sys.argv[0]] + sys.argv[1:]))
    print("dataset: %.2f GiB, %d-byte records, batch %d (%.1f MiB), %d epochs per row"
          % (size / (1 << 30), args.record_bytes, args.batch_size,
             args.batch_size * args.record_bytes / (1 << 20), args.epochs))
    print()
    print("| what | GB/s | batches/s | ratio to read() |")
    print("|---|---|---|---|")
    print("| sequential read(), 16 MiB buffer, best of 3 | %.2f | | 1.00 |" % seq)
    for w, gbps, bps in rows:
        print("| loaderd, %d worker%s | %.2f | %.1f | %.2f |" % (w, "" if w == 1 else "s", gbps, bps, gbps / seq))
    return 0


if __name__ == "__main__":
    sys.exit(main())
