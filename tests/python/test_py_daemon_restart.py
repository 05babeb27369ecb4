#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A loader whose daemon fails keeps its exact position: checkpoint, restart
the daemon, resume, and no sample is lost or repeated.

On a raw dataset of 1001 samples, batch 32, shuffled, a loader (depth 2)
takes a few batches, checking their values, and then its daemon fails in
one of these ways:

- SIGKILL while the loader holds a batch; the next next() fails in the
  release of that batch (run for every framework);
- SIGKILL while the loader waits for a batch (the daemon is first stopped
  with SIGSTOP until next() times out, so the wait is the one to fail);
- SIGKILL, then Batch.release() of the batch held fails;
- SIGTERM: the daemon's ERROR "daemon shutting down" (ESHUTDOWN).

Each time: the error is a DaemonUnavailableError; loader.failed is that
error and every later next() raises it again (same class and message);
state_dict() answers without an exception and is the position after the
last batch handed out; len() and epoch still answer; close() raises
nothing and state_dict() is the same after it. A daemon is started again
on the same configuration, Loader(state=...) takes the rest of the epoch,
and with the batches before the failure every sample of the epoch is
delivered exactly once, each with its bytes from the file.
"""

import collections
import errno
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED, K, DEPTH = 1001, 16, 32, 3, 4, 2
BATCHES = -(-N // BATCH)


def new_loader(loaderd, d, fw, **kw):
    return loaderd.Loader("p", socket=d.socket, device="cpu", framework=fw, depth=DEPTH,
                          name="restart", **kw)


def take(it, k, recs, what):
    """k batches' sample indices, values checked."""
    return [ch.check_rows(next(it), "data", recs, what) for _ in range(k)]


def expect_error(loaderd, fn, what):
    try:
        fn()
    except loaderd.DaemonUnavailableError as e:
        return e
    except Exception as e:  # noqa: BLE001  (the wrong kind of error is the failure reported)
        raise ch.TestFailure("%s raised %s(%r), expected DaemonUnavailableError" % (what, type(e).__name__, e))
    raise ch.TestFailure("%s raised nothing, expected DaemonUnavailableError" % what)


def check_failed(loaderd, x, it, e, taken, what):
    """The loader is failed with e and still knows its exact position;
    returns the state."""
    check(x.failed is e, "%s: loader.failed is %r, not the error raised (%r)" % (what, x.failed, e))
    state = x.state_dict()
    want = harness.token_stream(state["position"]) + "%d:%d:0:%d" % (SEED, N, sum(len(b) for b in taken))
    check(state["position"] == want, "%s: state_dict() %s after %d batches handed out; expected %s"
          % (what, state, len(taken), want))
    for _ in range(2):
        again = expect_error(loaderd, lambda: next(it), what + ": next() after the failure")
        check(type(again) is type(e) and str(again) == str(e) and again.errno == e.errno,
              "%s: next() after the failure raised %s(%r), not the same error as %s(%r)"
              % (what, type(again).__name__, str(again), type(e).__name__, str(e)))
    check(x.epoch == 0 and len(x) == BATCHES, "%s: after the failure epoch %d, len %d; expected 0 and %d"
          % (what, x.epoch, len(x), BATCHES))
    check(x.state_dict() == state, "%s: the state moved after the failure" % what)
    x.close()
    check(x.state_dict() == state, "%s: the state after close() is %s, was %s" % (what, x.state_dict(), state))
    return state


def resume_rest(loaderd, env, cfg, state, taken, recs, fw, what):
    """Starts a daemon on cfg; resumes at state; the epoch is exactly once.
    Returns the new daemon."""
    d = env.start_daemon(cfg)
    y = new_loader(loaderd, d, fw, state=state)
    check(len(y) == BATCHES - len(taken), "%s: resumed len %d, expected %d" % (what, len(y), BATCHES - len(taken)))
    rest = ch.epoch_indices(y, lambda b: ch.check_rows(b, "data", recs, what + ", resumed"))
    check(y.epoch == 1, "%s: the resumed loader is in epoch %d after the rest of epoch 0" % (what, y.epoch))
    y.close()
    seen = ch.flat(taken) + ch.flat(rest)
    counts = collections.Counter(seen)
    lost = [s for s in range(N) if counts[s] == 0]
    twice = sorted(s for s, n in counts.items() if n > 1)
    check(not lost and not twice and len(seen) == N, "%s: %d batches before the failure and %d after: "
          "%d samples lost (%s), %d repeated (%s)" % (what, len(taken), len(rest), len(lost), lost[:5],
                                                       len(twice), twice[:5]))
    return d


