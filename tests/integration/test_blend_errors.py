#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A blend's configuration errors point at the fault (docs/config.md,
"Blending").

`loaderd --check-config` must exit non-zero and print `FILE:LINE: ` and a
message naming the fault for each bad blend: a weight that is not a
number, zero, negative, a member without a weight, a member that is not a
token source, `blend_samples` on a lone source, `split` without a megatron
member, `direct`, `token_dtype` missing for a tokens member (at the
section's line). At start (the same FILE:LINE, of `source`): a member
whose file is missing or malformed is refused naming that file and the
member, and members storing different token types without `token_output`
are refused naming both; `token_output = int32` makes the same blend
valid, and so does a pattern whose braces hold commas (not a list). A
real start on a bad blend fails the same way. While serving, a member's
file cut short after start fails the client that reads it with an error
naming the pipeline and the member, and the daemon serves on.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_config_errors import BAD, run_loaderd, write_lines  # noqa: E402
from test_llmc import write_shard  # noqa: E402


def body(env):
    sock = env.path("cfg.sock")
    web = env.path("web")
    harness.write_megatron(web, [39, 50], list(range(1, 90)))
    code = env.path("code")
    harness.write_megatron(code, [100], list(range(1000, 1100)))
    write_shard(env.path("s_1.bin"), list(range(2000, 2050)))
    write_shard(env.path("s_2.bin"), list(range(3000, 3050)))
    wide = env.make_tokens("wide.bin", 200, "uint32")
    head = ["[daemon]", "socket = " + sock, "workers = 1", "", "[pipeline.mix]"]
    keys = ["seq_len = 8", "batch_size = 4"]
    two = "megatron:%s 0.7, megatron:%s 0.3" % (web, code)

    cases = [
        ("bad weight", head + [BAD + "source = megatron:%s 0.7x, megatron:%s 0.3" % (web, code)] + keys,
         'weight "0.7x" is not a positive number'),
        ("zero weight", head + [BAD + "source = megatron:%s 0, megatron:%s 1" % (web, code)] + keys,
         'weight "0" is not a positive number'),
        ("negative weight", head + keys + [BAD + "source = megatron:%s 1, megatron:%s -2" % (web, code)],
         'member 2 "megatron:%s -2": weight "-2" is not a positive number' % code),
        ("missing weight", head + [BAD + "source = megatron:%s, megatron:%s 0.3" % (web, code)] + keys,
         'member 1 "megatron:%s" has no weight' % web),
        ("not a token source", head + [BAD + "source = megatron:%s 1, imagefolder:%s 1" % (web, env.path("img"))]
         + keys, 'member 2 "imagefolder:%s" is not a token source' % env.path("img")),
        ("raw member", head + [BAD + "source = raw:%s 1, tokens:%s 1" % (wide, wide)] + keys,
         "is not a token source"),
        ("blend_samples alone", head + ["source = megatron:" + web] + keys + [BAD + "blend_samples = 100"],
         "blend_samples does not apply to a megatron source"),
        ("split without megatron", head + ["source = llmc:%s 1, llmc:%s 1" % (env.path("s_1.bin"),
                                                                              env.path("s_2.bin"))]
         + keys + [BAD + "split = 8,1,1"], "split does not apply to a blend of llmc sources"),
        ("direct", head + ["source = " + two] + keys + [BAD + "direct = on"],
         "direct: on reads one file range per sample"),
        ("tokens member without token_dtype", head[:-1] + [BAD + "[pipeline.mix]",
                                                           "source = megatron:%s 1, tokens:%s 1" % (web, wide)]
         + keys, 'missing required key "token_dtype" (of its tokens member)'),
        ("member file missing", head + [BAD + "source = %s, megatron:%s 1" % (two.replace(" 0.3", " 0.2"),
                                                                           env.path("nope"))] + keys,
         'pipeline "mix": %s: ' % env.path("nope")),
        ("member without a window", head + [BAD + "source = megatron:%s 1, llmc:%s 1" % (web, env.path("s_1.bin"))]
         + ["seq_len = 60", "batch_size = 4"], 'pipeline "mix": %s' % env.path("s_1.bin")),
        ("dtype mismatch", head + ["token_dtype = uint32", BAD + "source = megatron:%s 1, tokens:%s 1"
                                   % (web, wide)] + keys,
         'pipeline "mix": blend member 1 (%s) delivers uint16 tokens, member 2 (%s) uint32' % (web, wide)),
    ]
    for what, lines, message in cases:
        path = env.path(what.replace(" ", "_") + ".ini")
        bad_line = write_lines(path, lines)
        r = run_loaderd(["--check-config", "--config", path])
        where = "%s:%d: " % (path, bad_line)
        check(r.returncode != 0, "%s: --check-config exited 0" % what)
        check(where in r.stderr and message in r.stderr.split(where, 1)[1],
              "%s: stderr does not contain %r then %r:\n%s" % (what, where, message, r.stderr))
        print("%s: %s" % (what, r.stderr.strip().splitlines()[-1]))
        if what == "member file missing":
            check("(blend member 3)" in r.stderr, "member file missing: the member is not named:\n%s"
                  % r.stderr)
            s = run_loaderd(["--config", path])
            check(s.returncode != 0 and where in s.stderr,
                  "a real start on a blend with a missing member did not fail at %r:\n%s" % (where, s.stderr))

    goods = [
        ("token_output widens both", head + ["token_dtype = uint32", "token_output = int32",
                                             "source = megatron:%s 1, tokens:%s 1" % (web, wide)] + keys),
        ("braces with commas", head + ["source = llmc:%s_{1,2}.bin" % env.path("s")] + keys),
        ("blend of patterns", head + ["source = llmc:%s_{1,2}.bin 2, megatron:%s 1" % (env.path("s"), web)]
         + keys + ["blend_samples = 1000"]),
    ]
    for what, lines in goods:
        path = env.path(what.replace(" ", "_") + ".ini")
        write_lines(path, lines)
        r = run_loaderd(["--check-config", "--config", path])
        check(r.returncode == 0, "%s: --check-config exited %d:\n%s" % (what, r.returncode, r.stderr))
        print("%s: valid" % what)

    # While serving: a member's file cut short after start fails the client
    # reading it, naming the pipeline, the blended sample and the member;
    # the daemon goes on serving (a client of the other pipeline).
    cut = env.path("cut")
    harness.write_megatron(cut, [60, 60], list(range(5000, 5120)))
    d = env.start_daemon(env.config("serving", {
        "mix": {"source": "megatron:%s 0.5, megatron:%s 0.5" % (web, cut), "seq_len": 8, "batch_size": 4},
        "lone": {"source": "megatron:" + web, "seq_len": 8, "batch_size": 4}}))
    with open(cut + ".bin", "r+b") as f:
        f.truncate(10)
    r = env.loaderctl(harness.consume_args(d.socket, "mix", epochs=1, extra=["--quiet"]))
    want = ['pipeline "mix"', "member 2 (%s)" % cut, "shorter than at start"]
    check(r.returncode == 1 and all(w in r.stderr for w in want),
          "a member cut short after start: consume exited %d, stderr %r; expected exit 1 and %s"
          % (r.returncode, r.stderr, want))
    print("member cut short while serving: %s" % r.stderr.strip())
    r = env.loaderctl(harness.consume_args(d.socket, "lone", epochs=1, extra=["--quiet"]))
    check(r.returncode == 0, "the other pipeline after the failure: consume exited %d: %s"
          % (r.returncode, r.stderr))
    d.stop()


if __name__ == "__main__":
    harness.run_test("blend_errors", body)
