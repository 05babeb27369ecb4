#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python package behaves as a torch DataLoader does where a training
loop relies on it (host delivery; numpy, and torch when importable).

- Unpacking: a batch iterates over its tensors in output order
  (`tokens, positions, loss_mask = batch`, batch[0], and
  `for tokens, positions, loss_mask in loader` over a whole epoch) and is
  still read by name: batch["tokens"], keys() in output order, values(),
  items(), get(), `in`, len, dict(batch).
- A kept tensor never changes: the first batch's tensor, kept while the
  loop goes through the rest of epoch 0 and all of epoch 1 (about 50
  later batches, every slot of the arena reused many times over), still
  equals its clone taken at once and the file's records; the loader warns,
  once, that it holds a batch past next().
- Back-pressure: with depth 2, holding the tensors of two batches makes
  the next next() raise an error that says how many are held and what to
  do (clone, depth=); once they are dropped the next batch is the one
  that was due. Tensors kept alive only by a reference cycle are collected
  by next() (gc.collect()) instead of failing it, and tensors that die on
  another thread let their batches go at the next call.
- A write into a host torch tensor (in a child process, so that a crash
  is a failure, not a dead test): it lands in the tensor, the process
  lives, and once the batch is let go, the batches that come in that slot
  again hold the file's records, not the write.
- A loop left with break, then another `for`: it starts the next epoch
  (the whole of it, in the stream's order), also when the break came at
  an epoch's last batch; a loop run to its end, then another, goes on
  with the next epoch.
- Resumption stays exact: the state saved while holding batch K of an
  epoch, given to Loader(state=) or load_state_dict(), makes the first
  `for` continue with batch K+1 of that epoch, to its end.
"""

import gc
import os
import random
import struct
import subprocess
import sys
import threading
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, SEED = 200, 64, 8, 17   # 25 batches an epoch
SEQ, EOD = 15, 0

WRITER = r"""
import sys
import loaderd
sock, path, record = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "rb") as f:
    data = f.read()
x = loaderd.Loader("p", socket=sock, device="cpu", framework="torch")
it = iter(x)
b = next(it)
t = b["data"]
ptr = t.data_ptr()
t[0, 0] = 255 - t[0, 0]      # a write into one element (as label[0] = 5)
t[1:] = 7                    # and into most of the slot
assert int(t[2, 5]) == 7, "the write is not in the tensor"
del t
again = 0
for _ in range(120):         # about five epochs: the slot comes back many times
    try:
        b = next(it)
    except StopIteration:
        it = iter(x)
        b = next(it)
    t = b["data"]
    for r, s in enumerate(b.sample_indices()):
        if t[r].numpy().tobytes() != data[s * record:(s + 1) * record]:
            print("batch %d row %d (sample %d) is not the file's record (slot at 0x%x, the "
                  "written one at 0x%x)" % (b.seq, r, s, t.data_ptr(), ptr))
            sys.exit(3)
    again += t.data_ptr() == ptr
    del t
