#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Groups: clients that receive the same batches from one read.

Host delivery, a raw pipeline of 1024 records, batch 32, chunk 8 (4 items
a batch):
- 2 data-parallel groups x 2 members (4 clients) over 2 epochs with --dump:
  the members of a group dump byte-identical files, equal to a lone rank's
  of the same data-parallel rank; the two groups cover every sample exactly
  once per epoch; the workers did 4 items a batch, not 4 x members; the
  status line of each member names its group.
- a member attaching late: the first waits (status: waiting, nothing sent)
  and both then get the same sequence from the start.
- a member that disagrees (rank, depth, resume token, group size) is
  refused naming the group and the field; a full group refuses a third.
- a member that finishes (BYE) after 3 batches: the other gets the batches
  started for the group, then an error naming the member, not a hang.
- SIGKILL of one member mid-epoch: the other gets an error naming the
  group and the dead member's pid within seconds, and the key can be used
  again.
- the group's position token resumes the rest of the epoch at another
  data-parallel world size, covering it exactly once with what was read.
- a group of 3 of which 2 attach: past group_timeout_ms both get an error
  naming the group, their pids and the missing member, logged once,
  nothing read for it, and the daemon serves the next client.
"""

import collections
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, CHUNK, SEED = 1024, 48, 32, 8, 99
ITEMS_PER_BATCH = BATCH // CHUNK
DEPTH = 2
TIMEOUT_MS = 1500  # group_timeout_ms of the last daemon


def group_job(env, name, key, rank, world, member, **kw):
    extra = ["--group", key, "--group-size", str(kw.pop("size", 2)), "--name", "%s-%d" % (name, member)]
    extra += kw.pop("extra", [])
    return dict({"pipeline": "p", "rank": rank, "world": world,
                 "dump": env.path("%s-%d-%d.dump" % (name, rank, member)), "extra": extra}, **kw)


def spawn(env, d, job):
    return env.spawn_loaderctl(harness.consume_args(d.socket, **job) + ["--quiet"])


def items_done(d):
    """Items the workers have done, once no client is left and no item is
    in flight (a batch prefetched for a client that left still finishes)."""
    st = d.wait_status(lambda st: not st["clients"] and all(w["inflight"] == 0 for w in st["workers"]),
                       15, "no client and no item in flight")
    return sum(w["items"] for w in st["workers"])


def refused(env, d, job, want, what):
    r = env.loaderctl(harness.consume_args(d.socket, **job) + ["--quiet"])
    check(r.returncode == 1, "%s: exit %d, expected 1\nstderr: %s" % (what, r.returncode, r.stderr))
    for w in want:
        check(w in r.stderr, "%s: the error does not say %r: %r" % (what, w, r.stderr))
    print("%s: %s" % (what, r.stderr.strip()))


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=5)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("tp", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH, "seed": SEED, "chunk": CHUNK}},
                     workers=2)
    d = env.start_daemon(cfg)

    # 2 data-parallel groups of 2 members, 2 epochs
    check(items_done(d) == 0, "workers did items before any client")
    jobs = [group_job(env, "dp", "job-dp%d" % r, r, 2, m, epochs=2, extra=["--depth", str(DEPTH)])
            for r in range(2) for m in range(2)]
    procs = [spawn(env, d, j) for j in jobs]
    results = []
    for j, p in zip(jobs, procs):
        rc, out, err = harness.finish(p, 60, "member %s" % j["dump"])
        check(rc == 0, "member %s exited %d: %s" % (j["dump"], rc, err))
        summary, token = harness.parse_consume_output(out)
        results.append((summary, token, harness.read_dump(j["dump"])))
    batches = 2 * 2 * (N // 2 // BATCH)  # 2 epochs, 2 groups
    items = items_done(d)
    # at most DEPTH batches a group prefetched past the end; a batch read
    # once per member would make it twice as many
    check(batches * ITEMS_PER_BATCH <= items <= (batches + 2 * DEPTH) * ITEMS_PER_BATCH,
          "the workers did %d items for %d batches of %d items (and at most %d prefetched): each "
          "batch must be read once, not once per member" % (items, batches, ITEMS_PER_BATCH, 2 * DEPTH))
    for r in range(2):
        a, b = jobs[2 * r]["dump"], jobs[2 * r + 1]["dump"]
        harness.check_same_dump(b, a, "data-parallel rank %d: its members' dumps differ" % r)
        check(results[2 * r][1] == results[2 * r + 1][1], "rank %d: the members' tokens differ" % r)
        harness.check_dump_crcs(results[2 * r][2], crcs, "group of rank %d" % r)
    for epoch in range(2):
        counts = collections.Counter(s for k in (0, 2) for e, _, s, _ in results[k][2] if e == epoch)
        check(sorted(counts) == list(range(N)) and max(counts.values()) == 1,
              "epoch %d: the two groups together do not cover every sample exactly once" % epoch)
    # a lone rank of the same data-parallel rank gets what the group got
    lone = harness.consume_all(env, d.socket, [{"pipeline": "p", "rank": 1, "world": 2, "epochs": 2,
                                                 "dump": env.path("lone.dump")}])
    harness.check_same_dump(env.path("lone.dump"), jobs[2]["dump"],
                            "a group's batches differ from a lone rank's of the same rank")
    check(lone[0][1] == results[2][1], "a group's position differs from a lone rank's")
    stream = harness.token_stream(lone[0][1])  # "ldr2:p:DATA:", the pipeline's tokens' start

    # a late member: nothing is delivered before the group is whole
    before = items_done(d)
    late = ["--depth", str(DEPTH)]
    first = spawn(env, d, group_job(env, "late", "late", 0, 1, 0, epochs=1, extra=late))
    st = d.wait_status(lambda st: any(c["pid"] == first.pid for c in st["clients"]), 10,
                       "the first member to attach")
    me = [c for c in st["clients"] if c["pid"] == first.pid][0]
    check(me["group_state"] == "waiting" and me["group_joined"] == 1 and me["sent"] == 0,
          "a group of 1 of 2 members: status %s" % me)
    check(sum(w["items"] for w in st["workers"]) == before, "items were read for a group of 1 "
          "of 2 members")
    second = spawn(env, d, group_job(env, "late", "late", 0, 1, 1, epochs=1, extra=late))
    for p, m in ((first, 0), (second, 1)):
        rc, out, err = harness.finish(p, 30, "late member %d" % m)
        check(rc == 0, "late member %d exited %d: %s" % (m, rc, err))
    late_items = items_done(d) - before
    check(N // BATCH * ITEMS_PER_BATCH <= late_items <= (N // BATCH + DEPTH) * ITEMS_PER_BATCH,
          "late group: the workers did %d items for %d batches" % (late_items, N // BATCH))
    ref = harness.read_dump(env.path("late-0-0.dump"))
    check(len(ref) == N, "late group: %d rows, expected %d" % (len(ref), N))
    harness.check_same_dump(env.path("late-0-1.dump"), env.path("late-0-0.dump"),
                            "a member attaching late saw another sequence")

    # disagreement, a full group
    holder = spawn(env, d, group_job(env, "mm", "mm", 0, 2, 0, epochs=3, extra=["--step-ms", "20"]))
    d.wait_status(lambda st: any(c["pid"] == holder.pid for c in st["clients"]), 10, "member 0 of mm")
    refused(env, d, group_job(env, "mm", "mm", 1, 2, 1, epochs=1),
            ['group "mm"', "rank is 1 of 2, the group's is 0 of 2"], "a member of another rank")
    refused(env, d, group_job(env, "mm", "mm", 0, 2, 1, epochs=1, extra=["--depth", "1"]),
            ['group "mm"', "depth is 1"], "a member of another depth")
    refused(env, d, group_job(env, "mm", "mm", 0, 2, 1, epochs=1, size=3),
            ['group "mm"', "group_size is 3, the group's is 2"], "a member of another group size")
    refused(env, d, group_job(env, "mm", "mm", 0, 2, 1, epochs=1,
                              extra=["--resume", stream + "%d:%d:0:64" % (SEED, N)]),
            ['group "mm"', "resume token is \"%s%d:%d:0:64\", the group's is \"\"" % (stream, SEED, N)],
            "a member with another resume token")
    mate = spawn(env, d, group_job(env, "mm", "mm", 0, 2, 1, epochs=3, extra=["--step-ms", "20"]))
    st = d.wait_status(lambda st: sum(c["group"] == "mm" for c in st["clients"]) == 2
                       and all(c["released"] >= 3 for c in st["clients"] if c["group"] == "mm"),
                       15, "both members of mm to release 3 batches")
    for c in [c for c in st["clients"] if c["pid"] in (holder.pid, mate.pid)]:
        check(c["group"] == "mm" and c["group_size"] == 2 and c["group_joined"] == 2
              and c["group_state"] == "running", "status line of a member of mm: %s" % c)
    refused(env, d, group_job(env, "mm", "mm", 0, 2, 2, epochs=1),
            ['group "mm" already has its 2 members (pids', str(holder.pid), str(mate.pid)],
            "a third member")

    # SIGKILL of one member mid-epoch: the other is told, naming it
    os.kill(holder.pid, signal.SIGKILL)
    rc, out, err = harness.finish(mate, 10, "the member left alone")
    check(rc == 1, "the member left alone exited %d, expected 1: %s" % (rc, err))
    check('group "mm": member pid %d' % holder.pid in err and "left the group" in err,
          "the member left alone was not told which member left: %r" % err)
    print("member left alone: %s" % err.strip())
    holder.wait()
    d.wait_status(lambda st: not st["clients"], 10, "the group's members to be gone")
    again = [spawn(env, d, group_job(env, "again", "mm", 0, 2, m, batches=3)) for m in range(2)]
    for m, p in enumerate(again):
        rc, out, err = harness.finish(p, 30, "member %d of the group attached again" % m)
        check(rc == 0, "the key of an ended group cannot be used again: exit %d: %s" % (rc, err))

    # a member that finishes (BYE) ends the group: the other gets what was
    # started for the group, then an error saying why, not a hang
    short = spawn(env, d, group_job(env, "bye", "bye", 0, 1, 0, batches=3))
    long = spawn(env, d, group_job(env, "bye", "bye", 0, 1, 1, batches=30, extra=["--step-ms", "20"]))
    rc, out, err = harness.finish(short, 30, "the member that stops after 3 batches")
    check(rc == 0, "the member that stops after 3 batches exited %d: %s" % (rc, err))
    rc, out, err = harness.finish(long, 20, "the member that wants 30 batches")
    check(rc == 1 and 'group "bye": member pid %d' % short.pid in err
          and "left the group (BYE) after 3 batches" in err,
          "the member left alone after a BYE: exit %d, %r" % (rc, err))
    got, ref = harness.read_dump(env.path("bye-0-1.dump")), harness.read_dump(env.path("bye-0-0.dump"))
    check(len(ref) == 3 * BATCH and got[:len(ref)] == ref,
          "after a BYE the other member's batches are not the group's")
    print("member left after a BYE: %s" % err.strip())

    # resume from the group's token at another data-parallel world size
    jobs = [group_job(env, "first", "r-dp%d" % r, r, 2, m, batches=5) for r in range(2) for m in range(2)]
    procs = [spawn(env, d, j) for j in jobs]
    first = []
    for j, p in zip(jobs, procs):
        rc, out, err = harness.finish(p, 30, "member %s" % j["dump"])
        check(rc == 0, "member %s exited %d: %s" % (j["dump"], rc, err))
        first.append(harness.parse_consume_output(out)[1])
    g = 5 * BATCH * 2
    check(set(first) == {stream + "%d:%d:0:%d" % (SEED, N, g)}, "tokens after 5 batches of world 2: %s"
          % first)
    jobs = [group_job(env, "rest", "r-w3-dp%d" % r, r, 3, m, epochs=1, extra=["--resume", first[0]])
            for r in range(3) for m in range(2)]
    procs = [spawn(env, d, j) for j in jobs]
    for j, p in zip(jobs, procs):
        rc, out, err = harness.finish(p, 30, "member %s" % j["dump"])
        check(rc == 0, "resumed member %s exited %d: %s" % (j["dump"], rc, err))
        check(harness.parse_consume_output(out)[1] == stream + "%d:%d:1:0" % (SEED, N),
              "resumed member %s did not end at the end of epoch 0" % j["dump"])
    for r in range(3):
        harness.check_same_dump(jobs[2 * r + 1]["dump"], jobs[2 * r]["dump"],
                                "resumed at world 3, rank %d: the members' dumps differ" % r)
    seen = [s for r in range(2) for _, _, s, _ in harness.read_dump(env.path("first-%d-0.dump" % r))]
    rest = [s for r in range(3) for _, _, s, _ in harness.read_dump(env.path("rest-%d-0.dump" % r))]
    counts = collections.Counter(seen + rest)
    pad = -(-(N - g) // 3) * 3 - (N - g)
    check(sorted(counts) == list(range(N)) and len(seen) + len(rest) == N + pad,
          "resume at world 3: %d samples of %d delivered, %d deliveries (padding %d)"
          % (len(counts), N, len(seen) + len(rest), pad))
    d.stop()

    # a member that never comes: past group_timeout_ms the ones there are
    # told, naming the group, their pids and how many are missing
    cfg = env.config("tp-timeout", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                          "batch_size": BATCH, "seed": SEED, "chunk": CHUNK}},
                     workers=1, group_timeout_ms=TIMEOUT_MS)
    d = env.start_daemon(cfg)
    there = [spawn(env, d, group_job(env, "gone", "gone", 0, 1, m, size=3, epochs=1)) for m in range(2)]
    for m, p in enumerate(there):
        rc, out, err = harness.finish(p, 10 + TIMEOUT_MS // 1000, "member %d of a group of 3 with 2" % m)
        check(rc == 1 and 'group "gone": 2 of its 3 members attached (pids' in err
              and str(there[0].pid) in err and str(there[1].pid) in err
              and "the other 1 did not within group_timeout_ms (%d ms)" % TIMEOUT_MS in err,
              "member %d of a group that never fills: exit %d, %r" % (m, rc, err))
    print("a group that never fills: %s" % err.strip())
    check(items_done(d) == 0, "items were read for a group that never filled")
    check(d.log().count("did not within group_timeout_ms") == 1,
          "the timeout is not logged once:\n%s" % d.log())
    r = env.loaderctl(harness.consume_args(d.socket, "p", batches=2) + ["--quiet"], timeout_s=20)
    check(r.returncode == 0, "a client after the group's timeout: %s" % r.stderr)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_tp_groups", body)
