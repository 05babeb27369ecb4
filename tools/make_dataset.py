#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make_dataset: deterministic pseudo-random datasets for loaderd.

    make_dataset.py raw    --out FILE --records N --record-bytes B [--seed S]
    make_dataset.py tokens --out FILE --tokens N --dtype uint16|uint32
                           [--vocab V] [--seed S]

raw:    N fixed-size records of B bytes, the layout `source = raw:FILE`
        with `record_bytes = B` reads.
tokens: N little-endian tokens of the given dtype, the layout
        `source = tokens:FILE` with `token_dtype` reads. Without --vocab the
        tokens cover the dtype's whole range (so a token's high bit is set
        often, which is what a widening bug would show); with --vocab V they
        lie in [0, V).

write_megatron / write_megatron_index (no command) write a Megatron-LM
indexed dataset, PREFIX.bin and PREFIX.idx, as megatron-core's
IndexedDatasetBuilder does (`source = megatron:PREFIX`); the tests and
bench/token_bench.py use them.

The content depends only on the arguments: Python's random.Random(seed),
drawn in fixed-size chunks, so the same command writes the same bytes on any
machine. The demo, the integration tests and the benchmark all use it; the
tests import write_raw / write_tokens directly.
"""

import argparse
import array
import itertools
import os
import random
import struct
import sys
import time

CHUNK_BYTES = 16 << 20  # bytes drawn from the generator per write
DTYPES = {"uint16": ("H", 2), "uint32": ("I", 4)}
MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
MEGATRON_DTYPES = {"uint16": (8, "H", 2), "int32": (4, "i", 4)}  # megatron-core's dtype code, format, bytes


def write_raw(path, records, record_bytes, seed=0):
    """Writes records * record_bytes pseudo-random bytes; returns that size."""
    if records < 0 or record_bytes < 1:
        raise ValueError("records must be >= 0 and record_bytes >= 1")
    rng = random.Random(seed)
    total = records * record_bytes
    left = total
    with open(path, "wb") as f:
        while left > 0:
            n = min(left, CHUNK_BYTES)
            f.write(rng.randbytes(n))
            left -= n
    return total


def _token_chunk(rng, count, dtype, vocab):
    code, size = DTYPES[dtype]
    raw = rng.randbytes(count * size)
    if vocab is None:
        return raw  # the whole range of the dtype, little-endian below
    values = array.array(code)
    values.frombytes(raw)
    values = array.array(code, [v % vocab for v in values])
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def write_tokens(path, tokens, dtype, vocab=None, seed=0):
    """Writes `tokens` little-endian tokens; returns the file's size in bytes."""
    if dtype not in DTYPES:
        raise ValueError("dtype must be uint16 or uint32")
    code, size = DTYPES[dtype]
    if vocab is not None and not 1 <= vocab <= (1 << (8 * size)):
        raise ValueError("vocab must be in [1, %d] for %s" % (1 << (8 * size), dtype))
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    rng = random.Random(seed)
    per_chunk = CHUNK_BYTES // size
    left = tokens
    with open(path, "wb") as f:
        while left > 0:
            n = min(left, per_chunk)
            f.write(_token_chunk(rng, n, dtype, vocab))
            left -= n
    return tokens * size


def write_megatron_index(prefix, lengths, dtype="uint16", doc_index=None):
    """Writes PREFIX.idx for sequences of `lengths` tokens stored back to
    back in PREFIX.bin, as megatron-core's IndexedDatasetBuilder writes
    it: the MMIDIDX header (version 1, the dtype code, the sequence and
    document counts), the int32 sequence lengths, the int64 byte pointers
    (from 0, back to back) and the int64 document indices: `doc_index`
    (the first sequence of each document, then the sequence count), by
    default 0..n, one sequence per document. `lengths` is any sequence of
    ints; the arrays are built with the array module, so a million
    documents take a fraction of a second."""
    code, _, size = MEGATRON_DTYPES[dtype]
    sizes = array.array("i", lengths)
    pointers = array.array("q", itertools.accumulate((n * size for n in sizes), initial=0))
    pointers.pop()  # the end of the last sequence is no pointer
    doc_index = array.array("q", range(len(sizes) + 1) if doc_index is None else doc_index)
    if sys.byteorder != "little":
        for a in (sizes, pointers, doc_index):
            a.byteswap()
    with open(prefix + ".idx", "wb") as f:
        f.write(MEGATRON_MAGIC + struct.pack("<QBQQ", MEGATRON_VERSION, code, len(sizes), len(doc_index)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_index.tobytes())


def write_megatron(prefix, lengths, stream, dtype="uint16", doc_index=None):
    """A Megatron-LM indexed dataset (uint16 tokens, dtype code 8, unless
    `dtype` says int32): PREFIX.bin holds `stream`, the sequences' tokens
    back to back, and PREFIX.idx their `lengths` and the documents
    (`doc_index`, as write_megatron_index takes it; by default one
    sequence per document)."""
    _, fmt, _ = MEGATRON_DTYPES[dtype]
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack("<%d%s" % (len(stream), fmt), *stream))
    write_megatron_index(prefix, lengths, dtype, doc_index)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a deterministic pseudo-random dataset for loaderd.")
    sub = ap.add_subparsers(dest="kind", required=True)
    raw = sub.add_parser("raw", help="fixed-size records (source = raw:FILE)")
    raw.add_argument("--out", required=True)
    raw.add_argument("--records", type=int, required=True)
    raw.add_argument("--record-bytes", type=int, required=True)
    raw.add_argument("--seed", type=int, default=0)
    tok = sub.add_parser("tokens", help="flat token file (source = tokens:FILE)")
    tok.add_argument("--out", required=True)
    tok.add_argument("--tokens", type=int, required=True)
    tok.add_argument("--dtype", choices=sorted(DTYPES), required=True)
    tok.add_argument("--vocab", type=int, default=None)
    tok.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    start = time.monotonic()
    try:
        if args.kind == "raw":
            total = write_raw(args.out, args.records, args.record_bytes, args.seed)
            what = "%d records of %d bytes" % (args.records, args.record_bytes)
        else:
            total = write_tokens(args.out, args.tokens, args.dtype, args.vocab, args.seed)
            vocab = "" if args.vocab is None else ", vocab %d" % args.vocab
            what = "%d %s tokens%s" % (args.tokens, args.dtype, vocab)
    except (OSError, ValueError) as e:
        print("make_dataset: %s: %s" % (args.out, e), file=sys.stderr)
        return 1
    secs = time.monotonic() - start
    print("make_dataset: wrote %s: %s, %d bytes, seed %d (%.1f s)"
          % (os.path.abspath(args.out), what, total, args.seed, secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