print("written slot came back %d times" % again)
sys.exit(0 if again else 4)
"""


def equal(a, b):
    return bool((a == b).all())


def clone(t):
    return t.clone() if hasattr(t, "clone") else t.copy()


def unpacking(loaderd, sock, fw):
    x = loaderd.Loader("docs", socket=sock, framework=fw, device="cpu")
    want = len(x)
    it = iter(x)
    b = next(it)
    names = ["tokens", "positions", "loss_mask"]
    check(list(b.keys()) == names, "%s: keys() %s, want the outputs in order %s" % (fw, list(b.keys()), names))
    tokens, positions, loss_mask = b
    check(tokens is b["tokens"] and positions is b["positions"] and loss_mask is b["loss_mask"],
          "%s: unpacking does not give the tensors in output order" % fw)
    check(b[0] is tokens and b[2] is loss_mask and b[-1] is loss_mask, "%s: batch[i] is not tensor i" % fw)
    check(tuple(tokens.shape) == (b.rows, SEQ + 1) and tuple(positions.shape) == (b.rows, SEQ),
          "%s: shapes %s %s" % (fw, tuple(tokens.shape), tuple(positions.shape)))
    d = dict(b)
    check(list(d) == names and all(d[n] is b[n] for n in names), "%s: dict(batch) %r" % (fw, list(d)))
    check([n for n, _ in b.items()] == names and all(t is b[n] for n, t in b.items()),
          "%s: items()" % fw)
    check(all(t is b[n] for n, t in zip(names, b.values())), "%s: values()" % fw)
    check(len(b) == 3 and "tokens" in b and "nope" not in b and b.get("nope") is None
          and b.get("positions") is positions, "%s: len/in/get" % fw)
    ch.expect(KeyError, ["no tensor 'nope'", "tokens, positions, loss_mask"], lambda: b["nope"],
              fw + ": an unknown name")
    ch.expect(IndexError, ["tensor 3", "has 3"], lambda: b[3], fw + ": position 3")
    del tokens, positions, loss_mask, d
    n = 1
    for tokens, positions, loss_mask in it:
        check(tokens.shape[1] == SEQ + 1 and positions.shape[1] == SEQ and loss_mask.shape[1] == SEQ,
              "%s: `for tokens, positions, loss_mask in loader` gave shapes %s %s %s" %
              (fw, tuple(tokens.shape), tuple(positions.shape), tuple(loss_mask.shape)))
        n += 1
    check(n == want, "%s: %d batches in the epoch, len() said %d" % (fw, n, want))
    x.close()


def kept_tensor(loaderd, sock, fw, recs):
    x = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    it = iter(x)
    first = next(it)
    kept, kept_samples = first["data"], first.sample_indices()
    copy = clone(kept)
    del first
    later = 0
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for epoch in range(2):
            for b in (it if epoch == 0 else x):
                ch.check_rows(b, "data", recs, "%s: epoch %d" % (fw, epoch))
                check(equal(kept, copy), "%s: the tensor kept from batch 0 changed at batch %d (epoch "
                      "%d, index %d)" % (fw, b.seq, b.epoch, b.index))
                later += 1
    ours = [w for w in said if "still alive" in str(w.message)]
    check(len(ours) == 1 and "clone()" in str(ours[0].message),
          "%s: %d warnings about the kept batch: %s" % (fw, len(ours), [str(w.message) for w in said]))
    print("%s: %s" % (fw, ours[0].message))
    for r, s in enumerate(kept_samples):
        check(ch.row_bytes(kept, r) == recs[s], "%s: kept row %d is not sample %d's record" % (fw, r, s))
    check(later >= 45, "%s: only %d batches after the kept one" % (fw, later))
    x.close()
    check(equal(kept, copy), "%s: the kept tensor changed at close()" % fw)
    del kept
    print("%s: a tensor of batch 0 kept unchanged through %d later batches and close()" % (fw, later))


def back_pressure(loaderd, sock, fw):
    x = loaderd.Loader("p", socket=sock, framework=fw, device="cpu", depth=2)
    it = iter(x)
    held = [next(it)["data"], next(it)["data"]]
    e = ch.expect(loaderd.LoaderdError, ["holds 2 earlier batches", "batches 0, 1", "clone()", "depth="],
                  lambda: next(it), fw + ": a third batch while two are held")
    check(e.errno == 16, "%s: errno %r, want EBUSY" % (fw, e.errno))
    held.clear()
    b = next(it)
    check(b.seq == 2 and b.index == 2, "%s: after dropping them the next batch is %d, want 2" % (fw, b.seq))
    # Tensors alive only through reference cycles: next() collects them.
    gc.disable()
    try:
        for _ in range(2):
            cycle = [b["data"]]
            cycle.append(cycle)
            b = next(it)
        del cycle
        b = next(it)
        check(b.seq == 5, "%s: batch %d, want 5" % (fw, b.seq))
    finally:
        gc.enable()
    # Tensors that die on another thread (the deleter runs there): their
    # batches are released by the loader's next call.
    held = [next(it)["data"], next(it)["data"]]
    t = threading.Thread(target=held.clear)
    t.start()
    t.join()
    b = next(it)
    check(b.seq == 8, "%s: after tensors died on another thread: batch %d, want 8" % (fw, b.seq))
    x.close()


def write_host_tensor(env, sock, data):
    script = env.path("writer.py")
    with open(script, "w") as f:
        f.write(WRITER)
    r = subprocess.run([sys.executable, script, sock, data, str(RECORD)], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0, "the process writing into a host tensor exited %d (%s):\n%s%s" %
          (r.returncode, "killed by signal %d" % -r.returncode if r.returncode < 0 else "exit status",
           r.stdout, r.stderr))
    print("torch: a write into a host tensor: %s" % r.stdout.strip())


def break_then_iter(loaderd, sock, fw):
    ref = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    orders = [ch.epoch_indices(ref) for _ in range(4)]
    ref.close()
    x = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    got = []
    for b in x:
        got.append(b.sample_indices())
        if len(got) == 3:
            break
    check(got == orders[0][:3], "%s: the first batches are not epoch 0's" % fw)
    check(ch.epoch_indices(x) == orders[1], "%s: a `for` after a break is not the whole of epoch 1" % fw)
    for b in x:   # to the last batch of epoch 2, then break
        if b.last_in_epoch:
            break
    check(ch.epoch_indices(x) == orders[3], "%s: after a break at epoch 2's last batch, the next `for` "
          "is not the whole of epoch 3" % fw)
    x.close()
    return orders


def resume_exact(loaderd, sock, fw, orders):
    K = 5
    x = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    it = iter(x)
    for _ in range(K):
        b = next(it)
    state = x.state_dict()   # holding batch K - 1: it counts as consumed
    del b
    y = loaderd.Loader("p", socket=sock, framework=fw, device="cpu", state=state)
    check(ch.epoch_indices(y) == orders[0][K:], "%s: Loader(state=) does not go on with batch %d" % (fw, K))
    y.close()
    z = loaderd.Loader("p", socket=sock, framework=fw, device="cpu")
    for b in z:
        break
    z.load_state_dict(state)
    check(ch.epoch_indices(z) == orders[0][K:], "%s: load_state_dict() does not go on with batch %d" % (fw, K))
    z.close()
    x.close()


def token_file(env):
    rng = random.Random(3)
    stream = []
    while len(stream) < 3000:
        stream += [rng.randint(1, 65535) for _ in range(rng.randint(0, 29))] + [EOD]
    path = env.path("docs.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<%dH" % len(stream), *stream))
    return path


def body(env):
    loaderd = ch.import_loaderd()
    data = env.make_raw("data.bin", N, RECORD, seed=9)
    recs = ch.records(data, RECORD)
    pipelines = {
        "p": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH, "seed": SEED},
        "docs": {"source": "tokens:" + token_file(env), "token_dtype": "uint16", "token_output": "int64",
                 "seq_len": SEQ,
                 "batch_size": BATCH, "outputs": "tokens positions loss_mask", "eod_token": EOD},
    }
    d = env.start_daemon(env.config("habits", pipelines))
    fws = ch.frameworks()
    for fw in fws:
        unpacking(loaderd, d.socket, fw)
        kept_tensor(loaderd, d.socket, fw, recs)
        back_pressure(loaderd, d.socket, fw)
        orders = break_then_iter(loaderd, d.socket, fw)
        resume_exact(loaderd, d.socket, fw, orders)
    if "torch" in fws:
        write_host_tensor(env, d.socket, data)
    else:
        print("torch not among the frameworks tested: no write into a host tensor")
    d.check_log_clean()


if __name__ == "__main__":
    harness.run_test("test_py_habits", body)
