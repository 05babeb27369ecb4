#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Device delivery from a daemon that cannot offer it is a clear error.

A HELLO asking for device delivery (the protocol's own frame, with a made-up
GPU UUID) gets ERROR EOPNOTSUPP naming why: `gpu = off`, or, from a daemon
with `gpu = auto` on a machine without a usable GPU, the reason the GPU is
unavailable (when this machine has a GPU that daemon offers device delivery
and the case is skipped). A HELLO for device delivery with a zero UUID gets
EINVAL; a --device that is neither an ordinal nor a UUID is refused by the
client, naming it. Host clients of the same daemons are served as before
(the pipeline has `direct = on`, which only concerns device clients), and
`gpu = required` without a usable GPU makes the daemon exit 1 at start with
the reason.
"""

import errno
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_bad_frames import ERROR, HELLO, exchange, frame, string  # noqa: E402

N, RECORD, BATCH = 300, 128, 16
FAKE_UUID = bytes(range(1, 17))


def device_hello(pipeline, uuid):
    payload = (struct.pack("<IIII", 1, 0, 1, 0) + uuid + string(pipeline) + string("dev")
               + string("") + string("") + string("") + struct.pack("<II", 1, 0) + bytes(4))
    return frame(HELLO, payload)


def refusal(sock, uuid):
    answers = exchange(sock, device_hello("p", uuid))
    check(len(answers) == 1 and answers[0][0] == ERROR,
          "device HELLO got %r, expected one ERROR" % answers)
    code = struct.unpack_from("<i", answers[0][1])[0]
    n = struct.unpack_from("<H", answers[0][1], 4)[0]
    return code, answers[0][1][6:6 + n].decode()


def gpus_seen():
    r = subprocess.run([harness.binary("loaderd"), "--version"], capture_output=True, text=True,
                       timeout=60)
    for line in r.stdout.splitlines():
        if line.startswith("gpus: "):
            return int(line.split()[1])
    return 0


def body(env):
    data = env.make_raw("data.bin", N, RECORD)
    pipelines = {"p": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH,
                       "direct": "on"}}

    d = env.start_daemon(env.config("off", pipelines, gpu="off"))
    check(d.status()["delivery"] == "host (GPU off)", "status delivery line: %r" % d.status()["delivery"])
    code, text = refusal(d.socket, FAKE_UUID)
    check(code == errno.EOPNOTSUPP and "gpu = off" in text,
          "gpu = off: ERROR %d %r, expected EOPNOTSUPP naming gpu = off" % (code, text))
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1))
    check(r.returncode == 0, "host consume from the gpu = off daemon failed: %s" % r.stderr)
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, extra=["--device", "gpu0"]))
    check(r.returncode == 1 and 'device "gpu0" is neither a CUDA device ordinal nor a GPU UUID'
          in r.stderr, "consume --device gpu0: rc %d, stderr %r" % (r.returncode, r.stderr))
    d.stop()

    if gpus_seen() > 0:
        print("this machine has a GPU: the no-GPU refusal is not checked here")
        return
    d = env.start_daemon(env.config("auto", pipelines))
    st = d.status()
    check(st["delivery"].startswith("host (GPU unavailable: ") or st["delivery"] == "host (GPU unavailable: built without CUDA)",
          "status delivery line without a GPU: %r" % st["delivery"])
    code, text = refusal(d.socket, FAKE_UUID)
    check(code == errno.EOPNOTSUPP and "GPU delivery is not available" in text,
          "no GPU: ERROR %d %r, expected EOPNOTSUPP saying GPU delivery is not available"
          % (code, text))
    code, text = refusal(d.socket, bytes(16))
    check(code in (errno.EINVAL, errno.EOPNOTSUPP), "zero UUID: ERROR %d %r" % (code, text))
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1))
    check(r.returncode == 0, "host consume without a GPU failed: %s" % r.stderr)
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, extra=["--device", "0"]))
    check(r.returncode == 1 and r.stderr.startswith("loaderctl: ") and
          ("CUDA" in r.stderr or "GPU" in r.stderr),
          "consume --device 0 without a GPU: rc %d, stderr %r" % (r.returncode, r.stderr))
    d.stop()

    cfg = env.config("req", pipelines, gpu="required")
    r = subprocess.run([harness.binary("loaderd"), "--config", cfg], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, NOTIFY_SOCKET=""))
    check(r.returncode == 1 and "gpu = required" in r.stderr,
          "gpu = required without a GPU: rc %d, stderr %r" % (r.returncode, r.stderr))


if __name__ == "__main__":
    harness.run_test("test_device_refused", body)
