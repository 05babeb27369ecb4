#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`loaderctl status` tells the truth about the daemon.

Every line must follow the contract's format. It must show the project's
version (the one `loaderd --version` prints), the daemon's pid, host
delivery, the configured number of staging slots, every configured worker
running, each pipeline with its source, sample count, batch size, shuffle
and drop_last, and an attached slow consumer as a client with its pid,
name, pipeline, rank and world; once that consumer is gone, no client.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

WORKERS, SLOTS = 3, 10


def project_version():
    with open(os.path.join(harness.SOURCE_DIR, "CMakeLists.txt")) as f:
        m = re.search(r"project\(loaderd\s+VERSION\s+(\S+)", f.read())
    check(m is not None, "no project version in CMakeLists.txt")
    return m.group(1)


def body(env):
    raw = env.make_raw("raw.bin", 500, 100)
    tok = env.make_tokens("tok.bin", 1000, "uint16")
    cfg = env.config("st", {
        "images": {"source": "raw:" + raw, "record_bytes": 100, "batch_size": 16, "seed": 3},
        "text": {"source": "tokens:" + tok, "token_dtype": "uint16", "seq_len": 10, "batch_size": 4,
                 "shuffle": "false", "drop_last": "true"},
    }, workers=WORKERS, staging_slots=SLOTS)
    d = env.start_daemon(cfg)

    version = project_version()
    r = subprocess.run([harness.binary("loaderd"), "--version"], capture_output=True, text=True, timeout=10)
    check(r.returncode == 0 and version in r.stdout, "loaderd --version exited %d and printed %r, expected %s"
          % (r.returncode, r.stdout, version))

    text = d.status_text()
    print(text)
    st = harness.parse_status(text)
    check(st["version"] == version, "status shows version %s, expected %s" % (st["version"], version))
    check(st["pid"] == d.pid, "status shows pid %d, the daemon is %d" % (st["pid"], d.pid))
    check(st["delivery"].startswith("host"), "delivery is %s, expected host first" % st["delivery"])
    check(st["slots"] == SLOTS and st["in_use"] == 0, "arena line: %d slots, %d in use; expected %d, 0"
          % (st["slots"], st["in_use"], SLOTS))
    check(st["arena_bytes"] >= SLOTS * st["slot_bytes"] > 0, "arena of %d bytes cannot hold %d slots of %d"
          % (st["arena_bytes"], SLOTS, st["slot_bytes"]))
    check([w["index"] for w in st["workers"]] == list(range(WORKERS)), "workers listed: %s" % st["workers"])
    for w in st["workers"]:
        check(w["state"] == "running" and w["pid"] > 0 and harness.pid_alive(w["pid"]) and w["restarts"] == 0,
              "worker not running as it should: %s" % w)
    pipelines = {p["name"]: p for p in st["pipelines"]}
    check(sorted(pipelines) == ["images", "text"], "pipelines listed: %s" % sorted(pipelines))
    check(pipelines["images"] == {"name": "images", "source": "raw:" + raw, "samples": 500, "batch_size": 16,
                                  "shuffle": 1, "drop_last": 0}, "pipeline images: %s" % pipelines["images"])
    check(pipelines["text"] == {"name": "text", "source": "tokens:" + tok, "samples": 999 // 10,
                                "batch_size": 4, "shuffle": 0, "drop_last": 1}, "pipeline text: %s" % pipelines["text"])
    check(st["clients"] == [], "clients listed with none attached: %s" % st["clients"])

    c = env.spawn_loaderctl(harness.consume_args(d.socket, "images", rank=1, world=2, epochs=1,
                                                 extra=["--step-ms", "200", "--name", "watcher",
                                                        "--depth", "3", "--quiet"]))
    st = d.wait_status(lambda s: any(x["pid"] == c.pid and x["released"] >= 1 for x in s["clients"]), 15,
                       "the consumer to show as a client")
    client = next(x for x in st["clients"] if x["pid"] == c.pid)
    check(len(st["clients"]) == 1, "one consumer attached, %d clients listed" % len(st["clients"]))
    check((client["name"], client["pipeline"], client["rank"], client["world"], client["depth"], client["epoch"])
          == ("watcher", "images", 1, 2, 3, 0), "client line: %s" % client)
    check(client["released"] <= client["sent"] and client["sent"] - client["released"] <= client["in_flight"] <= 3,
          "client counts disagree with each other or with depth 3: %s" % client)
    # Stage means: the workers took some time, the client holds each batch
    # for its 200 ms step, a host client has no GPU stage.
    stages = client["stages_us"]
    check(stages["fill"] > 0 and 150000 <= stages["held"] and stages["gpu"] == 0
          and stages["queue"] is None, "stage figures of a host client stepping 200 ms: %s" % stages)
    c.kill()
    c.wait()
    d.wait_status(lambda s: s["clients"] == [] and s["in_use"] == 0, 10, "the client to go away")
    check(re.search(r"client \d+ \(pid %d\) detached after \d+ batches; per batch: fill_us \d+\.\d "
                    r"order_us \d+\.\d gpu_us 0\.0 held_us \d+\.\d" % c.pid, d.log()),
          "the detach line has no stage figures:\n%s" % d.log())
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_status", body)
