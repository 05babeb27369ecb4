#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Document-aware outputs of token pipelines (outputs = tokens positions
loss_mask cu_seqlens), through the Python package in host mode.

A uint16 token file of documents of 1 to 30 tokens, each ending with the
EOD token 0 (as Megatron's preprocessing appends it), the other tokens
1..65535; seq_len 15, so a sample holds 16 tokens and 15 inputs. For two
epochs, every row of every batch must hold, for the sample it names:
- tokens: the file's window of 16 tokens;
- positions: 0, 1, ... over the inputs, restarting after each input that
  is the EOD token (Megatron's reset_position_ids);
- loss_mask: 1.0, and 0.0 at an EOD input with eod_mask_loss = true (Megatron's
  eod_mask_loss); all 1.0 in a pipeline without it;
- cu_seqlens: 0, the end of each document among the inputs, 15, padded with
  15 to max_documents + 1 entries; with max_documents = 3, a row of more
  documents ends its third at 15; num_documents: the documents it holds.
The same outputs from a megatron:PREFIX pipeline over the same tokens.

Refused at start, on the line at fault: outputs without eod_token, an
unknown output name, outputs without tokens, and outputs with direct = on.
"""

import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

SEQ, BATCH, MAXDOC, EOD = 15, 8, 3, 0


def documents(seed):
    rng = random.Random(seed)
    stream, lengths = [], []
    while len(stream) < 3000:
        doc = [rng.randint(1, 65535) for _ in range(rng.randint(0, 29))] + [EOD]
        stream += doc
        lengths.append(len(doc))
    return stream, lengths


def expected(window, mask_eod):
    inputs = window[:SEQ]
    positions, loss, ends, pos = [], [], [], 0
    for i, t in enumerate(inputs):
        positions.append(pos)
        loss.append(0.0 if (t == EOD and mask_eod) else 1.0)
        if t == EOD and i + 1 < SEQ and len(ends) + 1 < MAXDOC:
            ends.append(i + 1)
        pos = 0 if t == EOD else pos + 1
    cu = [0] + ends + [SEQ] * (MAXDOC - len(ends))
    return positions, loss, cu, len(ends) + 1


def check_pipeline(loaderd, sock, name, stream, mask_eod):
    x = loaderd.Loader(name, socket=sock, framework="numpy", device="cpu")
    n_samples = (len(stream) - 1) // SEQ
    seen = 0
    for epoch in range(2):
        covered = []
        for b in x:
            check(sorted(b.keys()) == ["cu_seqlens", "loss_mask", "num_documents", "positions", "tokens"],
                  "%s: tensors %s" % (name, sorted(b.keys())))
            for r, s in enumerate(b.sample_indices()):
                window = stream[s * SEQ:s * SEQ + SEQ + 1]
                positions, loss, cu, n = expected(window, mask_eod)
                what = "%s: epoch %d batch %d row %d (sample %d)" % (name, epoch, b.index, r, s)
                check(b["tokens"][r].tolist() == window, "%s: tokens differ" % what)
                check(b["positions"][r].tolist() == positions, "%s: positions %s, expected %s"
                      % (what, b["positions"][r].tolist(), positions))
                check(b["loss_mask"][r].tolist() == loss, "%s: loss_mask %s, expected %s"
                      % (what, b["loss_mask"][r].tolist(), loss))
                check(b["cu_seqlens"][r].tolist() == cu and int(b["num_documents"][r]) == n,
                      "%s: cu_seqlens %s num_documents %d, expected %s and %d"
                      % (what, b["cu_seqlens"][r].tolist(), int(b["num_documents"][r]), cu, n))
                covered.append(s)
                seen += 1
        check(sorted(covered) == list(range(n_samples)), "%s: epoch %d covered %d samples, not each "
              "of the %d once" % (name, epoch, len(covered), n_samples))
    x.close()
    return seen


def refused(env, name, keys, line_key, words):
    cfg = env.config(name, {"p": keys})
    with open(cfg) as f:
        lines = f.read().splitlines()
    at = next(i for i, ln in enumerate(lines, 1) if ln.startswith(line_key + " "))
    r = subprocess.run([harness.binary("loaderd"), "--config", cfg, "--check-config"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode != 0 and ("%s:%d:" % (cfg, at)) in r.stderr and all(w in r.stderr for w in words),
          "%s: --check-config exited %d; expected %s:%d and %s:\n%s"
          % (name, r.returncode, cfg, at, words, r.stderr))


def body(env):
    loaderd = ch.import_loaderd()
    stream, lengths = documents(5)
    path = env.path("docs.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<%dH" % len(stream), *stream))
    prefix = env.path("docs")
    harness.write_megatron(prefix, lengths, stream)
    out = {"outputs": "tokens positions loss_mask cu_seqlens", "eod_token": EOD,
           "max_documents": MAXDOC, "seq_len": SEQ, "batch_size": BATCH, "seed": 7}
    pipelines = {
        "masked": dict(out, source="tokens:" + path, token_dtype="uint16", eod_mask_loss="true"),
        "plain": dict(out, source="tokens:" + path, token_dtype="uint16"),
        "megatron": dict(out, source="megatron:" + prefix, eod_mask_loss="true",
                         document_shuffle="off"),
    }
    d = env.start_daemon(env.config("docs", pipelines))
    seen = sum(check_pipeline(loaderd, d.socket, name, stream, name != "plain") for name in pipelines)
    print("%d rows checked: tokens, positions, loss_mask, cu_seqlens, num_documents" % seen)
    d.stop()

    base = {"source": "tokens:" + path, "token_dtype": "uint16", "seq_len": SEQ, "batch_size": 2}
    refused(env, "no-eod", dict(base, outputs="tokens positions"), "outputs", ["need eod_token"])
    refused(env, "unknown", dict(base, outputs="tokens attention", eod_token=0), "outputs",
            ['"attention" is not tokens'])
    refused(env, "no-tokens", dict(base, outputs="positions", eod_token=0), "outputs",
            ["must name tokens"])
    refused(env, "direct", dict(base, outputs="tokens loss_mask", eod_token=0, direct="on"), "direct",
            ["direct: on delivers the file's tokens"])


if __name__ == "__main__":
    harness.run_test("test_py_documents", body)
