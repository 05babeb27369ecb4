#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Device attach failures are clear errors naming the GPU, and cost nothing.

  - a HELLO naming a GPU the daemon does not see (a made-up UUID) gets ERROR
    ENODEV naming that UUID and the GPUs the daemon does see;
  - a ring larger than the GPU's memory (32 device slots of a batch of 1
    GiB records, as many as make the ring larger than the GPU's memory)
    gets ERROR ENOMEM "not enough free device memory on GPU <uuid>";
  - the client refuses `--device 7` when it sees fewer GPUs, and a UUID it
    does not see, naming what it was given;
and afterwards the daemon holds no client and no device memory, and serves
a device client of the same daemon as before.
"""

import errno
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402
from test_bad_frames import ERROR, HELLO, exchange, frame, string  # noqa: E402

FAKE_UUID = bytes(range(1, 17))
FAKE_TEXT = "GPU-01020304-0506-0708-090a-0b0c0d0e0f10"
HUGE_SLOTS = 32  # device slots of the "huge" pipeline's ring
HUGE_RECORD = 1 << 30  # the largest record_bytes


def device_hello(pipeline, uuid, depth=0):
    payload = (struct.pack("<IIII", 1, 0, 1, depth) + uuid + string(pipeline) + string("err")
               + string("") + string("")  # no resume token, the default split
               + string("") + struct.pack("<II", 1, 0) + bytes(4))  # no group, no flags
    return frame(HELLO, payload)


def refusal(sock, pipeline, uuid, depth=0):
    answers = exchange(sock, device_hello(pipeline, uuid, depth))
    check(len(answers) == 1 and answers[0][0] == ERROR,
          "device HELLO for %s got %r, expected one ERROR" % (pipeline, answers))
    code = struct.unpack_from("<i", answers[0][1])[0]
    n = struct.unpack_from("<H", answers[0][1], 4)[0]
    return code, answers[0][1][6:6 + n].decode()


def body(env):
    gpus = gpu_harness.require_gpus()
    real = gpus[0]["uuid"]
    # records a batch: 32 batches more than the GPU's memory
    huge_batch = gpus[0]["memory"] // (HUGE_SLOTS * HUGE_RECORD) + 1
    small = env.make_raw("small.bin", 64, 4096)
    crcs = harness.raw_sample_crcs(small, 4096)
    huge = env.path("huge.bin")
    with open(huge, "wb") as f:
        f.truncate(huge_batch * HUGE_RECORD)  # sparse: never read, only sized
    pipelines = {
        "small": {"source": "raw:" + small, "record_bytes": 4096, "batch_size": 16},
        "huge": {"source": "raw:" + huge, "record_bytes": HUGE_RECORD, "batch_size": huge_batch},
    }
    d = gpu_harness.start_daemon(env, gpu_harness.gpu_config(
        env, "errors", pipelines, staging_slots=1, shm_bytes="%dM" % ((huge_batch << 10) + 64),
        device_slots=HUGE_SLOTS, max_depth=HUGE_SLOTS))

    code, text = refusal(d.socket, "small", FAKE_UUID)
    check(code == errno.ENODEV and FAKE_TEXT in text and real in text,
          "unknown GPU: ERROR %d %r, expected ENODEV naming %s and %s" % (code, text, FAKE_TEXT, real))

    code, text = refusal(d.socket, "huge", bytes.fromhex(real[4:].replace("-", "")), depth=HUGE_SLOTS)
    check(code == errno.ENOMEM and ("not enough free device memory on GPU %s" % real) in text
          and "pipeline \"huge\"" in text,
          "a %d MiB ring: ERROR %d %r, expected ENOMEM naming the GPU and pipeline"
          % (HUGE_SLOTS * huge_batch << 10, code, text))

    r = gpu_harness.loaderctl(env, harness.consume_args(d.socket, "small", epochs=1,
                                                        extra=["--device", "7"]))
    check(r.returncode == 1 and "CUDA device 7 does not exist" in r.stderr,
          "--device 7: rc %d, stderr %r" % (r.returncode, r.stderr))
    r = gpu_harness.loaderctl(env, harness.consume_args(d.socket, "small", epochs=1,
                                                        extra=["--device", FAKE_TEXT]))
    check(r.returncode == 1 and ("no GPU with UUID %s" % FAKE_TEXT) in r.stderr,
          "--device %s: rc %d, stderr %r" % (FAKE_TEXT, r.returncode, r.stderr))

    d.wait_status(lambda s: not s["clients"] and all(g["device_bytes"] == 0 for g in s["gpus"]),
                  15, "no clients and no device memory after the refusals")
    dump = env.path("small.dump")
    r = gpu_harness.loaderctl(env, harness.consume_args(d.socket, "small", epochs=1, dump=dump,
                                                        extra=["--device", "0"]))
    check(r.returncode == 0, "a device client after the refusals failed: %s" % r.stderr)
    rows = harness.read_dump(dump)
    harness.check_dump_crcs(rows, crcs, "device client after the refusals")
    check(len(rows) == 64, "the device client got %d samples, expected 64" % len(rows))


if __name__ == "__main__":
    harness.run_test("test_gpu_attach_errors", body)
