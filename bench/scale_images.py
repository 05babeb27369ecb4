#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scale_images: how an imagefolder pipeline's start grows with the number
of files, against torchvision's ImageFolder on the same tree, in one run.

  tree     ROOT/cNNNNN/iNNNNNNN.jpg, --classes classes (default 1000) and
           N/classes files in each, for each N of --sizes (default
           100000,1000000). Every file is a hard link to one tiny JPEG of
           its class (kept beside the tree), so that the tree costs inodes
           and directory entries but no data blocks and the first batch
           decodes real images; the directories' times are set 10 s into
           the past, so that the listing is cacheable at once. The tree
           lives in --data-dir (default /tmp/loaderd-scale-images, on disk:
           tmpfs inodes cost memory), reused when its stamp matches, removed
           at the end unless --keep.
  loaderd  one daemon (workers = 1), one imagefolder pipeline (batch_size
           64, `resize(16) center_crop(16)`), started three times on a warm
           page cache (`du -s ROOT` first, which stats every entry as a scan
           does): scanned by one thread without a cache (scan_threads = 1,
           cache_dir empty: nothing cached or written), scanned by
           --threads threads (default: loaderd's, 8) with a cold cache (no
           listing cached: the scan writes it), then a warm cache (the
           listing read back and checked). For each: seconds from
           exec to the socket accepting, to `loaderctl status` saying
           running (the listing done, the arena filled), to the first
           batch of `loaderctl consume --batches 1`; the daemon's peak RSS
           (VmHWM); the arena's index bytes a file (the daemon's log line).
  peer     /usr/bin/python3 constructs torchvision.datasets.ImageFolder(ROOT)
           in its own process: the construction's seconds, and its peak RSS
           less the RSS after importing torchvision.

Usage: scale_images.py [--build BUILD] [--sizes 100000,1000000]
       [--classes 1000] [--data-dir DIR] [--keep] [--no-torch]
