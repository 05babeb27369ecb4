# SPDX-License-Identifier: Apache-2.0
"""client_harness: what the Python package's tests (tests/python, and
tests/gpu/test_gpu_python.py) share on top of tests/integration/harness.py.

- The package under test is the one the build staged ($LOADERD_BUILD_DIR/
  python, with the client library next to it); CTest puts it on PYTHONPATH.
- The frameworks a test runs its checks with: numpy and torch (Debian's
  python3-torch in CI; a missing one fails the test). $LOADERD_TEST_FRAMEWORKS
  narrows the list (the sanitizer build runs numpy only: torch's own
  libraries are not built for AddressSanitizer).
- Expected values come from the dataset file, read here independently of
  the daemon: the bytes of sample i of a raw file are its i-th record.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import harness  # noqa: E402  (tests/integration is put on the path just above)
from harness import TestFailure, TestSkip, check  # noqa: E402,F401


def import_loaderd():
    try:
        import loaderd
    except ImportError as e:
        raise TestFailure("cannot import the staged package (PYTHONPATH=%s): %s" %
                          (os.environ.get("PYTHONPATH"), e)) from None
    staged = os.path.join(harness.build_dir(), "python")
    check(os.path.dirname(os.path.dirname(os.path.abspath(loaderd.__file__))) == os.path.abspath(staged),
          "imported loaderd from %s, not the build's staged package in %s" % (loaderd.__file__, staged))
    return loaderd


def frameworks():
    wanted = os.environ.get("LOADERD_TEST_FRAMEWORKS", "numpy,torch").split(",")
    for name in wanted:
        try:
            __import__(name)
        except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
            raise TestFailure("%s cannot be imported by %s (%s); scripts/install-deps.sh installs it, "
                              "and $LOADERD_TEST_FRAMEWORKS narrows the frameworks tested"
                              % (name, sys.executable, e)) from None
    return wanted


def expect(kind, words, fn, what):
    """fn() must raise kind with every one of words in its message;
    returns the exception."""
    try:
        fn()
    except kind as e:
        for w in words:
            check(w in str(e), "%s raised %s(%r), which does not say %r" % (what, type(e).__name__, str(e), w))
        print("%s: %s" % (what, e))
        return e
    raise TestFailure("%s did not raise %s" % (what, kind.__name__))


def raw_pipeline(env, n, record_bytes, batch_size, data_seed, seed=None):
    """The package under test and a daemon serving pipeline "p": a raw file
    of n records (generated from data_seed), batch_size, and the pipeline's
    seed when given. Returns (loaderd, the file's records, the config, the
    daemon)."""
    loaderd = import_loaderd()
    data = env.make_raw("data.bin", n, record_bytes, seed=data_seed)
    recs = records(data, record_bytes)
    pipeline = {"source": "raw:" + data, "record_bytes": record_bytes, "batch_size": batch_size}
    if seed is not None:
        pipeline["seed"] = seed
    cfg = env.config("py", {"p": pipeline})
    return loaderd, recs, cfg, env.start_daemon(cfg)


def records(path, record_bytes):
    with open(path, "rb") as f:
        data = f.read()
    return [data[i:i + record_bytes] for i in range(0, len(data), record_bytes)]


def host_bytes(t):
    """The bytes of a host tensor or array, row-major."""
    if hasattr(t, "numpy"):
        t = t.numpy()
    return t.tobytes()


def row_bytes(t, row):
    if hasattr(t, "cpu"):
        t = t.cpu()
    return host_bytes(t[row])


def check_rows(batch, name, recs, what):
    """Every row of tensor `name` equals the file's record of its sample."""
    t = batch[name]
    indices = batch.sample_indices()
    check(len(indices) == batch.rows and t.shape[0] == batch.rows,
          "%s: batch %d has %d rows, %d sample indices, tensor of %d rows" %
          (what, batch.seq, batch.rows, len(indices), t.shape[0]))
    for r, s in enumerate(indices):
        got = row_bytes(t, r)
        check(got == recs[s], "%s: batch %d (epoch %d, index %d) row %d: sample %d's bytes differ "
              "from the file's record %d" % (what, batch.seq, batch.epoch, batch.index, r, s, s))
    return indices


def epoch_indices(loader, check_values=None):
    """The sample indices of one epoch of the loader, batch by batch;
    check_values(batch) runs on each batch."""
    out = []
    for b in loader:
        if check_values:
            check_values(b)
        out.append(b.sample_indices())
    return out


def flat(batches):
    return [s for b in batches for s in b]
