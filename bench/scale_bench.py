#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scale_bench: megatron token corpora of millions to billions of documents,
with `document_shuffle` on: what loaderd's start, first batch, memory and
epoch boundaries cost as the corpus grows, and what megatron-core's
GPTDataset costs to index the same data.

For each --docs count N (default 1e6,1e7,1e8):
  (a) dataset: a Megatron-LM indexed dataset PREFIX.idx / PREFIX.bin in
      --data-dir (kept between runs), N documents of one sequence each, of
      1 to 2,000 tokens (a fixed pattern: (d * 7919) mod 1999 + 1), uint16;
      the .bin is sparse (its tokens read as 0), so only the .idx (20 bytes
      a document) takes disk;
  (b) loaderd (--build): one daemon, workers 2, a megatron pipeline `big`
      (seq_len 4096, batch 8, shuffle and document_shuffle on) and a small
      raw pipeline `small`; it prints
        socket_s     from the start to `loaderctl status` answering,
        first_s      from the start to the end of a one-batch `loaderctl
                     consume` of `big`,
        rss_mb       the daemon's peak RSS (VmHWM, its shared memory
                     included) at the end,
        check_s      `loaderd --check-config` over the same configuration:
                     its time, and check_rss_mb its peak RSS,
        (--reload)   a daemon started with `small` alone, a client of it,
                     then `loaderctl reload` adding `big`: reload_s until
                     the reload answered, reload_wait_ms the client's
                     longest wait between two batches meanwhile (and,
                     unless --no-cache, the same from the index cache),
        resume5_s    a one-batch consume resumed at the start of epoch 5,
        boundary_ms  the longest wait between two batches of a client of
                     `small` (a connection made here, releasing at once)
                     while a consume of `big`, resumed two batches before
                     the end of epoch 7, crosses into epoch 8;
  (b2) with `cache_dir` (unless --no-cache): a first start that checks the
      index and writes the index cache (write_socket_s, write_first_s,
      write_rss_mb), a second start that reads it (warm_socket_s,
      warm_first_s, warm_rss_mb: what every later start and resume costs),
      `--check-config` from the cache (check_warm_s), and the cache's size
      (cache_mb: 8 bytes a block of 4096 documents, and a header);
      with --evict, the dataset's pages are dropped from the page cache
      before every start and check, so that each reads from disk;
  (c) megatron-core (--venv, made here unless --no-peer: pip install
      numpy, torch from PyTorch's CPU index and megatron-core): GPTDataset's
      index build over the same prefix through bench/megatron_peer.py
      --check (seq_len 4096, one epoch, its cache in a fresh directory):
      build_s (as megatron_peer.py reports it, torch's import left out),
      the process's peak RSS (rss_mb) and the cache's bytes (cache_mb);
      skipped, with the reason, where it cannot be installed or run.
With --files SIZES (e.g. 1e5,1e6,1e7), image trees of that many tiny
files too, through bench/scale_images.py (its own table: socket up, listed,
first batch and peak RSS for one scan thread, a cold and a warm listing
cache, arena bytes a file, against torchvision's ImageFolder on the same
tree); --docs '' leaves the token corpora out.
It then prints the growth exponent of each figure between the smallest and
the largest N (log(figure ratio) / log(N ratio)) and, for N the disk or the
time cannot hold (--project, e.g. 1e9), the figures the exponents project.

    bench/scale_bench.py [--build build] [--docs 1e6,1e7,1e8] [--data-dir DIR]
                         [--venv DIR | --no-peer] [--no-cache] [--evict] [--project 1e9]
                         [--out FILE]
"""

import argparse
import array
import datetime
import itertools
import math
import os
import platform
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_dataset  # noqa: E402

SEQ, BATCH, STEP = 4096, 8, 1 << 22  # STEP: documents written per chunk
MAGIC, VERSION = 0x4452444C, 7       # proto/PROTOCOL.md's frame header
HELLO, WELCOME, READY, RELEASE = 1, 2, 3, 4


def length_of(d):
    return (d * 7919) % 1999 + 1


def make_data(prefix, n):
    """PREFIX.idx / .bin for n documents, unless they are there already."""
    idx_bytes = 34 + 12 * n + 8 * (n + 1)
    if os.path.exists(prefix + ".idx") and os.path.getsize(prefix + ".idx") == idx_bytes:
        return sum_tokens(n)
    t0 = time.monotonic()
    code = make_dataset.MEGATRON_DTYPES["uint16"][0]
    tokens = 0
    with open(prefix + ".idx", "wb") as f:
        f.write(make_dataset.MEGATRON_MAGIC + struct.pack("<QBQQ", make_dataset.MEGATRON_VERSION,
                                                          code, n, n + 1))
        for at in range(0, n, STEP):
            f.write(array.array("i", map(length_of, range(at, min(n, at + STEP)))).tobytes())
        for at in range(0, n, STEP):
            lengths = map(length_of, range(at, min(n, at + STEP)))
            pointers = array.array("q", itertools.accumulate((2 * x for x in lengths), initial=2 * tokens))
            tokens = pointers.pop() // 2  # the chunk's end: no pointer
            f.write(pointers.tobytes())
        for at in range(0, n + 1, STEP):
            f.write(array.array("q", range(at, min(n + 1, at + STEP))).tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(tokens * 2)
    print("dataset %s: %d documents, %d tokens, written in %.1f s" % (prefix, n, tokens,
          time.monotonic() - t0), file=sys.stderr)
    return tokens


def sum_tokens(n):
    period = 1999  # length_of has this period
    whole = sum(length_of(d) for d in range(period))
    return (n // period) * whole + sum(length_of(d) for d in range(n - n % period, n))


def write_config(path, sock, prefix, small, cache_dir=""):
    with open(path, "w") as f:
        f.write("[daemon]\nsocket = %s\nworkers = 2\nshm_bytes = 64G\nlog_level = info\n" % sock)
        f.write("cache_dir = %s\n\n" % cache_dir)
        f.write("[pipeline.big]\nsource = megatron:%s\nseq_len = %d\nbatch_size = %d\nseed = 1\n\n"
                % (prefix, SEQ, BATCH))
        f.write("[pipeline.small]\nsource = raw:%s\nrecord_bytes = 64\nbatch_size = 8\n" % small)


def loaderctl(build, sock, args, timeout=600):
    return subprocess.run([os.path.join(build, "bin", "loaderctl"), "--socket", sock] + args,
                          capture_output=True, text=True, timeout=timeout)


def consume(build, sock, pipeline, batches, resume=None):
    args = ["consume", "--pipeline", pipeline, "--batches", str(batches), "--quiet"]
    if resume:
        args += ["--resume", resume]
    t0 = time.monotonic()
    r = loaderctl(build, sock, args)
    if r.returncode != 0:
        raise RuntimeError("consume %s: %s" % (" ".join(args), r.stderr.strip()[-400:]))
    token = [line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("position: ")][0]
    return time.monotonic() - t0, token


def frame(kind, payload):
    return struct.pack("<IHHIIQ", MAGIC, VERSION, kind, 0, len(payload), 7) + payload


def hello(pipeline):
    def string(s):
        return struct.pack("<H", len(s)) + s.encode()
    return frame(HELLO, struct.pack("<IIII", 0, 0, 1, 2) + bytes(16) + string(pipeline)
                 + string("scale-bench") + string("") + string("") + string("")
                 + struct.pack("<II", 1, 0) + bytes(4))


class Streamer(threading.Thread):
    """A client of `small` that releases each batch at once, noting when
    each READY came."""

    def __init__(self, sock_path):
        super().__init__(daemon=True)
        self.path, self.times, self.error = sock_path, [], None
        self.stop = threading.Event()

    def recv(self, s):
        data, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(64))
        for level, kind, fds in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for i in range(0, len(fds) - len(fds) % 4, 4):
                    os.close(struct.unpack_from("i", fds, i)[0])
        if len(data) < 24:
            raise RuntimeError("the daemon closed the connection")
        return struct.unpack_from("<H", data, 6)[0], data[24:]

    def run(self):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            s.settimeout(120)
            s.connect(self.path)
            s.send(hello("small"))
            if self.recv(s)[0] != WELCOME:
                raise RuntimeError("no WELCOME")
            while not self.stop.is_set():
                kind, p = self.recv(s)
                if kind != READY:
                    raise RuntimeError("frame type %d" % kind)
                self.times.append(time.monotonic())
                seq, = struct.unpack_from("<Q", p, 0)
                slot, gen = struct.unpack_from("<II", p, 48)
                s.send(frame(RELEASE, struct.pack("<QIIQ", seq, slot, gen, 0)))
            s.close()
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            self.error = e


def vm_hwm_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def start_to_first_batch(build, cfg, sock, log):
    """The daemon of cfg started (its output to the open file log; the
    dataset evicted first with --evict) and its first batch of `big`
    taken: (the process, {socket_s, first_s}: seconds from exec to the
    socket answering and to that batch, the batch's position token). The
    caller stops the process; a start that fails stops it here."""
    evict()
    t0 = time.monotonic()
    d = subprocess.Popen([os.path.join(build, "bin", "loaderd"), "--config", cfg],
                         stdout=log, stderr=subprocess.STDOUT)
    out = {}
    try:
        while loaderctl(build, sock, ["status"], timeout=60).returncode != 0:
            if d.poll() is not None:
                raise RuntimeError("loaderd exited %d (log %s)" % (d.returncode, log.name))
            time.sleep(0.05)
        out["socket_s"] = time.monotonic() - t0
        _, token = consume(build, sock, "big", 1)
        out["first_s"] = time.monotonic() - t0
    except BaseException:
        d.terminate()
        d.wait(120)
        log.close()
        raise
    return d, out, token


def measure_loaderd(build, prefix, n, tokens, work):
    sock = os.path.join(work, "s.sock")
    small = os.path.join(work, "small.bin")
    with open(small, "wb") as f:
        f.write(os.urandom(64 * 4096))
    cfg = os.path.join(work, "scale.ini")
    write_config(cfg, sock, prefix, small)
    log = open(os.path.join(work, "loaderd.log"), "w")
    d, out, token = start_to_first_batch(build, cfg, sock, log)
    try:
        fields = token.split(":")  # ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET
        windows = int(fields[4])
        out["resume5_s"], _ = consume(build, sock, "big", 1, ":".join(fields[:5] + ["5", "0"]))
        b = Streamer(sock)
        b.start()
        while len(b.times) < 50 and b.error is None and b.is_alive():
            time.sleep(0.01)
        start = time.monotonic()
        try:
            consume(build, sock, "big", 4, ":".join(fields[:5] + ["7", str(windows - 2 * BATCH)]))
        except RuntimeError as e:  # a daemon that stalls past loaderctl's patience: still a figure
            out["note"] = "crossing into epoch 8: %s" % e
        end = time.monotonic()
        b.stop.set()
        b.join(120)
        if b.error:
            raise RuntimeError("client of small: %s" % b.error)
        gaps = [y - x for x, y in zip(b.times, b.times[1:]) if y >= start and x <= end]
        out["boundary_ms"] = 1e3 * max(gaps) if gaps else float("nan")
        out["rss_mb"] = vm_hwm_mb(d.pid)
    finally:
        d.terminate()
        d.wait(120)
        log.close()
    return out


EVICT = []  # --evict: the dataset prefix whose pages each start finds out of the page cache


def evict():
    """The dataset's pages dropped from the page cache (posix_fadvise
    DONTNEED on its clean pages), so that the next start reads the .idx
    from disk, as after a reboot."""
    for prefix in EVICT:
        for ext in (".idx", ".bin"):
            fd = os.open(prefix + ext, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def start_once(build, cfg, sock, log_path):
    """One start of the daemon of cfg: socket up, first batch of `big`,
    peak RSS; then stopped. Its log's text too."""
    log = open(log_path, "w")
    d, out, _ = start_to_first_batch(build, cfg, sock, log)
    try:
        out["rss_mb"] = vm_hwm_mb(d.pid)
    finally:
        d.terminate()
        d.wait(120)
        log.close()
    with open(log_path) as f:
        return out, f.read()


def measure_cache(build, prefix, work):
    """The index cache (cache_dir): a first start that checks the index
    and writes the cache (write_*), a second start that reads it (warm_*:
    the start as every later one, or a resume, sees it), and
    `--check-config` from the cache (check_warm_s); the cache's size."""
    sock = os.path.join(work, "k.sock")
    small = os.path.join(work, "small.bin")
    cache = os.path.join(work, "cache")
    cfg = os.path.join(work, "cached.ini")
    write_config(cfg, sock, prefix, small, cache)
    out = {}
    first, log = start_once(build, cfg, sock, os.path.join(work, "write.log"))
    if "the index cache is written" not in log:
        raise RuntimeError("the first start wrote no index cache: %s" % log[-600:])
    out.update({"write_" + k: v for k, v in first.items()})
    warm, log = start_once(build, cfg, sock, os.path.join(work, "warm.log"))
    if "checked before" not in log:
        raise RuntimeError("the second start did not read the index cache: %s" % log[-600:])
    out.update({"warm_" + k: v for k, v in warm.items()})
    evict()
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(build, "bin", "loaderd"), "--config", cfg, "--check-config"],
                       capture_output=True, text=True, timeout=600)
    out["check_warm_s"] = time.monotonic() - t0
    if r.returncode != 0 or "checked before" not in r.stderr:
        raise RuntimeError("loaderd --check-config from the cache: %s" % r.stderr[-400:])
    out["cache_mb"] = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache)) / 2**20
    return out


