#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""When no worker can run any more, clients are told why instead of waiting.

The worker program is a script that runs the real worker with
LOADERD_WORKER_FAULT (worker/zygote.h) saying: every worker exits 1 at
start while a flag file exists. With the daemon serving a slow consumer,
the flag is made and every worker is SIGKILLed: each is respawned at once
(killed from outside), then fails to start, backs off, and once every
worker has failed 5 times in a row:
- the consumer gets an error naming the program and how it ends;
- a new client is refused with the same reason; status still answers,
  and the daemon stays up.
Once the flag is removed a worker starts at its next retry, and a client
reads a whole epoch byte for byte.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 1024, 64, 16


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=2)
    crcs = harness.raw_sample_crcs(data, RECORD)
    flag = env.path("broken")
    script = env.path("worker.sh")
    with open(script, "w") as f:
        f.write('#!/bin/sh\nLOADERD_WORKER_FAULT="all:1:%s" exec "%s" "$@"\n'
                % (flag, harness.binary("loaderd-worker")))
    os.chmod(script, 0o755)
    cfg = env.config("un", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH}}, workers=2, worker_program=script)
    d = env.start_daemon(cfg)
    slow = env.spawn_loaderctl(harness.consume_args(d.socket, "p", epochs=1000,
                                                    extra=["--quiet", "--step-ms", "5"]))
    d.wait_status(lambda st: any(c["released"] > 2 for c in st["clients"]), 10,
                  "the consumer to start")
    open(flag, "w").close()
    for w in d.status()["workers"]:
        os.kill(w["pid"], signal.SIGKILL)

    why = "no worker can run: %s: exit code 1 right after start, 5 times in a row" % script
    rc, out, err = harness.finish(slow, 30, "the consumer when no worker can run")
    check(rc == 1 and why in err, "the consumer exited %d with %r; expected 1 and %r" % (rc, err, why))
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1))
    check(r.returncode == 1 and why in r.stderr,
          "a new client while no worker can run: exit %d, %r" % (r.returncode, r.stderr))
    st = d.status()
    check(all(w["state"] in ("backoff", "starting") for w in st["workers"]),
          "workers are not in back-off: %s" % st["workers"])
    check(why in d.log(), "the log does not say %r:\n%s" % (why, d.log()))

    os.unlink(flag)
    d.wait_status(lambda st: any(w["state"] == "running" for w in st["workers"]), 15,
                  "a worker to start again once the program works")
    dump = env.path("after.dump")
    (_, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1, "dump": dump}])
    harness.check_dump_crcs(rows, crcs, "consume after the workers recovered")
    harness.check_permutation([s for _, s in harness.epoch_rows(rows, 0)], N,
                              "consume after the workers recovered")
    check("workers run again" in d.log(), "the log does not say the workers run again")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_workers_unable", body)
