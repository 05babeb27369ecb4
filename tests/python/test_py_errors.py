#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Errors reach Python as exceptions that carry the daemon's message.

- an unknown pipeline: PipelineNotFoundError naming it and the pipelines;
- no daemon at the socket: DaemonUnavailableError naming the socket, what
  is there (nothing), the running loaderd and how to name a path;
- GPU delivery where this machine or the daemon has none (run only where
  `loaderd --version` reports no GPU): DeviceUnavailableError with the reason;
- bad arguments (device, framework, rank): ValueError naming the value; a
  pipeline name with a control byte: LoaderdError (EINVAL) naming the byte;
- a batch used after release, through every door (a tensor, its DLPack
  export taken before the release, sample indices): BatchReleasedError
  naming the batch; an unknown tensor name: KeyError listing the names;
- a closed loader: LoaderdError saying so;
- a daemon that stops answering: TimeoutError after `timeout`, naming the
  pipeline; a daemon that dies: DaemonUnavailableError;
- a client library that cannot be loaded ($LOADERD_CLIENT_LIB): ImportError
  naming the path.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 200, 8, 10


def has_gpu():
    r = subprocess.run([harness.binary("loaderd"), "--version"], capture_output=True, text=True, timeout=60)
    return any(line.startswith("  gpu ") for line in r.stdout.splitlines())


def body(env):
    loaderd, _, _, d = ch.raw_pipeline(env, N, RECORD, BATCH, data_seed=2)
    sock = d.socket
    L = loaderd.Loader

    e = ch.expect(loaderd.PipelineNotFoundError, ['unknown pipeline "nope" (pipelines: p)'],
               lambda: L("nope", socket=sock, device="cpu"), "an unknown pipeline")
    check(isinstance(e, LookupError) and e.errno == 2, "unknown pipeline: %r errno %s" % (e, e.errno))
    missing = env.path("absent.sock")
    e = ch.expect(loaderd.DaemonUnavailableError, [missing, "nothing at " + missing, "loaderd is running here",
                                                   "LOADERD_SOCKET=PATH"],
                  lambda: L("p", socket=missing, device="cpu"), "a socket with no daemon")
    check(isinstance(e, ConnectionError), "no daemon: not a ConnectionError")
    ch.expect(loaderd.DaemonUnavailableError, [missing, "nothing at " + missing], lambda: loaderd.status(missing),
              "status of no daemon")
    if not has_gpu():
        ch.expect(loaderd.DeviceUnavailableError, [], lambda: L("p", socket=sock, device="cuda:0", framework="torch")
               if "torch" in ch.frameworks() else L("p", socket=sock, device=0), "GPU delivery without a GPU")
    ch.expect(ValueError, ["'tpu'"], lambda: L("p", socket=sock, device="tpu"), "device='tpu'")
    ch.expect(ValueError, ["'jax'"], lambda: L("p", socket=sock, framework="jax"), "framework='jax'")
    ch.expect(ValueError, ["rank 2 and world size 2"], lambda: L("p", socket=sock, device="cpu", rank=2, world_size=2),
           "rank 2 of 2")
    ch.expect(ValueError, ["numpy arrays cannot hold GPU memory"],
           lambda: L("p", socket=sock, device=0, framework="numpy"), "numpy with a GPU")
    e = ch.expect(loaderd.LoaderdError, ["pipeline name: byte 1 is 0x0a"],
               lambda: L("p\n", socket=sock, device="cpu"), "a newline in the pipeline name")
    check(e.errno == 22, "a newline in the pipeline name: errno %s, expected EINVAL" % e.errno)

    for fw in ch.frameworks():
        x = L("p", socket=sock, device="cpu", framework=fw)
        it = iter(x)
        b = next(it)
        exporter = b.dlpack("data")
        ch.expect(KeyError, ["'nope'", "data"], lambda: b["nope"], "an unknown tensor name")
        b.release()
        check(b.released, "release() did not mark the batch released")
        what = "batch 0 (epoch 0, index 0) was released"
        ch.expect(loaderd.BatchReleasedError, [what, "'data'"], lambda: b["data"], fw + ": a tensor after release")
        ch.expect(loaderd.BatchReleasedError, [what], lambda: exporter.__dlpack__(), fw + ": DLPack after release")
        ch.expect(loaderd.BatchReleasedError, [what], lambda: b.dlpack("data"), fw + ": dlpack() after release")
        ch.expect(loaderd.BatchReleasedError, [what], b.sample_indices, fw + ": sample indices after release")
        b.release()  # twice: nothing
        b2 = next(it)
        check(b2.seq == 1, "%s: after an explicit release the next batch is seq %d" % (fw, b2.seq))
        x.close()
        ch.expect(loaderd.LoaderdError, ["closed"], lambda: next(iter(x)), fw + ": a closed loader")
        ch.expect(loaderd.BatchReleasedError, ["batch 1"], lambda: b2["data"], fw + ": a batch of a closed loader")

    # A stopped daemon: the prepared batches come, then the timeout.
    x = L("p", socket=sock, device="cpu", framework="numpy", timeout=0.5, depth=2)
    it = iter(x)
    next(it)
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        e = ch.expect(TimeoutError, ['pipeline \'p\'', "0.5 s"], lambda: [next(it) for _ in range(20)],
                   "a stopped daemon")
        check(time.monotonic() - start < 10, "the timeout took %.1f s" % (time.monotonic() - start))
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    next(it)  # it answers again: the loader is still usable
    d.proc.kill()
    d.proc.wait()
    e = ch.expect(loaderd.DaemonUnavailableError, [], lambda: [next(it) for _ in range(50)], "a dead daemon")
    x.close()

    r = subprocess.run([sys.executable, "-c", "import loaderd; loaderd.Loader('p')"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, LOADERD_CLIENT_LIB="/nonexistent/libx.so"))
    check(r.returncode != 0 and "ImportError" in r.stderr and "/nonexistent/libx.so" in r.stderr
          and "LOADERD_CLIENT_LIB" in r.stderr, "a library that cannot be loaded: exit %d, %s" %
          (r.returncode, r.stderr[-400:]))


if __name__ == "__main__":
    harness.run_test("test_py_errors", body)
