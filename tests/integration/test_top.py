#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`loaderctl top --iterations 3 --interval 0.3` prints three plain
snapshots (stdout is a pipe): each a header line (the daemon's version and
pid, its workers), a pipeline table and a client table. With a client
consuming a raw pipeline slowly (--step-ms), the last snapshot's client
row has its id, its pid, its pipeline, rank/world, a positive batches/s, a
wait share and a limit name; the pipeline's row a positive batches/s,
samples/s of batch_size times that, and its one client. A second client
that consumes as fast as it can (no --step-ms) waits for its batches most
of the time: its limit is the stage of its pipeline that took the most
time, the workers' read of a raw pipeline, "read (workers)". A bad
--interval is a usage error.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BATCH = 8
CLIENT_RE = re.compile(r"^(\d+)\s+(\d+)\s+(\S+)\s+(\d+)/(\d+)\s+(-|[\d.]+)\s+([\d.]+)\s+"
                       r"(workers|the training|(?:read|decode|transform) \(workers\)|GPU decode|"
                       r"pinned copy|device copy)\s+(.*)$")
PIPELINE_RE = re.compile(r"^(\S+)\s+(-|[\d.]+)\s+(-|[\d.]+)\s+(\d+)$")


def snapshots(text):
    """[{"header", "pipelines": {name: row}, "clients": {id: row}}]"""
    out = []
    for line in text.splitlines():
        if line.startswith("loaderd "):
            out.append({"header": line, "pipelines": {}, "clients": {}})
            continue
        check(out, "a line before the first header: %r" % line)
        m = CLIENT_RE.match(line)
        if m:
            out[-1]["clients"][int(m.group(1))] = m.groups()
            continue
        m = PIPELINE_RE.match(line)
        if m:
            out[-1]["pipelines"][m.group(1)] = m.groups()
            continue
        check(line == "" or line.startswith("PIPELINE") or line.startswith("CLIENT"),
              "a line top should not print: %r" % line)
    return out


def body(env):
    raw = env.make_raw("raw.bin", 4000, 32)
    cfg = env.config("top", {"train": {"source": "raw:" + raw, "record_bytes": 32, "batch_size": BATCH},
                             "fast": {"source": "raw:" + raw, "record_bytes": 32, "batch_size": BATCH}},
                     workers=2)
    d = env.start_daemon(cfg)
    c = env.spawn_loaderctl(harness.consume_args(d.socket, "train", rank=0, world=1, epochs=50,
                                                 extra=["--step-ms", "20", "--quiet", "--name", "slow one"]))
    f = env.spawn_loaderctl(harness.consume_args(d.socket, "fast", rank=0, world=1, epochs=1000,
                                                 extra=["--quiet", "--name", "fast"]))
    st = d.wait_status(lambda s: len(s["clients"]) == 2 and all(x["released"] >= 3 for x in s["clients"]), 20,
                       "the clients consuming")
    cid = [x["id"] for x in st["clients"] if x["pipeline"] == "train"][0]
    fid = [x["id"] for x in st["clients"] if x["pipeline"] == "fast"][0]

    r = env.loaderctl(["--socket", d.socket, "top", "--iterations", "3", "--interval", "0.3"], timeout_s=20)
    check(r.returncode == 0, "loaderctl top exited %d: %s" % (r.returncode, r.stderr))
    print(r.stdout)
    snaps = snapshots(r.stdout)
    check(len(snaps) == 3, "%d snapshots, expected 3" % len(snaps))
    check("\033[" not in r.stdout, "escape sequences on a pipe")
    head = snaps[-1]["header"]
    check(("pid %d" % d.pid) in head and re.search(r"workers 2, \d+% busy", head), "header: %r" % head)

    row = snaps[-1]["clients"].get(cid)
    check(row is not None, "no row for client %d: %s" % (cid, snaps[-1]["clients"]))
    _, pid, pipeline, rank, world, rate, wait, limit, name = row
    check(int(pid) == c.pid, "client pid %s, expected %d" % (pid, c.pid))
    check(pipeline == "train" and (rank, world) == ("0", "1"), "pipeline/rank: %s" % (row,))
    check(rate != "-" and float(rate) > 0, "client batches/s %s, expected > 0" % rate)
    check(0 <= float(wait) <= 100, "wait %s" % wait)
    check(limit in ("read (workers)", "the training"), "limit %r" % limit)
    check(name == "slow one", "name %r" % name)
    # The first snapshot has no earlier one: no rate, yet the row.
    check(snaps[0]["clients"][cid][5] == "-", "first snapshot's rate: %s" % (snaps[0]["clients"][cid],))

    row = snaps[-1]["clients"].get(fid)
    check(row is not None and row[2] == "fast" and int(row[1]) == f.pid, "the fast client's row: %s" % (row,))
    check(float(row[5]) > 0 and row[7] == "read (workers)", "the fast client's rate and limit: %s" % (row,))

    p = snaps[-1]["pipelines"].get("train")
    check(p is not None, "no pipeline row: %s" % snaps[-1]["pipelines"])
    check(p[1] != "-" and float(p[1]) > 0 and p[3] == "1", "pipeline row %s" % (p,))
    check(abs(float(p[2]) - BATCH * float(p[1])) <= BATCH * 0.1, "samples/s %s for batches/s %s" % (p[2], p[1]))

    r = env.loaderctl(["--socket", d.socket, "top", "--interval", "0"], timeout_s=10)
    check(r.returncode == 2 and "--interval" in r.stderr, "a zero interval: %d %s" % (r.returncode, r.stderr))
    for x in (c, f):
        x.kill()
        x.wait()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_top", body)