def start(loaderd, d, fw, recs, what, k=K, **kw):
    """A new loader, its epoch iterator, and the sample indices of its first
    k batches (values checked)."""
    x = new_loader(loaderd, d, fw, **kw)
    it = iter(x)
    return x, it, take(it, k, recs, what)


def recover(loaderd, env, cfg, x, it, e, taken, recs, fw, what):
    """check_failed, then resume_rest from the state it returns."""
    return resume_rest(loaderd, env, cfg, check_failed(loaderd, x, it, e, taken, what), taken, recs, fw, what)


def killed_holding(loaderd, env, cfg, d, recs, fw):
    what = fw + ": SIGKILL while a batch is held"
    x, it, taken = start(loaderd, d, fw, recs, what)
    d.kill()
    e = expect_error(loaderd, lambda: next(it), what + ": next()")
    return recover(loaderd, env, cfg, x, it, e, taken, recs, fw, what)


def killed_waiting(loaderd, env, cfg, d, recs):
    what = "SIGKILL while next() waits"
    x, it, taken = start(loaderd, d, "numpy", recs, what, timeout=0.3)
    os.kill(d.pid, signal.SIGSTOP)
    try:
        for _ in range(DEPTH + 2):  # the batches already sent, then a wait that times out
            taken.append(ch.check_rows(next(it), "data", recs, what))
        raise ch.TestFailure("%s: a stopped daemon delivered %d batches" % (what, DEPTH + 2))
    except TimeoutError:
        pass
    finally:
        d.kill()  # SIGKILL ends a stopped process too
    e = expect_error(loaderd, lambda: next(it), what + ": next()")
    check(e.errno == errno.ECONNRESET, "%s: errno %s, expected ECONNRESET" % (what, e.errno))
    return recover(loaderd, env, cfg, x, it, e, taken, recs, "numpy", what)


def killed_then_release(loaderd, env, cfg, d, recs):
    what = "SIGKILL, then Batch.release()"
    x, it, taken = start(loaderd, d, "numpy", recs, what, k=K - 1)
    b = next(it)
    taken.append(ch.check_rows(b, "data", recs, what))
    d.kill()
    e = expect_error(loaderd, b.release, what)
    check(b.released, "%s: the batch is not marked released" % what)
    b.release()  # twice: nothing
    return recover(loaderd, env, cfg, x, it, e, taken, recs, "numpy", what)


def daemon_error(loaderd, env, cfg, d, recs):
    what = "the daemon's ERROR (SIGTERM)"
    x, it, taken = start(loaderd, d, "numpy", recs, what)
    d.stop()
    e = None
    for _ in range(DEPTH + 2):  # batches sent before the ERROR may still come
        try:
            taken.append(ch.check_rows(next(it), "data", recs, what))
        except loaderd.LoaderdError as err:
            e = err
            break
    check(isinstance(e, loaderd.DaemonUnavailableError) and e.errno == errno.ESHUTDOWN
          and "daemon shutting down" in str(e),
          "%s: raised %r (errno %s), expected DaemonUnavailableError ESHUTDOWN with the daemon's text"
          % (what, e, getattr(e, "errno", None)))
    return recover(loaderd, env, cfg, x, it, e, taken, recs, "numpy", what)


def with_block(loaderd, env, cfg, d, recs):
    """Leaving a `with` block of a loader whose daemon died raises only the
    error from inside the block."""
    what = "a with block"
    try:
        with new_loader(loaderd, d, "numpy") as x:
            it = iter(x)
            taken = take(it, K, recs, what)
            d.kill()
            raise KeyboardInterrupt  # stands for any error of the training step
    except KeyboardInterrupt:
        pass
    state = x.state_dict()
    check(state["position"] == harness.token_stream(state["position"]) + "%d:%d:0:%d" % (SEED, N, K * BATCH),
          "%s: state %s" % (what, state))
    return resume_rest(loaderd, env, cfg, state, taken, recs, "numpy", what)


def body(env):
    loaderd, recs, cfg, d = ch.raw_pipeline(env, N, RECORD, BATCH, data_seed=4, seed=SEED)
    for fw in ch.frameworks():
        d = killed_holding(loaderd, env, cfg, d, recs, fw)
    d = killed_waiting(loaderd, env, cfg, d, recs)
    d = killed_then_release(loaderd, env, cfg, d, recs)
    d = daemon_error(loaderd, env, cfg, d, recs)
    d = with_block(loaderd, env, cfg, d, recs)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_py_daemon_restart", body)
