#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""llmc:PATTERN pipelines: llm.c token shards, written here as llm.c's
write_datafile writes them (a header of 256 little-endian int32: magic
20240520, version 1, the token count N; then N uint16 tokens).

Four shards named by a brace pattern, of 900, 5 (no whole window), 1201
and 700 tokens; seq_len 7. Windows of 8 tokens never cross from one
shard into the next and follow the pattern's order. For two epochs two
ranks each get half of the windows, every window exactly once per epoch,
and every row's CRC is the CRC of its window in its shard's file; the
status lists the windows. With token_output = int32 and outputs = tokens
positions (eod_token 50256, llm.c's <|endoftext|>), each row's tokens are
its window widened and its positions restart after each 50256.

Malformed shards are refused at start (`loaderd --check-config`) naming
the file, the field and its offset: a wrong magic, version 2, a negative
token count, a file shorter and one longer than its token count says, a
file shorter than the header; a missing shard of the pattern is named;
token_dtype and direct do not apply to an llmc source, on their line.
"""

import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from harness_data import crc32c  # noqa: E402

SEQ, BATCH, EOT = 7, 4, 50256
COUNTS = [900, 5, 1201, 700]


def write_shard(path, tokens, magic=20240520, version=1, count=None, cut=0, extra=b""):
    header = struct.pack("<3i", magic, version, len(tokens) if count is None else count)
    data = header + bytes(1024 - len(header)) + struct.pack("<%dH" % len(tokens), *tokens) + extra
    with open(path, "wb") as f:
        f.write(data[:len(data) - cut])


def shard_tokens(seed, n):
    rng = random.Random(seed)
    return [EOT if rng.random() < 0.05 else rng.randint(0, 50255) for _ in range(n)]


def windows(shards):
    out = []
    for tokens in shards:
        out += [tokens[j * SEQ:j * SEQ + SEQ + 1] for j in range((len(tokens) - 1) // SEQ)]
    return out


def check_config_refused(env, name, keys, words, line_key=None):
    cfg = env.config(name, {"p": keys})
    r = subprocess.run([harness.binary("loaderd"), "--config", cfg, "--check-config"],
                       capture_output=True, text=True, timeout=30)
    at = ""
    if line_key:
        with open(cfg) as f:
            lines = f.read().splitlines()
        at = "%s:%d:" % (cfg, next(i for i, ln in enumerate(lines, 1) if ln.startswith(line_key + " ")))
    check(r.returncode != 0 and at in r.stderr and all(w in r.stderr for w in words),
          "%s: --check-config exited %d; expected %s %s:\n%s" % (name, r.returncode, at, words, r.stderr))
    print("%s: %s" % (name, r.stderr.strip().splitlines()[-1][:300]))


def body(env):
    shards = [shard_tokens(i + 1, n) for i, n in enumerate(COUNTS)]
    for i, tokens in enumerate(shards):
        write_shard(env.path("train_%06d.bin" % i), tokens)
    pattern = env.path("train_{000000..000003}.bin")
    wins = windows(shards)
    n = len(wins)
    check(n % 2 == 0, "the test's shards make %d windows, not an even number" % n)
    pipelines = {
        "plain": {"source": "llmc:" + pattern, "seq_len": SEQ, "batch_size": BATCH, "seed": 3},
        "docs": {"source": "llmc:" + pattern, "seq_len": SEQ, "batch_size": BATCH, "seed": 3,
                 "token_output": "int32", "outputs": "tokens positions", "eod_token": EOT},
    }
    d = env.start_daemon(env.config("llmc", pipelines, workers=2))
    listed = {p["name"]: p["samples"] for p in d.status()["pipelines"]}
    check(listed["plain"] == n, "status gives %s windows, expected %d" % (listed["plain"], n))

    crcs = [crc32c(struct.pack("<%dH" % (SEQ + 1), *w)) for w in wins]
    jobs = [{"pipeline": "plain", "rank": r, "world": 2, "epochs": 2, "dump": env.path("p%d.dump" % r)}
            for r in range(2)]
    results = harness.consume_all(env, d.socket, jobs)
    for epoch in range(2):
        got = sorted(s for _, _, rows in results for e, _, s, _ in rows if e == epoch)
        check(got == list(range(n)), "epoch %d: the two ranks got %d windows, not each of the %d once"
              % (epoch, len(got), n))
    for r, (_, _, rows) in enumerate(results):
        harness.check_dump_crcs(rows, crcs, "rank %d" % r)
    print("%d windows in %d shards, each once an epoch over 2 ranks, CRCs as in the files"
          % (n, len(COUNTS)))

    dump, data = env.path("docs.dump"), env.path("docs.data")
    r = env.loaderctl(harness.consume_args(d.socket, "docs", epochs=1, dump=dump,
                                           extra=["--dump-data", data, "--quiet"]))
    check(r.returncode == 0, "consume docs exited %d: %s" % (r.returncode, r.stderr))
    rows = harness.read_dump(dump)
    with open(data, "rb") as f:
        raw = f.read()
    row = (SEQ + 1) * 4 + SEQ * 8
    check(len(raw) == len(rows) * row and len(rows) == n, "docs: %d rows, %d bytes" % (len(rows), len(raw)))
    for i, (_, _, s, _) in enumerate(rows):
        tokens = list(struct.unpack("<%di" % (SEQ + 1), raw[i * row:i * row + (SEQ + 1) * 4]))
        positions = list(struct.unpack("<%dq" % SEQ, raw[i * row + (SEQ + 1) * 4:(i + 1) * row]))
        check(tokens == wins[s] and positions == harness.positions_of(wins[s], SEQ, EOT),
              "docs: row %d (window %d): tokens %s positions %s, expected %s %s"
              % (i, s, tokens, positions, wins[s], harness.positions_of(wins[s], SEQ, EOT)))
    d.stop()

    # Malformed shards: refused at start naming the file, the field, the offset.
    good = shard_tokens(9, 100)
    bad = [
        ("magic", dict(magic=20240801), ["magic at offset 0: 20240801, not 20240520"]),
        ("version", dict(version=2), ["version at offset 4: 2, only 1"]),
        ("negative", dict(count=-3), ["token count at offset 8: -3 is negative"]),
        ("short", dict(cut=3), ["token count at offset 8: 100 tokens need 1224 bytes", "the file has 1221: truncated"]),
        ("long", dict(extra=b"\0\0"), ["token count at offset 8: 100 tokens need 1224 bytes", "the file has 1226: trailing"]),
        ("header", dict(cut=1224 - 600), ["the header needs 1024 bytes, the file has 600"]),
    ]
    for name, how, words in bad:
        path = env.path("bad-%s_000001.bin" % name)
        write_shard(env.path("bad-%s_000000.bin" % name), good)
        write_shard(path, good, **how)
        check_config_refused(env, "bad-" + name, {
            "source": "llmc:" + env.path("bad-%s_{000000..000001}.bin" % name), "seq_len": SEQ,
            "batch_size": 2}, [path + ": "] + words, "source")
    check_config_refused(env, "missing", {"source": "llmc:" + env.path("train_{000003..000004}.bin"),
                                          "seq_len": SEQ, "batch_size": 2},
                         [env.path("train_000004.bin") + ": No such file"], "source")
    base = {"source": "llmc:" + pattern, "seq_len": SEQ, "batch_size": 2}
    check_config_refused(env, "dtype", dict(base, token_dtype="uint16"),
                         ["token_dtype does not apply to an llmc source"], "token_dtype")
    check_config_refused(env, "direct", dict(base, direct="on"),
                         ["direct does not apply to an llmc source"], "direct")


if __name__ == "__main__":
    harness.run_test("test_llmc", body)
