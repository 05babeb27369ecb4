#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Kernels on the client's stream see exactly the delivered batch, ordered
by the ready and released events alone (stream_check).

A raw pipeline of 16 MiB batches (256 KiB records, 64 per batch: a copy
long enough for a kernel that skips the ready wait to overtake it),
shuffled, device_slots 3, on a daemon with `pin = register`, one with
`pin = copy`, and one whose pipeline has `direct = on` (copies straight
from the page-locked file). stream_check takes 300 batches with device "0" and, on its
own non-blocking stream, per batch: ldr_stream_wait, (--busy: a 2 ms spin
kernel,) a kernel that checksums every row of the slot, ldr_release_stream;
the host never waits for the GPU, so the daemon refills each slot as soon as
its released event lets it. The checksums are compared with the data file's
records. --busy and --idle must give no mismatch; so must --busy with the
release-elsewhere control's timing (60 batches, 20 ms spin: the GPU, not
the daemon, is then what limits the pace, so every refill depends on the
released event), the control's exact counterpart; and so must --idle
--no-ready-wait, kernels that skip ldr_stream_wait: the daemon sends READY
only once the copy has landed (PROTOCOL.md, READY). The 16 MiB copies take
some 300 us, so a daemon that sent READY at issue shows here as mismatches.

A negative control shows the comparison would catch a slot refilled too
early; it must give mismatches, else the test fails saying it is not
sensitive: --busy --release-elsewhere records the released event on
another, idle stream, so the daemon refills a slot the busy stream has yet
to read. Its spin is 20 ms, far longer than the daemon needs to prepare and
copy a batch, so the overwrite does not depend on the daemon's speed.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

RECORD, N, BATCH = 256 << 10, 384, 64  # 16 MiB batches, 6 per epoch, all full
SLOTS = 3
BATCHES = 300
SPIN_US = 2000
ELSEWHERE_BATCHES, ELSEWHERE_SPIN_US = 60, 20000
# (label, pin, direct)
MODES = (("pin register", "register", False), ("pin copy", "copy", False),
         ("direct", "register", True))
_RESULT_RE = re.compile(r"stream_check: batches=(\d+) rows=(\d+) mismatches=(\d+)\n")


def stream_check(prog, d, data, what, flags, batches=BATCHES, spin_us=SPIN_US):
    """Runs stream_check; returns its mismatch count."""
    cmd = [prog, "--socket", d.socket, "--pipeline", "train", "--data", data,
           "--record-bytes", str(RECORD), "--batches", str(batches), "--depth", str(SLOTS),
           "--spin-us", str(spin_us)] + flags
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired as e:
        raise harness.TestFailure("%s: stream_check did not finish within 120 s; stderr: %s"
                                  % (what, e.stderr)) from None
    harness.check_no_sanitizer_report(r.stderr, what)
    m = _RESULT_RE.fullmatch(r.stdout)
    check(r.returncode in (0, 1) and m is not None,
          "%s: %s exited %d\nstdout: %s\nstderr: %s"
          % (what, " ".join(cmd), r.returncode, r.stdout, r.stderr))
    got_batches, rows, mismatches = (int(x) for x in m.groups())
    check(got_batches == batches and rows == batches * BATCH,
          "%s: stream_check checked %d batches, %d rows; expected %d, %d"
          % (what, got_batches, rows, batches, batches * BATCH))
    check((r.returncode == 1) == (mismatches > 0),
          "%s: stream_check exited %d with %d mismatches" % (what, r.returncode, mismatches))
    print("%s: %d of %d rows mismatched; %s" % (what, mismatches, rows, r.stderr.strip()))
    return mismatches, r.stderr


def body(env):
    gpu_harness.require_gpus()
    prog = gpu_harness.program("stream_check")
    data = env.make_raw("data.bin", N, RECORD, seed=21)
    train = {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH,
             "shuffle": "true", "seed": 8}

    for label, pin, direct in MODES:
        pipelines = {"train": dict(train, direct="on") if direct else train}
        cfg = gpu_harness.gpu_config(env, "stream-" + label.replace(" ", "-"), pipelines, pin=pin,
                                     workers=4, staging_slots=6, device_slots=SLOTS)
        d = gpu_harness.start_daemon(env, cfg)
        gpu_harness.check_delivery(d, pin)
        if direct:
            log = harness.read_text(d.log_path)
            check('pipeline "train": direct device delivery from' in log,
                  "the daemon log does not say the file was locked:\n%s" % log)

        positives = [(["--busy"], BATCHES, SPIN_US), (["--idle"], BATCHES, SPIN_US),
                     (["--busy"], ELSEWHERE_BATCHES, ELSEWHERE_SPIN_US),
                     (["--idle", "--no-ready-wait"], BATCHES, SPIN_US)]
        for flags, batches, spin_us in positives:
            what = "%s, %s%s" % (label, " ".join(flags),
                                 ", spin %d us" % spin_us if "--busy" in flags else "")
            mismatches, err = stream_check(prog, d, data, what, flags, batches=batches,
                                           spin_us=spin_us)
            check(mismatches == 0, "%s: %d rows differ from the data file:\n%s"
                  % (what, mismatches, err))

        what = "%s, --busy --release-elsewhere" % label
        mismatches, err = stream_check(prog, d, data, what, ["--busy", "--release-elsewhere"],
                                       batches=ELSEWHERE_BATCHES, spin_us=ELSEWHERE_SPIN_US)
        check(mismatches > 0, "%s: no mismatch although the slots were released on an idle "
              "stream while the busy one still read them: the check is not sensitive to a "
              "released event on the wrong stream\n%s" % (what, err))

        d.wait_status(lambda s: not s["clients"] and all(g["device_bytes"] == 0 for g in s["gpus"]),
                      15, "no client and every GPU's device_bytes 0 (%s)" % label)
        d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_stream", body)
