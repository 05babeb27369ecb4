#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""megatron:PREFIX pipelines: Megatron-LM's indexed datasets, read as they
are written (PREFIX.idx, PREFIX.bin).

Datasets written here in Megatron's layout (the MMIDIDX header, version 1,
the dtype code, then the sequence lengths, byte pointers and document
indices): 60 documents of 1 to 40 tokens, uint16 (over the type's whole
range) and int32. Each pipeline (seq_len 7) must deliver every window of
seq_len + 1 tokens of the documents' stream once per epoch, with the CRC
of the window as stored, or widened with token_output = int64; status
lists the samples; the workers read PREFIX.bin. (document_shuffle = off
throughout: the stored order is what is checked here;
test_megatron_shuffle.py checks the per-epoch document order.)

Splits (`split = A,B,C`, Megatron's --split): the status gives each
split's sequences as megatron-core's dataset builder computes them
(reimplemented here in Python, the reference), for several splits; a
client of split "valid" gets, once per epoch, every window of the valid
documents' tokens and nothing else (its CRCs against the file), and its
position token says "valid"; a train token is refused by valid naming
both; an unknown split name, a split a pipeline does not have and an
empty split are refused at attach, naming the split and the pipeline.

Malformed pairs are refused at start (`loaderd --check-config`) with the
file, the field and the offset named: a wrong magic, version 2, a float
dtype, document indices that do not end at the sequence count, a .bin
shorter than the index says; and a pipeline whose token_dtype is set (the
index says it) is refused on its line.
"""

import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

SEQ, BATCH, DOCS = 7, 16, 60
DTYPES = {"uint16": (8, "<H", 2, 65535), "int32": (4, "<i", 4, 2 ** 31 - 1)}  # code, format, bytes, max


def write_dataset(prefix, dtype, seed, version=1, magic=b"MMIDIDX\x00\x00", code=None, docs_end=None,
                  bin_cut=0):
    """Megatron's layout; returns the token stream written to PREFIX.bin."""
    dcode, fmt, size, top = DTYPES[dtype]
    rng = random.Random(seed)
    lengths = [rng.randint(1, 40) for _ in range(DOCS)]
    tokens = [rng.randint(0, top) for _ in range(sum(lengths))]
    with open(prefix + ".bin", "wb") as f:
        data = b"".join(struct.pack(fmt, t) for t in tokens)
        f.write(data[:len(data) - bin_cut])
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += n * size
    doc_index = list(range(DOCS + 1))
    if docs_end is not None:
        doc_index[-1] = docs_end
    with open(prefix + ".idx", "wb") as f:
        f.write(magic + struct.pack("<Q", version) + struct.pack("<B", code or dcode))
        f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_index)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_index), *doc_index))
    return tokens


def megatron_split(splits, size):
    """megatron-core's split of `size` elements (the index's sequences):
    parse_and_normalize_split, convert_split_vector_to_split_matrix and
    the builder's int(round(bookend * float(size))), as megatron-core
    0.16.1 has them; [idx0, idx1, idx2, idx3], split k = [idx[k],
    idx[k+1]). (tests/unit/test_split.c holds common/split.c to
    megatron-core's own results.)"""
    splits = [float(s) for s in splits]
    splits += [0.0] * (3 - len(splits))
    total = 0.0
    for s in splits:
        total += s
    cum = [0]
    for s in splits:
        cum.append(cum[-1] + s / total)
    return [int(round(c * float(size))) for c in cum]


def doc_lengths(seed):
    rng = random.Random(seed)
    return [rng.randint(1, 40) for _ in range(DOCS)]


