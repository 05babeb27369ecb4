#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Start-up lines are not rate-limited: every one of them may matter.

A configuration with 60 pipelines whose data files are missing (more than
the 50 lines a log call site may write per window once the daemon runs)
must make loaderd exit 1 with one error line naming each missing file,
and no "suppressed" line.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

PIPELINES = 60


def body(env):
    pipelines = {"p%02d" % i: {"source": "raw:" + env.path("missing-%02d.bin" % i),
                               "record_bytes": 16, "batch_size": 4} for i in range(PIPELINES)}
    cfg = env.config("startup", pipelines)
    r = subprocess.run([harness.binary("loaderd"), "--config", cfg], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    harness.check_no_sanitizer_report(r.stderr, "loaderd")
    check(r.returncode == 1, "loaderd exited %d with %d missing data files" % (r.returncode, PIPELINES))
    for i in range(PIPELINES):
        path = env.path("missing-%02d.bin" % i)
        check(r.stderr.count(path) == 1, "the log names %s %d times, expected once:\n%s"
              % (path, r.stderr.count(path), r.stderr))
    check("suppressed" not in r.stderr, "start-up lines were suppressed:\n%s" % r.stderr)


if __name__ == "__main__":
    harness.run_test("test_log_startup", body)
