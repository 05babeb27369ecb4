#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A configuration reload changes the worker count live and loses nothing;
a reload it cannot apply is refused whole, with a reason, and changes
nothing.

- Under a consumer stepping slowly through an epoch, `loaderctl reload`
  raises workers from 2 to 5 (answer "workers 2 -> 5"; five workers run),
  then SIGHUP lowers them to 2 while every worker is stopped (SIGSTOP)
  holding items: workers 2-4 show as retiring, finish those items once
  continued, exit 0 and are gone from status; workers 0 and 1 keep their
  pids. systemd hears RELOADING=1, then READY=1 again.
  The consumer's dump equals a run without reloads.
- Refused, each with exit 1, a message naming the problem, and status
  unchanged: a syntax error (FILE:LINE), a changed [daemon] key that takes
  a restart, workers over max_workers, a missing file. (Pipelines added,
  removed and changed: test_reload_pipelines.py.)
  A reload with nothing changed says "no change"; log_level applies live.
  Nothing reads NOTIFY_SOCKET meanwhile: each reload's RELOADING=1 and
  READY=1 fill its queue, which must not stall the daemon.
- As root, a reload asked by another user is refused (EPERM) and names
  the client's pid and uid. A daemon started without --config refuses a
  reload: it has no file.
- Afterwards a full epoch is still identical to the reference.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, STEP_MS = 1600, 512, 16, 30  # 100 batches, >= 3 s


def write(env, workers, pipeline_extra=None, extra_pipelines=None, **daemon):
    pipelines = {"p": dict({"source": "raw:" + env.data, "record_bytes": RECORD, "batch_size": BATCH,
                            "seed": 8, "chunk": 4}, **(pipeline_extra or {}))}
    pipelines.update(extra_pipelines or {})
    return env.config("rl", pipelines, workers=workers, max_workers=5, **daemon)


def reload(env, d, want_rc, want_text, what):
    r = env.loaderctl(["--socket", d.socket, "reload"])
    out = r.stdout if want_rc == 0 else r.stderr
    check(r.returncode == want_rc and want_text in out,
          "%s: loaderctl reload exited %d (expected %d); expected %r in its output\nstdout: %s\nstderr: %s"
          % (what, r.returncode, want_rc, want_text, r.stdout, r.stderr))
    return out


def check_refused(env, d, want_text, what, workers):
    before = d.status()["config"]
    reload(env, d, 1, want_text, what)
    st = d.status()
    check(st["config"]["refused"] == before["refused"] + 1 and st["config"]["reloads"] == before["reloads"],
          "%s: status counts %s after a refused reload, before it %s" % (what, st["config"], before))
    check(st["config"]["last"] is not None and st["config"]["last"][0] == "refused"
          and want_text in st["config"]["last"][1], "%s: last_reload is %s" % (what, st["config"]["last"]))
    check(st["config"]["workers"] == workers and len(st["workers"]) == workers,
          "%s: a refused reload changed the workers: %s" % (what, st["workers"]))
    check("reload refused" in d.log() and want_text in d.log(), "%s: the daemon's log does not say why" % what)


def running(st, n):
    return (st["config"]["workers"] == n and len(st["workers"]) == n
            and all(w["state"] == "running" and w["pid"] > 0 for w in st["workers"]))


