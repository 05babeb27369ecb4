#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python package in host mode delivers the dataset's bytes, in the
sampler's order, exactly once per epoch over two ranks.

For each framework (numpy; torch when importable):
- one rank: every row of every batch equals the file's record of the
  sample the batch names; the epoch is a permutation of the dataset;
  len(loader) is the epoch's batch count; the tensors are read-only views
  of the right dtype and shape; a second `for` continues with epoch 1;
- two ranks (two loaders in one process, as two training processes would
  hold them): each rank's order is DistributedSampler's shard of the epoch
  the world-1 loader saw, and together they cover every sample once plus
  the one padding repeat that 1001 samples over 2 ranks need;
- ranks from the environment ($RANK/$WORLD_SIZE) and their refusal.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED = 1001, 24, 32, 13


def one_rank(loaderd, sock, fw, recs):
    loader = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    check(loader.rank == 0 and loader.world_size == 1, "%s: rank/world %d/%d without a job" %
          (fw, loader.rank, loader.world_size))
    check(len(loader) == -(-N // BATCH), "%s: len(loader) %d, want %d" % (fw, len(loader), -(-N // BATCH)))
    check(loader.dataset_size == N and loader.batch_size == BATCH,
          "%s: dataset_size %d batch_size %d" % (fw, loader.dataset_size, loader.batch_size))
    first = []

    def values(b):
        if not first:
            t = b["data"]
            first.append(t)
            check(tuple(t.shape) == (b.rows, RECORD), "%s: shape %s" % (fw, tuple(t.shape)))
            check(str(t.dtype).endswith("uint8"), "%s: dtype %s" % (fw, t.dtype))
            if fw == "numpy":
                check(not t.flags.writeable, "numpy: a batch array is writeable")
                try:
                    t[0, 0] = 1
                    raise ch.TestFailure("numpy: writing into a batch array did not raise")
                except ValueError:
                    pass
            check(b.device == "cpu" and list(b.keys()) == ["data"] and len(b) == 1,
                  "%s: batch %r" % (fw, b))
        ch.check_rows(b, "data", recs, "%s world 1" % fw)

    epoch0 = ch.epoch_indices(loader, values)
    check(len(epoch0) == -(-N // BATCH), "%s: epoch 0 had %d batches" % (fw, len(epoch0)))
    order = ch.flat(epoch0)
    harness.check_permutation(order, N, "%s epoch 0" % fw)
    check(loader.epoch == 1, "%s: after one epoch the loader is in epoch %d" % (fw, loader.epoch))
    epoch1 = ch.epoch_indices(loader)
    check(ch.flat(epoch1) != order and sorted(ch.flat(epoch1)) == sorted(order),
          "%s: epoch 1 is not another permutation" % fw)
    loader.close()
    return order


def two_ranks(loaderd, sock, fw, recs, perm):
    loaders = [loaderd.Loader("p", socket=sock, framework=fw, device="cpu", rank=r, world_size=2)
               for r in range(2)]
    iters = [iter(x) for x in loaders]
    got = [[], []]
    done = [False, False]
    while not all(done):  # alternate, as two processes stepping together would
        for r in range(2):
            if done[r]:
                continue
            try:
                b = next(iters[r])
            except StopIteration:
                done[r] = True
                continue
            ch.check_rows(b, "data", recs, "%s world 2 rank %d" % (fw, r))
            got[r] += [(b.index, s) for s in b.sample_indices()]
    for r in range(2):
        want = harness.shard_expected(perm, 0, r, 2, BATCH, False)
        i = harness.first_difference(got[r], want)
        if i is not None:
            raise ch.TestFailure("%s world 2 rank %d: delivery differs from the sampler's shard at "
                                 "row %d: %s against %s" % (fw, r, i, got[r][i:i + 3], want[i:i + 3]))
    everything = [s for r in range(2) for _, s in got[r]]
    check(sorted(set(everything)) == list(range(N)) and len(everything) == N + 1,
          "%s world 2: %d rows covering %d samples, want %d rows covering all %d" %
          (fw, len(everything), len(set(everything)), N + 1, N))
    for x in loaders:
        x.close()


def env_ranks(loaderd, sock):
    job = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": None, "LOCAL_WORLD_SIZE": None}
    with harness.environ(job):
        x = loaderd.Loader("p", socket=sock, framework="numpy", device="cpu")
        check((x.rank, x.world_size) == (1, 2), "RANK=1 WORLD_SIZE=2 gave %d/%d" % (x.rank, x.world_size))
        check(len(x) == -(-((N + 1) // 2) // BATCH), "rank 1 of 2: len %d" % len(x))
        x.close()
    with harness.environ(dict(job, RANK="2")):
        try:
            loaderd.Loader("p", socket=sock, framework="numpy", device="cpu")
            raise ch.TestFailure("RANK=2 WORLD_SIZE=2 was accepted")
        except ValueError as e:
            check("RANK=2" in str(e) and "WORLD_SIZE=2" in str(e), "refusal does not name the variables: %s" % e)


def body(env):
    loaderd, recs, _, d = ch.raw_pipeline(env, N, RECORD, BATCH, data_seed=5, seed=SEED)
    for fw in ch.frameworks():
        perm = one_rank(loaderd, d.socket, fw, recs)
        two_ranks(loaderd, d.socket, fw, recs, perm)
    env_ranks(loaderd, d.socket)
    d.check_log_clean()


if __name__ == "__main__":
    harness.run_test("test_py_values", body)
