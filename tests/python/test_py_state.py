#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""state_dict(), load_state_dict(), Loader(state=...) and set_epoch().

For each framework (numpy; torch when importable), on a raw dataset of
1001 samples, batch 32, shuffled:
- mid-epoch round trip: a loader takes K batches and saves its state while
  holding the K-th (the batch in hand counts as consumed); it goes on to the
  end of the epoch and into the next. A new loader made with state= and an
  old one given load_state_dict() both deliver exactly those remaining
  batches, values included, then the same next epoch;
- another world size: a state saved by both ranks of world 2 after K
  batches (the two are equal) resumes with world 1 and world 3 on the rest
  of the epoch, so that with what world 2 consumed every sample is seen
  exactly once (plus the new world's padding);
- set_epoch(e) starts epoch e (its order is the order the stream gives
  epoch e), and is a no-op in the epoch the loader is in, so resuming
  mid-epoch and then calling set_epoch(current) keeps the place;
- refusals: a state of another pipeline, a malformed position, a position
  of another seed, one that names another pipeline, one saved when the
  pipeline's data was other data, and one of the older format that names
  no pipeline are refused with a message naming what is wrong (the older
  one with the token it would be on this pipeline), and the loader goes
  on where it was.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED, K = 1001, 16, 32, 21, 7


def take(it, k, recs, what):
    out = []
    for _ in range(k):
        b = next(it)
        ch.check_rows(b, "data", recs, what)
        out.append(b.sample_indices())
    return out


def rest_and_next_epoch(loader, recs, what, it=None):
    """The rest of the epoch (from iterator `it` when one is under way: a
    new iter() would start the next epoch), then the whole next one."""
    def values(b):
        ch.check_rows(b, "data", recs, what)
    return ch.epoch_indices(it or loader, values), ch.epoch_indices(loader, values)


def round_trip(loaderd, sock, fw, recs):
    new = lambda **kw: loaderd.Loader("p", socket=sock, framework=fw, device="cpu", **kw)  # noqa: E731
    a = new()
    it = iter(a)
    head = take(it, K, recs, fw + " before saving")
    state = a.state_dict()
    stream = harness.token_stream(state["position"])
    check(stream.startswith("ldr2:p:") and state["position"] == stream + "%d:%d:0:%d" % (SEED, N, K * BATCH),
          "%s: state after %d batches of world 1: %s" % (fw, K, state))
    rest, nxt = rest_and_next_epoch(a, recs, fw + " going on", it)
    check(len(head) + len(rest) == -(-N // BATCH), "%s: %d + %d batches in epoch 0" % (fw, len(head), len(rest)))
    b = new(state=state)
    check(len(b) == len(rest), "%s: resumed len %d, want %d" % (fw, len(b), len(rest)))
    got = rest_and_next_epoch(b, recs, fw + " resumed with state=")
    check(got == (rest, nxt), "%s: Loader(state=) does not deliver the batches after the saved one" % fw)
    c = new()
    take(iter(c), 3, recs, fw + " before load_state_dict")
    c.load_state_dict(state)
    got = rest_and_next_epoch(c, recs, fw + " after load_state_dict")
    check(got == (rest, nxt), "%s: load_state_dict() does not deliver the batches after the saved one" % fw)
    for x in (a, b, c):
        x.close()


def other_world(loaderd, sock, fw, recs):
    pair = [loaderd.Loader("p", socket=sock, framework=fw, device="cpu", rank=r, world_size=2)
            for r in range(2)]
    consumed = []
    its = [iter(x) for x in pair]
    for r in range(2):
        consumed += ch.flat(take(its[r], K, recs, "%s world 2 rank %d" % (fw, r)))
    states = [x.state_dict() for x in pair]
    check(states[0]["position"] == states[1]["position"] and states[0]["world_size"] == 2,
          "%s: world 2 ranks save different states: %s" % (fw, states))
    for x in pair:
        x.close()
    for world in (1, 3):
        seen = list(consumed)
        for r in range(world):
            x = loaderd.Loader("p", socket=sock, framework=fw, device="cpu", rank=r, world_size=world,
                               state=states[r % 2])
            seen += ch.flat(ch.epoch_indices(x, lambda b: ch.check_rows(
                b, "data", recs, "%s resumed world %d rank %d" % (fw, world, r))))
            x.close()
        remaining = N - 2 * K * BATCH
        pad = -remaining % world
        check(sorted(set(seen)) == list(range(N)) and len(seen) == N + pad,
              "%s: world 2 -> %d: %d rows covering %d samples, want %d covering %d" %
              (fw, world, len(seen), len(set(seen)), N + pad, N))


def epochs(loaderd, sock, fw, recs):
    ref = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    orders = [ch.epoch_indices(ref) for _ in range(4)]
    ref.close()
    x = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    x.set_epoch(3)
    check(x.epoch == 3, "%s: set_epoch(3) left the loader in epoch %d" % (fw, x.epoch))
    check(ch.epoch_indices(x) == orders[3], "%s: after set_epoch(3) the epoch is not epoch 3" % fw)
    x.set_epoch(1)
    check(ch.epoch_indices(x) == orders[1], "%s: set_epoch(1) after epoch 3 is not epoch 1" % fw)
    it = iter(x)
    take(it, 2, recs, fw + " epoch 2")
    state = x.state_dict()
    x.close()
    y = loaderd.Loader("p", socket=sock, framework=fw, device="cpu", state=state)
    y.set_epoch(2)  # the epoch it is in: keeps its place
    check(ch.epoch_indices(y) == orders[2][2:], "%s: set_epoch(current) after a resume lost the place" % fw)
    y.close()


def refusals(loaderd, sock, recs):
    x = loaderd.Loader("p", socket=sock, framework="numpy", device="cpu")
    it = iter(x)
    take(it, 2, recs, "before refusals")
    good = x.state_dict()
    stream = harness.token_stream(good["position"])
    data = harness.token_data(good["position"])
    other = "%016x" % (int(data, 16) ^ 1)
    cases = [
        (dict(good, pipeline="q"), ValueError, "pipeline 'q'"),
        (dict(good, position="ldr2:nonsense"), loaderd.LoaderdError, "is not a loaderd position token"),
        (dict(good, position=stream + "%d:%d:0:64" % (SEED + 1, N)), loaderd.LoaderdError, "seed %d" % SEED),
        (dict(good, position=stream + "%d:%d:0:64" % (SEED, N + 5)), loaderd.LoaderdError, "had %d samples" % (N + 5)),
        (dict(good, position="ldr2:q:%s:%d:%d:0:64" % (data, SEED, N)), loaderd.LoaderdError,
         'is a position in pipeline "q" (data %s); this client attaches to pipeline "p" (data %s)' % (data, data)),
        (dict(good, position="ldr2:p:%s:%d:%d:0:64" % (other, SEED, N)), loaderd.LoaderdError,
         'pipeline "p" when its data was %s; the data changed since (it is %s now' % (other, data)),
        (dict(good, position="ldr1:%d:%d:0:64" % (SEED, N)), loaderd.LoaderdError,
         'is of an older format (ldr1) that names no pipeline and no data, so it cannot be checked '
         'against pipeline "p": attach without a resume token to start over, or, only if it was saved '
         'on this pipeline and its data has not changed since, resume with "%s%d:%d:0:64"' % (stream, SEED, N)),
        (dict(good, version=9), ValueError, "version 9"),
        ({"epoch": 3}, ValueError, "state_dict() returns"),
    ]
    for state, kind, words in cases:
        try:
            x.load_state_dict(state)
            raise ch.TestFailure("load_state_dict(%r) was accepted" % (state,))
        except kind as e:
            check(words in str(e), "load_state_dict(%r) raised %r, which does not say %r" % (state, str(e), words))
    check(x.state_dict() == good, "a refused state moved the loader: %s, was %s" % (x.state_dict(), good))
    nxt = next(it)
    check(nxt.index == 2 and nxt.epoch == 0, "after refusals the next batch is %r, want index 2" % nxt)
    x.close()


def body(env):
    loaderd, recs, _, d = ch.raw_pipeline(env, N, RECORD, BATCH, data_seed=8, seed=SEED)
    for fw in ch.frameworks():
        round_trip(loaderd, d.socket, fw, recs)
        other_world(loaderd, d.socket, fw, recs)
        epochs(loaderd, d.socket, fw, recs)
    refusals(loaderd, d.socket, recs)


if __name__ == "__main__":
    harness.run_test("test_py_state", body)
