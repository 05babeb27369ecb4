#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Malformed frames get an ERROR frame or a closed connection, never a hang.

Frames are built by hand over SOCK_SEQPACKET, following proto/PROTOCOL.md:
a 24-byte little-endian header {magic 0x4452444c, version 7, type, flags,
length, request_id} and the typed payload (strings as u16 length + bytes).
Two well-formed frames first prove the encoding right (STATUS_REQ gets
STATUS, a valid HELLO gets WELCOME); then random bytes, a 70,000-byte
packet, versions 5, 6 and 8, a RELEASE or a DECODED before HELLO, a HELLO with
rank >= world, one asking to decode with host delivery and a few more must each be answered with ERROR (type 6) and a close, or a plain
close. A consumer attached throughout must be unaffected, the daemon must
stay up, and a normal consume afterwards must deliver correct data.
"""

import array
import os
import random
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

MAGIC, VERSION = 0x4452444C, 7
HELLO, WELCOME, READY, RELEASE, BYE, ERROR, STATUS_REQ, STATUS, RELOAD_REQ, DECODED = range(1, 11)
HELLO_DECODE = 0x1
N, RECORD, BATCH = 1001, 64, 32
ANSWER_TIMEOUT_S = 5


def frame(ftype, payload=b"", version=VERSION, flags=0, length=None, request_id=7, magic=MAGIC):
    if length is None:
        length = len(payload)
    return struct.pack("<IHHIIQ", magic, version, ftype, flags, length, request_id) + payload


def string(text):
    data = text.encode()
    return struct.pack("<H", len(data)) + data


def hello_payload(pipeline, rank=0, world=1, depth=0, name="bad-frames", resume="", split="",
                  group="", group_size=1, flags=0):
    return (struct.pack("<IIII", 0, rank, world, depth) + bytes(16)
            + string(pipeline) + string(name) + string(resume) + string(split)
            + string(group) + struct.pack("<II", group_size, flags) + bytes(4))


def exchange(path, packet):
    """Sends one packet on a fresh connection; returns the list of answers
    (type, payload) received until the daemon closes, or raises on a hang.
    Any fd passed along is closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    s.settimeout(ANSWER_TIMEOUT_S)
    answers = []
    try:
        s.connect(path)
        try:
            s.send(packet)
        except (BrokenPipeError, ConnectionResetError):
            return answers  # closed before it even took the packet: no hang
        while True:
            try:
                data, anc, _, _ = s.recvmsg(70000, socket.CMSG_SPACE(4 * 4))
            except ConnectionResetError:
                return answers
            except socket.timeout:
                answers.append(("hang", None))
                return answers
            for level, kind, fds in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    for fd in array.array("i", fds[:len(fds) - len(fds) % 4]):
                        os.close(fd)
            if not data:
                return answers
            ftype = struct.unpack_from("<H", data, 6)[0] if len(data) >= 8 else None
            answers.append((ftype, data[24:]))
            if ftype in (WELCOME, STATUS):
                return answers  # a good answer; the client side ends here
    finally:
        s.close()


def error_text(payload):
    if len(payload) < 6:
        return repr(payload)
    code, n = struct.unpack_from("<iH", payload)
    return "code %d: %s" % (code, payload[6:6 + n].decode(errors="replace"))


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=13)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("bf", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                  "batch_size": BATCH, "seed": 2}})
    d = env.start_daemon(cfg)
    path = d.socket

    # Positive controls: the hand-made encoding is the daemon's.
    got = exchange(path, frame(STATUS_REQ))
    check(got and got[0][0] == STATUS, "a valid STATUS_REQ got %s, expected STATUS" % got)
    got = exchange(path, frame(HELLO, hello_payload("p")))
    check(got and got[0][0] == WELCOME, "a valid HELLO got %s, expected WELCOME" % got)

    # A well-behaved client streams through all of it.
    bystander_dump = env.path("bystander.dump")
    bystander = env.spawn_loaderctl(harness.consume_args(
        path, "p", epochs=1, dump=bystander_dump, extra=["--step-ms", "40", "--quiet"]))

    rng = random.Random(1)
    bad = [
        ("random bytes", rng.randbytes(100)),
        ("a 70,000-byte packet", frame(HELLO, bytes(70000 - 24))),
        ("version 5", frame(STATUS_REQ, version=5)),
        ("version 8", frame(STATUS_REQ, version=8)),
        ("version 6", frame(STATUS_REQ, version=6)),
        ("RELEASE before HELLO", frame(RELEASE, struct.pack("<QIIQ", 0, 0, 0, 0))),
        ("DECODED before HELLO", frame(DECODED, struct.pack("<QIIIIIIQQ", 0, 0, 0, 1, 0, 0, 0,
                                                              2**64 - 1, 0))),
        ("HELLO with rank 2 of world 2", frame(HELLO, hello_payload("p", rank=2, world=2))),
        ("HELLO with world 0", frame(HELLO, hello_payload("p", rank=0, world=0))),
        ("HELLO for an unknown pipeline", frame(HELLO, hello_payload("nope"))),
        ("HELLO with a string past the payload", frame(HELLO, hello_payload("p")[:-10] + b"\xff\xff")),
        ("HELLO asking to decode with host delivery", frame(HELLO, hello_payload("p", flags=HELLO_DECODE))),
        ("a 10-byte packet", frame(STATUS_REQ)[:10]),
        ("a bad magic", frame(STATUS_REQ, magic=0x12345678)),
        ("an unknown type", frame(99)),
        ("a length over the payload", frame(STATUS_REQ, length=100)),
        ("an unknown flag", frame(STATUS_REQ, flags=0x80)),
        ("READY sent by a client", frame(READY, bytes(80))),
        ("a garbage resume token", frame(HELLO, hello_payload("p", resume="ldr2:x"))),
        ("a RELOAD_REQ with a payload", frame(RELOAD_REQ, b"\x00")),
    ]
    for what, packet in bad:
        answers = exchange(path, packet)
        check(("hang", None) not in answers,
              "%s: no answer and no close within %d s (got %s)" % (what, ANSWER_TIMEOUT_S, answers))
        for ftype, payload in answers:
            check(ftype == ERROR, "%s: answered with frame type %s, expected ERROR (6) or a close"
                  % (what, ftype))
            print("%s: ERROR %s" % (what, error_text(payload)))
        check(len(answers) <= 1, "%s: %d ERROR frames before the close" % (what, len(answers)))
        check(d.alive(), "loaderd died after %s" % what)

    rc, out, err = harness.finish(bystander, 60, "the consumer attached during the bad frames")
    check(rc == 0, "the consumer attached during the bad frames exited %d: %s" % (rc, err))
    rows = harness.read_dump(bystander_dump)
    harness.check_dump_crcs(rows, crcs, "consumer during bad frames")
    check(sorted(s for _, _, s, _ in rows) == list(range(N)), "the consumer attached during the bad "
          "frames did not receive every sample once")

    dump = env.path("after.dump")
    (_, _, rows), = harness.consume_all(env, path, [{"pipeline": "p", "epochs": 2, "dump": dump}])
    harness.check_dump_crcs(rows, crcs, "consume after bad frames")
    for epoch in range(2):
        check(sorted(s for e, _, s, _ in rows if e == epoch) == list(range(N)),
              "consume after bad frames: epoch %d incomplete" % epoch)
    check(d.status()["clients"] == [], "clients remain listed after every connection closed")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_bad_frames", body)
