#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A position token resumes only the stream it was saved on: its pipeline,
with the data it had.

Pipelines p and q read two files of the same size with the same seed, so
their tokens agree on SEED and N; the tokens name the pipeline and its
data, and each is refused by the other, both through `loaderctl consume
--resume` and through a hand-made HELLO (the daemon's check at attach),
with both pipelines and both data identities named. Then:

- restarted with p pointed at q's file, the unchanged q not shuffled, the
  tokens pipeline reading its file as uint16 windows of 20 (the same
  sample count as uint32 windows of 10), the blend's weights 1:3 instead
  of 1:1 (the same blend_samples), and the image pipeline with another
  transform: every token whose samples changed is refused saying the data
  changed; the image token survives the transform (which changes what a
  sample looks like, not which sample an index means);
- restarted with the first configuration and another worker count: every
  token is accepted again, and p resumes exactly where it stopped (the
  rest of the reference epoch, byte for byte);
- a token of the older format (ldr1, no pipeline, no data) is refused as
  such, with the token it would be on the pipeline, which resumes.
"""

import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
import test_bad_frames as frames  # noqa: E402  (the hand-made frames of the protocol)

N, RECORD, BATCH, SEED, K = 200, 64, 8, 7, 3
TOKENS32 = 1001  # uint32 tokens: windows of 10 give 100 samples; as uint16, 2002 tokens in windows of 20 too
CLASSES = 4
T1, T2 = "resize(40) center_crop(32)", "resize(48) center_crop(24)"


def consume(env, d, pipeline, token=None, **kw):
    extra = ["--quiet"] + (["--resume", token] if token else [])
    return env.loaderctl(harness.consume_args(d.socket, pipeline, extra=extra, **kw), timeout_s=30)


def token_after(env, d, pipeline, batches):
    r = consume(env, d, pipeline, batches=batches)
    check(r.returncode == 0, "%s: consume exited %d: %s" % (pipeline, r.returncode, r.stderr))
    return harness.parse_consume_output(r.stdout)[1]


def accepted(env, d, pipeline, token, what, dump=None):
    r = consume(env, d, pipeline, token, epochs=1, dump=dump)
    check(r.returncode == 0, "%s: token %s refused on pipeline %s: %s" % (what, token, pipeline, r.stderr))
    print("%s: accepted" % what)


def hello(pipeline, resume):
    def string(b):
        return struct.pack("<H", len(b)) + b
    payload = (struct.pack("<IIII", 0, 0, 1, 0) + bytes(16) + string(pipeline.encode())
               + string(b"identity") + string(resume.encode()) + string(b"") + string(b"")
               + struct.pack("<II", 1, 0) + bytes(4))
    return frames.frame(frames.HELLO, payload)


def refused(env, d, pipeline, token, words, what):
    """Refused by loaderctl consume --resume (exit 1) and at attach by the
    daemon (an ERROR EINVAL answering the HELLO), each message holding
    every one of `words`."""
    r = consume(env, d, pipeline, token, epochs=1)
    check(r.returncode == 1, "%s: consume --resume exited %d, expected 1: %s" % (what, r.returncode, r.stderr))
    for w in words:
        check(w in r.stderr, "%s: loaderctl's error lacks %r:\n%s" % (what, w, r.stderr))
    answers = frames.exchange(d.socket, hello(pipeline, token))
    check(len(answers) == 1 and answers[0][0] == frames.ERROR,
          "%s: a HELLO with the token was answered %s, expected one ERROR" % (what, answers))
    code, n = struct.unpack_from("<iH", answers[0][1])
    text = answers[0][1][6:6 + n].decode()
    check(code == 22, "%s: ERROR code %d, expected EINVAL (22): %s" % (what, code, text))
    for w in words:
        check(w in text, "%s: the daemon's ERROR lacks %r:\n%s" % (what, w, text))
    print("%s: %s" % (what, text))


def pipelines(env, files, phase):
    a, b, toks, root, m1, m2 = files
    raw = {"record_bytes": RECORD, "batch_size": BATCH, "seed": SEED}
    first = phase != 2
    return {
        "p": dict(raw, source="raw:" + (a if first else b)),
        "q": dict(raw, source="raw:" + b, **({} if first else {"shuffle": "false"})),
        "tok": {"source": "tokens:" + toks, "token_dtype": "uint32" if first else "uint16",
                "seq_len": 10 if first else 20, "batch_size": BATCH, "seed": SEED},
        "img": {"source": "imagefolder:" + root, "batch_size": 2, "seed": SEED,
                "transform": T1 if first else T2},
        "bl": {"source": "tokens:%s 1, tokens:%s %d" % (m1, m2, 1 if first else 3),
               "token_dtype": "uint16", "seq_len": 8, "blend_samples": 100, "batch_size": BATCH,
               "seed": SEED},
    }


def body(env):
    a = env.make_raw("a.bin", N, RECORD, seed=1)
    b = env.make_raw("b.bin", N, RECORD, seed=2)
    toks = env.make_tokens("t.bin", TOKENS32, "uint32", seed=3)
    m1 = env.make_tokens("m1.bin", 401, "uint16", seed=4)
    m2 = env.make_tokens("m2.bin", 801, "uint16", seed=5)
    root = env.path("tree")
    subprocess.run([harness.binary("mkjpeg"), "--tree", root, "--classes", str(CLASSES),
                    "--per-class", "3", "--min-side", "40", "--max-side", "60", "--seed", "6"],
                   check=True, stdout=subprocess.DEVNULL)
    files = (a, b, toks, root, m1, m2)
    crcs = harness.raw_sample_crcs(a, RECORD)

    d = env.start_daemon(env.config("one", pipelines(env, files, 1)))
    (_, _, ref), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1,
                                                        "dump": env.path("ref.dump")}])
    tokens = {name: token_after(env, d, name, K) for name in ("p", "q", "tok", "img", "bl")}
    tp, tq = tokens["p"], tokens["q"]
    dp, dq = harness.token_data(tp), harness.token_data(tq)
    check(tp.startswith("ldr2:p:") and tq.startswith("ldr2:q:") and dp != dq,
          "p and q read other files: their tokens %s and %s must name each its own" % (tp, tq))
    check(tp.split(":")[3:] == tq.split(":")[3:], "p and q were meant to agree on SEED:N:EPOCH:OFFSET: "
          "%s, %s" % (tp, tq))

    # Another pipeline with the same seed and sample count and another file.
    refused(env, d, "q", tp, ['resume token "%s" is a position in pipeline "p" (data %s); this client '
                              'attaches to pipeline "q" (data %s)' % (tp, dp, dq)], "p's token on q")
    refused(env, d, "p", tq, ['is a position in pipeline "q" (data %s); this client attaches to '
                              'pipeline "p" (data %s)' % (dq, dp)], "q's token on p")
    accepted(env, d, "p", tp, "p's token on p")

    # The older format names no pipeline: refused as such, with the token it would be here.
    old = "ldr1:" + ":".join(tp.split(":")[3:])
    refused(env, d, "p", old, ['resume token "%s" is of an older format (ldr1) that names no pipeline '
                               'and no data, so it cannot be checked against pipeline "p": attach '
                               'without a resume token to start over' % old,
                               'resume with "%s"' % tp], "an ldr1 token")
    old_other = "ldr1:%d:%d:0:0" % (SEED + 1, N)
    refused(env, d, "p", old_other, ["older format (ldr1)", "start over"], "an ldr1 token of another seed")
    r = consume(env, d, "p", old_other, epochs=1)
    check("resume with" not in r.stderr, "an ldr1 token that does not fit p is offered as p's: %s" % r.stderr)
    d.stop()

    # Restarted with data that changed under the same names.
    d = env.start_daemon(env.config("two", pipelines(env, files, 2)))
    refused(env, d, "p", tp, ['resume token "%s" is a position in pipeline "p" when its data was %s; '
                              'the data changed since (it is %s now' % (tp, dp, dq),
                              "attach without a resume token to start over"], "p pointed at q's file")
    for name, why in (("q", "shuffle = false"), ("tok", "uint16 windows of 20"),
                      ("bl", "weights 1:3")):
        t = tokens[name]
        refused(env, d, name, t, ['is a position in pipeline "%s" when its data was %s; the data '
                                  'changed since' % (name, harness.token_data(t))], "%s: %s" % (name, why))
    accepted(env, d, "img", tokens["img"], "img with another transform")
    d.stop()

    # Restarted as at first, with another worker count: every token resumes, p exactly.
    d = env.start_daemon(env.config("three", pipelines(env, files, 3), workers=3))
    dump = env.path("rest.dump")
    accepted(env, d, "p", tp, "p after a restart", dump=dump)
    rows = harness.read_dump(dump)
    harness.check_dump_crcs(rows, crcs, "p resumed after a restart")
    want = [(s, c) for _, _, s, c in ref[K * BATCH:]]
    check([(s, c) for _, _, s, c in rows] == want,
          "p resumed after a restart does not deliver the rest of the reference epoch")
    for name in ("q", "tok", "img", "bl"):
        accepted(env, d, name, tokens[name], "%s after a restart" % name)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_resume_identity", body)
