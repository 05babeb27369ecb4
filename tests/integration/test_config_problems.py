#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every problem in one run, each saying what to do.

- `loaderd --check-config` on a file with five problems of five kinds in
  five sections (an unknown key, an unknown section, a missing required
  key, a bad choice, torchvision's transform syntax) prints all five, each
  as `FILE:LINE: message` with its line and its hint, in line order, then
  `configuration FILE: 5 problems found`, and exits 1; a real start prints
  the same, then `5 problems, not started`.
- The start-up checks that open the data: two pipelines whose files are
  missing and an unknown socket_group are all three reported, counted;
  with a misspelt key in one pipeline, the other's data and the group are
  still checked in the same run.
- A reload of a file with many problems is refused with as many as fit in
  an ERROR text, then "and N more"; the log has every one.
- A client asking for an unknown pipeline is told the closest name and the
  pipelines there are; one connecting to a path where nothing listens is
  told where the running loaderd listens, and one at a stale socket that
  nothing listens there.
- loaderctl's misspelt commands and options: the closest one.
"""

import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

ERROR_TEXT_MAX = 1024  # PROTO_ERROR_TEXT_MAX


def run_loaderd(args):
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    r = subprocess.run([harness.binary("loaderd")] + args, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30, env=env)
    harness.check_no_sanitizer_report(r.stderr, "loaderd " + " ".join(args))
    return r


def five_problems(env):
    data = env.make_raw("data.bin", 64, 64)
    path = env.path("five.ini")
    lines = [
        "[daemon]",                                                     # 1
        "socket = " + env.path("five.sock"),                            # 2
        "wokers = 2",                                                   # 3
        "[pipline.x]",                                                  # 4
        "batch_size = 1",                                               # 5
        "[pipeline.train]",                                             # 6
        "source = raw:" + data,                                         # 7
        "record_bytes = 64",                                            # 8
        "[pipeline.valid]",                                             # 9
        "source = imagefolder:" + env.dir,                              # 10
        "batch_size = 8",                                               # 11
        "transform = resize(256) center_crop(224)",                     # 12
        "decode = gpuu",                                                # 13
        "[pipeline.test]",                                              # 14
        "source = imagefolder:" + env.dir,                              # 15
        "batch_size = 8",                                               # 16
        "transform = RandomResizedCrop(224, scale=(0.08, 1.0))",        # 17
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    want = [
        (3, 'unknown key "wokers" in [daemon]; did you mean "workers"?'),
        (4, "unknown section [pipline.x]; did you mean [pipeline.x]?"),
        (6, '[pipeline.train] missing required key "batch_size": add "batch_size = 256"'),
        (13, '[pipeline.valid] decode: "gpuu" is not one of auto|cpu|gpu; did you mean "gpu"?'),
        (17, "[pipeline.test] transform: random_resized_crop: \"RandomResizedCrop(224, scale=(0.08, "
             "1.0))\" is torchvision's syntax: a range is lo:hi and two sizes are height, width, "
             "without brackets; write random_resized_crop(224, scale=0.08:1.0)"),
    ]
    for args, last in ((["--check-config", "--config", path], "5 problems found"),
                       (["--config", path], "5 problems, not started")):
        r = run_loaderd(args)
        check(r.returncode == 1, "loaderd %s: exit %d, expected 1:\n%s" % (args[0], r.returncode, r.stderr))
        errors = [line for line in r.stderr.splitlines() if line.startswith("loaderd: error: ")]
        check(len(errors) == 6, "loaderd %s: %d error lines, expected 5 and the count:\n%s"
              % (args[0], len(errors), r.stderr))
        for (line, text), got in zip(want, errors):
            expected = "loaderd: error: %s:%d: %s" % (path, line, text)
            check(got == expected, "loaderd %s: got\n  %s\nexpected\n  %s" % (args[0], got, expected))
        check(errors[-1] == "loaderd: error: configuration %s: %s" % (path, last),
              "loaderd %s: the last line is %r" % (args[0], errors[-1]))
    print("five problems: all reported, with their lines, then the count")


def preflight_problems(env):
    path = env.config("pre", {
        "train": {"source": "raw:" + env.path("no-train.bin"), "record_bytes": 64, "batch_size": 4},
        "valid": {"source": "raw:" + env.path("no-valid.bin"), "record_bytes": 64, "batch_size": 4},
    }, socket_group="no-such-group-here")
    r = run_loaderd(["--check-config", "--config", path])
    check(r.returncode == 1, "preflight: exit %d" % r.returncode)
    for text in ['pipeline "train": %s: No such file or directory' % env.path("no-train.bin"),
                 'pipeline "valid": %s: No such file or directory' % env.path("no-valid.bin"),
                 '[daemon] socket_group: "no-such-group-here" is not a group on this system',
                 "configuration %s: 3 problems found" % path]:
        check(text in r.stderr, "preflight: stderr lacks %r:\n%s" % (text, r.stderr))
    print("preflight: both pipelines' data and the group reported, 3 problems")

    # a file with a problem: the sections without one are checked all the same
    path = env.config("mixed", {
        "train": {"source": "raw:" + env.path("no-train.bin"), "record_bytes": 64, "batch_size": 4},
        "valid": {"source": "raw:" + env.path("no-valid.bin"), "record_bytes": 64, "batchsize": 4},
    }, socket_group="no-such-group-here")
    r = run_loaderd(["--check-config", "--config", path])
    check(r.returncode == 1, "mixed: exit %d" % r.returncode)
    for text in ['unknown key "batchsize" in [pipeline.valid]; did you mean "batch_size"?',
                 'pipeline "train": %s: No such file or directory' % env.path("no-train.bin"),
                 '[daemon] socket_group: "no-such-group-here" is not a group on this system',
                 "configuration %s: 3 problems found" % path]:
        check(text in r.stderr, "mixed: stderr lacks %r:\n%s" % (text, r.stderr))
    check("no-valid.bin" not in r.stderr, "mixed: the data of a pipeline with a problem was checked")
    print("mixed: the file's problem, the other pipeline's data and the group, 3 problems")


def reload_and_clients(env):
    data = env.make_raw("serve.bin", 64, 64)
    pipelines = {name: {"source": "raw:" + data, "record_bytes": 64, "batch_size": 4}
                 for name in ("train", "valid")}
    cfg = env.config("srv", pipelines)
    d = env.start_daemon(cfg)

    # an unknown pipeline: the closest name and the list
    r = env.loaderctl(["--socket", d.socket, "consume", "--pipeline", "trian", "--batches", "1"])
    want = 'unknown pipeline "trian" (did you mean "train"? pipelines: train, valid)'
    check(r.returncode != 0 and want in r.stderr, "an unknown pipeline: exit %d, stderr %r"
          % (r.returncode, r.stderr))
    r = env.loaderctl(["--socket", d.socket, "consume", "--pipeline", "zzz", "--batches", "1"])
    check('unknown pipeline "zzz" (pipelines: train, valid)' in r.stderr,
          "no close pipeline: stderr %r" % r.stderr)

    # a reload of a file with 60 problems: what fits, then "and N more"
    with open(cfg) as f:
        good = f.read()
    with open(cfg, "a") as f:
        f.write("".join("bogus_key_%d = 1\n" % i for i in range(60)))
    r = env.loaderctl(["--socket", d.socket, "reload"])
    check(r.returncode == 1, "a bad reload: exit %d" % r.returncode)
    m = re.search(r"; and (\d+) more", r.stderr)
    check(m is not None, "a bad reload: no 'and N more' in %r" % r.stderr)
    shown = r.stderr.count('unknown key "bogus_key_')
    check(shown >= 5 and shown + int(m.group(1)) == 60,
          "a bad reload: %d shown and %s more, expected 60 in all: %r" % (shown, m.group(1), r.stderr))
    reply = r.stderr.split("reload: ", 1)[1].rstrip("\n")
    check(len(reply.encode()) < ERROR_TEXT_MAX, "a bad reload: the reply is %d bytes" % len(reply))
    check(d.log().count('unknown key "bogus_key_') >= 60,
          "a bad reload: the log does not list every problem")
    with open(cfg, "w") as f:
        f.write(good)

    # nothing at the path: where the running daemon listens
    missing = env.path("absent.sock")
    r = env.loaderctl(["--socket", missing, "status"])
    check(r.returncode == 1, "no socket: exit %d" % r.returncode)
    for text in ["connect %s: No such file or directory: nothing at %s;" % (missing, missing),
                 "loaderd is running here: pid ", "LOADERD_SOCKET=PATH"]:
        check(text in r.stderr, "no socket: stderr lacks %r:\n%s" % (text, r.stderr))
    # this daemon among them, unless the machine runs more than the four listed
    ours = "pid %d listening on %s" % (d.proc.pid, d.socket)
    check(ours in r.stderr or re.search(r"; and \d+ more;", r.stderr),
          "no socket: stderr lacks %r:\n%s" % (ours, r.stderr))

    # a daemon killed: its socket stays, nobody listens
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    r = env.loaderctl(["--socket", d.socket, "status"])
    text = "a socket is at %s but nothing listens on it" % d.socket
    check(r.returncode == 1 and text in r.stderr, "a stale socket: stderr %r" % r.stderr)
    print("clients: unknown pipeline, reload, missing and stale sockets explained")


def loaderctl_usage(env):
    """A misspelt command or option of loaderctl: the closest one."""
    for args, want in ((["stauts"], "unknown command 'stauts'; did you mean 'status'?"),
                       (["consume", "--pipline", "x"], "unknown option '--pipline'; did you mean '--pipeline'?"),
                       (["peek", "--colums", "3"], "unknown option '--colums'; did you mean '--columns'?"),
                       (["consume", "--zzz"], "unknown option '--zzz'\n")):
        r = env.loaderctl(args)
        check(r.returncode == 2 and want in r.stderr, "loaderctl %s: exit %d, stderr %r"
              % (" ".join(args), r.returncode, r.stderr))
    print("loaderctl: misspelt commands and options answered with the closest")


def body(env):
    loaderctl_usage(env)
    five_problems(env)
    preflight_problems(env)
    reload_and_clients(env)


if __name__ == "__main__":
    harness.run_test("test_config_problems", body)
