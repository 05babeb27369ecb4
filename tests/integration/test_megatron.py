#!/usr/bin/env python3
"""megatron:PREFIX pipelines: Megatron-LM's indexed datasets, read as they
are written (PREFIX.idx, PREFIX.bin).

Datasets written here in Megatron's layout (the MMIDIDX header, version 1,
the dtype code, then the sequence lengths, byte pointers and document
indices): 60 documents of 1 to 40 tokens, uint16 (over the type's whole
range) and int32. Each pipeline (seq_len 7) must deliver every window of
seq_len + 1 tokens of the documents' stream once per epoch, with the CRC
of the window as stored, or widened with token_output = int64; status
lists the samples; the workers read PREFIX.bin.

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


def body(env):
    prefixes = {dt: env.path("ds-%s" % dt) for dt in DTYPES}
    streams = {dt: write_dataset(prefixes[dt], dt, seed=i + 1) for i, dt in enumerate(DTYPES)}
    cases = [("u16", "uint16", None), ("u16-i64", "uint16", "int64"), ("i32", "int32", None)]
    pipelines = {}
    for name, dt, out in cases:
        keys = {"source": "megatron:" + prefixes[dt], "seq_len": SEQ, "batch_size": BATCH, "seed": 4}
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