def measure_reload(build, prefix, work, cache_dir=""):
    """A daemon started with `small` alone, a client of it releasing each
    batch at once, then `loaderctl reload` adding `big`: how long the
    reload took to answer, and the client's longest wait between two
    batches meanwhile (what the daemon's loop spent at a stretch)."""
    sock = os.path.join(work, "r.sock")
    small = os.path.join(work, "small.bin")
    cfg = os.path.join(work, "reload.ini")
    with open(cfg, "w") as f:
        f.write("[daemon]\nsocket = %s\nworkers = 2\nshm_bytes = 64G\nlog_level = info\n"
                "runtime_index_bytes = 1G\nstaging_slot_bytes = 1M\ncache_dir = %s\n\n"
                % (sock, cache_dir))
        f.write("[pipeline.small]\nsource = raw:%s\nrecord_bytes = 64\nbatch_size = 8\n" % small)
    log = open(os.path.join(work, "reload.log"), "w")
    d = subprocess.Popen([os.path.join(build, "bin", "loaderd"), "--config", cfg],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        while loaderctl(build, sock, ["status"], timeout=60).returncode != 0:
            if d.poll() is not None:
                raise RuntimeError("loaderd exited %d (log %s)" % (d.returncode, log.name))
            time.sleep(0.05)
        b = Streamer(sock)
        b.start()
        while len(b.times) < 50 and b.error is None and b.is_alive():
            time.sleep(0.01)
        write_config(cfg, sock, prefix, small, cache_dir)  # the same [daemon], and `big`
        text = open(cfg).read().replace("log_level = info\n", "log_level = info\nruntime_index_bytes = 1G\nstaging_slot_bytes = 1M\n")
        with open(cfg, "w") as f:
            f.write(text)
        evict()
        start = time.monotonic()
        r = loaderctl(build, sock, ["reload"])
        end = time.monotonic()
        if r.returncode != 0:
            raise RuntimeError("reload: %s" % (r.stderr.strip()[-400:]))
        n = len(b.times)
        while len(b.times) < n + 20 and b.error is None and b.is_alive():
            time.sleep(0.01)
        b.stop.set()
        b.join(120)
        if b.error:
            raise RuntimeError("client of small: %s" % b.error)
        gaps = [y - x for x, y in zip(b.times, b.times[1:]) if y >= start and x <= end]
        return {"reload_s": end - start, "reload_wait_ms": 1e3 * max(gaps) if gaps else float("nan")}
    finally:
        d.terminate()
        d.wait(120)
        log.close()


def measure_check(build, prefix, work):
    """`loaderd --check-config` over the corpus: its time and the
    process's own peak RSS."""
    sock = os.path.join(work, "c.sock")
    small = os.path.join(work, "small.bin")
    cfg = os.path.join(work, "check.ini")
    write_config(cfg, sock, prefix, small)
    evict()
    t0 = time.monotonic()
    with open(os.path.join(work, "check.log"), "w+") as log:
        p = subprocess.Popen([os.path.join(build, "bin", "loaderd"), "--config", cfg, "--check-config"],
                             stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
        took = time.monotonic() - t0
        log.seek(0)
        text = log.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("loaderd --check-config: %s" % text.strip()[-400:])
    return {"check_s": took, "check_rss_mb": usage.ru_maxrss / 1024.0}


def make_venv(venv):
    """numpy, torch (CPU) and megatron-core in venv; its python, or None
    and why."""
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            return None, "python3 -m venv: " + r.stderr.strip()[-300:]
    probe = subprocess.run([py, "-c", "import numpy, torch, megatron.core"], capture_output=True)
    if probe.returncode == 0:
        return py, None
    # torch's CPU build where PyTorch's index is reachable, else PyPI's
    subprocess.run([py, "-m", "pip", "install", "-q", "numpy", "torch", "--index-url",
                    "https://download.pytorch.org/whl/cpu"], capture_output=True, text=True)
    r = subprocess.run([py, "-m", "pip", "install", "-q", "numpy", "torch", "megatron-core"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "pip install numpy torch megatron-core: %s" % r.stderr.strip()[-300:]
    return py, None


def measure_peer(py, prefix, work):
    cache = os.path.join(work, "mcore-cache")
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.monotonic()
    with open(os.path.join(work, "peer.out"), "w+") as out:
        p = subprocess.Popen([py, os.path.join(HERE, "megatron_peer.py"), "--prefix", prefix,
                              "--seq-len", str(SEQ), "--batch-size", str(BATCH), "--workers", "1",
                              "--cache", cache, "--check"], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)  # this child's own peak RSS
        took = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err = out.read()
    if p.returncode != 0:
        return {"error": "megatron_peer.py --check exited %d: %s" % (p.returncode, err.strip()[-300:])}
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(cache) for f in fs)
    built = re.search(r"built in ([0-9.]+) s", err)  # the build itself, without torch's import
    return {"build_s": float(built.group(1)) if built else took, "process_s": took,
            "rss_mb": usage.ru_maxrss / 1024.0, "cache_mb": size / 2**20}


def exponent(rows, key, docs):
    pts = [(n, r[key]) for n, r in zip(docs, rows) if isinstance(r.get(key), float) and r[key] > 0]
    if len(pts) < 2:
        return None
    (n0, v0), (n1, v1) = pts[0], pts[-1]
    return math.log(v1 / v0) / math.log(n1 / n0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--docs", default="1e6,1e7,1e8")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "loaderd-scale"))
    ap.add_argument("--venv", default=None, help="megatron-core's venv (default DATA_DIR/venv)")
    ap.add_argument("--no-peer", action="store_true", help="measure loaderd only")
    ap.add_argument("--project", default="1e9", help="document counts to project to ('' for none)")
    ap.add_argument("--out", help="also write the report here")
    ap.add_argument("--reload", action="store_true",
                    help="also add `big` by a reload to a running daemon (reload_s, reload_wait_ms)")
    ap.add_argument("--files", default="", help="image trees of these file counts as well "
                    "(bench/scale_images.py), e.g. 1e5,1e6,1e7")
    ap.add_argument("--no-cache", action="store_true",
                    help="leave out the starts with the index cache (cache_dir)")
    ap.add_argument("--evict", action="store_true",
                    help="drop the dataset's pages from the page cache before every start and "
                    "check (posix_fadvise): each reads the .idx from disk")
    args = ap.parse_args()
    docs = [int(float(x)) for x in args.docs.split(",") if x]
    if args.files:
        files = ",".join(str(int(float(x))) for x in args.files.split(","))
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale_images.py"),
               "--build", args.build, "--sizes", files, "--data-dir", os.path.join(args.data_dir, "images")]
        r = subprocess.run(cmd)
        if r.returncode != 0:
            sys.exit("scale_bench: %s exited %d" % (" ".join(cmd), r.returncode))
    if not docs:
        return
    os.makedirs(args.data_dir, exist_ok=True)
    py, why = (None, "--no-peer") if args.no_peer else make_venv(args.venv or os.path.join(args.data_dir, "venv"))
    lines = ["scale_bench %s, %s, %d cores, build %s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        platform.platform(), os.cpu_count(), os.path.abspath(args.build))]
    if py is None:
        lines.append("megatron-core: skipped (%s)" % why)
    ours, peers = [], []
    for n in docs:
        prefix = os.path.join(args.data_dir, "docs%d" % n)
        tokens = make_data(prefix, n)
        EVICT[:] = [prefix] if args.evict else []
        with tempfile.TemporaryDirectory(dir=args.data_dir) as work:
            ours.append(measure_loaderd(args.build, prefix, n, tokens, work))
            ours[-1].update(measure_check(args.build, prefix, work))
            if not args.no_cache:
                ours[-1].update(measure_cache(args.build, prefix, work))
            if args.reload:
                ours[-1].update(measure_reload(args.build, prefix, work))
                if not args.no_cache:  # measure_cache left the cache written
                    ours[-1].update({"cached_" + k: v for k, v in measure_reload(
                        args.build, prefix, work, os.path.join(work, "cache")).items()})
            peers.append(measure_peer(py, prefix, work) if py else {})
        print("N=%d done: %s %s" % (n, ours[-1], peers[-1]), file=sys.stderr)
    lines.append("")
    lines.append("| documents | loaderd socket_s | first_s | rss_mb | resume5_s | boundary_ms |"
                 " check_s | check_rss_mb | megatron-core build_s | rss_mb | cache_mb |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, o, p in zip(docs, ours, peers):
        peer = ("| %.1f | %.0f | %.0f |" % (p["build_s"], p["rss_mb"], p["cache_mb"]) if "build_s" in p
                else "| %s | | |" % (p.get("error", "skipped")[:120]))
        lines.append("| %.0e | %.2f | %.2f | %.0f | %.2f | %.1f%s | %.2f | %.0f %s" % (
            n, o["socket_s"], o["first_s"], o["rss_mb"], o["resume5_s"], o["boundary_ms"],
            " (%s)" % o["note"][-160:] if "note" in o else "", o["check_s"], o["check_rss_mb"], peer))
    if not args.no_cache:
        lines.append("")
        lines.append("with cache_dir (the index cache): the first start checks the index and "
                     "writes the cache, the second reads it")
        lines.append("")
        lines.append("| documents | write socket_s | write first_s | write rss_mb | warm socket_s |"
                     " warm first_s | warm rss_mb | check_warm_s | cache_mb |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for n, o in zip(docs, ours):
            lines.append("| %.0e | %.2f | %.2f | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f |" % (
                n, o["write_socket_s"], o["write_first_s"], o["write_rss_mb"], o["warm_socket_s"],
                o["warm_first_s"], o["warm_rss_mb"], o["check_warm_s"], o["cache_mb"]))
    if args.reload:
        lines.append("")
        lines.append("added by a reload: " + ", ".join(
            "%.0e: answered in %.2f s, a client of small waited at most %.1f ms"
            % (n, o["reload_s"], o["reload_wait_ms"]) for n, o in zip(docs, ours)))
        if not args.no_cache:
            lines.append("added by a reload, from the index cache: " + ", ".join(
                "%.0e: answered in %.2f s, a client of small waited at most %.1f ms"
                % (n, o["cached_reload_s"], o["cached_reload_wait_ms"]) for n, o in zip(docs, ours)))
    lines.append("")
    exps = {}
    keys = ["socket_s", "first_s", "rss_mb", "resume5_s", "boundary_ms", "check_s", "check_rss_mb"]
    if not args.no_cache:
        keys += ["write_first_s", "warm_socket_s", "warm_first_s", "warm_rss_mb", "check_warm_s",
                 "cache_mb"]
    for key in keys:
        exps["loaderd " + key] = (exponent(ours, key, docs), key, ours)
    for key in ("build_s", "rss_mb", "cache_mb"):
        exps["megatron-core " + key] = (exponent(peers, key, docs), key, peers)
    lines.append("growth exponents (figure ~ N^k, from %.0e to %.0e documents): %s" % (
        docs[0], docs[-1], ", ".join("%s %.2f" % (k, e) for k, (e, _, _) in exps.items() if e is not None)))
    for n in [int(float(x)) for x in args.project.split(",") if x]:
        proj = []
        for name, (e, key, rows) in exps.items():
            if e is None:
                continue
            proj.append("%s %.3g" % (name, rows[-1][key] * (n / docs[-1]) ** e))
        lines.append("projected to %.0e documents (.idx %.1f GB): %s" % (n, (34 + 20 * n) / 1e9,
                                                                        ", ".join(proj)))
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
