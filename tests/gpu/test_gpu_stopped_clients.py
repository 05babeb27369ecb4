#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stopped clients, device and host, take no staging slot from the others.

One daemon, 8 staging slots, device_slots 4, max_depth 16. Three clients
fill up and are SIGSTOPped: a device client through staging (A), a direct
device client (D, its own pipeline with direct = on) and a host client
of depth 16 (H). Status must show each within the share it had when it
took its slots (staging slots / (clients + 1)), D with no staging slot at
all. Then a device client (B) and a host client (C), both of depth 16,
each read two epochs to the end, byte for byte, while the others stay
stopped. Finally A, D and H continue and also finish correctly.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

RECORD, N, BATCH, SLOTS = 16 << 10, 512, 16, 8  # 256 KiB batches, 32 per epoch


def body(env):
    gpu_harness.require_gpus()
    data = env.make_raw("data.bin", N, RECORD, seed=41)
    crcs = harness.raw_sample_crcs(data, RECORD)
    common = {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH}
    pipelines = {"p": common, "direct": dict(common, direct="on")}
    d = gpu_harness.start_daemon(env, gpu_harness.gpu_config(
        env, "stop", pipelines, workers=2, staging_slots=SLOTS, device_slots=4, max_depth=16))

    def start(name, pipeline, device, epochs=2, step_ms=None):
        dump = env.path(name + ".dump")
        extra = ["--depth", "16", "--name", name, "--quiet"]
        if step_ms:
            extra += ["--step-ms", str(step_ms)]
        p = gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
            d.socket, pipeline, device=device, epochs=epochs, dump=dump, extra=extra))
        return p, dump

    def client(st, p):
        return gpu_harness.client_by_pid(st, p.pid)

    stopped = []
    for name, pipeline, device, want in (("A", "p", "0", 4), ("D", "direct", "0", 4),
                                          ("H", "p", None, 1)):
        p, dump = start(name, pipeline, device, step_ms=20)
        # Full: a device client holds its whole ring; the host client as
        # many staging slots as its share lets it.
        def full(st, p=p, want=want, device=device):
            c = client(st, p)
            if c is None:
                return False
            if device:
                return c["sent"] - c["released"] >= want - 1 and c["in_flight"] >= want
            return c["staging"] >= max(1, st["share"])
        d.wait_status(full, 30, "client %s to fill up" % name)
        os.kill(p.pid, signal.SIGSTOP)
        stopped.append((name, p, dump))
    st = d.status()
    for name, p, _ in stopped:
        c = client(st, p)
        check(c is not None, "stopped client %s is not in status" % name)
        check(c["staging"] <= SLOTS // 2, "stopped client %s holds %d staging slots:\n%s"
              % (name, c["staging"], d.status_text()))
    by_name = {c["name"]: c for c in st["clients"]}
    check(by_name["D"]["path"] == "direct" and by_name["D"]["staging"] == 0,
          "the direct client: %s" % by_name["D"])
    check(sum(c["staging"] for c in st["clients"]) < SLOTS,
          "stopped clients hold every staging slot:\n%s" % d.status_text())

    def finish_all(clients, when):
        for name, p, dump in clients:
            rc, out, err = harness.finish(p, 60, "client %s %s" % (name, when))
            check(rc == 0, "client %s exited %d %s: %s" % (name, rc, when, err))
            rows = harness.read_dump(dump)
            gpu_harness.check_epochs(rows, 2, N, "client %s" % name)
            harness.check_dump_crcs(rows, crcs, "client %s" % name)

    finish_all([("B",) + start("B", "p", "0"), ("C",) + start("C", "p", None)],
               "while A, D and H are stopped")
    for _, p, _ in stopped:
        os.kill(p.pid, signal.SIGCONT)
    finish_all(stopped, "after SIGCONT")
    d.wait_status(lambda s: not s["clients"] and s["in_use"] == 0, 15, "every slot to be free")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_stopped_clients", body)
