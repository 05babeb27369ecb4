#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""1000 device attachments leave nothing behind, in the client or the daemon.

attach_cycles connects, attaches with device "0", takes and releases 2
batches (1 MiB each) and closes, 10 times to warm up and then 1000 times.
At both ends, with the daemon idle (status: no client, the GPU's
device_bytes 0), this test measures the daemon's open fds (settled) and
VmRSS, and attach_cycles measures the GPU's free memory (cudaMemGetInfo,
device-wide) and its own open fds. Pass: device free memory within 4 MiB of
where it started, the program's and the daemon's fd counts unchanged, the
daemon's RSS grown by less than 16 MiB; every measurement is printed.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

RECORD, N, BATCH = 64 << 10, 64, 16  # 1 MiB batches
CYCLES, WARMUP = 1000, 10
DEVICE_SLACK = 4 << 20
RSS_SLACK = 16 << 20
_RESULT_RE = re.compile(r"attach_cycles: cycles=(\d+) device_free_before=(\d+) "
                        r"device_free_after=(\d+) fds_before=(\d+) fds_after=(\d+) "
                        r"seconds=(\d+\.\d+)")


def daemon_idle(d, uuid, when):
    """Waits until the daemon has no client and no device memory, then
    measures its fds and RSS."""
    def idle(st):
        g = gpu_harness.gpu_by_uuid(st, uuid)
        check(g is not None, "status lists GPUs %s, not %s" % ([x["uuid"] for x in st["gpus"]], uuid))
        return not st["clients"] and g["device_bytes"] == 0 and g["clients"] == 0
    d.wait_status(idle, 20, "no client and device_bytes 0 %s" % when)
    fds = gpu_harness.settled(lambda: gpu_harness.fd_count(d.pid), "the daemon's fd count %s" % when)
    return {"fds": fds, "rss": gpu_harness.rss_bytes(d.pid)}


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]
    prog = gpu_harness.program("attach_cycles")
    data = env.make_raw("data.bin", N, RECORD, seed=51)
    pipelines = {"train": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH}}
    d = gpu_harness.start_daemon(env, gpu_harness.gpu_config(env, "cycles", pipelines, workers=2,
                                                             staging_slots=4, device_slots=2))

    conv = gpu_harness.Conversation(env, [prog, "--socket", d.socket, "--pipeline", "train",
                                          "--cycles", str(CYCLES), "--warmup", str(WARMUP)],
                                    "attach_cycles")
    conv.expect("attach_cycles: warm", 60)
    before = daemon_idle(d, uuid, "after the warm-up")
    conv.send("go")
    conv.expect("attach_cycles: cycled", 200)
    after = daemon_idle(d, uuid, "after %d cycles" % CYCLES)
    conv.send("go")
    rc, out, err = conv.finish(30)
    check(rc == 0, "attach_cycles exited %d\nstdout: %s\nstderr: %s" % (rc, out, err))
    m = _RESULT_RE.fullmatch(out.strip())
    check(m is not None, "attach_cycles printed %r, not its result line" % out)
    cycles, free_before, free_after, fds_before, fds_after = (int(x) for x in m.groups()[:5])
    seconds = float(m.group(6))
    check(cycles == CYCLES, "attach_cycles ran %d cycles, asked for %d" % (cycles, CYCLES))

    free_delta = free_after - free_before
    rss_delta = after["rss"] - before["rss"]
    print("%d cycles in %.1f s (%.1f ms each)" % (cycles, seconds, 1000 * seconds / max(cycles, 1)))
    print("device free memory: %d -> %d bytes (%+d)" % (free_before, free_after, free_delta))
    print("attach_cycles fds: %d -> %d" % (fds_before, fds_after))
    print("daemon fds: %d -> %d" % (before["fds"], after["fds"]))
    print("daemon VmRSS: %d -> %d bytes (%+d)" % (before["rss"], after["rss"], rss_delta))

    check(abs(free_delta) <= DEVICE_SLACK, "device free memory moved by %d bytes over %d cycles "
          "(allowed: %d)" % (free_delta, cycles, DEVICE_SLACK))
    check(fds_after == fds_before, "attach_cycles has %d open fds after %d cycles, %d before"
          % (fds_after, cycles, fds_before))
    check(after["fds"] == before["fds"], "the daemon has %d open fds after %d cycles, %d before"
          % (after["fds"], cycles, before["fds"]))
    check(rss_delta < RSS_SLACK, "the daemon's VmRSS grew by %d bytes over %d cycles (allowed: < %d)"
          % (rss_delta, cycles, RSS_SLACK))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_attach_cycles", body)
