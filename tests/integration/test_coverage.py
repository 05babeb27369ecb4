#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every epoch covers the dataset the way DistributedSampler does.

A raw dataset of 1001 records (divisible by neither 2 nor 3), batch 32; for
world 1, 2 and 3, with drop_last off and on, all ranks consume two epochs at
once with --dump. Per epoch the union over ranks must be exactly the
sampler's multiset (drop_last: per-rank share rounded down to whole batches,
no sample twice; padding: all n samples plus exactly total - n repeats),
every sample's CRC must match its bytes in the file, the two epochs' orders
must differ, and batch numbers and sizes must be as the contract says. On
top of that each rank's order must be the world-1 order dealt out
round-robin (rank r gets positions r, r+W, ...), which is what makes the
permutation independent of the world size.
"""

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, EPOCHS = 1001, 64, 32, 2


def check_rank(rows, summary, perm, rank, world, drop_last, crcs, what):
    harness.check_dump_crcs(rows, crcs, what)
    for epoch in range(EPOCHS):
        got = harness.epoch_rows(rows, epoch)
        expected = harness.shard_expected(perm[epoch], 0, rank, world, BATCH, drop_last)
        sizes = collections.Counter(b for b, _ in got)
        n_batches = len(set(b for b, _ in expected))
        check(sorted(sizes) == list(range(n_batches)),
              "%s epoch %d: batch numbers %s, expected 0..%d"
              % (what, epoch, sorted(sizes), n_batches - 1))
        for b in range(n_batches):
            want = BATCH if b < n_batches - 1 or drop_last else len(expected) - b * BATCH
            check(sizes[b] == want, "%s epoch %d batch %d has %d samples, expected %d"
                  % (what, epoch, b, sizes[b], want))
        diff = harness.first_difference(got, expected)
        if diff is not None:
            raise harness.TestFailure("%s epoch %d: the order differs from the world-1 order dealt "
                                      "round-robin from row %d on (got %s, expected %s)"
                                      % (what, epoch, diff, got[diff:diff + 3], expected[diff:diff + 3]))
    epochs_seen = sorted(set(e for e, _, _, _ in rows))
    check(epochs_seen == list(range(EPOCHS)), "%s: dumped epochs %s" % (what, epochs_seen))
    check(summary["epochs"] == EPOCHS and summary["samples"] == len(rows)
          and summary["bytes"] == len(rows) * RECORD
          and summary["batches"] == len(set((e, b) for e, b, _, _ in rows)),
          "%s: summary %s disagrees with the %d dumped samples" % (what, summary, len(rows)))


def check_union(per_rank_rows, world, drop_last, what):
    for epoch in range(EPOCHS):
        counts = collections.Counter(s for rows in per_rank_rows for e, _, s, _ in rows if e == epoch)
        total = sum(counts.values())
        if drop_last:
            per_rank = (N // world) // BATCH * BATCH
            check(total == per_rank * world, "%s epoch %d: %d samples, expected %d"
                  % (what, epoch, total, per_rank * world))
            check(max(counts.values()) == 1, "%s epoch %d: a sample was delivered twice" % (what, epoch))
        else:
            expected_total = -(-N // world) * world
            check(sorted(counts) == list(range(N)),
                  "%s epoch %d: not every sample delivered (%d distinct)" % (what, epoch, len(counts)))
            check(total == expected_total, "%s epoch %d: %d samples, expected %d"
                  % (what, epoch, total, expected_total))
            check(max(counts.values()) <= 2, "%s epoch %d: a sample delivered 3 times" % (what, epoch))


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=11)
    crcs = harness.raw_sample_crcs(data, RECORD)
    common = {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH,
              "seed": 1234, "chunk": 5}
    cfg = env.config("cov", {
        "pad": dict(common, drop_last="false"),
        "drop": dict(common, drop_last="true"),
        "ordered": dict(common, shuffle="false"),
    })
    d = env.start_daemon(cfg)

    perm = None
    for world in (1, 2, 3):
        jobs = []
        for pipeline in ("pad", "drop"):
            for rank in range(world):
                jobs.append({"pipeline": pipeline, "rank": rank, "world": world, "epochs": EPOCHS,
                             "dump": env.path("%s-%d-%d.dump" % (pipeline, world, rank))})
        results = harness.consume_all(env, d.socket, jobs)
        if perm is None:
            # world 1 without drop_last delivers every epoch's whole permutation
            rows = results[0][2]
            perm = [[s for _, s in harness.epoch_rows(rows, e)] for e in range(EPOCHS)]
            for e in range(EPOCHS):
                harness.check_permutation(perm[e], N, "world 1 epoch %d" % e)
            check(perm[0] != perm[1], "epochs 0 and 1 have the same order")
            check(perm[0] != list(range(N)), "epoch 0 is not shuffled")
        for pipeline, drop_last in (("pad", False), ("drop", True)):
            mine = [(j, r) for j, r in zip(jobs, results) if j["pipeline"] == pipeline]
            for j, (summary, _, rows) in mine:
                what = "%s world %d rank %d" % (pipeline, world, j["rank"])
                check(summary["pipeline"] == pipeline and summary["rank"] == j["rank"]
                      and summary["world"] == world, "%s: summary names %s" % (what, summary))
                check_rank(rows, summary, perm, j["rank"], world, drop_last, crcs, what)
            check_union([r[2] for _, r in mine], world, drop_last, "%s world %d" % (pipeline, world))

    identity = [list(range(N))] * EPOCHS
    jobs = [{"pipeline": "ordered", "rank": r, "world": 2, "epochs": EPOCHS,
             "dump": env.path("ordered-%d.dump" % r)} for r in range(2)]
    for j, (summary, _, rows) in zip(jobs, harness.consume_all(env, d.socket, jobs)):
        check_rank(rows, summary, identity, j["rank"], 2, False, crcs, "ordered rank %d" % j["rank"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_coverage", body)
