#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""megatron:PREFIX with document_shuffle (on by default): each epoch's
documents in an order of their own, concatenated, then cut into windows of
seq_len + 1 tokens, as Megatron-LM's GPTDataset builds its samples.

A uint16 dataset written here in Megatron's layout, 50 documents of 1 to
40 tokens and 3 empty ones; each non-empty document starts with a token no
other document has (60000 + its number), the rest below 50000, so that a
stream of tokens names the documents it is made of. seq_len 7. For two
epochs, two ranks consume the pipeline with --dump and --dump-data; then,
computed here from the file (pipeline sh: document_shuffle_block = 4, so
its order is a shuffle of 14 blocks and of the documents in each):
- every window of the epoch is delivered exactly once across the ranks,
  and the number of windows is (tokens - 1) // seq_len in both epochs;
- the windows, in window order, overlap by one token and make one stream
  that is the split's documents, each once, in some order, cut after the
  last whole window (the rest is a prefix of the next document);
- that order differs between the epochs and from the stored order, and
  each block's documents are one run of it, the blocks out of stored order;
- a daemon with 3 workers delivers exactly the same (epoch, batch,
  sample, CRC) lines and bytes as one with 1 worker;
- 30 batches, then 15 resumed from the position token, are the 45 batches
  of one run into the second epoch; resumed at epoch 5 after 3 batches and
  at the start of epoch 3, 4 batches are those one run delivers there.
