#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""No image, however costly to decode, holds a worker longer than max_decode_ms.

An imagefolder of small photos and one large progressive noise JPEG (well
within max_image_pixels, but tens of milliseconds of CPU to decode even at
the smallest DCT scale, since a progressive file is read whole). With
max_decode_ms = 2:
- on_error = substitute: every epoch is delivered whole, the large image
  replaced by another sample; the log names the file once with "its
  decode took over max_decode_ms of CPU time"; status counts it.
- on_error = fail: the client's error names the file and the same reason.
With the default max_decode_ms (5000) the same image decodes.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

REASON = "its decode took over max_decode_ms of CPU time"


def body(env):
    mkjpeg = harness.binary("mkjpeg")
    root = env.path("images")
    for cls in ("a", "b"):
        os.makedirs(os.path.join(root, cls))
        for i in range(6):
            subprocess.run([mkjpeg, os.path.join(root, cls, "%d.jpg" % i), "--width", "96",
                            "--height", "80", "--seed", str(i)], check=True)
    big = os.path.join(root, "b", "big.jpg")
    subprocess.run([mkjpeg, big, "--width", "2400", "--height", "2000", "--pattern", "noise",
                    "--progressive"], check=True)
    common = {"source": "imagefolder:" + root, "batch_size": 4, "shuffle": "false",
              "transform": "resize(32) center_crop(32)"}
    cfg = env.config("cap", {"capped": dict(common, max_decode_ms=2),
                             "strict": dict(common, max_decode_ms=2, on_error="fail"),
                             "default": common})
    d = env.start_daemon(cfg)

    dump = env.path("capped.dump")
    r = env.loaderctl(harness.consume_args(d.socket, "capped", epochs=2, dump=dump))
    check(r.returncode == 0, "capped: consume exited %d: %s" % (r.returncode, r.stderr))
    rows = harness.read_dump(dump)
    check(len(rows) == 2 * 13, "capped: %d rows, expected 26" % len(rows))
    log = d.log()
    check(log.count(big + ": " + REASON) == 1,
          "the log does not name %s once with %r:\n%s" % (big, REASON, log))
    st = d.status()
    check(st["bad_images"] >= 2 and st["substituted"] == st["bad_images"],
          "status: bad_images %d substituted %d" % (st["bad_images"], st["substituted"]))

    r = env.loaderctl(harness.consume_args(d.socket, "strict", epochs=1))
    check(r.returncode == 1 and big in r.stderr and REASON in r.stderr,
          "strict: consume exited %d, stderr %r; expected an error naming %s and why"
          % (r.returncode, r.stderr, big))

    before = d.status()["bad_images"]
    r = env.loaderctl(harness.consume_args(d.socket, "default", epochs=1))
    check(r.returncode == 0 and d.status()["bad_images"] == before,
          "default max_decode_ms: consume exited %d (%s), bad_images %d -> %d"
          % (r.returncode, r.stderr, before, d.status()["bad_images"]))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_decode_cap", body)
