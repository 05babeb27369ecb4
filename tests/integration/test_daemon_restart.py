#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`loaderctl consume` prints its position on every exit, and the position
agrees with its dump exactly.

On a raw dataset of 1001 records (batch 16, shuffled), a consumer steps
slowly through epoch 0 with --dump and is cut off mid-epoch in four ways:

- the daemon is SIGKILLed: the consumer exits 1 with a "loaderctl: " error,
  and a new daemon is started on the same configuration;
- the daemon is stopped (SIGTERM): its ERROR "daemon shutting down" ends the
  consumer, exit 1;
- the dump file cannot be written past a few KiB (RLIMIT_FSIZE): exit 1
  naming the file; the partly written batch must not be left in it;
- the consumer itself gets SIGINT: exit 0.

Each time the consumer must still print the two stdout lines of a normal
end (summary and `position: TOKEN`), the summary must count exactly the
dumped rows, and the token must be the offset of the dumped samples. A
consumer resumed with that token (on the restarted daemon where there is
one) must deliver the rest of the epoch so that, with the first dump, every
sample is delivered exactly once with the CRC of its bytes in the file.
"""

import collections
import os
import resource
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED = 1001, 64, 16, 5
STEP_MS = 40
FSIZE_LIMIT = 3000  # bytes of dump: a few batches of lines, then a write fails midway


def start_consumer(env, d, dump, preexec_fn=None):
    """A slow consumer of epoch 0, in the background."""
    args = harness.consume_args(d.socket, "p", epochs=1, dump=dump,
                                extra=["--step-ms", str(STEP_MS), "--quiet"])
    p = subprocess.Popen([harness.binary("loaderctl")] + args, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=preexec_fn)
    env.procs.append(p)
    return p


def wait_released(d, p, k):
    d.wait_status(lambda st: any(x["pid"] == p.pid and x["released"] >= k for x in st["clients"]),
                  20, "the consumer to release %d batches" % k)
    check(p.poll() is None, "the consumer finished before it was cut off")


def check_cut_off(rc, out, err, want_rc, dump, crcs, what):
    """The consumer's exit, its two lines and its dump agree; returns
    (token, dumped rows)."""
    check(rc == want_rc, "%s: consume exited %d, expected %d\nstdout: %s\nstderr: %s"
          % (what, rc, want_rc, out, err))
    if want_rc != 0:
        check(err.startswith("loaderctl: "), "%s: stderr does not start with a \"loaderctl: \" error: %r"
              % (what, err))
    summary, token = harness.parse_consume_output(out)
    rows = harness.read_dump(dump)
    harness.check_dump_crcs(rows, crcs, what)
    check(0 < len(rows) < N, "%s: %d rows dumped; expected the consumer cut off mid-epoch" % (what, len(rows)))
    batches = sorted(set(b for _, b, _, _ in rows))
    check(batches == list(range(len(batches))) and all(e == 0 for e, _, _, _ in rows),
          "%s: the dump holds batches %s, not whole batches 0..k of epoch 0" % (what, batches))
    check(len(rows) == len(batches) * BATCH, "%s: %d rows in %d batches of %d: a batch is dumped in part"
          % (what, len(rows), len(batches), BATCH))
    check(summary["batches"] == len(batches) and summary["samples"] == len(rows)
          and summary["bytes"] == len(rows) * RECORD,
          "%s: the summary %s disagrees with the %d rows dumped" % (what, summary, len(rows)))
    want = harness.token_stream(token) + "%d:%d:0:%d" % (SEED, N, len(rows))
    check(want.startswith("ldr2:p:"), "%s: the position %s does not name pipeline p" % (what, token))
    check(token == want, "%s: position %s after dumping %d samples; expected %s" % (what, token, len(rows), want))
    return token, rows


def resume_rest(env, d, token, first_rows, crcs, what):
    """Resumes at token; the two dumps together cover epoch 0 exactly once."""
    dump = env.path("%s-rest.dump" % what.replace(" ", "-"))
    (summary, end, rows), = harness.consume_all(env, d.socket, [
        {"pipeline": "p", "epochs": 1, "dump": dump, "extra": ["--resume", token]}])
    harness.check_dump_crcs(rows, crcs, what + ", resumed")
    # the daemon restarted in between: the same pipeline and data, so the same stream
    check(end == harness.token_stream(token) + "%d:%d:1:0" % (SEED, N),
          "%s: resumed to the end of epoch 0, position %s (saved %s)" % (what, end, token))
    counts = collections.Counter(s for e, _, s, _ in first_rows + rows if e == 0)
    lost = [s for s in range(N) if counts[s] == 0]
    twice = sorted(s for s, k in counts.items() if k > 1)
    check(not lost and not twice and len(first_rows) + len(rows) == N,
          "%s: %d samples lost (%s), %d delivered twice (%s)" % (what, len(lost), lost[:5], len(twice), twice[:5]))


def cut_off_by(env, d, how, released, end, crcs):
    """A consumer of d, ended by end() once it has released `released`
    batches; what it dumped checked (check_cut_off). (position, rows, its
    stderr)."""
    dump = env.path("%s.dump" % how)
    p = start_consumer(env, d, dump)
    wait_released(d, p, released)
    end()
    rc, out, err = harness.finish(p, 20, "the consumer after its daemon was %s" % how)
    token, rows = check_cut_off(rc, out, err, 1, dump, crcs, "daemon %s" % how)
    return token, rows, err


def body(env):
    data = env.make_raw("data.bin", N, RECORD, seed=17)
    crcs = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("rst", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                   "batch_size": BATCH, "seed": SEED}})

    # The daemon dies: the socket is gone under the consumer.
    d = env.start_daemon(cfg)
    token, rows, err = cut_off_by(env, d, "killed", 5, d.kill, crcs)
    print("daemon killed: %s; %s" % (err.strip(), token))
    d = env.start_daemon(cfg)  # the same configuration and socket
    resume_rest(env, d, token, rows, crcs, "daemon killed")

    # The daemon stops: its ERROR frame ends the session.
    token, rows, err = cut_off_by(env, d, "stopped", 3, d.stop, crcs)
    check("daemon shutting down" in err, "daemon stopped: stderr lacks the daemon's reason: %r" % err)
    d = env.start_daemon(cfg)
    resume_rest(env, d, token, rows, crcs, "daemon stopped")

    # The dump cannot be written: the batch that failed is neither in the
    # file nor in the position.
    def limit_dump():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    dump = env.path("full.dump")
    p = start_consumer(env, d, dump, preexec_fn=limit_dump)
    rc, out, err = harness.finish(p, 20, "the consumer whose dump cannot be written")
    token, rows = check_cut_off(rc, out, err, 1, dump, crcs, "dump write failure")
    check(dump in err, "dump write failure: the error does not name %s: %r" % (dump, err))
    resume_rest(env, d, token, rows, crcs, "dump write failure")

    # A stop signal: a normal end, mid-epoch.
    dump = env.path("interrupted.dump")
    p = start_consumer(env, d, dump)
    wait_released(d, p, 3)
    p.send_signal(signal.SIGINT)
    rc, out, err = harness.finish(p, 20, "the consumer after SIGINT")
    token, rows = check_cut_off(rc, out, err, 0, dump, crcs, "SIGINT")
    resume_rest(env, d, token, rows, crcs, "SIGINT")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_daemon_restart", body)