def body(env):
    env.data = env.make_raw("data.bin", N, RECORD, seed=21)
    crcs = harness.raw_sample_crcs(env.data, RECORD)
    cfg = write(env, 2)
    d = env.start_daemon(cfg)
    st = d.status()
    check(st["config"] == {"file": cfg, "workers": 2, "max_workers": 5, "reloads": 0, "refused": 0, "last": None},
          "config line at start: %s" % st["config"])

    ref_dump = harness.reference_epoch(env, d, crcs, N)

    # Grow, then shrink, under a slow consumer.
    slow, slow_dump = harness.spawn_slow_consumer(env, d, STEP_MS)
    write(env, 5)
    reload(env, d, 0, "workers 2 -> 5", "growing to 5 workers")
    st = d.wait_status(lambda s: running(s, 5), 15, "five running workers")
    check(st["config"]["reloads"] == 1 and st["config"]["last"] == ("applied", "workers 2 -> 5"),
          "status after growing: %s" % st["config"])
    old_pids = [w["pid"] for w in st["workers"][:2]]

    # Every worker stopped, so items pile up on all of them, the retiring
    # ones included; then SIGHUP reduces the count to 2.
    pids = [w["pid"] for w in st["workers"]]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        d.wait_status(lambda s: all(w["inflight"] > 0 for w in s["workers"]), 15,
                      "every stopped worker to hold items")
        check(slow.poll() is None, "the consumer finished before the workers were reduced")
        write(env, 2)
        d.drain_notes()  # the notes so far, the first reload's included
        notes_before = len(d.notes)
        os.kill(d.pid, signal.SIGHUP)
        st = d.wait_status(lambda s: s["config"]["workers"] == 2, 15, "SIGHUP to reduce the workers to 2")
        check([(w["index"], w["state"]) for w in st["workers"]] ==
              [(0, "running"), (1, "running"), (2, "retiring"), (3, "retiring"), (4, "retiring")]
              and all(w["inflight"] > 0 for w in st["workers"]),
              "workers 2-4, stopped with items, are not shown retiring: %s" % st["workers"])
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    st = d.wait_status(lambda s: running(s, 2), 15, "the retired workers to be gone")
    check([w["pid"] for w in st["workers"]] == old_pids, "workers 0 and 1 changed pids: %s" % st["workers"])
    for pid in pids[2:]:
        harness.wait_for(lambda: not harness.pid_alive(pid), 10, "the retired worker %d to exit" % pid)

    def notified():
        d.drain_notes()
        new = d.notes[notes_before:]
        return "RELOADING=1" in new and "READY=1" in new[new.index("RELOADING=1"):]
    harness.wait_for(notified, 5, "RELOADING=1, then READY=1, on NOTIFY_SOCKET after SIGHUP "
                     "(received %s)" % d.notes[notes_before:])

    rc, out, err = harness.finish(slow, 60, "the slow consumer")
    check(rc == 0, "the consumer exited %d across reloads\nstdout: %s\nstderr: %s" % (rc, out, err))
    ref_text = harness.check_same_dump(slow_dump, ref_dump,
                                       "the dump across reloads differs from the reference")
    for i in (2, 3, 4):
        check("worker %d (pid %d) retired: exit code 0" % (i, pids[i]) in d.log(),
              "retired worker %d did not exit cleanly:\n%s" % (i, d.log()))

    # Reloads that are refused whole.
    with open(cfg) as f:
        good = f.read()
    with open(cfg, "a") as f:
        f.write("bogus = 1\n")
    line = good.count("\n") + 1
    check_refused(env, d, "%s:%d: unknown key \"bogus\"" % (cfg, line), "a syntax error", 2)
    write(env, 4, staging_slots=8)
    check_refused(env, d, "[daemon] staging_slots, which takes a restart", "a changed staging_slots", 2)
    env.config("rl", {"p": {"source": "raw:" + env.data, "record_bytes": RECORD, "batch_size": BATCH,
                            "seed": 8, "chunk": 4}}, workers=6)  # max_workers left to its default
    check_refused(env, d, "over max_workers = 5", "workers over max_workers", 2)
    os.rename(cfg, cfg + ".away")
    check_refused(env, d, "%s: No such file or directory" % cfg, "a missing file", 2)
    os.rename(cfg + ".away", cfg)

    write(env, 2)
    reload(env, d, 0, "no change", "an unchanged file")
    write(env, 2, log_level="debug")
    reload(env, d, 0, "log_level info -> debug", "log_level")

    if os.getuid() == 0:  # another user may connect (socket 0666 here) but not reload
        os.chmod(env.dir, 0o711)
        os.chmod(d.socket, 0o666)
        r = harness.subprocess.run([harness.binary("loaderctl"), "--socket", d.socket, "reload"],
                                   capture_output=True, text=True, timeout=20,
                                   preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
        check(r.returncode == 1 and "runs as uid 65534" in r.stderr and "only root" in r.stderr,
              "a reload by uid 65534: exit %d, stderr %r" % (r.returncode, r.stderr))
    else:
        print("not root: the check that another user cannot reload is skipped")

    (_, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1,
                                                         "dump": env.path("after.dump")}])
    check(harness.read_text(env.path("after.dump")) == ref_text, "an epoch after the reloads differs")
    d.stop()
    no_file_reload(env)


def no_file_reload(env):
    """A daemon started without --config has no file to reload."""
    sock = env.path("nofile.sock")
    with open(env.path("nofile.log"), "wb") as log, \
            harness.environ({"LOADERD_SOCKET": sock, "NOTIFY_SOCKET": None}):
        proc = harness.subprocess.Popen([harness.binary("loaderd")], stdin=harness.subprocess.DEVNULL,
                                        stdout=log, stderr=log)
    try:
        harness.wait_for(lambda: env.loaderctl(["--socket", sock, "status"]).returncode == 0, 15,
                         "loaderd without --config to answer")
        r = env.loaderctl(["--socket", sock, "reload"])
        check(r.returncode == 1 and "started without --config" in r.stderr,
              "reload of a daemon without a file: exit %d, stderr %r" % (r.returncode, r.stderr))
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    harness.run_test("test_reload", body)
