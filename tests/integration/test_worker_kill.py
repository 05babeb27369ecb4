#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A worker killed mid-epoch costs nothing but time.

With 2 workers, a consumer stepping slowly through an epoch (--step-ms, so
the epoch takes a few seconds) has a worker SIGKILLed under it once it has
released a few batches. The worker is stopped (SIGSTOP) first and killed
only once status shows it holding items, so the kill always strands work
that the daemon must issue again. The consumer must finish the epoch with exit 0 and
a dump identical to a fault-free run's; the daemon must respawn the worker:
status shows it running again, under a new pid, with restarts 1.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, STEP_MS = 1600, 512, 16, 30  # 100 batches, >= 3 s


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=21)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("wk", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH, "seed": 8, "chunk": 4}}, workers=2)
    d = env.start_daemon(cfg)

    ref_dump = harness.reference_epoch(env, d, crcs, N)
    slow, slow_dump = harness.spawn_slow_consumer(env, d, STEP_MS)
    victim = d.status()["workers"][0]
    check(victim["state"] == "running" and victim["pid"] > 0, "worker 0 is not running: %s" % victim)
    check(slow.poll() is None, "the consumer finished before the worker could be killed")
    os.kill(victim["pid"], signal.SIGSTOP)
    d.wait_status(lambda st: st["workers"][0]["inflight"] > 0, 15,
                  "the stopped worker 0 to be holding items")
    os.kill(victim["pid"], signal.SIGKILL)

    rc, out, err = harness.finish(slow, 60, "the slow consumer")
    check(rc == 0, "the consumer exited %d after a worker was killed\nstdout: %s\nstderr: %s" % (rc, out, err))
    harness.parse_consume_output(out)
    harness.check_same_dump(slow_dump, ref_dump,
                            "the dump with a worker killed differs from the fault-free one")

    st = d.wait_status(lambda s: s["workers"][0]["state"] == "running" and s["workers"][0]["pid"] > 0
                       and s["workers"][0]["pid"] != victim["pid"],
                       15, "worker 0 to run again under a new pid")
    check(st["workers"][0]["restarts"] == 1, "worker 0 shows restarts %d after one kill, expected 1"
          % st["workers"][0]["restarts"])
    check(st["workers"][1]["restarts"] == 0, "worker 1 restarted although only worker 0 was killed")
    check(not os.path.exists("/proc/%d" % victim["pid"]), "the killed worker %d was not reaped" % victim["pid"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_worker_kill", body)
