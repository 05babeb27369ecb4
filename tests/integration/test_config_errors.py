#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Bad configurations are refused with a message that points at the fault.

`loaderd --check-config --config F` must exit non-zero and print
`F:LINE: ...` with the right line for each syntax or value error (the bad
line sits at a different place in each file; among them a bad `split`, `split` on a
tokens source, `direct` with the megatron document shuffle and a malformed
llmc pattern), and `pipeline "NAME": PATH:
...` for each data-file error (imagefolder trees too: a missing root, no
class directory, a class without a JPEG, a directory loop; a metrics_listen that is not loopback
or an absolute path); a valid file passes with exit 0 and says so.
Starting loaderd for real on a bad file must fail the same way.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BAD = "<<BAD>>"  # marks the line the error must point at


def config_cases(sock, data):
    p = ["[pipeline.p]", "source = raw:" + data, "record_bytes = 64", "batch_size = 8"]
    return [
        ("unknown key", ["[daemon]", "socket = " + sock, "workers = 1", BAD + "frobnicate = 3"] + p),
        ("metrics on every address", ["[daemon]", "socket = " + sock, BAD + "metrics_listen = 0.0.0.0:9400",
                                      "workers = 1"] + p),
        ("metrics on a name", ["[daemon]", "socket = " + sock, "workers = 1",
                               BAD + "metrics_listen = metrics.example:9400"] + p),
        ("metrics on a relative path", ["[daemon]", BAD + "metrics_listen = metrics.sock", "socket = " + sock] + p),
        ("unknown section", ["[daemon]", "socket = " + sock, ""] + p + ["", BAD + "[nonsense]", "a = 1"]),
        ("bad integer", ["[daemon]", "socket = " + sock] + p[:3] + [BAD + "batch_size = 12x"]),
        ("bad daemon integer", ["[daemon]", "socket = " + sock, BAD + "workers = abc"] + p),
        ("missing batch_size", ["[daemon]", "socket = " + sock] + p + ["", BAD + "[pipeline.q]",
                                                                       "source = raw:" + data,
                                                                       "record_bytes = 64"]),
        ("duplicate pipeline", ["[daemon]", "socket = " + sock] + p + ["", BAD + "[pipeline.p]",
                                                                       "source = raw:" + data,
                                                                       "record_bytes = 64",
                                                                       "batch_size = 8"]),
        ("bad source kind", ["[daemon]", "socket = " + sock, "", "[pipeline.p]",
                             BAD + "source = jpeg:" + data, "record_bytes = 64", "batch_size = 8"]),
        ("bad bool", ["[daemon]", "socket = " + sock] + p + [BAD + "shuffle = maybe"]),
        ("syntax error", ["[daemon]", "socket = " + sock, "workers = 1", "", BAD + "this line is not ini"] + p),
        ("bad split", ["[daemon]", "socket = " + sock, "", "[pipeline.m]", "source = megatron:" + data,
                       "seq_len = 8", BAD + "split = 969,30,-1", "batch_size = 8"]),
        ("split of tokens", ["[daemon]", "socket = " + sock, "", "[pipeline.t]", "source = tokens:" + data,
                             "token_dtype = uint16", "seq_len = 8", "batch_size = 8", BAD + "split = 8,1,1"]),
        ("direct with document_shuffle", ["[daemon]", "socket = " + sock, "", "[pipeline.m]",
                                          "source = megatron:" + data, "seq_len = 8", BAD + "direct = on",
                                          "batch_size = 8"]),
        ("llmc pattern", ["[daemon]", "socket = " + sock, "", "[pipeline.l]",
                          BAD + "source = llmc:" + data + "_{000..", "seq_len = 8", "batch_size = 8"]),
    ]


def write_lines(path, lines):
    bad_line = None
    out = []
    for n, line in enumerate(lines, 1):
        if line.startswith(BAD):
            bad_line = n
            line = line[len(BAD):]
        out.append(line)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return bad_line


