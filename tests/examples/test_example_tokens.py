#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""examples/train_tokens.py runs against a real loaderd, on the CPU.

A file of 20,000 uint16 tokens below 500 (tools/make_dataset.py), one
daemon with three tokens pipelines on it, seq_len 32, batch 8: "lm"
(token_output = int64) and "narrow" (delivered as stored, uint16). The
example, as a subprocess with --device cpu --vocab 512 --d-model 64
--layers 2 --steps 4 --warmup 1 --json on "lm", must exit 0 and print one
JSON line whose figures match the run (steps 4, 4 x 8 x 32 tokens,
tokens/s above 0, a data-wait fraction in [0, 1], seq_len 32). It must
exit non-zero with the reason on stderr for a pipeline name the daemon
does not have (the daemon's own message), for the uint16 pipeline (the
advice to set token_output) and for a --vocab below the file's tokens.
A third pipeline, "docs", delivers `outputs = tokens positions loss_mask
cu_seqlens` (eod_token 7, eod_mask_loss): the example must train on it
with all three in its step (positions, document mask, masked loss; the
JSON's outputs_used), and use none of them on "lm".
Afterwards the daemon must still stop cleanly (no client left).

Skipped (77) when torch cannot be imported, and in a sanitizer build
(torch's libraries are not built for AddressSanitizer).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example_harness as eh  # noqa: E402
import harness  # noqa: E402  (example_harness put tests/integration on the path)
from harness import check  # noqa: E402

EXAMPLE = eh.example("train_tokens.py")
TOKENS, VOCAB, SEQ, BATCH, STEPS = 20000, 500, 32, 8, 4


def body(env):
    eh.require_modules("torch")
    path = env.make_tokens("tokens.bin", TOKENS, "uint16", seed=5, vocab=VOCAB)
    keys = {"source": "tokens:" + path, "token_dtype": "uint16", "seq_len": SEQ, "batch_size": BATCH}
    docs = dict(keys, token_output="int64", outputs="tokens positions loss_mask cu_seqlens",
                eod_token=7, eod_mask_loss="true", max_documents=8)
    d = env.start_daemon(env.config("ex", {"lm": dict(keys, token_output="int64"), "narrow": keys,
                                           "docs": docs}, gpu="off"))
    common = ["--device", "cpu", "--socket", d.socket, "--d-model", "64", "--layers", "2",
              "--steps", str(STEPS), "--warmup", "1", "--json"]

    what = "train_tokens --pipeline lm"
    f = eh.figures(eh.run_example(EXAMPLE, common + ["--pipeline", "lm", "--vocab", "512"], what), what)
    check(f.get("steps") == STEPS and f.get("tokens") == STEPS * BATCH * SEQ,
          "%s: %r steps and %r tokens, expected %d and %d"
          % (what, f.get("steps"), f.get("tokens"), STEPS, STEPS * BATCH * SEQ))
    check(f.get("seq_len") == SEQ and f.get("batch_size") == BATCH,
          "%s: seq_len %r, batch %r; the pipeline's are %d and %d"
          % (what, f.get("seq_len"), f.get("batch_size"), SEQ, BATCH))
    check(isinstance(f.get("tokens_per_s"), (int, float)) and f["tokens_per_s"] > 0,
          "%s: tokens_per_s %r, expected > 0" % (what, f.get("tokens_per_s")))
    wait = f.get("data_wait_fraction")
    check(isinstance(wait, (int, float)) and 0 <= wait <= 1, "%s: data_wait_fraction %r" % (what, wait))

    what = "train_tokens --pipeline docs"
    f = eh.figures(eh.run_example(EXAMPLE, common + ["--pipeline", "docs", "--vocab", "512"], what), what)
    check(f.get("outputs_used") == ["positions", "loss_mask", "cu_seqlens"],
          "%s: the step used %r of the pipeline's outputs" % (what, f.get("outputs_used")))
    check(isinstance(f.get("loss"), float) and f["loss"] == f["loss"] and f["loss"] > 0,
          "%s: loss %r" % (what, f.get("loss")))
    f = eh.figures(eh.run_example(EXAMPLE, common + ["--pipeline", "lm", "--vocab", "512"], what), what)
    check(f.get("outputs_used") == [], "pipeline lm: the step used %r" % f.get("outputs_used"))

    what = "train_tokens --pipeline nosuch"
    eh.check_fails(eh.run_example(EXAMPLE, common + ["--pipeline", "nosuch"], what), what, 'unknown pipeline "nosuch"')
    what = "train_tokens on uint16 tokens"
    eh.check_fails(eh.run_example(EXAMPLE, common + ["--pipeline", "narrow", "--vocab", "512"], what), what,
                "token_output = int64")
    what = "train_tokens --vocab 100 on tokens below %d" % VOCAB
    eh.check_fails(eh.run_example(EXAMPLE, common + ["--pipeline", "lm", "--vocab", "100"], what), what, "--vocab is 100")

    st = d.status()
    check(not st["clients"], "clients still attached after the examples exited: %r" % st["clients"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_example_tokens", body)
