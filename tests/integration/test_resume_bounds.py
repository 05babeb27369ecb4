#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every field of a resume token is bounded, and a stream never wraps.

- Tokens refused at attach (exit 1), each with a message naming the token
  and the field at fault: an epoch near 2^64 (18446744073709551615) and
  2^32, an overflowing seed, signs, spaces, leading zeros, an empty field,
  a missing or extra field, an offset past N.
- A stream resumed at the start of epoch 2^32 - 1 (the last one) delivers
  that whole epoch, every sample once, and then ends the session with an
  error saying the stream has ended, instead of delivering epoch 0 (or
  2^32) again. A token at the very end of that epoch is refused at attach.
- The daemon serves on afterwards.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED = 50, 64, 8, 9
LAST = 2 ** 32 - 1


def consume(env, d, token, dump=None, epochs=2):
    args = harness.consume_args(d.socket, "p", epochs=epochs, dump=dump,
                                extra=["--resume", token, "--quiet"])
    return env.loaderctl(args, timeout_s=30)


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=5)
    crcs = harness.raw_sample_crcs(data, RECORD)
    d = env.start_daemon(env.config("rb", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                                 "batch_size": BATCH, "seed": SEED}}))
    r = env.loaderctl(harness.consume_args(d.socket, "p", batches=1, extra=["--quiet"]))
    check(r.returncode == 0, "a first batch: consume exited %d: %s" % (r.returncode, r.stderr))
    stream = harness.token_stream(harness.parse_consume_output(r.stdout)[1])
    prefix = stream + "%d:%d:" % (SEED, N)
    refused = [
        (prefix + "18446744073709551615:0",
         "EPOCH 18446744073709551615 is not below 4294967296 (2^32)"),
        (prefix + "4294967296:0", "EPOCH 4294967296 is not below 4294967296 (2^32)"),
        (stream + "18446744073709551616:%d:0:0" % N,
         'SEED "18446744073709551616" is larger than 18446744073709551615'),
        (stream + "+%d:%d:0:0" % (SEED, N), 'SEED "+9" is not a decimal number (digits only)'),
        (prefix + "-1:0", 'EPOCH "-1" is not a decimal number (digits only)'),
        # The client library refuses a space before sending (PROTOCOL.md 5.1).
        (prefix + " 1:0", "resume token: byte %d is 0x20" % len(prefix)),
        (prefix + "01:0", 'EPOCH "01" has a leading zero'),
        (prefix + "1:", "OFFSET is empty"),
        (prefix + "1", "it has 3 fields where ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT] "
         "has SEED:N:EPOCH:OFFSET"),
        (prefix + "1:0:0", 'SPLIT "0" is not valid or test'),
        (prefix + "1:0:valid:0", "it has a field after SPLIT"),
        (prefix + "0:%d" % (N + 1), "OFFSET %d is larger than N %d" % (N + 1, N)),
        (prefix + "%d:%d" % (LAST, N), "is at the end of epoch 4294967295, the last a stream has"),
    ]
    for token, why in refused:
        r = consume(env, d, token)
        check(r.returncode == 1, "token %r: consume exited %d, expected 1; stderr: %s"
              % (token, r.returncode, r.stderr))
        check(why in r.stderr, "token %r: the error lacks %r:\n%s" % (token, why, r.stderr))
        check(token in r.stderr or "at the end of epoch" in why or " " in token,  # see above
              "token %r: the error does not name the token:\n%s" % (token, r.stderr))
        print("%s: %s" % (token, r.stderr.strip().splitlines()[-1]))

    # The last epoch, then the end of the stream: no wrap.
    dump = env.path("last.dump")
    r = consume(env, d, prefix + "%d:0" % LAST, dump=dump)
    check(r.returncode == 1, "consume past the last epoch exited %d, expected 1: %s"
          % (r.returncode, r.stderr))
    check('pipeline "p": the stream has ended: epoch 4294967295 was the last a stream has'
          in r.stderr, "the end of the stream is not explained:\n%s" % r.stderr)
    rows = harness.read_dump(dump)
    check(rows and all(e == LAST for e, _, _, _ in rows),
          "epochs delivered: %s, expected only %d" % (sorted(set(e for e, _, _, _ in rows)), LAST))
    harness.check_dump_crcs(rows, crcs, "the last epoch")
    harness.check_permutation([s for _, _, s, _ in rows], N, "the last epoch")
    print("last epoch: %d samples, then: %s" % (len(rows), r.stderr.strip().splitlines()[-1]))

    # Mid-way through the last epoch: the rest of it, then the same end.
    r = consume(env, d, prefix + "%d:%d" % (LAST, 3 * BATCH), dump=dump)
    check(r.returncode == 1 and "the stream has ended" in r.stderr,
          "resumed inside the last epoch: exit %d, %s" % (r.returncode, r.stderr))
    rows = harness.read_dump(dump)
    check(len(rows) == N - 3 * BATCH and all(e == LAST for e, _, _, _ in rows),
          "resumed inside the last epoch: %d rows, epochs %s" % (len(rows), set(e for e, _, _, _ in rows)))

    r = consume(env, d, prefix + "%d:0" % (LAST - 1), epochs=1)
    check(r.returncode == 0, "the epoch before the last is refused: %s" % r.stderr)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_resume_bounds", body)
