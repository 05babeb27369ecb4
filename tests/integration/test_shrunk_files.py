#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A data file cut short after start fails the client that reads past its
end, with an error that names the pipeline, the sample and the file; the
daemon goes on serving the others.

loaderd checks every file's size at start; a file may shrink later (a
rewrite in place, a full disk). One daemon with a pipeline of each kind
that reads by offset: raw, tokens, megatron (stored order, and with the
per-epoch document shuffle) and llmc (two shards, the second cut). Each
file is cut to a few bytes after the daemon has started and before any
client came; one epoch of each pipeline must then fail with exit 1 and
`file is shorter than at start` beside the pipeline's name, the sample
and the file (megatron: PREFIX.bin; llmc: the shard). An
untouched pipeline is consumed fully afterwards.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_llmc import write_shard  # noqa: E402

SEQ, BATCH = 8, 4


def body(env):
    raw = env.make_raw("raw.bin", 64, 32, seed=3)
    tok = env.make_tokens("tok.bin", 400, "uint16", seed=4)
    mg, mgs, intact = env.path("mg"), env.path("mgs"), env.path("intact")
    for prefix in (mg, mgs, intact):
        harness.write_megatron(prefix, [50, 70, 30], list(range(1, 151)))
    shards = [env.path("s_1.bin"), env.path("s_2.bin")]
    for k, path in enumerate(shards):
        write_shard(path, list(range(100 * k, 100 * k + 90)))
    tokens = {"seq_len": SEQ, "batch_size": BATCH}
    pipelines = {
        "raw": {"source": "raw:" + raw, "record_bytes": 32, "batch_size": BATCH},
        "tok": dict(tokens, source="tokens:" + tok, token_dtype="uint16"),
        "mg": dict(tokens, source="megatron:" + mg, document_shuffle="false"),
        "mgs": dict(tokens, source="megatron:" + mgs),
        "llmc": dict(tokens, source="llmc:" + env.path("s_{1..2}.bin")),
        "intact": dict(tokens, source="megatron:" + intact),
    }
    d = env.start_daemon(env.config("shrunk", pipelines, workers=2))
    cuts = {"raw": (raw, raw), "tok": (tok, tok), "mg": (mg + ".bin", mg + ".bin"), "mgs": (mgs + ".bin", mgs + ".bin"),
            "llmc": (shards[1], shards[1])}
    for path, _ in cuts.values():
        with open(path, "r+b") as f:
            f.truncate(1030 if path in shards else 6)
    for name, (_, named) in cuts.items():
        r = env.loaderctl(harness.consume_args(d.socket, name, epochs=1, extra=["--quiet"]))
        want = ['pipeline "%s"' % name, "sample", named, "shorter than at start"]
        check(r.returncode == 1 and all(w in r.stderr for w in want),
              "%s cut short after start: consume exited %d, stderr %r; expected exit 1 and %s"
              % (name, r.returncode, r.stderr, want))
        print("%s: %s" % (name, r.stderr.strip()))
    r = env.loaderctl(harness.consume_args(d.socket, "intact", epochs=1, extra=["--quiet"]))
    check(r.returncode == 0, "the untouched pipeline afterwards: consume exited %d: %s"
          % (r.returncode, r.stderr))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_shrunk_files", body)
