# SPDX-License-Identifier: Apache-2.0
"""wait: a condition polled under a deadline, the one way loaderd's tests
(tests/integration/harness.py) and benchmarks (bench/bench_daemon.py) wait
for something to happen: never a fixed sleep (docs/style.md, habit 11). Each
caller says what a timeout is in its own terms: the exception to raise."""

import time


def wait_for(cond, timeout_s, interval_s, timed_out):
    """Polls cond() every interval_s until it returns a true value, which
    is returned; when timeout_s passes first, raises timed_out(), an
    exception saying what was waited for."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise timed_out()
        time.sleep(interval_s)
