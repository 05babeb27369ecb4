#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""loaderd.status(): the text by default, the JSON as a dict with json=True.

- status(socket) is the text `loaderctl status` prints (its first line
  names the daemon's pid);
- status(socket, json=True) is a dict of schema "loaderd.status/1" with
  the same pid, the pipeline and the loader attached from this process
  as a client with its name, equal to what `loaderctl status --json`
  prints but for the clock;
- Loader.stats() of a host loader: the batches handed out, a data wait,
  no decoding of its own (and so no wait for one), and why not;
- no daemon: DaemonUnavailableError either way.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 200, 8, 10


def body(env):
    loaderd, _, _, d = ch.raw_pipeline(env, N, RECORD, BATCH, data_seed=2)
    text = loaderd.status(d.socket)
    check(isinstance(text, str) and text.startswith("loaderd ") and " pid %d " % d.pid in text.splitlines()[0],
          "status() text: %r" % text[:200])
    loader = loaderd.Loader("p", socket=d.socket, device="cpu", name="py-status")
    it = iter(loader)
    next(it)
    doc = loaderd.status(d.socket, json=True)
    check(isinstance(doc, dict) and doc["schema"] == "loaderd.status/1" and doc["daemon"]["pid"] == d.pid,
          "status(json=True): %r" % str(doc)[:300])
    check([p["name"] for p in doc["pipelines"]] == ["p"], "pipelines: %s" % doc["pipelines"])
    mine = [c for c in doc["clients"] if c["pid"] == os.getpid()]
    check(len(mine) == 1 and mine[0]["name"] == "py-status" and mine[0]["pipeline"] == "p",
          "this process's loader among the clients: %s" % doc["clients"])
    ctl = d.status_json()
    check(ctl["clients"][0]["id"] == mine[0]["id"] and len(ctl["workers"]) == len(doc["workers"]),
          "loaderctl status --json and status(json=True) differ: %s / %s" % (ctl["clients"], doc["clients"]))
    next(it)
    st = loader.stats()
    check(st["batches"] == 2 and st["wait_s"] >= 0 and not st["decoding"] and
          st["decode_wait_s"] == 0 and st["decode_late_s"] == 0 and st["images_gpu"] == 0 and st["decode_why_not"] == "",
          "stats() of a host loader after 2 batches: %s" % st)
    loader.close()
    missing = env.path("absent.sock")
    ch.expect(loaderd.DaemonUnavailableError, [missing], lambda: loaderd.status(missing, json=True),
              "status(json=True) of no daemon")


if __name__ == "__main__":
    harness.run_test("test_py_status", body)
