#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A loaderd-decoder that misbehaves, for test_gpu_decoder_faults: it
speaks daemon/gpu/decoder_proto.h on descriptor 3 as the real program does,
up to the point where LOADERD_TEST_DECODER says it goes wrong:

  refuse    answers the setup with rc -EINVAL and a reason
  garbage   answers the setup with 12 bytes that are no ready message
  silent    reads the setup and never answers
  bad-done  is ready (real interprocess CUDA events, from PyTorch), then
            answers every job with a done message for one image too many
  exit      is ready, then exits at its first job without answering
  once      the first one started (it makes the file LOADERD_TEST_DECODER_MARK
            names) does as `exit`; every later one as `refuse`

It is started by the daemon in place of the real program (the test puts
a copy of loaderd with this one beside it), with the real one's
arguments: --device N --max-batch B --flags F [--lib L].
"""

import os
import socket
import struct
import sys
import time

MAGIC = 0x6C64726465636F32
SETS_MAX = 4
HANDLE = 64
SETUP = struct.Struct("<QIIQ")             # magic, sets, pad, buf_bytes; then the handles
READY = struct.Struct("<QiI256s")          # magic, rc, engines, why; then the events
JOB = struct.Struct("<QII")                # magic, set, n; then n images of 72 bytes
DONE = struct.Struct("<QiIII")             # magic, rc, n, n_err, pad
RESULT = struct.Struct("<iIIIII")          # status, width, height, out_w, out_h, has_err


def ready_message(device):
    """A ready message with a real interprocess event per set."""
    import torch
    torch.cuda.set_device(device)
    events = []
    for _ in range(SETS_MAX):
        e = torch.cuda.Event(interprocess=True)
        e.record()
        events.append(e)
    torch.cuda.synchronize()
    handles = b"".join(bytes(e.ipc_handle()).ljust(HANDLE, b"\0")[:HANDLE] for e in events)
    return READY.pack(MAGIC, 0, 7, b"") + handles, events


def main():
    mode = os.environ.get("LOADERD_TEST_DECODER", "")
    if mode == "once":
        try:
            os.close(os.open(os.environ["LOADERD_TEST_DECODER_MARK"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            mode = "exit"
        except FileExistsError:
            mode = "refuse"
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    device = int(args.get("--device", "0"))
    sock = socket.socket(fileno=3)
    setup = sock.recv(1 << 16)
    if len(setup) < SETUP.size or SETUP.unpack_from(setup)[0] != MAGIC:
        sys.exit("misbehaving_decoder: no setup message")
    if mode == "refuse":
        sock.send(READY.pack(MAGIC, -22, 0, b"refused by the test's decoder") + b"\0" * SETS_MAX * HANDLE)
        sys.exit(1)
    if mode == "garbage":
        sock.send(b"not a ready!")
        time.sleep(600)
    if mode == "silent":
        time.sleep(600)
    msg, events = ready_message(device)
    sock.send(msg)
    while True:
        job = sock.recv(1 << 22)
        if not job:
            return
        if mode == "exit":
            os._exit(0)
        n = JOB.unpack_from(job)[2]
        sock.send(DONE.pack(MAGIC, 0, n + 1, 0, 0) + RESULT.pack(0, 1, 1, 1, 1, 0) * (n + 1))


if __name__ == "__main__":
    main()
