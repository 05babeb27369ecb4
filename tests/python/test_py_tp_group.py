#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel groups through the Python package:
Loader(NAME, rank=R, world_size=W, tp_group=KEY, tp_size=N).

On a raw dataset of 300 records, batch 16, shuffled: two loaders of one
group (data-parallel rank 1 of 2), created one after the other in one
process, receive the same batches (sequence, sample indices, bytes equal
to the file's) for a whole epoch, which is exactly data-parallel rank 1's
share; their state_dict()s are equal and resume a group (by Loader(state=) and
by load_state_dict() on both members), and a lone loader of rank 1, at
the same position. A third member is refused with
LoaderdError naming the group; tp_size without tp_group, and tp_group
without an explicit rank and world size, are ValueErrors. When one
member is closed, the other's next() raises LoaderdError naming the group.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 300, 24, 16


def body(env):
    loaderd, recs, _, d = ch.raw_pipeline(env, N, RECORD, BATCH, data_seed=4, seed=17)

    def member(key="tp-dp1", **kw):
        return loaderd.Loader("p", socket=d.socket, device="cpu", framework="numpy", rank=1,
                              world_size=2, tp_group=key, tp_size=2, depth=2, **kw)

    ch.expect(ValueError, ["tp_size 2 needs tp_group"],
              lambda: loaderd.Loader("p", socket=d.socket, device="cpu", tp_size=2), "tp_size without tp_group")
    ch.expect(ValueError, ["pass rank and world_size"],
              lambda: loaderd.Loader("p", socket=d.socket, device="cpu", tp_group="x", tp_size=2),
              "tp_group without rank and world_size")

    a, b = member(), member()
    ch.expect(loaderd.LoaderdError, ['group "tp-dp1" already has its 2 members'], member,
              "a third member")
    lone = loaderd.Loader("p", socket=d.socket, device="cpu", framework="numpy", rank=1,
                          world_size=2, depth=2)
    ia, ib, il = iter(a), iter(b), iter(lone)
    got = []
    for k in range(len(a)):
        x, y, z = next(ia), next(ib), next(il)
        what = "batch %d" % k
        check(x.seq == y.seq and x.epoch == y.epoch and x.index == y.index,
              "%s: the members got batches %s and %s" % (what, (x.seq, x.index), (y.seq, y.index)))
        check(x.sample_indices() == y.sample_indices() == z.sample_indices(),
              "%s: the members' (or the lone rank's) sample indices differ" % what)
        ch.check_rows(x, "data", recs, what + " member 0")
        ch.check_rows(y, "data", recs, what + " member 1")
        got += x.sample_indices()
    check(len(set(got)) == len(got) == N // 2, "an epoch of rank 1 of 2: %d samples (%d distinct), "
          "expected %d" % (len(got), len(set(got)), N // 2))
    state = a.state_dict()
    check(state == b.state_dict() == lone.state_dict(), "the members' and the lone rank's "
          "state_dict()s differ")
    lone.close()
    a.close()
    b.close()

    # the group's state resumes a group and a lone rank at the same place
    c, e = member("tp-again", state=state), member("tp-again", state=state)
    lone = loaderd.Loader("p", socket=d.socket, device="cpu", framework="numpy", rank=1,
                          world_size=2, state=state)
    x, y, z = next(iter(c)), next(iter(e)), next(iter(lone))
    check(x.epoch == 1 and x.index == 0 and x.sample_indices() == y.sample_indices()
          == z.sample_indices(), "resumed from the group's state: epoch %d batch %d" % (x.epoch, x.index))
    first = z.sample_indices()
    lone.close()

    # load_state_dict() on both members: a new group, at the saved position
    c.load_state_dict(state)
    e.load_state_dict(state)
    ic, ie = iter(c), iter(e)
    x, y = next(ic), next(ie)
    check(x.epoch == 1 and x.index == 0 and x.sample_indices() == y.sample_indices() == first,
          "the members after load_state_dict(): epoch %d batch %d" % (x.epoch, x.index))

    # one member leaves: the other is told, naming the group
    c.close()
    it = ie  # (a new iter() would start the next epoch: a new group, waiting for c)
    ch.expect(loaderd.LoaderdError, ['group "tp-again"', "left the group"],
              lambda: [next(it) for _ in range(len(e) + 1)], "the member left alone")
    e.close()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_py_tp_group", body)
