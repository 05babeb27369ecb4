#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU decoding from decoder processes (gpu_decode_helpers = processes).

(a) A decode = gpu pipeline of good baseline JPEGs, gpu_decode_threads = 3:
    with processes, the daemon starts 2 loaderd-decoder processes (its
    children) at the first decoding client, and two epochs to GPU 0
    (`loaderctl consume --dump`) are byte-identical to those of a daemon
    whose helpers are threads: which process decodes an image changes no
    byte of it.
(b) One decoder process killed (SIGKILL) while a client reads: the
    client still gets every sample of both epochs once each, the log
    names the process, the images it held are decoded on the CPU
    (images_fallback in status), the other decoder goes on, and another
    process is started in the killed one's place (`decoders 2` in status
    again, a new pid among the daemon's children).
(c) That new process stopped (SIGSTOP: alive, silent) while a client
    reads: once worker_timeout_ms passes without its answer it is killed
    and logged ("no answer in time"), which shows it had been given work;
    every sample is still delivered once, and it too is replaced.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import client_harness as ch  # noqa: E402

CLASSES, PER_CLASS, BATCH, SEED, EPOCHS = 3, 40, 8, 17, 2
TRANSFORM = "random_resized_crop(96) hflip(0.5)"
TIMEOUT_MS = 3000  # worker_timeout_ms: how long a silent decoder holds its lane


def decoders(pid):
    """The pids of pid's loaderd-decoder children."""
    out = []
    r = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and f[1].startswith("loaderd-decod"):
            out.append(int(f[0]))
    return out


def log(d):
    with open(d.log_path, errors="replace") as f:
        return f.read()


def fallback(d):
    """images_fallback of pipeline jpeg, once no client is attached."""
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    return {x["pipeline"]: x for x in st["decode"] if x["gpu"] == 0}["jpeg"]["images_fallback"]


def read_epochs(d, loaderd, torch, n, fault, what):
    """EPOCHS epochs to GPU 0 from a Loader, fault() called after its
    second batch; each epoch must hold every sample once."""
    x = loaderd.Loader("jpeg", socket=d.socket, device=0)
    seen = {e: [] for e in range(EPOCHS)}
    done = False
    for epoch in range(EPOCHS):
        for k, b in enumerate(x):
            seen[epoch] += list(b.sample_indices())
            torch.cuda.synchronize()
            if not done and k == 1:
                fault()
                done = True
                time.sleep(0.2)
    x.close()
    for e in range(EPOCHS):
        check(sorted(seen[e]) == list(range(n)), "epoch %d after %s: %d samples, not each of %d once"
              % (e, what, len(seen[e]), n))


def replaced(d, kids, gone):
    """Waits for a decoder process in place of `gone` (status back at 2
    decoders, the log saying so); its pid."""
    d.wait_status(lambda s: s["gpus"][0]["decoders"] == 2, 20, "2 decoder processes again")
    now = [k for k in decoders(d.proc.pid) if k not in kids]
    rest = [k for k in kids if k != gone]
    check(len(now) == 1 and sorted(decoders(d.proc.pid)) == sorted(rest + now),
          "after decoder %d ended, the daemon's decoders are %s: not %s and one new"
          % (gone, decoders(d.proc.pid), rest))
    check("JPEG decoder process %d started in place" % now[0] in log(d),
          "the log does not say decoder %d was started in place of %d" % (now[0], gone))
    return now[0]


def run(env, tag, pipelines, helpers):
    cfg = gpu_harness.gpu_config(env, tag, pipelines, workers=2, device_slots=4, staging_slots=8,
                                 gpu_decode_threads=3, gpu_decode_helpers=helpers,
                                 worker_timeout_ms=TIMEOUT_MS)
    d = gpu_harness.start_daemon(env, cfg)
    gpu_harness.check_delivery(d, "register")
    path = env.path("%s.dump" % tag)
    gpu_harness.consume(env, d.socket, "jpeg", path, device="0", epochs=EPOCHS)
    with open(path) as f:
        return d, f.read()


def body(env):
    gpu_harness.require_gpus()
    if not os.access(os.path.join(harness.build_dir(), "bin", "loaderd-decoder"), os.X_OK):
        raise harness.TestSkip("loaderd-decoder is not built here (no nvjpeg.h)")
    torch = gpu_harness.torch_cuda()
    loaderd = ch.import_loaderd()
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 700, 140, 200)
    pipelines = {"jpeg": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
                          "transform": TRANSFORM, "decode": "gpu", "max_decode_ms": 2000}}
    n = CLASSES * PER_CLASS

    # (a)
    d, threads = run(env, "threads", pipelines, "threads")
    check(decoders(d.proc.pid) == [], "helpers = threads, yet the daemon has decoder processes")
    d.stop()
    d, procs = run(env, "procs", pipelines, "processes")
    kids = decoders(d.proc.pid)
    check(len(kids) == 2, "gpu_decode_threads = 3 with processes: %d decoder processes, not 2" % len(kids))
    gpu_harness.check_same_dumps([("helpers = threads", threads), ("helpers = processes", procs)])
    gpu_harness.check_epochs(harness.parse_dump_lines(procs.splitlines(), "procs"), EPOCHS, n,
                             "helpers = processes")
    print("2 decoder processes (%s): two epochs byte-identical to helper threads" % kids)

    # (b) one decoder killed while a client reads, (c) its successor stopped
    fb0 = fallback(d)
    killed = kids[0]
    read_epochs(d, loaderd, torch, n, lambda: os.kill(killed, signal.SIGKILL), "a decoder was killed")
    check("JPEG decoder process %d ended" % killed in log(d), "the log does not name the killed decoder %d" % killed)
    fb = fallback(d)
    check(fb > fb0, "images_fallback %d -> %d: the killed decoder's images were not decoded on the CPU"
          % (fb0, fb))
    now = replaced(d, kids, killed)
    print("decoder %d killed: every sample delivered, %d images decoded on the CPU instead, "
          "decoder %d started in its place" % (killed, fb - fb0, now))

    t0 = time.monotonic()
    read_epochs(d, loaderd, torch, n, lambda: os.kill(now, signal.SIGSTOP), "a decoder was stopped")
    took = time.monotonic() - t0
    check("JPEG decoder process %d ended (no answer in time)" % now in log(d),
          "decoder %d, stopped, was not ended for its silence: it was given no work\n%s" % (now, log(d)))
    check(fallback(d) > fb, "images_fallback stayed %d: the stopped decoder's images were not decoded "
          "on the CPU" % fb)
    kids = [k for k in kids if k != killed] + [now]
    later = replaced(d, kids, now)
    print("decoder %d stopped: ended after %.1f s (worker_timeout_ms %d), every sample delivered, "
          "decoder %d started in its place" % (now, took, TIMEOUT_MS, later))
    kids = [k for k in kids if k != now] + [later]
    d.stop()
    deadline = time.monotonic() + 10
    while any(os.path.exists("/proc/%d" % k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for k in kids:
        check(not os.path.exists("/proc/%d" % k), "decoder %d outlived the daemon" % k)


if __name__ == "__main__":
    harness.run_test("test_gpu_decode_procs", body)
