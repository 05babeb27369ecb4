#!/usr/bin/env python3
"""examples/train_tokens.py runs against a real loaderd, on the CPU.

A file of 20,000 uint16 tokens below 500 (tools/make_dataset.py), one
daemon with two tokens pipelines on it, seq_len 32, batch 8: "lm"
(token_output = int64) and "narrow" (delivered as stored, uint16). The
example, as a subprocess with --device cpu --vocab 512 --d-model 64
--layers 2 --steps 4 --warmup 1 --json on "lm", must exit 0 and print one
JSON line whose figures match the run (steps 4, 4 x 8 x 32 tokens,
tokens/s above 0, a data-wait fraction in [0, 1], seq_len 32). It must
exit non-zero with the reason on stderr for a pipeline name the daemon
does not have (the daemon's own message), for the uint16 pipeline (the
advice to set token_output) and for a --vocab below the file's tokens.
Afterwards the daemon must still stop cleanly (no client left).

Skipped (77) when torch cannot be imported, and in a sanitizer build
(torch's libraries are not built for AddressSanitizer).
"""

import json
import os
import subprocess
import sys

SOURCE_DIR = os.environ.get("LOADERD_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
import harness  # noqa: E402  (tests/integration is put on the path just above)
from harness import check  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "train_tokens.py")
TOKENS, VOCAB, SEQ, BATCH, STEPS = 20000, 500, 32, 8, 4
RUN_TIMEOUT_S = 120


def require_torch():
    if os.environ.get("LOADERD_SANITIZE"):
        raise harness.TestSkip("sanitizer build (LOADERD_SANITIZE=%s): torch does not run under it"
                               % os.environ["LOADERD_SANITIZE"])
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
        raise harness.TestSkip("torch cannot be imported (%s): python3-torch" % e) from None


def run_example(args, what):
    cmd = [sys.executable, EXAMPLE] + args
    env = dict(os.environ, OMP_NUM_THREADS="2")  # CI runs tests side by side on few cores
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise harness.TestFailure("%s: did not finish within %d s; stderr: %s"
                                  % (what, RUN_TIMEOUT_S, e.stderr)) from None


def check_fails(r, what, needle):
    check(r.returncode != 0, "%s exited 0, expected an error; stdout: %s" % (what, r.stdout))
    check(needle in r.stderr, "%s: stderr does not say %r:\n%s" % (what, needle, r.stderr[-4000:]))


def body(env):
    require_torch()
    path = env.make_tokens("tokens.bin", TOKENS, "uint16", seed=5, vocab=VOCAB)
    keys = {"source": "tokens:" + path, "token_dtype": "uint16", "seq_len": SEQ, "batch_size": BATCH}
    d = env.start_daemon(env.config("ex", {"lm": dict(keys, token_output="int64"), "narrow": keys},
                                    gpu="off"))
    common = ["--device", "cpu", "--socket", d.socket, "--d-model", "64", "--layers", "2",
              "--steps", str(STEPS), "--warmup", "1", "--json"]

    what = "train_tokens --pipeline lm"
    r = run_example(common + ["--pipeline", "lm", "--vocab", "512"], what)
    check(r.returncode == 0, "%s exited %d:\n%s" % (what, r.returncode, r.stderr[-4000:]))
    lines = r.stdout.splitlines()
    check(len(lines) == 1, "%s printed %d lines on stdout, expected one JSON line:\n%s"
          % (what, len(lines), r.stdout))
    try:
        f = json.loads(lines[0])
    except ValueError as e:
        raise harness.TestFailure("%s: stdout is not JSON (%s): %r" % (what, e, lines[0])) from None
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

    what = "train_tokens --pipeline nosuch"
    check_fails(run_example(common + ["--pipeline", "nosuch"], what), what, 'unknown pipeline "nosuch"')
    what = "train_tokens on uint16 tokens"
    check_fails(run_example(common + ["--pipeline", "narrow", "--vocab", "512"], what), what,
                "token_output = int64")
    what = "train_tokens --vocab 100 on tokens below %d" % VOCAB
    check_fails(run_example(common + ["--pipeline", "lm", "--vocab", "100"], what), what, "--vocab is 100")

    st = d.status()
    check(not st["clients"], "clients still attached after the examples exited: %r" % st["clients"])
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_example_tokens", body)
