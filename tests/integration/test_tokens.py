#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Token pipelines deliver windows of seq_len+1 tokens, widened exactly.

uint16 and uint32 token files over the whole range of their dtype (so the
top bit is set often and sign extension would show), seq_len 7, a token
count whose windows leave a remainder; token_output unset, int64, and for
uint16 also int32 and uint32. One epoch must hold (n_tokens-1)//7 samples,
each exactly once, and every sample's CRC must be that of the window
zero-extended to the delivered width, little-endian; the summary's byte
count must be samples * 8 * width.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

TOKENS, SEQ, BATCH = 2001, 7, 16  # 285 windows, 5 tokens left over
WIDTH = {"uint16": 2, "uint32": 4, "int32": 4, "int64": 8}

CASES = [  # pipeline name, stored dtype, token_output (None = unset)
    ("u16", "uint16", None),
    ("u16-i64", "uint16", "int64"),
    ("u16-i32", "uint16", "int32"),
    ("u16-u32", "uint16", "uint32"),
    ("u32", "uint32", None),
    ("u32-i64", "uint32", "int64"),
]


def body(env):
    files = {dt: env.make_tokens("tok-%s.bin" % dt, TOKENS, dt, seed=9) for dt in ("uint16", "uint32")}
    pipelines = {}
    for name, dtype, out in CASES:
        keys = {"source": "tokens:" + files[dtype], "token_dtype": dtype, "seq_len": SEQ,
                "batch_size": BATCH, "seed": 3}
        if out is not None:
            keys["token_output"] = out
        pipelines[name] = keys
    d = env.start_daemon(env.config("tok", pipelines))

    n_samples = (TOKENS - 1) // SEQ
    st = d.status()
    listed = {p["name"]: p["samples"] for p in st["pipelines"]}
    for name, _, _ in CASES:
        check(listed.get(name) == n_samples, "status gives pipeline %s %s samples, expected %d"
              % (name, listed.get(name), n_samples))

    jobs = [{"pipeline": name, "epochs": 1, "dump": env.path(name + ".dump")} for name, _, _ in CASES]
    results = harness.consume_all(env, d.socket, jobs)
    for (name, dtype, out), (summary, _, rows) in zip(CASES, results):
        width = WIDTH[out or dtype]
        crcs = harness.token_sample_crcs(files[dtype], WIDTH[dtype], width, SEQ)
        check(len(crcs) == n_samples, "reference has %d windows, expected %d" % (len(crcs), n_samples))
        samples = sorted(s for _, _, s, _ in rows)
        check(samples == list(range(n_samples)), "%s: epoch delivered %d samples, not each of the %d once"
              % (name, len(samples), n_samples))
        harness.check_dump_crcs(rows, crcs, name)
        check(summary["samples"] == n_samples and summary["bytes"] == n_samples * (SEQ + 1) * width,
              "%s: summary says %d samples, %d bytes; expected %d samples of %d bytes"
              % (name, summary["samples"], summary["bytes"], n_samples, (SEQ + 1) * width))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_tokens", body)