It prints a markdown table (one row per size and run) and the machine.
"""
import argparse
import datetime
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def tiny_jpeg(path, seed):
    """A 16x16 baseline JPEG (PIL when present, else mkjpeg)."""
    try:
        from PIL import Image
        img = Image.new("RGB", (16, 16), ((seed * 37) % 256, (seed * 91) % 256, 128))
        img.save(path, "JPEG", quality=90)
        return
    except ImportError:
        pass
    raise SystemExit("scale_images: PIL is needed to write the tiny JPEGs")


def make_tree(data_dir, n_files, n_classes):
    root = os.path.join(data_dir, "tree-%d" % n_files)
    src = os.path.join(data_dir, "src-%d" % n_files)
    stamp = os.path.join(data_dir, "stamp-%d" % n_files)
    want = "%d %d\n" % (n_files, n_classes)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return root
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    os.makedirs(root)
    per = n_files // n_classes
    extra = n_files - per * n_classes
    t0 = time.monotonic()
    past = time.time() - 10
    for c in range(n_classes):
        sp = os.path.join(src, "c%05d.jpg" % c)
        tiny_jpeg(sp, c)
        d = os.path.join(root, "c%05d" % c)
        os.mkdir(d)
        for i in range(per + (1 if c < extra else 0)):
            os.link(sp, os.path.join(d, "i%08d.jpg" % i))
        os.utime(d, (past, past))
    os.utime(root, (past, past))
    open(stamp, "w").write(want)
    print("# tree of %d files in %d classes made in %.1f s" % (n_files, n_classes,
                                                             time.monotonic() - t0), flush=True)
    return root


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def wait_until(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.005)
    raise SystemExit("scale_images: timed out waiting for " + what)


def run_loaderd(build, root, work, cache_dir, threads, label, plain=False):
    sock = os.path.join(work, "s.sock")
    conf = os.path.join(work, "loaderd.ini")
    with open(conf, "w") as f:
        keys = "" if plain else "cache_dir = %s\n" % cache_dir
        if threads and not plain:
            keys += "scan_threads = %d\n" % threads
        f.write("[daemon]\nsocket = %s\nworkers = 1\nlog_level = info\nshm_bytes = 8G\n%s\n"
                "[pipeline.train]\nsource = imagefolder:%s\nbatch_size = 64\n"
                "transform = resize(16) center_crop(16)\n" % (sock, keys, root))
    log_path = os.path.join(work, "loaderd-%s.log" % label)
    ctl = os.path.join(build, "bin", "loaderctl")
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([os.path.join(build, "bin", "loaderd"), "--config", conf],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        def up():
            if proc.poll() is not None:
                raise SystemExit("loaderd exited %d: see %s" % (proc.returncode, log_path))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(sock)
                return True
            except OSError:
                return False
            finally:
                s.close()
        wait_until(up, 600, "the socket")
        t_sock = time.monotonic() - t0

        def running():
            r = subprocess.run([ctl, "--socket", sock, "status"], capture_output=True, text=True)
            return r.returncode == 0 and "state: starting" not in r.stdout
        wait_until(running, 600, "the start to finish")
        t_run = time.monotonic() - t0
        r = subprocess.run([ctl, "--socket", sock, "consume", "--pipeline", "train",
                            "--batches", "1", "--quiet"], capture_output=True, text=True,
                           timeout=600)
        t_batch = time.monotonic() - t0
        if r.returncode != 0:
            raise SystemExit("loaderctl consume exited %d: %s" % (r.returncode, r.stderr))
        hwm = vm_hwm_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    text = open(log_path, errors="replace").read()
    m = re.search(r"index of ([0-9]+) bytes in the arena", text)
    index_bytes = int(m.group(1)) if m else None
    return {"sock": t_sock, "run": t_run, "batch": t_batch, "hwm_kib": hwm,
            "index_bytes": index_bytes, "log": text}


def run_torch(root):
    code = (
        "import resource,time,sys\n"
        "from torchvision.datasets import ImageFolder\n"
        "def rss():\n"
        "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])\n"
        "base=rss()\n"
        "t=time.monotonic(); ds=ImageFolder(sys.argv[1]); dt=time.monotonic()-t\n"
        "hwm=int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])\n"
        "print(dt, hwm-base, len(ds))\n")
    r = subprocess.run(["/usr/bin/python3", "-c", code, root], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    dt, kib, n = r.stdout.split()
    return float(dt), int(kib), int(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build-test"))
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--data-dir", default="/tmp/loaderd-scale-images")
    ap.add_argument("--threads", type=int, default=0, help="scan_threads of the parallel runs "
                    "(0: loaderd's default)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.makedirs(a.data_dir, exist_ok=True)
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        root = make_tree(a.data_dir, n, a.classes)
        # a warm page cache and dentry cache: du stats every entry, as a scan does
        subprocess.run(["du", "-s", root], capture_output=True)
        work = tempfile.mkdtemp(prefix="scale-images-")
        cache = os.path.join(work, "cache")
        os.mkdir(cache)
        for label, threads in (("1 thread, no cache", 1), ("cold cache", a.threads),
                               ("warm cache", a.threads)):
            cdir = cache if label != "1 thread, no cache" else ""  # "": not cached
            if cdir:
                os.makedirs(cdir, exist_ok=True)
            r = run_loaderd(build, root, work, cdir, threads, label.replace(" ", "-"))
            per = "%.1f" % (r["index_bytes"] / n) if r["index_bytes"] else "?"
            rows.append("| %d | loaderd, %s | %.2f | %.2f | %.2f | %.0f | %s |"
                        % (n, label, r["sock"], r["run"], r["batch"], r["hwm_kib"] / 1024, per))
            print(rows[-1], flush=True)
        if not a.no_torch:
            t = run_torch(root)
            if t:
                rows.append("| %d | torchvision ImageFolder(root) | | %.2f | | %.0f (over import) | |"
                            % (n, t[0], t[1] / 1024))
            else:
                rows.append("| %d | torchvision ImageFolder(root) | error | | | | |" % n)
            print(rows[-1], flush=True)
        shutil.rmtree(work, ignore_errors=True)
        if not a.keep:
            shutil.rmtree(a.data_dir, ignore_errors=True)
            os.makedirs(a.data_dir, exist_ok=True)
    print()
    print("| files | run | socket up s | listed (running) s | first batch s | peak RSS MiB "
          "| arena index bytes/file |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    print()
    print("machine: %s, %d cores; %s" % (os.uname().machine, os.cpu_count(),
                                        datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
