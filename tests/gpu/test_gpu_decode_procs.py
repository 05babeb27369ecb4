#!/usr/bin/env python3
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
    (images_fallback in status), and the other decoder goes on.
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


def decoders(pid):
    """The pids of pid's loaderd-decoder children."""
    out = []
    r = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and f[1].startswith("loaderd-decod"):
            out.append(int(f[0]))
    return out


def run(env, tag, pipelines, helpers):
    cfg = gpu_harness.gpu_config(env, tag, pipelines, workers=2, device_slots=4, staging_slots=8,
                                 gpu_decode_threads=3, gpu_decode_helpers=helpers)
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
                          "transform": TRANSFORM, "decode": "gpu"}}
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

    # (b) one decoder killed while a client reads
    st0 = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    fb0 = {x["pipeline"]: x for x in st0["decode"]}["jpeg"]["images_fallback"]
    x = loaderd.Loader("jpeg", socket=d.socket, device=0)
    seen = {e: [] for e in range(EPOCHS)}
    killed = None
    for epoch in range(EPOCHS):
        for k, b in enumerate(x):
            seen[epoch] += list(b.sample_indices())
            torch.cuda.synchronize()
            if killed is None and k == 1:
                killed = kids[0]
                os.kill(killed, signal.SIGKILL)
                time.sleep(0.2)
    x.close()
    for e in range(EPOCHS):
        check(sorted(seen[e]) == list(range(n)), "epoch %d after a decoder was killed: %d samples, "
              "not each of %d once" % (e, len(seen[e]), n))
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    fb = {y["pipeline"]: y for y in st["decode"]}["jpeg"]["images_fallback"]
    with open(d.log_path, errors="replace") as f:
        log = f.read()
    check("JPEG decoder process %d ended" % killed in log, "the log does not name the killed decoder %d" % killed)
    check(fb > fb0, "images_fallback %d -> %d: the killed decoder's images were not decoded on the CPU"
          % (fb0, fb))
    check(decoders(d.proc.pid) == [kids[1]], "after the kill, the daemon's decoders are %s, not [%d]"
          % (decoders(d.proc.pid), kids[1]))
    print("decoder %d killed: every sample delivered, %d images decoded on the CPU instead"
          % (killed, fb - fb0))
    d.stop()
    deadline = time.monotonic() + 10
    while os.path.exists("/proc/%d" % kids[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    check(not os.path.exists("/proc/%d" % kids[1]), "decoder %d outlived the daemon" % kids[1])


if __name__ == "__main__":
    harness.run_test("test_gpu_decode_procs", body)
