#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Workers are forks of one zygote, which holds the arena's only writable
mapping outside the master; losing it is fatal, and said so.

1. The process tree: the master has one child that is not a worker, the
   zygote (`loaderd-worker --zygote`); every worker's parent is the
   zygote. The zygote holds a shared writable mapping of the arena but no
   descriptor of it; no worker holds one either. A worker that is killed
   comes back as a fork of the same zygote.
2. SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGPIPE sent to the zygote are
   ignored: it stays, and a client reads an epoch byte for byte.
3. SIGKILL of the zygote: the workers die with it, and the daemon exits 1
   by itself, its log naming the zygote and why no worker can start again.
4. A worker program whose zygote exits at start: loaderd exits 1 at start,
   naming the program, `--zygote` and its exit code; no READY=1.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 512, 64, 16


def children(pid):
    found = set()
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, task)) as f:
            found |= {int(p) for p in f.read().split()}
    return found


def parent_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def holds_arena_fd(pid):
    base = "/proc/%d/fd" % pid
    for name in os.listdir(base):
        try:
            if os.readlink(os.path.join(base, name)).startswith("/memfd:loaderd-arena"):
                return True
        except OSError:
            pass
    return False


def arena_mappings(pid):
    with open("/proc/%d/maps" % pid) as f:
        return [line.split()[1] for line in f if "/memfd:loaderd-arena" in line]


def find_zygote(d):
    workers = {w["pid"] for w in d.status()["workers"]}
    others = [p for p in children(d.proc.pid) if p not in workers]
    zygotes = []
    for p in others:
        with open("/proc/%d/cmdline" % p, "rb") as f:
            if b"\0--zygote\0" in f.read():
                zygotes.append(p)
    check(len(zygotes) == 1, "expected one zygote among the master's children %s, found %s"
          % (sorted(children(d.proc.pid)), zygotes))
    return zygotes[0]


def tree(env, d, crcs):
    zygote = find_zygote(d)
    workers = d.status()["workers"]
    for w in workers:
        check(parent_of(w["pid"]) == zygote, "worker %s's parent is %d, not the zygote %d"
              % (w, parent_of(w["pid"]), zygote))
        check(not holds_arena_fd(w["pid"]), "worker %d holds a descriptor of the arena" % w["pid"])
        check(arena_mappings(w["pid"]) == ["rw-s"], "worker %d's arena mappings: %s"
              % (w["pid"], arena_mappings(w["pid"])))
    check(not holds_arena_fd(zygote), "the zygote still holds a descriptor of the arena")
    check(arena_mappings(zygote) == ["rw-s"], "the zygote's arena mappings: %s"
          % arena_mappings(zygote))
    old = workers[0]["pid"]
    os.kill(old, signal.SIGKILL)
    st = d.wait_status(lambda s: s["workers"][0]["state"] == "running" and s["workers"][0]["pid"]
                       not in (0, old), 15, "worker 0 to come back")
    check(parent_of(st["workers"][0]["pid"]) == zygote, "the respawned worker is not the zygote's")
    check(not harness.pid_alive(old), "the killed worker %d was not reaped" % old)
    return zygote


def signals_ignored(env, d, zygote, crcs):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE):
        os.kill(zygote, sig)
    (_, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1,
                                                         "dump": env.path("signals.dump")}])
    harness.check_dump_crcs(rows, crcs, "consume after signals to the zygote")
    check(harness.pid_alive(zygote), "the zygote died of an ignored signal")
    check(d.alive(), "loaderd exited after signals to the zygote")


def zygote_killed(env, d, zygote):
    workers = [w["pid"] for w in d.status()["workers"]]
    os.kill(zygote, signal.SIGKILL)
    try:
        rc = d.proc.wait(timeout=30)
    except harness.subprocess.TimeoutExpired:
        raise harness.TestFailure("loaderd did not exit within 30 s of its zygote's death") from None
    check(rc == 1, "loaderd exited %d after its zygote was killed, expected 1" % rc)
    log = d.log()
    expect = "the worker zygote (%s --zygote) killed by signal 9" % harness.binary("loaderd-worker")
    check(expect in log and "no worker can be started again" in log,
          "loaderd's log does not say %r:\n%s" % (expect, log))
    harness.wait_for(lambda: not any(harness.pid_alive(p) for p in workers), 10,
                     "the workers to die with the zygote")
    d.check_log_clean()


def zygote_fails_at_start(env, data):
    script = env.path("nozygote.sh")
    with open(script, "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = --zygote ]; then exit 3; fi\nexec "%s" "$@"\n'
                % harness.binary("loaderd-worker"))
    os.chmod(script, 0o755)
    cfg = env.config("nz", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH}}, workers=2, worker_program=script)
    d = env.start_daemon(cfg, wait_ready=False)
    try:
        rc = d.proc.wait(timeout=30)
    except harness.subprocess.TimeoutExpired:
        raise harness.TestFailure("loaderd did not exit although its zygote cannot start") from None
    check(rc == 1, "loaderd exited %d, expected 1, when its zygote exits at start" % rc)
    expect = "the worker zygote (%s --zygote) exit code 3 before it was ready" % script
    check(expect in d.log(), "loaderd's log does not say %r:\n%s" % (expect, d.log()))
    d.drain_notes()
    check(not any(n == "READY=1" for n in d.notes), "READY=1 sent although no zygote started")


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=5)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("zy", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH}}, workers=2)
    d = env.start_daemon(cfg)
    zygote = tree(env, d, crcs)
    signals_ignored(env, d, zygote, crcs)
    zygote_killed(env, d, zygote)
    zygote_fails_at_start(env, data)


if __name__ == "__main__":
    harness.run_test("test_worker_zygote", body)
