#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a client sends cannot forge status or log lines, nor reach a
terminal raw.

Consumers attach with `loaderctl consume --name NAME` under names holding a
newline followed by a forged `  client 99 pid 1 name "x` line (the daemon
would complete it), an ANSI escape (ESC[2J), quotes and backslashes, a tab,
a carriage return, DEL, UTF-8 (Latin and CJK, and the 8-bit CSI U+009B),
and a byte that is not UTF-8. `loaderctl status` must parse (harness
.parse_status) to exactly those consumers, each name shown in the escaped
form of common/escape.h (computed here independently), and the status text
must hold no control byte but the line ends.

Then HELLOs built by hand carry such bytes in the pipeline name and the
resume token: each is refused with an ERROR whose text is printable ASCII
(control bytes and non-ASCII are refused by the decoder, EPROTO; quotes and
backslashes in an unknown pipeline or a bad token come back escaped, with
ENOENT and EINVAL). The client library refuses such a pipeline or token
before sending anything (loaderctl and the Python package).

Throughout, the daemon's log must hold no byte outside printable ASCII but
the line ends, and show each name escaped.
"""

import os
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
import test_bad_frames as frames  # noqa: E402  (the hand-made frames of the protocol)

N, RECORD, BATCH = 64, 8, 4
EPROTO, ENOENT, EINVAL = 71, 2, 22

NAMES = [
    b'\n  client 99 pid 1 name "x',
    b"\x1b[2J\x1b[31mred",
    b'q"uo\\"te\\',
    b"tab\there\rcr\x7fdel",
    "café-名前\u009b[1m".encode(),
    b"not utf-8 \xff\xfe",
]


def escaped(raw):
    """The rendering of common/escape.h, written out independently."""
    out = []
    for b in raw:
        if b in b'"\\':
            out.append("\\" + chr(b))
        elif b in b"\n\r\t":
            out.append({10: "\\n", 13: "\\r", 9: "\\t"}[b])
        elif 0x20 <= b <= 0x7e:
            out.append(chr(b))
        else:
            out.append("\\x%02x" % b)
    return "".join(out)


def check_printable(data, what, line_ends=True):
    """data (bytes) holds printable ASCII only, and line ends if allowed."""
    for i, b in enumerate(data):
        ok = 0x20 <= b <= 0x7e or (line_ends and b == 0x0a)
        check(ok, "%s: byte %d is 0x%02x: %r" % (what, i, b, data[max(0, i - 40):i + 40]))


def string(raw):
    return struct.pack("<H", len(raw)) + raw


def hello(pipeline, name=b"hand-made", resume=b""):
    payload = (struct.pack("<IIII", 0, 0, 1, 0) + bytes(16) + string(pipeline) + string(name) + string(resume)
               + string(b"") + string(b"") + struct.pack("<II", 1, 0) + bytes(4))
    return frames.frame(frames.HELLO, payload)


def refused(path, packet, code, words, what):
    """The HELLO gets one ERROR of `code` whose text is printable and holds
    `words`."""
    answers = frames.exchange(path, packet)
    check(len(answers) == 1 and answers[0][0] == frames.ERROR,
          "%s: answered %s, expected one ERROR then a close" % (what, answers))
    payload = answers[0][1]
    got_code, n = struct.unpack_from("<iH", payload)
    text = payload[6:6 + n]
    check_printable(text, "%s: the ERROR text" % what, line_ends=False)
    check(got_code == code and words.encode() in text, "%s: ERROR %d %r; expected %d with %r"
          % (what, got_code, text, code, words))
    print("%s: ERROR %d %s" % (what, got_code, text.decode()))


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=3)
    cfg = env.config("nm", {"p": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH}})
    d = env.start_daemon(cfg)
    ctl = os.fsencode(harness.binary("loaderctl"))

    consumers = []
    for raw in NAMES:
        args = [ctl] + [os.fsencode(a) for a in harness.consume_args(
            d.socket, "p", epochs=1000, extra=["--step-ms", "50", "--depth", "1", "--quiet"])]
        p = subprocess.Popen(args + [b"--name", raw], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        env.procs.append(p)
        consumers.append((raw, p))
    pids = {p.pid: raw for raw, p in consumers}

    st = d.wait_status(lambda st: {c["pid"] for c in st["clients"]} == set(pids), 20,
                       "the %d consumers to be attached" % len(pids))
    r = subprocess.run([ctl, b"--socket", os.fsencode(d.socket), b"status"], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30)
    check(r.returncode == 0, "loaderctl status exited %d: %r" % (r.returncode, r.stderr))
    check_printable(r.stdout, "the status text")
    st = harness.parse_status(r.stdout.decode("ascii"))
    check(len(st["clients"]) == len(pids) and {c["pid"] for c in st["clients"]} == set(pids),
          "status lists clients %s; the consumers are %s" % ([(c["id"], c["pid"]) for c in st["clients"]],
                                                              sorted(pids)))
    for c in st["clients"]:
        want = escaped(pids[c["pid"]])
        check(c["name"] == want and c["pipeline"] == "p", "client pid %d: name shown as %r, expected %r"
              % (c["pid"], c["name"], want))
    print("status:\n" + r.stdout.decode())

    # Bytes a HELLO may not carry in the pipeline or the resume token.
    path = d.socket
    for raw in (b"p\n  client 99 pid 1", b"p\x1b[2J", b"p\x7f", b"p q", "pé".encode(), b"p\xff"):
        refused(path, hello(raw), EPROTO, "HELLO: pipeline byte", "pipeline %r" % raw)
    for raw in (b"ldr1:0:64:0:0\n", b"ldr1:\x1b[2J", b"ldr1:0:64:0:0\t", "ldr1:é".encode(), b"\x9b1m"):
        refused(path, hello(b"p", resume=raw), EPROTO, "HELLO: resume byte", "resume %r" % raw)
    # Printable bytes that end a quoted field come back escaped.
    refused(path, hello(b'p"\\q'), ENOENT, 'unknown pipeline "p\\"\\\\q"', "a pipeline with a quote")
    refused(path, hello(b"p", resume=b'ldr2:"\\x1b'), EINVAL, 'resume token "ldr2:\\"\\\\x1b" is not',
            "a token with a quote")
    check(d.alive(), "loaderd died after the refused HELLOs")

    # The client library says what is wrong before sending anything.
    r = env.loaderctl(harness.consume_args(d.socket, "p\x1b[2J", epochs=1))
    check(r.returncode == 1 and "pipeline name: byte 1 is 0x1b" in r.stderr and "\x1b" not in r.stderr,
          "loaderctl with an escape in the pipeline name: exit %d, %r" % (r.returncode, r.stderr))
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, extra=["--resume", "ldr1:0:64:0:0\n"]))
    check(r.returncode == 1 and "resume token: byte 13 is 0x0a" in r.stderr,
          "loaderctl with a newline in the token: exit %d, %r" % (r.returncode, r.stderr))

    for raw, p in consumers:
        p.send_signal(signal.SIGINT)
    for raw, p in consumers:
        out, err = p.communicate(timeout=30)
        harness.check_no_sanitizer_report(err.decode(errors="replace"), "consume --name %r" % raw)
        check(p.returncode == 0, "consume --name %r exited %d: %r" % (raw, p.returncode, err))
        harness.parse_consume_output(out.decode())
    d.wait_status(lambda st: not st["clients"], 20, "the consumers to be gone")
    d.stop()

    with open(d.log_path, "rb") as f:
        log = f.read()
    check_printable(log, "the daemon's log")
    for raw in NAMES:
        check(escaped(raw).encode() in log, "the daemon's log does not show the name %r as %r"
              % (raw, escaped(raw)))
    check(b'unknown pipeline "p\\"\\\\q"' in log, "the daemon's log lacks the escaped unknown pipeline")


if __name__ == "__main__":
    harness.run_test("test_client_names", body)
