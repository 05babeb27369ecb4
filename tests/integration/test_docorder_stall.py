#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An epoch's document order is computed off the daemon's loop: a client of
another pipeline keeps receiving batches while clients of a large
document-shuffled megatron pipeline start epochs nobody was in.

A megatron dataset of 10^7 documents (1 to 29 tokens each, its .bin
sparse) and a small raw pipeline. Client B streams the raw pipeline
through a connection made here (HELLO, then a RELEASE for each READY),
noting when each READY comes. Meanwhile, four times, `loaderctl consume`
resumes the megatron pipeline two batches before the end of an epoch no
client was in yet and consumes four batches, so that two epochs' orders
are new to the daemon each time (the block sums of 2,442 blocks here; a
pass over all 10^7 documents per epoch where the order was a permutation
of the documents, 1 to 2 s on a small machine, during which every client
of the daemon waited). B's longest wait between two READYs while that
went on must stay under max(0.5 s, 20 times its median wait).
"""

import array
import os
import socket
import statistics
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
import make_dataset  # noqa: E402
import test_bad_frames as frames  # noqa: E402  (the hand-made frames of the protocol)

DOCS, SEQ, BATCH, SEED = 10_000_000, 4096, 8, 3


def write_big(prefix):
    """10^7 documents of 1..29 tokens; the .bin sparse (its tokens are 0)."""
    lengths = array.array("i", ((d * 7919) % 29 + 1 for d in range(DOCS)))
    make_dataset.write_megatron_index(prefix, lengths)
    with open(prefix + ".bin", "wb") as f:
        f.truncate(sum(lengths) * 2)
    return sum(lengths)


class Streamer(threading.Thread):
    """Client B: takes and releases batches of `pipeline` until stopped,
    noting the time of each READY."""

    def __init__(self, path, pipeline):
        super().__init__(daemon=True)
        self.path, self.pipeline = path, pipeline
        self.times, self.error = [], None
        self.stop = threading.Event()

    def recv(self, s):
        data, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(16 * 4))
        for level, kind, fds in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for i in range(0, len(fds) - len(fds) % 4, 4):
                    os.close(struct.unpack_from("i", fds, i)[0])
        check(len(data) >= 24, "client B: the daemon closed the connection")
        return struct.unpack_from("<H", data, 6)[0], data[24:]

    def run(self):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            s.settimeout(20)
            s.connect(self.path)
            s.send(frames.frame(frames.HELLO, frames.hello_payload(self.pipeline, depth=2,
                                                                   name="stall-b")))
            kind, _ = self.recv(s)
            check(kind == frames.WELCOME, "client B: HELLO answered with frame type %d" % kind)
            while not self.stop.is_set():
                kind, payload = self.recv(s)
                check(kind == frames.READY, "client B: frame type %d, not READY" % kind)
                self.times.append(time.monotonic())
                seq, = struct.unpack_from("<Q", payload, 0)
                slot, generation = struct.unpack_from("<II", payload, 48)
                s.send(frames.frame(frames.RELEASE, struct.pack("<QIIQ", seq, slot, generation, 0)))
            s.close()
        except Exception as e:  # reported by the test's thread
            self.error = e


def body(env):
    big = env.path("big")
    tokens = write_big(big)
    small = env.make_raw("small.bin", 4096, 64)
    windows = (tokens - 1) // SEQ
    cfg = env.config("stall", {
        "big": {"source": "megatron:" + big, "seq_len": SEQ, "batch_size": BATCH, "seed": SEED},
        "small": {"source": "raw:" + small, "record_bytes": 64, "batch_size": 8},
    }, workers=2)
    d = env.start_daemon(cfg, timeout_s=60)
    r = env.loaderctl(harness.consume_args(d.socket, "big", batches=1, extra=["--quiet"]), timeout_s=60)
    check(r.returncode == 0, "big: consume exited %d: %s" % (r.returncode, r.stderr))
    token = harness.parse_consume_output(r.stdout)[1]
    fields = token.split(":")  # ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET
    check(int(fields[4]) == windows, "big: %s, expected %d windows" % (token, windows))

    b = Streamer(d.socket, "small")
    b.start()
    harness.wait_for(lambda: len(b.times) >= 50 or b.error, 20, "client B's first batches")
    start = time.monotonic()
    for epoch in (1, 3, 5, 7):  # each resumed into an epoch no client was in, and on into the next
        resume = ":".join(fields[:5] + [str(epoch), str(windows - 2 * BATCH)])
        r = env.loaderctl(harness.consume_args(d.socket, "big", batches=4,
                                               extra=["--quiet", "--resume", resume]), timeout_s=60)
        check(r.returncode == 0, "big: consume --resume %s exited %d: %s" % (resume, r.returncode, r.stderr))
        check(harness.parse_consume_output(r.stdout)[1].split(":")[5] == str(epoch + 1),
              "big: 4 batches from %s did not reach epoch %d: %s" % (resume, epoch + 1, r.stdout))
    end = time.monotonic()
    b.stop.set()
    b.join(30)
    check(b.error is None, "client B: %s" % b.error)
    during = [t for t in b.times if start <= t <= end]
    before = [t for t in b.times if t < start]
    gaps = [y - x for x, y in zip(b.times, b.times[1:]) if y >= start and x <= end]
    check(len(during) > 10 and len(before) > 10, "client B received %d batches before and %d during "
          "the epochs' starts" % (len(before), len(during)))
    usual = statistics.median(y - x for x, y in zip(before, before[1:]))
    bound = max(0.5, 20 * usual)
    print("client B: %d batches during %.2f s of 8 new epochs; median wait %.1f ms before, "
          "longest %.1f ms during (bound %.0f ms)" % (len(during), end - start, usual * 1e3,
                                                       max(gaps) * 1e3, bound * 1e3))
    check(max(gaps) < bound, "client B waited %.2f s for a batch while epochs of pipeline big "
          "started (bound %.2f s)" % (max(gaps), bound))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_docorder_stall", body)
