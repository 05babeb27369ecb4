# SPDX-License-Identifier: Apache-2.0
"""example_harness: what the examples' smoke tests share on top of
tests/integration/harness.py: skipping where torch cannot run, running an
example under a deadline, and reading its result (one JSON line on stdout)
or its refusal (non-zero exit, the reason on stderr)."""

import json
import os
import subprocess
import sys

SOURCE_DIR = os.environ.get("LOADERD_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
import harness  # noqa: E402  (tests/integration is put on the path just above)
from harness import check  # noqa: E402

RUN_TIMEOUT_S = 120


def example(name):
    return os.path.join(SOURCE_DIR, "examples", name)


def require_modules(*modules):
    """Skips the test in a sanitizer build; a missing module fails it."""
    if os.environ.get("LOADERD_SANITIZE"):
        raise harness.TestSkip("sanitizer build (LOADERD_SANITIZE=%s): torch does not run under it"
                               % os.environ["LOADERD_SANITIZE"])
    for name in modules:
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
            raise harness.TestFailure("%s cannot be imported by %s (%s): scripts/install-deps.sh installs "
                                      "python3-torch and python3-torchvision" % (name, sys.executable, e)) from None


def run_example(script, args, what):
    cmd = [sys.executable, script] + args
    env = dict(os.environ, OMP_NUM_THREADS="2")  # CI runs tests side by side on few cores
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise harness.TestFailure("%s: did not finish within %d s; stderr: %s"
                                  % (what, RUN_TIMEOUT_S, e.stderr)) from None


def figures(r, what):
    """The JSON line of a run that must have succeeded."""
    check(r.returncode == 0, "%s exited %d:\n%s" % (what, r.returncode, r.stderr[-4000:]))
    lines = r.stdout.splitlines()
    check(len(lines) == 1, "%s printed %d lines on stdout, expected one JSON line:\n%s"
          % (what, len(lines), r.stdout))
    try:
        return json.loads(lines[0])
    except ValueError as e:
        raise harness.TestFailure("%s: stdout is not JSON (%s): %r" % (what, e, lines[0])) from None


def check_fails(r, what, needle):
    check(r.returncode != 0, "%s exited 0, expected an error; stdout: %s" % (what, r.stdout))
    check(needle in r.stderr, "%s: stderr does not say %r:\n%s" % (what, needle, r.stderr[-4000:]))
