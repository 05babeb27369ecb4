#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a rank receives depends on the seed only, never on the worker count.

The same pipeline (small work items, so a batch is spread over every
worker) is consumed by both ranks of world 2 for two epochs, once from a
daemon with 1 worker, once from a daemon with 4 and once from one with
`workers = auto` (which starts at 1 and changes the count as it sees fit):
the dumps must be byte-identical and every CRC must match the file. A pipeline with another
seed must give another order of the same samples.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 777, 200, 24


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=5)
    crcs = harness.raw_sample_crcs(data, RECORD)
    common = {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH, "chunk": 3}
    pipelines = {"a": dict(common, seed=42), "b": dict(common, seed=43)}

    dumps = {}
    for workers in (1, 4, "auto"):
        d = env.start_daemon(env.config("w%s" % workers, pipelines, workers=workers))
        st = d.status()
        expected = 1 if workers == "auto" else workers
        check(len(st["workers"]) == expected, "status lists %d workers, configured %s"
              % (len(st["workers"]), workers))
        jobs = [{"pipeline": p, "rank": r, "world": 2, "epochs": 2,
                 "dump": env.path("%s-w%s-r%d.dump" % (p, workers, r))}
                for p in ("a", "b") for r in range(2)]
        for j, (_, _, rows) in zip(jobs, harness.consume_all(env, d.socket, jobs)):
            harness.check_dump_crcs(rows, crcs, "%s rank %d with %s workers" % (j["pipeline"], j["rank"], workers))
            dumps[(j["pipeline"], workers, j["rank"])] = harness.read_text(j["dump"])
        if workers == 4:
            busy = [w["index"] for w in d.status()["workers"] if w["items"] > 0]
            check(len(busy) > 1, "with 4 workers only workers %s did any item" % busy)
        d.stop()

    for p in ("a", "b"):
        for r in range(2):
            one = dumps[(p, 1, r)]
            for other in (4, "auto"):
                two = dumps[(p, other, r)]
                check(one == two, "pipeline %s rank %d: the dump with %s workers differs from the "
                      "one with 1 worker (first differing line %s)"
                      % (p, r, other, harness.first_difference(one.splitlines(), two.splitlines())))
    for r in range(2):
        a = [line.split()[2] for line in dumps[("a", 1, r)].splitlines()]
        b = [line.split()[2] for line in dumps[("b", 1, r)].splitlines()]
        check(a != b, "seeds 42 and 43 give rank %d the same order" % r)
    for seed_name in ("a", "b"):
        seen = set(int(x.split()[2]) for r in range(2) for x in dumps[(seed_name, 1, r)].splitlines()
                   if x.startswith("0 "))
        check(seen == set(range(N)), "pipeline %s: epoch 0 misses %d samples" % (seed_name, N - len(seen)))

if __name__ == "__main__":
    harness.run_test("test_determinism", body)
