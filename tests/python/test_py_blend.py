#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A blended pipeline through the Python package: Loader("mix").

The members of tests/integration/test_blend.py (two Megatron datasets and
two llm.c shards, member d's tokens in 1000*d ..), blended with weights
equal to their sizes, with outputs tokens and positions (eod_token 1003, a
token of the second member). For two epochs, each batch's
sample_indices() name blended samples; every row holds, for its sample,
a window of the member the greedy rule gives (checked against the files)
and its positions; each epoch delivers every blended sample and every
member window once. state_dict() after a batch resumes a new Loader at
the next batch's samples and rows.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_blend import SEQ, SIZES, greedy, write_members  # noqa: E402

EOD, BATCH = 1003, 4


def body(env):
    loaderd = ch.import_loaderd()
    prefixes, pattern, windows = write_members(env)
    src = "megatron:%s 60, megatron:%s 36, llmc:%s 24" % (prefixes[0], prefixes[1], pattern)
    d = env.start_daemon(env.config("blend", {"mix": {
        "source": src, "seq_len": SEQ, "batch_size": BATCH, "seed": 9, "document_shuffle": "off",
        "outputs": "tokens positions", "eod_token": EOD}}))
    n = sum(SIZES)
    members, _ = greedy(SIZES, n)
    x = loaderd.Loader("mix", socket=d.socket, framework="numpy", device="cpu")
    check(len(x) == n // BATCH, "%d batches an epoch, expected %d" % (len(x), n // BATCH))
    for epoch in range(2):
        covered, seen = [], set()
        for b in x:
            for r, s in enumerate(b.sample_indices()):
                s = int(s)
                row = tuple(b["tokens"][r].tolist())
                what = "epoch %d batch %d row %d (sample %d)" % (epoch, b.index, r, s)
                m = members[s]
                check(row in windows[m], "%s: tokens %s... are not a window of member %d" % (what, row[:3], m))
                check(b["positions"][r].tolist() == harness.positions_of(row, SEQ, EOD), "%s: positions" % what)
                covered.append(s)
                seen.add(row)
        check(sorted(covered) == list(range(n)), "epoch %d: samples are not each of 0..%d once"
              % (epoch, n - 1))
        check(len(seen) == n, "epoch %d: %d distinct windows, not each member window once" % (epoch, len(seen)))
    print("mix: %d blended samples, twice" % n)

    it = iter(x)
    next(it)
    state = x.state_dict()
    b = next(it)
    want = ([int(s) for s in b.sample_indices()], b["tokens"].tolist())
    x.close()
    y = loaderd.Loader("mix", socket=d.socket, framework="numpy", device="cpu", state=state)
    b = next(iter(y))
    got = ([int(s) for s in b.sample_indices()], b["tokens"].tolist())
    check(got == want, "resumed from %s at samples %s, expected %s" % (state["position"], got[0], want[0]))
    y.close()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_py_blend", body)
