#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU delivery and GPU decoding under CUDA MPS.

Beside a training process, the daemon's GPU work shares the GPU with the
training kernels; without MPS the two processes take turns in time slices,
and GPU decoding slows several times (docs/config.md, "GPU decoding beside
training: MPS"). This test runs the daemon and its clients under a private
MPS control daemon (its pipe and log directories in a directory of its own,
quit at the end), as an operator would run them under the node's:

(a) without MPS: a decode = gpu pipeline and a raw pipeline, two epochs of
    each to GPU 0 with `loaderctl consume --dump` (every row's CRC, the
    batches copied back); status says `mps 0` for the GPU, and the log
    says once that decoding is not under MPS;
(b) under MPS, a new daemon and clients: status says `mps 1`, no such
    notice, and the dumps are byte-identical to (a)'s: sharing the GPU
    through MPS changes no byte of what is delivered;
(c) a client left outside MPS (its environment without the control
    daemon's pipe directory) attached to the daemon under MPS: it gets
    every batch, byte-identical again, or a clear error naming the GPU;
    what it got is printed.

Skipped (77) without a GPU, or without nvidia-cuda-mps-control on PATH.
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import TestSkip, check  # noqa: E402

CLASSES, PER_CLASS, BATCH, SEED, EPOCHS = 3, 16, 8, 21, 2
TRANSFORM = "random_resized_crop(96) hflip(0.5)"
RAW_RECORDS, RAW_BYTES = 96, 3072
MPS_NOTICE = "not under MPS"
MPS_ENV = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


class Mps:
    """A private MPS control daemon; env() names it to a process."""

    def __init__(self):
        # pipe paths must fit a Unix socket's name: a short directory in /tmp
        self.root = tempfile.mkdtemp(prefix="ldr-mps-")
        self.dirs = [os.path.join(self.root, d) for d in ("pipe", "log")]
        for d in self.dirs:
            os.mkdir(d)
        self.running = False

    def env(self):
        return dict(zip(MPS_ENV, self.dirs))

    def start(self):
        r = subprocess.run(["nvidia-cuda-mps-control", "-d"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30,
                           env=gpu_harness.proc_env(self.env()))
        check(r.returncode == 0, "nvidia-cuda-mps-control -d exited %d: %s"
              % (r.returncode, r.stderr + r.stdout))
        self.running = True

    def stop(self):
        if self.running:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", capture_output=True,
                           text=True, timeout=30, env=gpu_harness.proc_env(self.env()))
            self.running = False
        shutil.rmtree(self.root, ignore_errors=True)


def outside():
    """A process's environment overrides that keep it out of any MPS."""
    return {k: None for k in MPS_ENV}


def make_data(env):
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 300, 120, 200)
    raw = env.path("records.bin")
    with open(raw, "wb") as f:
        for i in range(RAW_RECORDS):
            f.write(bytes((i * 7 + k) % 251 for k in range(RAW_BYTES)))
    return {"jpeg": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
                     "transform": TRANSFORM, "decode": "gpu"},
            "raw": {"source": "raw:" + raw, "record_bytes": RAW_BYTES, "batch_size": BATCH,
                    "seed": SEED}}


def dumps(env, d, tag, overrides):
    """Two epochs of each pipeline to GPU 0: {pipeline: dump text}."""
    out = {}
    for name in ("jpeg", "raw"):
        path = env.path("%s-%s.dump" % (tag, name))
        gpu_harness.consume(env, d.socket, name, path, device="0", epochs=EPOCHS,
                            overrides=overrides)
        with open(path) as f:
            out[name] = f.read()
    return out


def run_daemon(env, tag, pipelines, overrides):
    cfg = gpu_harness.gpu_config(env, tag, pipelines, workers=2, device_slots=4, staging_slots=8)
    d = gpu_harness.start_daemon(env, cfg, overrides=overrides)
    gpu_harness.check_delivery(d, "register")
    return d


def log_text(d):
    with open(d.log_path, errors="replace") as f:
        return f.read()


def body(env):
    gpu_harness.require_gpus()
    if shutil.which("nvidia-cuda-mps-control") is None:
        raise TestSkip("nvidia-cuda-mps-control is not on PATH")
    pipelines = make_data(env)

    # (a) no MPS
    d = run_daemon(env, "plain", pipelines, outside())
    plain = dumps(env, d, "plain", outside())
    st = d.status()
    check(st["gpus"][0]["mps"] is False, "without MPS, status says mps 1 for GPU 0")
    check(log_text(d).count(MPS_NOTICE) == 1,
          "without MPS, the log should say once that GPU decoding is %s" % MPS_NOTICE)
    d.stop()
    for name, text in plain.items():
        rows = harness.parse_dump_lines(text.splitlines(), name)
        n = RAW_RECORDS if name == "raw" else CLASSES * PER_CLASS
        gpu_harness.check_epochs(rows, EPOCHS, n, "%s without MPS" % name)

    mps = Mps()
    try:
        mps.start()
        # (b) daemon and clients under MPS
        d = run_daemon(env, "mps", pipelines, mps.env())
        shared = dumps(env, d, "mps", mps.env())
        st = d.status()
        check(st["gpus"][0]["mps"] is True, "under MPS, status says mps 0 for GPU 0")
        check(MPS_NOTICE not in log_text(d), "under MPS, the log says GPU decoding is %s" % MPS_NOTICE)
        for name in plain:
            gpu_harness.check_same_dumps([("%s without MPS" % name, plain[name]),
                                          ("%s under MPS" % name, shared[name])])
        print("under MPS: status mps 1; %s byte-identical to the run without MPS"
              % " and ".join(sorted(plain)))

        # (c) a client outside MPS, the daemon under it
        path = env.path("mixed.dump")
        args = gpu_harness.consume_cmd(d.socket, "jpeg", device="0", epochs=EPOCHS, dump=path)
        r = gpu_harness.loaderctl(env, args, overrides=outside())
        if r.returncode == 0:
            with open(path) as f:
                gpu_harness.check_same_dumps([("jpeg under MPS", shared["jpeg"]),
                                              ("jpeg, client outside MPS", f.read())])
            print("a client outside MPS: served, byte-identical")
        else:
            uuid = st["gpus"][0]["uuid"]
            check(uuid in r.stderr or "GPU" in r.stderr,
                  "a client outside MPS failed without naming the GPU (exit %d): %s"
                  % (r.returncode, r.stderr))
            print("a client outside MPS: refused (exit %d): %s" % (r.returncode, r.stderr.strip()))
        d.stop()
    finally:
        mps.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_mps", body)