def run_loaderd(args, timeout_s=15):
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    try:
        return subprocess.run([harness.binary("loaderd")] + args, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise harness.TestFailure("loaderd %s was still running after %d s, expected it to refuse "
                                  "the configuration" % (" ".join(args), timeout_s)) from None


def body(env):
    sock = env.path("cfg.sock")
    data = env.make_raw("data.bin", 64, 64)
    started = []  # (what, config, expected text) also checked by a real start

    for what, lines in config_cases(sock, data):
        path = env.path(what.replace(" ", "_") + ".ini")
        bad_line = write_lines(path, lines)
        r = run_loaderd(["--check-config", "--config", path])
        where = "%s:%d:" % (path, bad_line)
        check(r.returncode != 0, "%s: --check-config exited 0" % what)
        check(where in r.stderr, "%s: stderr does not contain %r:\n%s" % (what, where, r.stderr))
        print("%s: %s" % (what, r.stderr.strip().splitlines()[-1]))
        if what == "metrics on every address":
            check("[daemon] metrics_listen: \"0.0.0.0:9400\" is not a loopback address" in r.stderr,
                  "%s: the reason is not given:\n%s" % (what, r.stderr))
        if what == "unknown key":
            started.append((what, path, where))

    def tokens_cfg(name, path, dtype, seq_len):
        return {name: {"source": "tokens:" + path, "token_dtype": dtype, "seq_len": seq_len,
                       "batch_size": 1}}

    missing = env.path("no-such-file.bin")
    odd = env.make_raw("odd.bin", 1000, 1)
    few = env.make_raw("few.bin", 3, 64)
    tok_odd = env.make_raw("tok-odd.bin", 1001, 1)
    tok_short = env.make_tokens("tok-short.bin", 8, "uint16")
    data_cases = [
        ("missing", {"miss": {"source": "raw:" + missing, "record_bytes": 64, "batch_size": 8}},
         missing, "No such file or directory"),
        ("raw size", {"rawsize": {"source": "raw:" + odd, "record_bytes": 96, "batch_size": 1}},
         odd, "size 1000 is not a multiple of record_bytes 96"),
        ("too few samples", {"few": {"source": "raw:" + few, "record_bytes": 64, "batch_size": 64}},
         few, "dataset has 3 samples, fewer than batch_size 64"),
        ("odd token file", tokens_cfg("tokodd", tok_odd, "uint16", 4), tok_odd, None),
        ("short token file", tokens_cfg("tokshort", tok_short, "uint16", 8), tok_short, None),
    ]
    # imagefolder trees: no root, no class, a class without JPEG, a loop
    trees = {name: env.path(name) for name in ("noclass", "emptyclass", "loop")}
    os.makedirs(trees["noclass"])
    os.makedirs(os.path.join(trees["emptyclass"], "cat"))
    with open(os.path.join(trees["emptyclass"], "cat", "a.txt"), "w") as f:
        f.write("not an image\n")
    os.makedirs(os.path.join(trees["loop"], "cat"))
    open(os.path.join(trees["loop"], "cat", "a.jpg"), "wb").close()
    os.symlink("..", os.path.join(trees["loop"], "cat", "up"))

    def images_cfg(name, root):
        return {name: {"source": "imagefolder:" + root, "batch_size": 1,
                       "transform": "center_crop(8)"}}
    data_cases += [
        ("missing image root", images_cfg("imgmiss", missing), missing, "No such file or directory"),
        ("no class directory", images_cfg("noclass", trees["noclass"]), trees["noclass"],
         "no class directory in it"),
        ("class without JPEG", images_cfg("emptycls", trees["emptyclass"]), trees["emptyclass"],
         "cat: class directory with no .jpg or .jpeg file"),
        ("directory loop", images_cfg("loop", trees["loop"]), trees["loop"],
         "cat/up/cat: a directory loop (a symlink to a parent)"),
    ]
    for what, pipelines, path, message in data_cases:
        name = next(iter(pipelines))
        cfg = harness.write_config(env.path(name + ".ini"), {"socket": sock, "workers": 1}, pipelines)
        r = run_loaderd(["--check-config", "--config", cfg])
        check(r.returncode != 0, "%s: --check-config exited 0" % what)
        expected = 'pipeline "%s": %s: %s' % (name, path, message or "")
        check(expected in r.stderr, "%s: stderr does not contain %r:\n%s" % (what, expected, r.stderr))
        print("%s: %s" % (what, r.stderr.strip().splitlines()[-1]))
        if what == "metrics on every address":
            check("[daemon] metrics_listen: \"0.0.0.0:9400\" is not a loopback address" in r.stderr,
                  "%s: the reason is not given:\n%s" % (what, r.stderr))
        if what == "raw size":
            started.append((what, cfg, expected))

    good = harness.write_config(env.path("good.ini"), {"socket": sock, "workers": 1}, {
        "a": {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8},
        "b": {"source": "tokens:" + env.make_tokens("tok.bin", 100, "uint32"), "token_dtype": "uint32",
              "seq_len": 9, "batch_size": 2, "token_output": "int64"},
    })
    r = run_loaderd(["--check-config", "--config", good])
    check(r.returncode == 0, "a valid config fails --check-config (exit %d): %s" % (r.returncode, r.stderr))
    expected = "loaderd: configuration %s is valid (2 pipelines)" % good
    check(expected in r.stdout + r.stderr, "--check-config of a valid file does not print %r:\n%s%s"
          % (expected, r.stdout, r.stderr))
    check(not os.path.exists(sock), "--check-config created the socket")

    for what, cfg, expected in started:
        r = run_loaderd(["--config", cfg])
        check(r.returncode != 0, "%s: loaderd started on the bad config and exited 0" % what)
        check(expected in r.stderr, "%s: starting loaderd does not print %r:\n%s" % (what, expected, r.stderr))
        check(not os.path.exists(sock), "%s: the failed start left the socket behind" % what)


if __name__ == "__main__":
    harness.run_test("test_config_errors", body)
