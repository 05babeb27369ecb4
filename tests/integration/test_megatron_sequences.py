#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""megatron:PREFIX with documents of several sequences: `split` divides the
index's sequences, as megatron-core's GPTDataset does, and an end of a
split that falls inside a document cuts it.

An int32 dataset written here in Megatron's layout: 400 documents (3 of
them empty) holding 997 sequences of 0 to 12 tokens, from 1 to 6 a
document; every token names its sequence and place (100 q + j + 2) but
the last of each document, which is the end-of-document token 1. The
split 80,15,5 gives, by megatron-core's rule over the 997 sequences,
train 0..798, valid 798..947, test 947..997, and both 798 and 947 fall
inside documents (the data is drawn until they do; Megatron-LM's older
rule over the 400 documents would give other ranges).
- status lists each split's sequences and megatron-core's sample count
  for one epoch, (tokens of the split's sequences - 1) // seq_len
  (GPTDataset's _get_num_tokens_per_epoch and __len__);
- without the document shuffle, split valid delivers every window of
  sequences 798..947's tokens once an epoch, and nothing else, with
  `positions` restarting after each end-of-document token, as GPTDataset
  computes them from the tokens;
- with it, each epoch's windows of train and of valid are one stream of
  the split's documents in some order, each once (the last cut short),
  where a document that an end cuts counts as its part in the split: the
  document holding sequence 798 has its sequences before 798 in train
  and those from 798 in valid, each a document of its split's order;
  positions again follow the tokens;
- a split's document order differs between epochs;
- both ends inside one document, and an empty document at an end: each
  split delivers exactly its sequences' tokens.
With LOADERD_MEGATRON_CORE naming an unpacked megatron-core wheel (and
torch importable), megatron-core's own builder also builds the three
GPTDatasets of the dataset (tools/megatron_split_reference.py,
gpt_datasets) and their sequences and lengths must be what status gives;
without it that comparison is left out, and says so.
"""

import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_megatron import megatron_split  # noqa: E402

DOCS, SEQUENCES, EMPTY = 400, 997, (0, 211, 399)
SEQ, BATCH, EOD, WEIGHTS = 16, 8, 1, (80, 15, 5)
SPLITS = ("train", "valid", "test")


def make_index(seed):
    """(sequence lengths, document index, tokens) of one draw."""
    rng = random.Random(seed)
    per_doc = [0 if d in EMPTY else 1 for d in range(DOCS)]
    full = [d for d in range(DOCS) if d not in EMPTY]
    for _ in range(SEQUENCES - sum(per_doc)):
        d = rng.choice([d for d in full if per_doc[d] < 6])
        per_doc[d] += 1
    doc_index, lengths, tokens = [0], [], []
    for d in range(DOCS):
        for i in range(per_doc[d]):
            last = i == per_doc[d] - 1
            n = rng.randint(2, 12) if last else rng.choice((0, 0) + tuple(range(1, 13)))
            q = len(lengths)
            seq = [100 * q + j + 2 for j in range(n)]
            if last:
                seq[-1] = EOD
            lengths.append(n)
            tokens += seq
        doc_index.append(len(lengths))
    return lengths, doc_index, tokens


def pieces_of(doc_index, starts, lo, hi):
    """The token ranges of the documents of sequences [lo, hi), each
    document clipped to them; those without tokens left out."""
    out = []
    for d in range(DOCS):
        a, b = max(doc_index[d], lo), min(doc_index[d + 1], hi)
        if a < b and starts[a] < starts[b]:
            out.append((starts[a], starts[b]))
    return out


def rows_of(rows, raw, epoch, what):
    """{sample: (tokens, positions)} of one epoch, each sample once."""
    row_bytes = 4 * (SEQ + 1) + 8 * SEQ
    check(len(raw) == len(rows) * row_bytes, "%s: %d bytes of data for %d rows" % (what, len(raw), len(rows)))
    out = {}
    for i, (e, _, s, _) in enumerate(rows):
        if e != epoch:
            continue
        check(s not in out, "%s: epoch %d delivered sample %d twice" % (what, epoch, s))
        row = raw[i * row_bytes:(i + 1) * row_bytes]
        tokens = list(struct.unpack_from("<%di" % (SEQ + 1), row))
        positions = list(struct.unpack_from("<%dq" % SEQ, row, 4 * (SEQ + 1)))
        out[s] = (tokens, positions)
    return out


def consume(env, d, pipeline, split, epochs):
    dump, data = env.path("%s-%s.dump" % (pipeline, split)), env.path("%s-%s.data" % (pipeline, split))
    r = env.loaderctl(harness.consume_args(d.socket, pipeline, epochs=epochs, dump=dump,
                                           extra=["--split", split, "--dump-data", data, "--quiet"]))
    check(r.returncode == 0, "consume --pipeline %s --split %s exited %d: %s"
          % (pipeline, split, r.returncode, r.stderr))
    with open(data, "rb") as f:
        return harness.read_dump(dump), f.read()


def check_positions(windows, what):
    for s, (tokens, positions) in windows.items():
        check(positions == harness.positions_of(tokens, SEQ, EOD), "%s: sample %d: positions %s, "
              "not those of its tokens %s" % (what, s, positions, tokens))


def stream_order(windows, stream, pieces, n_samples, what):
    """The pieces the epoch's windows are made of, in order: every piece
    of the split once, the last cut short."""
    check(sorted(windows) == list(range(n_samples)), "%s: samples %s..., not 0..%d"
          % (what, sorted(windows)[:8], n_samples - 1))
    joined = []
    for s in range(n_samples):
        tokens = windows[s][0]
        if s:
            check(tokens[0] == joined[-1], "%s: window %d does not start with window %d's last token"
                  % (what, s, s - 1))
            joined += tokens[1:]
        else:
            joined += tokens
    by_first = {stream[a]: (a, b) for a, b in pieces}
    check(len(by_first) == len(pieces), "%s: two pieces start with the same token" % what)
    order, at = [], 0
    while at < len(joined):
        piece = by_first.get(joined[at])
        check(piece is not None and piece not in order, "%s: token %d of the epoch's stream (%d) "
              "starts no document of the split not yet seen" % (what, at, joined[at]))
        a, b = piece
        part = joined[at:at + b - a]
        check(part == stream[a:a + len(part)], "%s: the document at tokens %d..%d differs from the "
              "file's at stream token %d" % (what, a, b, at))
        order.append(piece)
        at += b - a
    total = sum(b - a for a, b in pieces)
    left = sum(b - a for a, b in pieces if (a, b) not in order)
    check(n_samples == (total - 1) // SEQ and left < SEQ,
          "%s: %d windows of the split's %d tokens leave out documents of %d tokens"
          % (what, n_samples, total, left))
    return order


def body(env):
    seed = 0
    while True:
        lengths, doc_index, stream = make_index(seed)
        idx = megatron_split(WEIGHTS, SEQUENCES)
        if not set(idx[1:3]) & set(doc_index):
            break
        seed += 1
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + n)
    check(idx == [0, 798, 947, 997], "megatron-core's split of 997 sequences: %s" % idx)
    old = megatron_split(WEIGHTS, DOCS)  # the same rule over documents
    check(doc_index[old[1]] != idx[1], "the document split would give train the same sequences")
    prefix = env.path("web")
    harness.write_megatron(prefix, lengths, stream, dtype="int32", doc_index=doc_index)
    base = {"source": "megatron:" + prefix, "seq_len": SEQ, "batch_size": BATCH, "seed": 6,
            "split": ",".join(map(str, WEIGHTS)), "outputs": "tokens positions", "eod_token": EOD}
    d = env.start_daemon(env.config("seq", {"plain": dict(base, document_shuffle="off"), "shuf": base}))

    # Status: the sequence ranges and megatron-core's samples of one epoch.
    want = {}
    for k, split in enumerate(SPLITS):
        tokens = sum(lengths[idx[k]:idx[k + 1]])
        want[split] = (idx[k], idx[k + 1], (tokens - 1) // SEQ if tokens > SEQ else 0)
    for p in d.status()["pipelines"]:
        check(p["splits"] == want, "pipeline %s: status gives %s, megatron-core %s" % (p["name"], p["splits"], want))
        check(p["samples"] == want["train"][2], "pipeline %s: samples %d" % (p["name"], p["samples"]))
    print("splits of %d sequences in %d documents: %s" % (SEQUENCES, DOCS, want))
    root = os.environ.get("LOADERD_MEGATRON_CORE")
    if root:
        import megatron_split_reference  # noqa: E402  (tools/, on the path through harness)
        built = megatron_split_reference.gpt_datasets(root, prefix, ",".join(map(str, WEIGHTS)), SEQ)
        got = {split: (b[1], b[2], b[0]) for split, b in zip(SPLITS, built)}
        check(got == want, "megatron-core's GPTDatasets: %s; status: %s" % (got, want))
        print("megatron-core's own GPTDatasets (%s): %s" % (root, got))
    else:
        print("LOADERD_MEGATRON_CORE not set: megatron-core's GPTDatasets not built here")

    # No document shuffle: valid is sequences 798..947's tokens, window by window.
    rows, raw = consume(env, d, "plain", "valid", 2)
    valid = stream[starts[idx[1]]:starts[idx[2]]]
    n_valid = want["valid"][2]
    for epoch in range(2):
        windows = rows_of(rows, raw, epoch, "plain valid")
        check(sorted(windows) == list(range(n_valid)), "plain valid: epoch %d delivered %s..., not "
              "each of the %d samples once" % (epoch, sorted(windows)[:8], n_valid))
        for s, (tokens, _) in windows.items():
            check(tokens == valid[s * SEQ:s * SEQ + SEQ + 1], "plain valid: sample %d holds %s, not "
                  "the split's window %s" % (s, tokens, valid[s * SEQ:s * SEQ + SEQ + 1]))
        check_positions(windows, "plain valid epoch %d" % epoch)

    # Document shuffle: the documents of each split, the cut one in part.
    cut = next(dd for dd in range(DOCS) if doc_index[dd] < idx[1] < doc_index[dd + 1])
    head, tail = (starts[doc_index[cut]], starts[idx[1]]), (starts[idx[1]], starts[doc_index[cut + 1]])
    for k, split in enumerate(SPLITS[:2]):
        pieces = pieces_of(doc_index, starts, idx[k], idx[k + 1])
        check((head if split == "train" else tail) in pieces, "%s: the cut document's part is not "
              "one of its documents" % split)
        rows, raw = consume(env, d, "shuf", split, 2)
        orders = []
        for epoch in range(2):
            windows = rows_of(rows, raw, epoch, "shuf " + split)
            what = "shuf %s epoch %d" % (split, epoch)
            orders.append(stream_order(windows, stream, pieces, want[split][2], what))
            check_positions(windows, what)
        check(orders[0] != orders[1], "shuf %s: the two epochs have the same order" % split)
        print("shuf %s: %d documents (document %d cut at sequence %d), orders %s... / %s..."
              % (split, len(pieces), cut, idx[1], orders[0][:3], orders[1][:3]))
    d.stop()
    check_small(env)


def check_small(env):
    """Both ends of the splits in one document, and an empty document at
    an end: split = 1,1,1 over 10 sequences of 5 tokens is 0..3, 3..7,
    7..10; shuffled, each split of "one" (a document of all 10 sequences,
    then two empty ones) is one document, its part, and each split of
    "gap" (documents 0..3, an empty one at 3, 3..10) holds only its
    sequences' tokens, window by window."""
    lengths = [5] * 10
    stream = [100 * q + j + 2 for q in range(10) for j in range(5)]
    pipelines = {}
    for name, doc_index in (("one", [0, 10, 10, 10]), ("gap", [0, 3, 3, 10])):
        prefix = env.path(name)
        harness.write_megatron(prefix, lengths, stream, dtype="int32", doc_index=doc_index)
        pipelines[name] = {"source": "megatron:" + prefix, "seq_len": 4, "batch_size": 1, "seed": 2,
                           "split": "1,1,1"}
    d = env.start_daemon(env.config("small", pipelines))
    for p in d.status()["pipelines"]:
        check(p["splits"] == {"train": (0, 3, 3), "valid": (3, 7, 4), "test": (7, 10, 3)},
              "pipeline %s: status gives %s" % (p["name"], p["splits"]))
    for name in pipelines:
        for k, split in enumerate(SPLITS):
            lo, hi = (0, 3, 7, 10)[k], (0, 3, 7, 10)[k + 1]
            part = stream[5 * lo:5 * hi]
            dump = env.path("%s-%s.dump" % (name, split))
            data = env.path("%s-%s.data" % (name, split))
            r = env.loaderctl(harness.consume_args(d.socket, name, epochs=1, dump=dump,
                                                   extra=["--split", split, "--dump-data", data, "--quiet"]))
            check(r.returncode == 0, "%s %s: consume exited %d: %s" % (name, split, r.returncode, r.stderr))
            with open(data, "rb") as f:
                raw = f.read()
            got = {s: list(struct.unpack_from("<5i", raw, 20 * i))
                   for i, (_, _, s, _) in enumerate(harness.read_dump(dump))}
            want = {s: part[4 * s:4 * s + 5] for s in range((len(part) - 1) // 4)}
            check(got == want, "%s %s: windows %s, not those of sequences %d..%d %s"
                  % (name, split, got, lo, hi, want))
    d.stop()
    print("one document cut twice, an empty document at an end: each split its own tokens")


if __name__ == "__main__":
    harness.run_test("test_megatron_sequences", body)