Split valid of a pipeline with split = 6,3,1 is made of the valid
documents only (megatron-core's ranges), shuffled. split = 0,1,1 over 3
documents leaves train empty (refused at attach) and gives valid 2 and
test 1. direct = on with the document shuffle is refused on its line.
"""

import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_megatron import megatron_split  # noqa: E402

SEQ, BATCH, DOCS, EMPTY = 7, 4, 50, (5, 17, 33)
BLOCK = 4  # pipeline sh: 14 blocks of 4 documents (the last of 1); shv: one block, all of them
MARK = 60000


def make_documents(seed):
    rng = random.Random(seed)
    docs = []
    for d in range(DOCS + len(EMPTY)):
        if d in EMPTY:
            docs.append([])
        else:
            docs.append([MARK + d] + [rng.randint(0, 49999) for _ in range(rng.randint(0, 39))])
    return docs


def write_dataset(prefix, docs):
    harness.write_megatron(prefix, [len(doc) for doc in docs], [t for doc in docs for t in doc])


def windows_of(rows, raw, epoch, what):
    """{sample: tokens} of one epoch, each sample once."""
    row_bytes = (SEQ + 1) * 2
    out = {}
    for i, (e, _, s, _) in enumerate(rows):
        if e != epoch:
            continue
        check(s not in out, "%s: epoch %d delivered window %d twice" % (what, epoch, s))
        out[s] = list(struct.unpack("<%dH" % (SEQ + 1), raw[i * row_bytes:(i + 1) * row_bytes]))
    return out


def document_order(windows, docs, allowed, what):
    """The documents the epoch's windows are made of, in order; checks that
    the windows make one stream of whole documents of `allowed`, each
    once, and a prefix of one more."""
    n = len(windows)
    check(sorted(windows) == list(range(n)), "%s: windows %s are not 0..%d" % (what, sorted(windows)[:8], n - 1))
    stream = []
    for s in range(n):
        w = windows[s]
        if s:
            check(w[0] == stream[-1], "%s: window %d does not start with window %d's last token"
                  % (what, s, s - 1))
            stream += w[1:]
        else:
            stream += w
    order, at = [], 0
    while at < len(stream):
        d = stream[at] - MARK
        check(d in allowed and d not in order, "%s: token %d of the epoch's stream (%d) does not "
              "start a document of the split not yet seen" % (what, at, stream[at]))
        doc = docs[d]
        part = stream[at:at + len(doc)]
        check(part == doc[:len(part)], "%s: document %d at token %d differs from the file's"
              % (what, d, at))
        order.append(d)
        at += len(doc)
    total = sum(len(docs[d]) for d in allowed)
    check(n == (total - 1) // SEQ, "%s: %d windows for the split's %d tokens, not (%d - 1) // %d"
          % (what, n, total, total, SEQ))
    return order


def run(env, name, workers, jobs_of):
    d = env.start_daemon(env.config(name, PIPELINES, workers=workers))
    results = harness.consume_all(env, d.socket, jobs_of(name))
    d.stop()
    return results


def body(env):
    seed = next(s for s in range(100) if
                (sum(len(x) for x in make_documents(s)) - 1) // SEQ % 2 == 0)
    docs = make_documents(seed)
    prefix = env.path("web")
    write_dataset(prefix, docs)
    global PIPELINES
    PIPELINES = {
        "sh": {"source": "megatron:" + prefix, "seq_len": SEQ, "batch_size": BATCH, "seed": 5,
               "document_shuffle_block": BLOCK},
        "shv": {"source": "megatron:" + prefix, "seq_len": SEQ, "batch_size": BATCH, "seed": 5,
                "split": "6,3,1"},
    }
    everything = list(range(len(docs)))

    def jobs(name):
        return [{"pipeline": "sh", "rank": r, "world": 2, "epochs": 2,
                 "dump": env.path("%s-%d.dump" % (name, r)),
                 "extra": ["--dump-data", env.path("%s-%d.data" % (name, r))]} for r in range(2)]

    runs = {w: run(env, "w%d" % w, w, jobs) for w in (1, 3)}
    orders = []
    for epoch in range(2):
        windows = {}
        for r in range(2):
            with open(env.path("w1-%d.data" % r), "rb") as f:
                raw = f.read()
            part = windows_of(runs[1][r][2], raw, epoch, "rank %d" % r)
            both = set(part) & set(windows)
            check(not both, "epoch %d: windows %s went to both ranks" % (epoch, sorted(both)[:8]))
            windows.update(part)
        orders.append(document_order(windows, docs, everything, "epoch %d" % epoch))
        print("epoch %d: %d windows, documents %s..." % (epoch, len(windows), orders[-1][:12]))
    stored = [d for d in everything if docs[d]]
    for epoch, order in enumerate(orders):
        # blocks of BLOCK stored documents, each a run of the order
        runs_of = [d // BLOCK for i, d in enumerate(order) if i == 0 or d // BLOCK != order[i - 1] // BLOCK]
        check(len(runs_of) == len(set(runs_of)), "epoch %d: the blocks of the order %s are not runs "
              "of it" % (epoch, runs_of))
        check(runs_of != sorted(runs_of), "epoch %d: the blocks are in stored order" % epoch)
    check(orders[0] != orders[1], "the two epochs have the same document order")
    check(orders[0][:len(stored)] != stored[:len(orders[0])], "epoch 0 keeps the stored order")
    for r in range(2):
        check(runs[1][r][2] == runs[3][r][2], "rank %d: 1 and 3 workers delivered different dumps" % r)
        with open(env.path("w1-%d.data" % r), "rb") as a, open(env.path("w3-%d.data" % r), "rb") as b:
            check(a.read() == b.read(), "rank %d: 1 and 3 workers delivered different bytes" % r)

    # Resumable: 30 batches, then 15 more from the token, are the first 45
    # batches of one run (the second epoch's start included).
    d = env.start_daemon(env.config("resume", PIPELINES, workers=2))
    per_epoch = (len(runs[1][0][2]) + len(runs[1][1][2])) // 2 // BATCH
    (_, _, ref), = harness.consume_all(env, d.socket, [{"pipeline": "sh", "batches": 45,
                                                        "dump": env.path("ref.dump")}])
    (_, token, first), = harness.consume_all(env, d.socket, [{"pipeline": "sh", "batches": 30,
                                                              "dump": env.path("a.dump")}])
    (_, _, rest), = harness.consume_all(env, d.socket, [{"pipeline": "sh", "batches": 15,
                                                         "dump": env.path("b.dump"),
                                                         "extra": ["--resume", token]}])
    check(per_epoch < 45, "the resume check does not reach epoch 1 (%d batches an epoch)" % per_epoch)
    got = [(e, s, c) for e, _, s, c in first + rest]
    want = [(e, s, c) for e, _, s, c in ref]
    check(got == want, "30 batches and 15 more from %s differ from 45 batches in one run" % token)

    # Resumed at any epoch and offset: epoch 5 after 3 batches, and epoch 3
    # at its start, are the batches one run from the start delivers there.
    (_, _, long_ref), = harness.consume_all(env, d.socket, [{"pipeline": "sh",
                                                             "batches": 6 * per_epoch + 2,
                                                             "dump": env.path("long.dump")}])
    fields = token.split(":")  # ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET
    for epoch, offset in ((5, 3 * BATCH), (3, 0)):
        at = ":".join(fields[:5] + [str(epoch), str(offset)])
        (_, _, got), = harness.consume_all(env, d.socket, [{"pipeline": "sh", "batches": 4,
                                                            "dump": env.path("e%d.dump" % epoch),
                                                            "extra": ["--resume", at]}])
        rows = [(e, s, c) for e, _, s, c in long_ref if e == epoch]
        first_row = offset  # one rank: the epoch's rows in order
        check([(e, s, c) for e, _, s, c in got] == rows[first_row:first_row + 4 * BATCH],
              "4 batches resumed at %s differ from those one run delivers there" % at)
    d.stop()

    # Split valid, shuffled: the valid documents only.
    idx = megatron_split((6, 3, 1), len(docs))
    d = env.start_daemon(env.config("valid", PIPELINES))
    dump, data = env.path("v.dump"), env.path("v.data")
    r = env.loaderctl(harness.consume_args(d.socket, "shv", epochs=2, dump=dump,
                                           extra=["--split", "valid", "--dump-data", data, "--quiet"]))
    check(r.returncode == 0, "consume --split valid exited %d: %s" % (r.returncode, r.stderr))
    d.stop()
    rows = harness.read_dump(dump)
    with open(data, "rb") as f:
        raw = f.read()
    valid = list(range(idx[1], idx[2]))
    vorders = [document_order(windows_of(rows, raw, e, "valid"), docs, valid, "valid epoch %d" % e)
               for e in range(2)]
    check(vorders[0] != vorders[1], "valid: the two epochs have the same document order")
    print("valid (documents %d..%d): %s / %s" % (idx[1], idx[2], vorders[0], vorders[1]))

    # split = 0,1,1 over 3 documents: train is not built (megatron-core's
    # bookend of no width), valid has 2, test 1; train is refused at attach.
    small = env.path("small")
    write_dataset(small, [[MARK + d] + [d] * 5 for d in range(3)])
    d = env.start_daemon(env.config("rounding", {"p": {"source": "megatron:" + small, "seq_len": 2,
                                                       "batch_size": 1, "split": "0,1,1"}}))
    got = d.status()["pipelines"][0]["splits"]
    check(got == {"train": (0, 0, 0), "valid": (0, 2, 5), "test": (2, 3, 2)},
          "split = 0,1,1 over 3 documents: status gives %s" % got)
    r = env.loaderctl(harness.consume_args(d.socket, "p", batches=1))
    check(r.returncode != 0 and 'pipeline "p": split "train" is empty: split = 0,1,1 gives it '
          'sequences 0..0 of 3' in r.stderr, "train of split = 0,1,1: exited %d: %s"
          % (r.returncode, r.stderr))
    d.stop()

    cfg = env.config("direct", {"p": {"source": "megatron:" + prefix, "seq_len": SEQ,
                                      "batch_size": BATCH, "direct": "on"}})
    r = subprocess.run([harness.binary("loaderd"), "--config", cfg, "--check-config"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "direct: on reads each sample as one range" in r.stderr,
          "direct with the document shuffle: exited %d: %s" % (r.returncode, r.stderr))


PIPELINES = {}

if __name__ == "__main__":
    harness.run_test("test_megatron_shuffle", body)
