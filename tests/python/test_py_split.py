#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Splits of a megatron pipeline through the Python package:
Loader(NAME, split="valid").

A Megatron dataset of documents of 1 to 30 tokens, each ending with the EOD
token 0, and a pipeline with split = 8,1,1 and document-aware outputs. The
valid split's documents are those megatron-core's rule gives (computed here in
Python); for two epochs a Loader of split "valid" delivers each window of
those documents' tokens once per epoch (tokens and positions checked row by
row) and nothing of the other splits; its state_dict() names the split and
resumes a valid Loader at the next batch, while a train Loader refuses it
(ValueError naming both splits) and so does the daemon when the position
token is forced on it. An unknown split and "valid" of a pipeline without
`split` are refused with LoaderdError naming the split and the pipeline.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_py_documents import EOD, documents  # noqa: E402

SEQ, BATCH, WEIGHTS = 15, 4, (8, 1, 1)


def megatron_split(splits, size):
    """megatron-core's split of `size` sequences (one a document here)."""
    total = float(sum(splits))
    cum = [0.0]
    for s in splits:
        cum.append(cum[-1] + s / total)
    return [int(round(c * float(size))) for c in cum]


def body(env):
    loaderd = ch.import_loaderd()
    stream, lengths = documents(11)
    prefix = env.path("web")
    harness.write_megatron(prefix, lengths, stream)
    base = {"source": "megatron:" + prefix, "seq_len": SEQ, "batch_size": BATCH, "seed": 3,
            "outputs": "tokens positions", "eod_token": EOD, "document_shuffle": "off"}
    d = env.start_daemon(env.config("split", {"web": dict(base, split="8,1,1"), "whole": base}))

    idx = megatron_split(WEIGHTS, len(lengths))
    first, end = sum(lengths[:idx[1]]), sum(lengths[:idx[2]])
    valid = stream[first:end]
    n = (len(valid) - 1) // SEQ
    x = loaderd.Loader("web", socket=d.socket, framework="numpy", device="cpu", split="valid")
    check(len(x) == (n + BATCH - 1) // BATCH, "valid: %d batches an epoch, expected %d of %d samples"
          % (len(x), (n + BATCH - 1) // BATCH, n))
    for epoch in range(2):
        covered = []
        for b in x:
            for r, s in enumerate(b.sample_indices()):
                window = valid[s * SEQ:s * SEQ + SEQ + 1]
                what = "valid: epoch %d batch %d row %d (sample %d)" % (epoch, b.index, r, s)
                check(b["tokens"][r].tolist() == window, "%s: tokens %s, not the valid documents' "
                      "window %s" % (what, b["tokens"][r].tolist(), window))
                check(b["positions"][r].tolist() == harness.positions_of(window, SEQ, EOD), "%s: positions" % what)
                covered.append(s)
        check(sorted(covered) == list(range(n)), "valid: epoch %d covered %d samples, not each of "
              "the %d once" % (epoch, len(covered), n))
    print("split valid: documents %d..%d, %d windows, twice" % (idx[1], idx[2], n))

    # state_dict() after one batch: resumes a valid Loader, not a train one.
    it = iter(x)
    next(it)
    state = x.state_dict()
    want = [int(s) for s in next(it).sample_indices()]
    x.close()
    check(state["split"] == "valid" and state["position"].endswith(":valid"),
          "valid: state_dict() %s does not name the split" % state)
    y = loaderd.Loader("web", socket=d.socket, framework="numpy", device="cpu", split="valid",
                       state=state)
    got = [int(s) for s in next(iter(y)).sample_indices()]
    check(got == want, "valid: resumed at samples %s, expected %s" % (got, want))
    y.close()
    try:
        loaderd.Loader("web", socket=d.socket, framework="numpy", device="cpu", state=state)
        check(False, "a train Loader took a valid state")
    except ValueError as e:
        check("split 'valid'" in str(e) and "split 'train'" in str(e), "train Loader: %s" % e)
    forged = dict(state, split="train")
    try:
        loaderd.Loader("web", socket=d.socket, framework="numpy", device="cpu", state=forged)
        check(False, "the daemon resumed a valid token on train")
    except loaderd.LoaderdError as e:
        check('split "valid"; this client attaches to split "train" of pipeline "web"' in str(e),
              "forged state: %s" % e)

    for name, split, words in [("web", "validation", ['unknown split "validation"', 'pipeline "web"']),
                               ("whole", "valid", ['pipeline "whole" has no split "valid"'])]:
        try:
            loaderd.Loader(name, socket=d.socket, framework="numpy", device="cpu", split=split)
            check(False, "split %r of %s was accepted" % (split, name))
        except loaderd.LoaderdError as e:
            check(all(w in str(e) for w in words), "split %r of %s: %s" % (split, name, e))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_py_split", body)