def check_splits(env, prefix, stream, size):
    """Status, delivery and refusals of pipelines with split = ...."""
    lengths = doc_lengths(1)
    starts = [sum(lengths[:d]) for d in range(DOCS + 1)]
    weights = {"a": (6, 3, 1), "b": (969, 30, 1), "c": (1, 1, 1), "d": (98, 2)}
    pipelines = {name: {"source": "megatron:" + prefix, "seq_len": SEQ, "batch_size": 4, "seed": 4,
                        "split": ",".join(str(x) for x in w), "document_shuffle": "off"}
                 for name, w in weights.items()}
    pipelines["whole"] = {"source": "megatron:" + prefix, "seq_len": SEQ, "batch_size": 4}
    d = env.start_daemon(env.config("mg-split", pipelines))
    listed = {p["name"]: p for p in d.status()["pipelines"]}
    for name, w in weights.items():
        idx = megatron_split(w, DOCS)
        for k, split in enumerate(("train", "valid", "test")):
            n_tokens = starts[idx[k + 1]] - starts[idx[k]]
            want = (idx[k], idx[k + 1], (n_tokens - 1) // SEQ if n_tokens > SEQ else 0)
            got = listed[name]["splits"].get(split)
            check(got == want, "pipeline %s (split %s): status gives %s documents..end,samples %s; "
                  "Megatron's rule gives %s" % (name, ",".join(map(str, w)), split, got, want))
        check(listed[name]["samples"] == listed[name]["splits"]["train"][2],
              "pipeline %s: samples %d is not the train split's" % (name, listed[name]["samples"]))
    check("splits" not in listed["whole"], "a pipeline without split lists splits: %s" % listed["whole"])

    # Split "valid" of pipeline a: its documents' tokens only, every window once an epoch.
    idx = megatron_split(weights["a"], DOCS)
    first, end = starts[idx[1]], starts[idx[2]]
    valid = stream[first:end]
    n_valid = (len(valid) - 1) // SEQ
    windows = [struct.pack("<%dH" % (SEQ + 1), *valid[i * SEQ:i * SEQ + SEQ + 1]) for i in range(n_valid)]
    dump, data = env.path("valid.dump"), env.path("valid.data")
    r = env.loaderctl(harness.consume_args(d.socket, "a", epochs=2, dump=dump,
                                           extra=["--split", "valid", "--dump-data", data, "--quiet"]))
    check(r.returncode == 0, "consume --split valid exited %d: %s" % (r.returncode, r.stderr))
    summary, token = harness.parse_consume_output(r.stdout)
    rows = harness.read_dump(dump)
    with open(data, "rb") as f:
        raw = f.read()
    row_bytes = (SEQ + 1) * 2
    check(len(raw) == len(rows) * row_bytes, "valid: %d bytes of data for %d rows" % (len(raw), len(rows)))
    for epoch in range(2):
        samples = sorted(s for e, _, s, _ in rows if e == epoch)
        check(samples == list(range(n_valid)), "valid: epoch %d delivered samples %s, not each of the "
              "%d once" % (epoch, samples[:10], n_valid))
    for i, (e, b, s, crc) in enumerate(rows):
        got = raw[i * row_bytes:(i + 1) * row_bytes]
        check(got == windows[s], "valid: epoch %d row %d (sample %d) holds tokens %s, not the valid "
              "documents' window %s" % (e, i, s, struct.unpack("<%dH" % (SEQ + 1), got),
                                        valid[s * SEQ:s * SEQ + SEQ + 1]))
    check(token.endswith(":valid") and (":%d:" % n_valid) in token,
          "valid: the position token %r does not say valid and its %d samples" % (token, n_valid))
    print("split valid of a: %d windows of documents %d..%d, token %s" % (n_valid, idx[1], idx[2], token))

    # Refusals at attach, naming the split and the pipeline.
    (_, train_token, _), = harness.consume_all(env, d.socket, [{"pipeline": "a", "batches": 1,
                                                              "dump": env.path("t.dump")}])
    refused = [
        ("a", "validation", [], 'pipeline "a": unknown split "validation" (train, valid or test)'),
        ("a", "vaild", [], 'pipeline "a": unknown split "vaild" (did you mean "valid"? train, valid or test)'),
        ("whole", "valid", [], 'pipeline "whole" has no split "valid"'),
        ("b", "test", [], 'pipeline "b": split "test" is empty'),
        ("a", "valid", ["--resume", train_token],
         'is a position in split "train"; this client attaches to split "valid" of pipeline "a"'),
        ("a", "train", ["--resume", token],
         'is a position in split "valid"; this client attaches to split "train" of pipeline "a"'),
    ]
    for pipeline, split, extra, why in refused:
        r = env.loaderctl(harness.consume_args(d.socket, pipeline, batches=1,
                                               extra=["--split", split] + extra))
        check(r.returncode != 0 and why in r.stderr, "consume --pipeline %s --split %s %s: exited %d; "
              "expected an error with %r:\n%s" % (pipeline, split, extra, r.returncode, why, r.stderr))
    d.stop()


def body(env):
    prefixes = {dt: env.path("ds-%s" % dt) for dt in DTYPES}
    streams = {dt: write_dataset(prefixes[dt], dt, seed=i + 1) for i, dt in enumerate(DTYPES)}
    cases = [("u16", "uint16", None), ("u16-i64", "uint16", "int64"), ("i32", "int32", None)]
    pipelines = {}
    for name, dt, out in cases:
        keys = {"source": "megatron:" + prefixes[dt], "seq_len": SEQ, "batch_size": BATCH, "seed": 4,
                "document_shuffle": "off"}
        if out:
            keys["token_output"] = out
        pipelines[name] = keys
    d = env.start_daemon(env.config("mg", pipelines))
    st = d.status()
    listed = {p["name"]: (p["samples"], p["source"]) for p in st["pipelines"]}
    jobs = [{"pipeline": name, "epochs": 2, "dump": env.path(name + ".dump")} for name, _, _ in cases]
    results = harness.consume_all(env, d.socket, jobs)
    for (name, dt, out), (summary, _, rows) in zip(cases, results):
        n_samples = (len(streams[dt]) - 1) // SEQ
        check(listed[name][0] == n_samples, "status gives pipeline %s %s samples, expected %d"
              % (name, listed[name][0], n_samples))
        size = DTYPES[dt][2]
        width = 8 if out == "int64" else size
        crcs = harness.token_sample_crcs(prefixes[dt] + ".bin", size, width, SEQ)
        for epoch in range(2):
            samples = sorted(s for e, _, s, _ in rows if e == epoch)
            check(samples == list(range(n_samples)), "%s: epoch %d delivered %d samples, not each of "
                  "the %d once" % (name, epoch, len(samples), n_samples))
        harness.check_dump_crcs(rows, crcs, name)
        check(summary["bytes"] == 2 * n_samples * (SEQ + 1) * width,
              "%s: summary says %d bytes; expected %d" % (name, summary["bytes"],
                                                          2 * n_samples * (SEQ + 1) * width))
    d.stop()
    check_splits(env, prefixes["uint16"], streams["uint16"], 2)

    # Malformed pairs: refused at start with the file, the field, the offset.
    bad = [
        ("magic", dict(magic=b"MMIDIDY\x00\x00"), "magic"),
        ("version", dict(version=2), "version"),
        ("float", dict(code=7), "float32"),
        ("docs", dict(docs_end=DOCS - 1), "document_indices"),
        ("short", dict(bin_cut=6), ".bin"),
    ]
    for name, how, word in bad:
        prefix = env.path("bad-%s" % name)
        write_dataset(prefix, "uint16", seed=9, **how)
        cfg = env.config("bad-" + name, {"p": {"source": "megatron:" + prefix, "seq_len": SEQ,
                                               "batch_size": 2}})
        r = subprocess.run([harness.binary("loaderd"), "--config", cfg, "--check-config"],
                           capture_output=True, text=True, timeout=30)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and prefix + ".idx" in out and word in out and "offset" in out,
              "%s: --check-config exited %d; expected a refusal naming %s.idx, %r and an offset:\n%s"
              % (name, r.returncode, prefix, word, out))
        print("%s: %s" % (name, [ln for ln in out.splitlines() if prefix in ln][:1]))
    cfg = env.config("dtype-set", {"p": {"source": "megatron:" + prefixes["uint16"], "seq_len": SEQ,
                                         "batch_size": 2, "token_dtype": "uint16"}})
    r = subprocess.run([harness.binary("loaderd"), "--config", cfg, "--check-config"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and "token_dtype does not apply to a megatron source" in r.stderr,
          "token_dtype on a megatron pipeline: exited %d: %s" % (r.returncode, r.stderr))


if __name__ == "__main__":
    harness.run_test("test_megatron", body)
