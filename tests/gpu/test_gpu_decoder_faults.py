#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Decoder processes (gpu_decode_helpers = processes) that fail in every
way a process can: no program, a refusal, a malformed or no answer to
the setup, a malformed answer to a job, an exit at a job.

A copy of loaderd runs with a decoder program beside it that misbehaves
as told (misbehaving_decoder.py, LOADERD_TEST_DECODER), or with none
there; gpu_decode_threads = 3, worker_timeout_ms = 3000 (30000 where
the decoder must start: it imports PyTorch). In every case
the client gets both epochs, every sample once, and the log names what
went wrong:

  missing, refuse, garbage, silent: the decoder cannot be set up, so the
      lane decodes alone; the log says why (the program's path, its
      reason, "a malformed answer", "no answer in time"), no decoder
      process is left (`decoders 0`), and the batches are byte-identical
      to those of helper threads: the GPU decoded every image.
  bad-done, exit: the decoder is set up and fails at its first job; the
      log names its pid and why ("a malformed answer", "it closed its
      socket"), its images are decoded on the CPU (images_fallback), and
      another is started in its place, the wait doubling while they keep
      failing ("another is started in 1000 ms", then 2000).
  once: the first decoder exits at its first job, and every one started
      after it refuses its setup: the log says each time that none could
      be started in its place, and why, and the wait doubles ("trying
      again in 2000 ms", then 4000); batches keep coming, decoded by the
      lane and on the CPU.
"""

import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

CLASSES, PER_CLASS, BATCH, SEED, EPOCHS = 3, 40, 8, 23, 2
TRANSFORM = "random_resized_crop(96) hflip(0.5)"
TIMEOUT_MS = 3000       # worker_timeout_ms, where the decoder never answers
START_TIMEOUT_MS = 30000  # where it must: importing PyTorch takes seconds
HERE = os.path.dirname(os.path.abspath(__file__))

# mode: what the log must say of the decoder's failure
SETUP_FAULTS = {
    "missing": r"a JPEG decoding process could not be set up \(\S*loaderd-decoder: No such file",
    "refuse": r"a JPEG decoding process could not be set up \(decoder process \d+: refused by the "
              r"test's decoder\)",
    "garbage": r"a JPEG decoding process could not be set up \(decoder process \d+: a malformed answer\)",
    "silent": r"a JPEG decoding process could not be set up \(decoder process \d+: no answer in time\)",
}
JOB_FAULTS = {
    "bad-done": r"JPEG decoder process (\d+) ended \(a malformed answer\)",
    "exit": r"JPEG decoder process (\d+) ended \((?:it closed its socket|it does not take jobs)\)",
}


def loaderd_copy(env, mode):
    """A directory with loaderd, its worker, and (but for `missing`) the
    misbehaving decoder as loaderd-decoder; the loaderd there."""
    d = env.path("bin-" + mode)
    os.makedirs(d)
    shutil.copy2(harness.binary("loaderd"), os.path.join(d, "loaderd"))
    os.symlink(harness.binary("loaderd-worker"), os.path.join(d, "loaderd-worker"))
    if mode != "missing":
        with open(os.path.join(d, "loaderd-decoder"), "w") as f:
            f.write('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable,
                                                          os.path.join(HERE, "misbehaving_decoder.py")))
        os.chmod(os.path.join(d, "loaderd-decoder"), 0o755)
    return os.path.join(d, "loaderd")


def run(env, tag, pipelines, helpers, program=None, mode=None, timeout_ms=TIMEOUT_MS):
    cfg = gpu_harness.gpu_config(env, tag, pipelines, workers=2, device_slots=4, staging_slots=8,
                                 gpu_decode_threads=3, gpu_decode_helpers=helpers,
                                 worker_timeout_ms=timeout_ms)
    d = gpu_harness.start_daemon(env, cfg, overrides={"LOADERD_TEST_DECODER": mode or "",
                                                      "LOADERD_TEST_DECODER_MARK": env.path("mark-%s" % tag)},
                                 program=program)
    gpu_harness.check_delivery(d, "register")
    path = env.path("%s.dump" % tag)
    gpu_harness.consume(env, d.socket, "jpeg", path, device="0", epochs=EPOCHS)
    with open(path) as f:
        dump = f.read()
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    with open(d.log_path, errors="replace") as f:
        log = f.read()
    return d, dump, st, log


def body(env):
    gpu_harness.require_gpus()
    if not os.access(os.path.join(harness.build_dir(), "bin", "loaderd-decoder"), os.X_OK):
        raise harness.TestSkip("loaderd-decoder is not built here (no nvjpeg.h)")
    gpu_harness.torch_cuda()  # the misbehaving decoder makes its events with PyTorch
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 710, 140, 200)
    pipelines = {"jpeg": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
                          "transform": TRANSFORM, "decode": "gpu", "max_decode_ms": 2000}}
    n = CLASSES * PER_CLASS
    d, threads, _, _ = run(env, "threads", pipelines, "threads")
    d.stop()

    for mode, said in SETUP_FAULTS.items():
        d, dump, st, log = run(env, mode, pipelines, "processes", loaderd_copy(env, mode), mode)
        check(re.search(said, log), "decoder %s: the log does not say /%s/:\n%s" % (mode, said, log))
        check(st["gpus"][0]["decoders"] == 0, "decoder %s: status says decoders %d, not 0"
              % (mode, st["gpus"][0]["decoders"]))
        gpu_harness.check_epochs(harness.parse_dump_lines(dump.splitlines(), mode), EPOCHS, n,
                                 "decoder " + mode)
        gpu_harness.check_same_dumps([("helper threads", threads), ("decoder " + mode, dump)])
        d.stop()
        print("decoder %s: not set up (%s), the lane decoded alone, batches byte-identical"
              % (mode, re.search(said, log).group(0)))

    for mode, said in JOB_FAULTS.items():
        d, dump, st, log = run(env, mode, pipelines, "processes", loaderd_copy(env, mode), mode,
                               START_TIMEOUT_MS)
        pids = re.findall(said, log)
        check(pids, "decoder %s: the log does not say /%s/:\n%s" % (mode, said, log))
        fb = {x["pipeline"]: x for x in st["decode"] if x["gpu"] == 0}["jpeg"]["images_fallback"]
        check(fb > 0, "decoder %s: images_fallback 0: its images were not decoded on the CPU" % mode)
        gpu_harness.check_epochs(harness.parse_dump_lines(dump.splitlines(), mode), EPOCHS, n,
                                 "decoder " + mode)
        # Replaced, and the wait doubles while the replacements fail too
        check("another is started in 1000 ms" in log, "decoder %s: no restart after 1000 ms:\n%s"
              % (mode, log))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "another is started in 2000 ms" not in log:
            gpu_harness.consume(env, d.socket, "jpeg", env.path("%s-more.dump" % mode), device="0",
                                epochs=1)
            with open(d.log_path, errors="replace") as f:
                log = f.read()
        check("JPEG decoder process" in log and "started in place of the one that ended" in log,
              "decoder %s: none was started in place of the failed one:\n%s" % (mode, log))
        check("another is started in 2000 ms" in log, "decoder %s: a replacement failed too, yet the "
              "next wait did not double to 2000 ms:\n%s" % (mode, log))
        d.stop()
        print("decoder %s: pid %s failed at a job, %d images decoded on the CPU, replaced; the wait "
              "doubled" % (mode, pids[0], fb))

    # A replacement that cannot be set up: tried again, later and later
    mode = "once"
    d, dump, st, log = run(env, mode, pipelines, "processes", loaderd_copy(env, mode), mode,
                           START_TIMEOUT_MS)
    gpu_harness.check_epochs(harness.parse_dump_lines(dump.splitlines(), mode), EPOCHS, n, "decoder once")
    check(re.search(JOB_FAULTS["exit"], log), "decoder once: the first decoder's end is not logged:\n%s" % log)
    said = (r"no JPEG decoder process could be started in place of the one that ended \(decoder process "
            r"\d+: refused by the test's decoder\): trying again in %d ms")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not re.search(said % 4000, log):
        gpu_harness.consume(env, d.socket, "jpeg", env.path("once-more.dump"), device="0", epochs=1)
        with open(d.log_path, errors="replace") as f:
            log = f.read()
    for ms in (2000, 4000):
        check(re.search(said % ms, log), "decoder once: no failed restart said with its next try in %d ms:\n%s"
              % (ms, log))
    check(d.status()["gpus"][0]["decoders"] == 0, "decoder once: status counts a decoder, yet none runs")
    d.stop()
    print("decoder once: its replacements refused their setup, tried again after 2000, then 4000 ms")


if __name__ == "__main__":
    harness.run_test("test_gpu_decoder_faults", body)
