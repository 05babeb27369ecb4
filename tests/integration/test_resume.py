#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A position token resumes the epoch exactly, at any world size.

Both ranks of world 2 consume K batches and print their position; the two
tokens must be equal (and say how many samples of the epoch the job used).
Resuming from that token with world 2, 3 and 1 must deliver the rest of the
epoch re-sharded over the new ranks (DistributedSampler semantics on the
segment that starts at the token's offset), so that together with the
samples already consumed every sample is seen exactly once (plus only the
padding repeats of the new world size). Tokens that are malformed, for
another seed or for another dataset size are refused with exit 1 and a
message about the token.
"""

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED, K = 1001, 64, 32, 77, 5


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=31)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("rs", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH, "seed": SEED}})
    d = env.start_daemon(cfg)

    (_, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1,
                                                         "dump": env.path("ref.dump")}])
    perm = [s for _, s in harness.epoch_rows(rows, 0)]
    harness.check_permutation(perm, N, "reference epoch 0")

    jobs = [{"pipeline": "p", "rank": r, "world": 2, "batches": K, "dump": env.path("first-%d.dump" % r)}
            for r in range(2)]
    first = harness.consume_all(env, d.socket, jobs)
    consumed = []
    for r, (summary, token, rows) in enumerate(first):
        harness.check_dump_crcs(rows, crcs, "world 2 rank %d, first %d batches" % (r, K))
        expected = harness.shard_expected(perm, 0, r, 2, BATCH, False)[:K * BATCH]
        check(harness.epoch_rows(rows, 0) == expected and len(rows) == len(expected),
              "world 2 rank %d: the first %d batches are not the sampler's" % (r, K))
        check(summary["batches"] == K, "rank %d: --batches %d consumed %d" % (r, K, summary["batches"]))
        consumed += [s for _, _, s, _ in rows]
    token = first[0][1]
    check(first[1][1] == token, "ranks 0 and 1 print different positions: %s, %s" % (token, first[1][1]))
    g = K * BATCH * 2
    stream = harness.token_stream(token)
    check(stream.startswith("ldr2:p:"), "the token %s does not name pipeline p" % token)
    check(token == stream + "%d:%d:0:%d" % (SEED, N, g), "position after %d batches of world 2 is %s, "
          "expected %s%d:%d:0:%d" % (K, token, stream, SEED, N, g))

    for world in (2, 3, 1):
        jobs = [{"pipeline": "p", "rank": r, "world": world, "epochs": 1,
                 "dump": env.path("resume-%d-%d.dump" % (world, r)), "extra": ["--resume", token]}
                for r in range(world)]
        rest = []
        for r, (summary, end_token, rows) in enumerate(harness.consume_all(env, d.socket, jobs)):
            what = "resume with world %d rank %d" % (world, r)
            harness.check_dump_crcs(rows, crcs, what)
            check(all(e == 0 for e, _, _, _ in rows), "%s: delivered epochs other than 0" % what)
            expected = harness.shard_expected(perm, g, r, world, BATCH, False)
            got = harness.epoch_rows(rows, 0)
            diff = harness.first_difference(got, expected)
            if diff is not None:
                raise harness.TestFailure("%s: row %d is %s, the sampler's segment from offset %d gives %s"
                                          % (what, diff, got[diff:diff + 2], g, expected[diff:diff + 2]))
            check(end_token == stream + "%d:%d:1:0" % (SEED, N), "%s: position at the end of the epoch is %s"
                  % (what, end_token))
            check(summary["epochs"] == 1, "%s: summary counts %d epochs" % (what, summary["epochs"]))
            rest += [s for _, _, s, _ in rows]
        counts = collections.Counter(consumed + rest)
        check(sorted(counts) == list(range(N)), "resume with world %d: %d samples of %d never delivered"
              % (world, N - len(counts), N))
        pad = -(-(N - g) // world) * world - (N - g)
        check(len(consumed) + len(rest) == N + pad and max(counts.values()) <= 2,
              "resume with world %d: %d deliveries, expected %d (padding %d)"
              % (world, len(consumed) + len(rest), N + pad, pad))

    for bad, why in (("garbage", "malformed"), (stream + "%d:%d:0:%d" % (SEED + 1, N, g), "another seed"),
                     (stream + "%d:%d:0:0" % (SEED, N - 1), "another dataset size")):
        r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, extra=["--resume", bad, "--quiet"]))
        check(r.returncode == 1, "a %s token (%s) gave exit %d, expected 1\nstderr: %s"
              % (why, bad, r.returncode, r.stderr))
        check(r.stderr.startswith("loaderctl: ") and ("token" in r.stderr.lower() or bad in r.stderr),
              "a %s token (%s): the error does not mention the token: %r" % (why, bad, r.stderr))
        print("%s token: %s" % (why, r.stderr.strip()))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_resume", body)
