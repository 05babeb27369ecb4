#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""stage_timing_bench: what the stages' latency histograms cost, as an
A/B of `[daemon] stage_timing = on` against `off`.

Two workloads, each the most sensitive of its kind to a per-sample cost:
  - raw: host delivery of small records (default 4 KiB, batches of 256),
    from the page cache: per sample, the workers read and the daemon does
    almost nothing else, so the read's clock reads weigh the most;
  - images: an image pipeline decoded on the workers' CPUs (mkjpeg's
    ImageNet-like tree, random_resized_crop(224) hflip(0.5)), per image a read,
    a decode and a transform timed.
With --device UUID the consumer takes its batches on that GPU (device
delivery: the staging wait, pinned copy and device copy are timed too;
--decode gpu adds the GPU decode).

Each round runs every workload with stage timing on, then off, then the
next round off then on (A B B A ...), a fresh daemon each time, and the
table gives each configuration's median, their ratio, and the median of
the rounds' own ratios (on and off of one round ran back to back, so
that ratio is the less sensitive to a machine whose load drifts). Figures compare only within one run on one machine.

    bench/stage_timing_bench.py --build DIR [--rounds 6] [--workers 2]
        [--workloads raw,images] [--raw-mib 256] [--record-bytes 4096]
        [--batch-size 256] [--images 2000] [--epochs 3] [--device UUID]
        [--decode cpu|gpu] [--data-dir DIR]
"""

import argparse
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_dataset  # noqa: E402  (tools/ is put on the path just above)
import bench_daemon  # noqa: E402  (bench/ is put on the path just above)
from host_bench import cpu_model, read_file_gbps, wait_until_up  # noqa: E402


def pipeline_lines(args, workload, data):
    if workload == "raw":
        return ("source = raw:%s\nrecord_bytes = %d\nbatch_size = %d\n"
                % (data, args.record_bytes, args.batch_size))
    return ("source = imagefolder:%s\nbatch_size = %d\ntransform = random_resized_crop(224) hflip(0.5)\n"
            "decode = %s\n" % (data, args.image_batch, args.decode))


def run(args, bindir, tmp, workload, data, timing, n):
    """One daemon, one consume of --epochs epochs: samples per second."""
    tag = "%s-%s-%d" % (workload, timing, n)
    sock = os.path.join(tmp, tag + ".sock")
    cfg = os.path.join(tmp, tag + ".ini")
    with open(cfg, "w") as f:
        f.write("[daemon]\nsocket = %s\nworkers = %d\nstaging_slots = 16\nshm_bytes = 4G\n"
                "log_level = warning\nstage_timing = %s\ngpu = %s\n\n[pipeline.bench]\n%s"
                % (sock, args.workers, timing, "auto" if args.device else "off",
                   pipeline_lines(args, workload, data)))
    log = open(os.path.join(tmp, tag + ".log"), "wb")
    proc = subprocess.Popen([os.path.join(bindir, "loaderd"), "--config", cfg],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        loaderctl = os.path.join(bindir, "loaderctl")
        try:
            wait_until_up(loaderctl, sock, proc)
        except RuntimeError as e:
            log.flush()
            with open(os.path.join(tmp, tag + ".log"), errors="replace") as f:
                raise RuntimeError("%s; its log:\n%s" % (e, f.read()[-2000:])) from None
        cmd = [loaderctl, "--socket", sock, "consume", "--pipeline", "bench", "--epochs", str(args.epochs),
               "--quiet"]
        if args.device:
            cmd += ["--device", args.device]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
        m = re.search(r"samples_per_s=(\S+)", r.stdout)
        if not m:
            raise RuntimeError("no summary line in loaderctl's output: %r" % r.stdout)
        return float(m.group(1))
    finally:
        bench_daemon.stop_process(proc)
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build tree (default ./build)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of on and off each (default 6)")
    ap.add_argument("--workers", type=int, default=2, help="workers (default 2)")
    ap.add_argument("--workloads", default="raw,images", help="raw, images or both (default)")
    ap.add_argument("--raw-mib", type=int, default=256, help="raw dataset in MiB (default 256)")
    ap.add_argument("--record-bytes", type=int, default=4096, help="raw record bytes (default 4096)")
    ap.add_argument("--batch-size", type=int, default=256, help="raw batch size (default 256)")
    ap.add_argument("--images", type=int, default=2000, help="JPEGs of the image tree (default 2000)")
    ap.add_argument("--image-batch", type=int, default=64, help="image batch size (default 64)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per measurement (default 3)")
    ap.add_argument("--device", help="consume on this GPU (UUID): device delivery")
    ap.add_argument("--decode", default="cpu", choices=("cpu", "gpu"), help="image decode (default cpu)")
    ap.add_argument("--data-dir", help="where the datasets are made (default a temporary directory)")
    args = ap.parse_args()

    bindir = os.path.join(os.path.abspath(args.build), "bin")
    for exe in ("loaderd", "loaderd-worker", "loaderctl", "mkjpeg"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            sys.exit("stage_timing_bench: %s/%s is missing; build first" % (bindir, exe))
    workloads = [w for w in args.workloads.split(",") if w]
    if any(w not in ("raw", "images") for w in workloads):
        sys.exit("stage_timing_bench: --workloads takes raw and images")

    with tempfile.TemporaryDirectory(prefix="loaderd-stage-bench-") as tmp:
        where = args.data_dir or tmp
        os.makedirs(where, exist_ok=True)
        data = {}
        if "raw" in workloads:
            data["raw"] = os.path.join(where, "raw.bin")
            records = (args.raw_mib << 20) // args.record_bytes
            make_dataset.write_raw(data["raw"], records, args.record_bytes, seed=1)
            read_file_gbps(data["raw"])  # into the page cache
        if "images" in workloads:
            data["images"] = os.path.join(where, "images")
            per_class = max(1, args.images // 10)
            subprocess.run([os.path.join(bindir, "mkjpeg"), "--tree", data["images"], "--classes", "10",
                            "--per-class", str(per_class), "--min-side", "300", "--max-side", "500",
                            "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        got = {(w, t): [] for w in workloads for t in ("on", "off")}
        for n in range(args.rounds):
            order = ("on", "off") if n % 2 == 0 else ("off", "on")
            for w in workloads:
                for t in order:
                    rate = run(args, bindir, tmp, w, data[w], t, n)
                    got[(w, t)].append(rate)
                    print("stage_timing_bench: round %d %s stage_timing=%s: %.1f samples/s" % (n, w, t, rate),
                          flush=True)

    print()
    print("machine: %d cores, %s, kernel %s" % (os.cpu_count(), cpu_model(), platform.release()))
    print("command: %s" % " ".join(shlex.quote(a) for a in [sys.argv[0]] + sys.argv[1:]))
    print()
    print("| workload | stage_timing on, median samples/s | off, median | on / off | median of the rounds' on / off | runs (on; off) |")
    print("|---|---|---|---|---|---|")
    for w in workloads:
        on, off = statistics.median(got[(w, "on")]), statistics.median(got[(w, "off")])
        paired = statistics.median(a / b for a, b in zip(got[(w, "on")], got[(w, "off")]))
        print("| %s | %.1f | %.1f | %.4f | %.4f | %s; %s |" % (
            w, on, off, on / off, paired, ", ".join("%.0f" % x for x in got[(w, "on")]),
            ", ".join("%.0f" % x for x in got[(w, "off")])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
