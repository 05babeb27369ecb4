#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A device client killed mid-stream takes its device ring with it, and
the other device client on the GPU goes on unharmed.

Two pipelines on different data files, each consumed by a
`loaderctl consume --device 0 --dump`, the victim's with `direct = on`
(status must give it path direct, the survivor path staging), so a
direct client dies with copies in flight: the survivor (pipeline "keep", 4
epochs at 100 ms a step, about 5 s) starts first; once it has been sent 3
batches the GPU's device_bytes is noted as the survivor's alone. The victim
(pipeline "lose") starts next and is SIGKILLed once status shows it was
sent 4 batches. Then, within 15 s, status must no longer list the victim and the
GPU's device_bytes must be back to the survivor's figure (or 0 if the
survivor has finished meanwhile). The survivor must exit 0 with a correct
dump (each sample once per epoch, every CRC that of the file), and in the
end no client and 0 device bytes remain.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

KEEP_RECORD, KEEP_N, KEEP_BATCH, KEEP_EPOCHS = 48 << 10, 200, 16, 4  # 768 KiB batches, 13 per epoch
LOSE_RECORD, LOSE_N, LOSE_BATCH = 64 << 10, 256, 16  # 1 MiB batches
DEPTH = 3


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]
    keep = env.make_raw("keep.bin", KEEP_N, KEEP_RECORD, seed=31)
    lose = env.make_raw("lose.bin", LOSE_N, LOSE_RECORD, seed=32)
    crcs = harness.raw_sample_crcs(keep, KEEP_RECORD)
    pipelines = {
        "keep": {"source": "raw:" + keep, "record_bytes": KEEP_RECORD, "batch_size": KEEP_BATCH,
                 "seed": 1},
        "lose": {"source": "raw:" + lose, "record_bytes": LOSE_RECORD, "batch_size": LOSE_BATCH,
                 "seed": 2, "direct": "on"},
    }
    d = gpu_harness.start_daemon(env, gpu_harness.gpu_config(env, "two", pipelines, workers=2,
                                                             device_slots=4))

    def gpu(st):
        g = gpu_harness.gpu_by_uuid(st, uuid)
        check(g is not None, "status lists GPUs %s, not %s" % ([x["uuid"] for x in st["gpus"]], uuid))
        return g

    check(gpu(d.status())["device_bytes"] == 0, "device_bytes is not 0 before any client attached")

    keep_dump = env.path("keep.dump")
    survivor = gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
        d.socket, "keep", device="0", epochs=KEEP_EPOCHS, dump=keep_dump,
        extra=["--step-ms", "100", "--depth", str(DEPTH), "--name", "survivor"]))

    def sent(pid, n):
        def pred(st):
            c = gpu_harness.client_by_pid(st, pid)
            return c is not None and c["sent"] >= n
        return pred

    st = d.wait_status(sent(survivor.pid, 3), 30, "the survivor to be sent 3 batches")
    c = gpu_harness.client_by_pid(st, survivor.pid)
    check(c["gpu"] == uuid, "status gives the survivor gpu %s, expected %s" % (c["gpu"], uuid))
    survivor_bytes = gpu(st)["device_bytes"]
    check(survivor_bytes > 0, "device_bytes is 0 with the survivor attached")

    victim = gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
        d.socket, "lose", device="0", epochs=100, dump=env.path("lose.dump"),
        extra=["--step-ms", "20", "--depth", str(DEPTH), "--name", "victim"]))
    st = d.wait_status(sent(victim.pid, 4), 30, "the victim to be sent 4 batches")
    paths = {x["name"]: x["path"] for x in st["clients"]}
    check(paths == {"survivor": "staging", "victim": "direct"},
          "status gives the clients' paths %s; expected the survivor staging, the victim direct"
          % paths)
    both_bytes = gpu(st)["device_bytes"]
    print("device_bytes: survivor alone %d, with the victim %d" % (survivor_bytes, both_bytes))
    check(both_bytes > survivor_bytes, "device_bytes did not grow (%d -> %d) with a second device "
          "client" % (survivor_bytes, both_bytes))
    check(gpu(st)["clients"] == 2, "status gives the GPU %d clients with both attached"
          % gpu(st)["clients"])
    if survivor.poll() is not None:
        raise harness.TestFailure("the survivor ended (exit %d) before the victim could be "
                                  "killed; stderr: %s" % (survivor.returncode, survivor.stderr.read()))
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()

    def victim_freed(st):
        if gpu_harness.client_by_pid(st, victim.pid) is not None:
            return False
        alone = gpu_harness.client_by_pid(st, survivor.pid) is not None
        return gpu(st)["device_bytes"] == (survivor_bytes if alone else 0)
    st = d.wait_status(victim_freed, 15, "the killed victim's client and device ring to be freed "
                       "(device_bytes back to %d, or 0 once the survivor is done)" % survivor_bytes)
    print("after the kill: device_bytes %d, clients %s"
          % (gpu(st)["device_bytes"], [(x["name"], x["pid"]) for x in st["clients"]]))

    rc, out, err = harness.finish(survivor, 60, "the survivor")
    check(rc == 0, "the survivor exited %d after the victim was killed\nstdout: %s\nstderr: %s"
          % (rc, out, err))
    summary, _ = harness.parse_consume_output(out)
    check(summary["device"] == uuid, "the survivor's summary says device=%s, expected %s"
          % (summary["device"], uuid))
    check(summary["epochs"] == KEEP_EPOCHS, "the survivor's summary: %s" % summary)
    rows = harness.read_dump(keep_dump)
    gpu_harness.check_epochs(rows, KEEP_EPOCHS, KEEP_N, "the survivor")
    harness.check_dump_crcs(rows, crcs, "the survivor")

    d.wait_status(lambda s: not s["clients"] and gpu(s)["device_bytes"] == 0, 15,
                  "no client and device_bytes 0 once both are gone")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_two_clients", body)
