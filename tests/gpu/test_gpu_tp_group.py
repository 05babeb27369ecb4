#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A group of 2 device clients receives the same batches from one read.

A raw pipeline of 300 records of 16 KiB, batch 16, chunk 4 (4 items a
batch): two `loaderctl consume --device N --group tp0 --group-size 2
--dump --dump-data` (data-parallel rank 0 of 1), on the first GPU and,
when there are two, on the second one (members on different GPUs), for 2
epochs. Their dumps, and the bytes they read from their device rings
(--dump-data), must be identical; each epoch covers every sample exactly
once with the file's CRCs; the workers did the items of one read (4 a
batch, plus at most the group's prefetch), not one per member; the status
shows both members in group tp0 of size 2 while they run. Then a host
member and a device member of one group: the second is refused, naming
the group and the field (delivery). Skipped (77) without a GPU.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

N, RECORD, BATCH, CHUNK, EPOCHS, DEPTH = 300, 16 << 10, 16, 4, 2, 2
BATCHES = -(-N // BATCH)


def body(env):
    gpus = gpu_harness.require_gpus()
    devices = ["0", "1" if len(gpus) > 1 else "0"]
    data = env.make_raw("data.bin", N, RECORD, seed=41)
    crcs = harness.raw_sample_crcs(data, RECORD)
    pipelines = {"p": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH,
                       "seed": 6, "chunk": CHUNK}}
    d = gpu_harness.start_daemon(env, gpu_harness.gpu_config(env, "tp", pipelines, workers=2,
                                                             device_slots=4))
    gpu_harness.check_delivery(d, "register")

    procs = []
    for m, dev in enumerate(devices):
        procs.append(gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
            d.socket, "p", device=dev, epochs=EPOCHS, dump=env.path("m%d.dump" % m),
            extra=["--dump-data", env.path("m%d.data" % m), "--group", "tp0", "--group-size", "2",
                   "--depth", str(DEPTH), "--step-ms", "30", "--name", "m%d" % m])))
    st = d.wait_status(lambda st: sum(c["group"] == "tp0" for c in st["clients"]) == 2
                       and all(c["sent"] >= 2 for c in st["clients"]), 60,
                       "both members to be sent 2 batches")
    for c in st["clients"]:
        check(c["group_size"] == 2 and c["group_joined"] == 2 and c["group_state"] == "running",
              "status line of a member: %s" % c)
    for m, p in enumerate(procs):
        rc, out, err = harness.finish(p, 120, "member %d" % m)
        check(rc == 0, "member %d on device %s exited %d: %s" % (m, devices[m], rc, err))
    rows = harness.read_dump(env.path("m0.dump"))
    gpu_harness.check_epochs(rows, EPOCHS, N, "member 0")
    harness.check_dump_crcs(rows, crcs, "member 0")
    harness.check_same_dump(env.path("m1.dump"), env.path("m0.dump"), "the members' dumps differ")
    with open(env.path("m0.data"), "rb") as f0, open(env.path("m1.data"), "rb") as f1:
        check(f0.read() == f1.read(), "the bytes the members read from their GPUs differ")
    items = sum(w["items"] for w in d.status()["workers"])
    per_batch = BATCH // CHUNK
    check(EPOCHS * BATCHES * per_batch <= items <= (EPOCHS * BATCHES + DEPTH) * per_batch,
          "the workers did %d items for %d batches of at most %d items: each batch must be read "
          "once for the group" % (items, EPOCHS * BATCHES, per_batch))
    print("devices %s: %d items for %d batches" % (devices, items, EPOCHS * BATCHES))

    host = gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
        d.socket, "p", epochs=1, extra=["--group", "mixed", "--group-size", "2", "--depth", str(DEPTH)]))
    d.wait_status(lambda st: any(c["pid"] == host.pid for c in st["clients"]), 30,
                  "the host member to attach")
    r = gpu_harness.loaderctl(env, gpu_harness.consume_cmd(
        d.socket, "p", device="0", epochs=1, extra=["--group", "mixed", "--group-size", "2", "--depth", str(DEPTH)]))
    check(r.returncode == 1 and 'group "mixed"' in r.stderr and "delivery is device, the group's "
          "is host" in r.stderr, "a device member of a host group: exit %d, %r"
          % (r.returncode, r.stderr))
    host.kill()
    host.wait()
    d.wait_status(lambda st: not st["clients"], 15, "no client left")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_tp_group", body)
