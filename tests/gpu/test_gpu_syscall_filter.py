#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The daemon's CUDA work under the installed unit's system-call filter.

tests/integration/test_syscall_filter.py runs the daemon and its workers
under the unit's SystemCallFilter=, SystemCallErrorNumber= and
RestrictAddressFamilies= (seccomp_exec.py) with host clients only; the
CUDA driver's calls (ioctls on /dev/nvidia*, mmap, the IPC handles, the
decoder processes' contexts) are made only where there is a GPU. Here the
same filter, expanded from the installed unit, holds the daemon, its
workers and its decoder processes while:

(a) a raw pipeline is delivered to GPU 0 through the staging slots
    (pin = register: the slots are page-locked under the filter) and an
    image pipeline is decoded on the GPU's engines by decoder processes
    (decode = gpu, gpu_decode_helpers = processes), each consumed for two
    epochs by `loaderctl consume --device 0` (outside the filter, as a
    training process is); every epoch holds every sample once, and the
    dumps are byte-identical to the same consumers of a daemon without
    the filter;
(b) the same under a private MPS control daemon, where
    nvidia-cuda-mps-control is on PATH (the daemon's contexts are then MPS
    clients);

and in each case: status reports device delivery, images went to the
engines, no worker or decoder restarted, the log has no sign of a refused
call, and the daemon exits 0 on SIGTERM.

The filter's groups come from systemd-analyze or from the listing
$LOADERD_SYSCALL_GROUPS names (scripts/gpu-check.sh --fetch writes it where
systemd is, for GPU machines without it); the filter is loaded by the
libseccomp binding or pyseccomp. Skipped (77) without a GPU, without
loaderd-decoder, without the groups or without a binding.
"""

import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
import installed  # noqa: E402
import test_syscall_filter as sf  # noqa: E402
from harness import TestSkip, check  # noqa: E402
from test_gpu_mps import Mps  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SECCOMP_EXEC = os.path.join(HERE, "..", "integration", "seccomp_exec.py")
CLASSES, PER_CLASS, BATCH, SEED, EPOCHS = 3, 16, 8, 29, 2
RAW_RECORDS, RAW_BYTES = 96, 3072


def make_data(env):
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 900, 120, 160)
    raw = env.make_raw("data.bin", RAW_RECORDS, RAW_BYTES)
    return {"jpeg": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
                     "transform": "random_resized_crop(96) hflip(0.5)", "decode": "gpu"},
            "raw": {"source": "raw:" + raw, "record_bytes": RAW_BYTES, "batch_size": 16, "seed": SEED}}


def serve(env, tag, pipelines, wrapper, overrides, mps=False):
    """A daemon (under wrapper) and two epochs of each pipeline to GPU 0:
    ({pipeline: dump text}, the daemon, still running); status must say
    whether the GPU is under MPS."""
    cfg = gpu_harness.gpu_config(env, tag, pipelines, workers=2, device_slots=4, staging_slots=8,
                                 gpu_decode_threads=2, gpu_decode_helpers="processes")
    d = gpu_harness.EnvDaemon(env, cfg, overrides)
    d.wrapper = list(wrapper)
    env.daemons.append(d)
    d.start()
    d.wait_ready(90)
    gpu_harness.check_delivery(d, "register")
    dumps = {}
    for name, n in (("jpeg", CLASSES * PER_CLASS), ("raw", RAW_RECORDS)):
        path = env.path("%s-%s.dump" % (tag, name))
        _, rows = gpu_harness.consume(env, d.socket, name, path, device="0", epochs=EPOCHS,
                                      overrides=overrides)
        gpu_harness.check_epochs(rows, EPOCHS, n, "%s: %s" % (tag, name))
        with open(path) as f:
            dumps[name] = f.read()
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    restarts = [w["restarts"] for w in st["workers"]]
    check(restarts and not any(restarts), "%s: workers restarted %s\n%s" % (tag, restarts, d.log()))
    jpeg = {x["pipeline"]: x for x in st["decode"] if x["gpu"] == 0}["jpeg"]
    check(jpeg["images_gpu"] > 0, "%s: no image went to the GPU's engines: %s" % (tag, jpeg))
    check(st["gpus"][0]["decoders"] >= 1, "%s: no decoder process: %s" % (tag, st["gpus"][0]))
    check(st["gpus"][0]["mps"] is mps, "%s: status says mps %s for GPU 0" % (tag, st["gpus"][0]["mps"]))
    return dumps, d


def stop(d, tag):
    os.kill(d.main_pid(), signal.SIGTERM)
    rc = d.proc.wait(timeout=60)
    log = d.log()
    check(rc == 0, "%s: loaderd exited %d after SIGTERM\n%s" % (tag, rc, log))
    for sign in sf.REFUSED + ["started in place"]:
        check(sign not in log, "%s: the log says %r:\n%s" % (tag, sign, log))


def body(env):
    gpu_harness.require_gpus()
    if not os.access(os.path.join(harness.build_dir(), "bin", "loaderd-decoder"), os.X_OK):
        raise TestSkip("loaderd-decoder is not built here (no nvjpeg.h)")
    groups = sf.group_listing()
    if groups is None:
        raise TestSkip("neither systemd-analyze nor $%s for the filter's groups" % sf.GROUPS_ENV)
    if not sf.have_binding():
        raise TestSkip("neither the libseccomp binding (python3-seccomp) nor pyseccomp")
    os.environ["ASAN_OPTIONS"] = ":".join(x for x in [os.environ.get("ASAN_OPTIONS", ""),
                                                      "detect_leaks=0"] if x)
    unit = os.path.join(installed.install(env), installed.UNIT)
    words, calls = sf.unit_filter(unit, groups)
    errno_name = (sf.read_all(unit, "SystemCallErrorNumber") or ["EPERM"])[-1]
    family = (sf.read_all(unit, "RestrictAddressFamilies") or ["AF_UNIX"])[-1].split()
    check(len(family) == 1, "%s: RestrictAddressFamilies=%s: seccomp_exec.py takes one" % (unit, family))
    listed = env.path("syscalls.txt")
    with open(listed, "w") as f:
        f.write("\n".join(sorted(calls)) + "\n")
    wrapper = [sys.executable, SECCOMP_EXEC, listed, errno_name, family[0]]
    pipelines = make_data(env)

    plain, d = serve(env, "plain", pipelines, [], {})
    stop(d, "without the filter")
    # (a)
    filtered, d = serve(env, "filter", pipelines, wrapper, {})
    stop(d, "under the filter")
    for name in plain:
        gpu_harness.check_same_dumps([("%s without the filter" % name, plain[name]),
                                      ("%s under the filter" % name, filtered[name])])
    print("under the unit's filter (%s; %d calls): device delivery and decoder processes, "
          "two epochs of each pipeline byte-identical to the daemon without it" % (" ".join(words), len(calls)))
    # (b)
    if shutil.which("nvidia-cuda-mps-control") is None:
        print("nvidia-cuda-mps-control is not on PATH: not run under MPS")
        return
    mps = Mps()
    try:
        mps.start()
        under, d = serve(env, "mps", pipelines, wrapper, mps.env(), mps=True)
        stop(d, "under the filter and MPS")
    finally:
        mps.stop()
    for name in plain:
        gpu_harness.check_same_dumps([("%s without the filter" % name, plain[name]),
                                      ("%s under the filter and MPS" % name, under[name])])
    print("under the filter and MPS: the same, byte-identical")


if __name__ == "__main__":
    harness.run_test("test_gpu_syscall_filter", body)
