#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""py_host_bench: what the Python package's batch lifetime and writable host
tensors cost, on host delivery with torch.

One daemon, one raw pipeline, a torch loader (device="cpu") taking --batches
batches (through as many epochs as that needs) in each mode below; the
modes take turns, --rounds times, and each row gives the median round. Each
step touches one byte of every page of the batch (the page faults a reader
pays, without the reader's own arithmetic):
  shared         the arena mapped shared and read-only, as before torch host
                 tensors became writable (the C library's default; here by
                 attaching without LDR_ATTACH_WRITABLE)
  private        the torch default: mapped private and writable, each
                 release a madvise(MADV_DONTNEED) over the slot, each batch
                 its slot's pages faulted in again
  private+loop   the same with the tensor in a variable alive at next()
                 (`t = batch["data"]`): each batch stays held one step longer
  private+kept   the same with one tensor of the first batch kept for the
                 whole run: one slot of the depth held throughout
  private+clone  the same, cloning the batch's tensor each step: what a copy
                 at next() of what is still viewed would cost (a loop
                 variable keeps a view alive at almost every next())
Columns: batches/s (wall), and the client's own CPU time per batch
(process_time, which includes madvise and the page faults), and the share
of the time the loader waited for the daemon.

    bench/py_host_bench.py [--build DIR] [--record-bytes 4096] [--batch-size 16]
                           [--batches 3000] [--rounds 3] [--workers 2]
"""

import argparse
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_dataset  # noqa: E402  (tools/ is put on the path just above)

MODES = ["shared", "private", "private+loop", "private+kept", "private+clone"]


def start_daemon(args, bindir, data, tmp):
    sock = os.path.join(tmp, "bench.sock")
    cfg = os.path.join(tmp, "bench.ini")
    batch_bytes = args.batch_size * args.record_bytes
    with open(cfg, "w") as f:
        f.write("[daemon]\nsocket = %s\nworkers = %d\nstaging_slots = 16\nshm_bytes = %d\n"
                "log_level = warning\n\n[pipeline.bench]\nsource = raw:%s\nrecord_bytes = %d\n"
                "batch_size = %d\n" % (sock, args.workers, 18 * batch_bytes + (64 << 20), data,
                                       args.record_bytes, args.batch_size))
    log = open(os.path.join(tmp, "loaderd.log"), "wb")
    proc = subprocess.Popen([os.path.join(bindir, "loaderd"), "--config", cfg],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while subprocess.run([os.path.join(bindir, "loaderctl"), "--socket", sock, "status"],
                         capture_output=True).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit("py_host_bench: loaderd did not start (see %s)" % log.name)
        time.sleep(0.05)
    return proc, sock


def run(loaderd, lib, torch, sock, mode, n):
    lib.ATTACH_WRITABLE = 0 if mode == "shared" else 1
    x = loaderd.Loader("bench", socket=sock, device="cpu", framework="torch")
    lib.ATTACH_WRITABLE = 1
    it = iter(x)

    def batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(x)
            return next(it)

    def touch(t):
        return int(t.view(-1)[::4096].sum())

    kept = batch()["data"] if mode == "private+kept" else None
    touch(batch()["data"])  # attached, the ring full: the clock starts here
    wait0, cpu0, t0 = x.stats()["wait_s"], time.process_time(), time.perf_counter()
    for _ in range(n):
        b = batch()
        if mode == "private+loop":
            t = b["data"]
            touch(t)
        elif mode == "private+clone":
            touch(b["data"].clone())
        else:
            touch(b["data"])
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    wait = x.stats()["wait_s"] - wait0
    del kept
    x.close()
    return n / wall, cpu / n * 1e6, wait / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    ap.add_argument("--record-bytes", type=int, default=4096, help="bytes per sample (default 4096)")
    ap.add_argument("--batch-size", type=int, default=16, help="samples per batch (default 16)")
    ap.add_argument("--batches", type=int, default=3000, help="batches per mode and round (default 3000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all modes (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="loaderd workers (default 2)")
    args = ap.parse_args()

    build = os.path.abspath(args.build)
    bindir = os.path.join(build, "bin")
    sys.path.insert(0, os.path.join(build, "python"))
    import torch
    import loaderd
    from loaderd import _lib
    with tempfile.TemporaryDirectory(prefix="loaderd-pybench-") as tmp:
        data = os.path.join(tmp, "bench.bin")
        records = max(64 * args.batch_size, (256 << 20) // args.record_bytes)
        make_dataset.write_raw(data, records, args.record_bytes, seed=1)
        proc, sock = start_daemon(args, bindir, data, tmp)
        try:
            res = {m: [] for m in MODES}
            for r in range(args.rounds):
                for m in MODES:
                    res[m].append(run(loaderd, _lib, torch, sock, m, args.batches))
                    print("py_host_bench: round %d %-14s %.0f batches/s, %.1f us CPU a batch, waited "
                          "%.0f%%" % (r, m, res[m][-1][0], res[m][-1][1], 100 * res[m][-1][2]), flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    print()
    print("machine: %d cores, kernel %s, torch %s" % (os.cpu_count(), platform.release(), torch.__version__))
    print("command: %s" % " ".join(shlex.quote(a) for a in [sys.argv[0]] + sys.argv[1:]))
    print("batch: %d x %d bytes (%.0f KiB), %d batches a mode, median of %d rounds"
          % (args.batch_size, args.record_bytes, args.batch_size * args.record_bytes / 1024,
             args.batches, args.rounds))
    print()
    print("| mode | batches/s | client CPU per batch (us) | waited for data |")
    print("|---|---|---|---|")
    for m in MODES:
        rate = statistics.median(x[0] for x in res[m])
        cpu = statistics.median(x[1] for x in res[m])
        wait = statistics.median(x[2] for x in res[m])
        print("| %s | %.0f | %.1f | %.0f%% |" % (m, rate, cpu, 100 * wait))
    return 0


if __name__ == "__main__":
    sys.exit(main())
