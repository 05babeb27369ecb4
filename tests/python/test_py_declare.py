#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pipelines a job declares through Loader(source=..., ...) instead of naming
one of the daemon's configuration.

On a daemon with job_roots = the test's data directory, no configured
pipeline, job_linger_ms 300, for numpy:
- two jobs with different batch sizes stream at once, each its own batch
  size, every row the file's record of its sample;
- the two ranks of one job (job="J", world_size 2) share one pipeline and
  one sampler: across them every sample once per epoch; status lists the
  pipeline once, with its job key and the pid that declared it;
- two jobs declaring the same text get independent samplers: each sees
  every sample in an epoch;
- refused, each naming what is wrong: a path outside job_roots (absolute,
  and through ".."), an imagefolder whose listing holds a symlink that
  leads out, a declaration over job_index_bytes and one over
  job_batch_bytes, an unknown key (named,
  with "declared by client pid N"), world_size 2 without a job key, and
  pipeline= with source= at once;
- an image swapped, after the listing, for a symlink that leads out: the
  worker refuses what it opened (the client's error names the file);
- a declared pipeline is removed once its last client has left
  (job_linger_ms later), not before;
- state_dict() of a declared loader resumes exactly in a new loader that
  declares the same pipeline (another job's run too);
- a reload that empties job_roots: a declaration is refused, naming the key;
- a declared megatron corpus with document_shuffle (block sums in the
  arena): two epochs of batches equal to the same pipeline configured.
"""

import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD = 480, 64
LINGER_MS = 300


def declared(st):
    return [p for p in st["pipelines"] if p["name"].startswith("d.")]


def body(env):
    loaderd = ch.import_loaderd()
    root = env.path("data")
    os.makedirs(root)
    data = os.path.join(root, "a.bin")
    harness.make_dataset.write_raw(data, N, RECORD, 41)
    recs = ch.records(data, RECORD)
    outside = env.make_raw("outside.bin", N, RECORD, seed=42)
    daemon = dict(job_roots=root, job_linger_ms=LINGER_MS, staging_slot_bytes="64K",
                  job_batch_bytes="16K", job_index_bytes="8K", max_job_pipelines=8)
    cfg = env.config("decl", {}, **daemon)
    d = env.start_daemon(cfg)
    sock = d.socket
    src = "raw:" + data

    def new(job, batch_size, **kw):
        return loaderd.Loader(source=src, options={"record_bytes": RECORD}, batch_size=batch_size,
                              seed=3, job=job, socket=sock, framework="numpy", device="cpu", **kw)

    # Two jobs, two batch sizes, at once.
    a, b = new("A", 8), new("B", 16)
    ia, ib = iter(a), iter(b)
    for _ in range(5):
        ba, bb = next(ia), next(ib)
        check(ba.rows == 8 and bb.rows == 16, "batch sizes %d and %d, declared 8 and 16" % (ba.rows, bb.rows))
        ch.check_rows(ba, "data", recs, "job A")
        ch.check_rows(bb, "data", recs, "job B")
    st = d.status()
    check(sorted((p["batch_size"]) for p in declared(st)) == [8, 16], "status: %s" % st["pipelines"])
    a.close()
    b.close()

    # Two ranks of one job: one sampler, every sample once.
    r0, r1 = new("J", 12, rank=0, world_size=2), new("J", 12, rank=1, world_size=2)
    st = d.status()
    js = [p for p in declared(st) if p.get("job") == "J"]
    check(len(js) == 1 and js[0]["declared_pid"] == os.getpid(),
          "the ranks of job J: %s" % st["pipelines"])
    check(sum(1 for c in st["clients"] if c["pipeline"] == js[0]["name"]) == 2,
          "both ranks are not on %s: %s" % (js[0]["name"], st["clients"]))
    seen = ch.flat(ch.epoch_indices(r0)) + ch.flat(ch.epoch_indices(r1))
    check(sorted(seen) == list(range(N)), "ranks of job J: %d samples, not every one once" % len(seen))
    r0.close()
    r1.close()

    # The same text from two jobs: two samplers.
    x, y = new("X", 12), new("Y", 12)
    ex, ey = ch.flat(ch.epoch_indices(x)), ch.flat(ch.epoch_indices(y))
    check(sorted(ex) == list(range(N)) and sorted(ey) == list(range(N)),
          "jobs X and Y do not each see every sample (%d, %d)" % (len(ex), len(ey)))
    names = [p["name"] for p in declared(d.status()) if p.get("job") in ("X", "Y")]
    check(len(names) == 2 and names[0] == names[1], "jobs X and Y: %s" % names)
    x.close()
    y.close()

    # Removed once the last client has left, after the linger.
    d.wait_status(lambda s: not declared(s), 10, "the declared pipelines to go after their clients")
    check("its last client left" in d.log(), "the log does not say why a declared pipeline went")

    # Resume from state_dict(), in another job's run.
    s1 = new("run-1", 12)
    it = iter(s1)
    for _ in range(7):
        next(it)
    state = s1.state_dict()
    rest = [b.sample_indices() for b in it]  # the rest of this epoch (a new iter() starts the next)
    s1.close()
    check(state["pipeline"].startswith("d."), "a declared loader's state names %r" % state["pipeline"])
    s2 = new("run-2", 12, state=state)
    check(ch.epoch_indices(s2) == rest, "Loader(state=) of a declared pipeline does not resume exactly")
    s2.close()

    # Refusals.
    refused = loaderd.LoaderdError
    ch.expect(refused, ["outside.bin", "outside the directories jobs may read", root],
              lambda: loaderd.Loader(source="raw:" + outside, options={"record_bytes": RECORD},
                                     batch_size=8, job="Z", socket=sock, framework="numpy",
                                     device="cpu"), "a path outside job_roots")
    ch.expect(refused, ["..", "outside the directories jobs may read"],
              lambda: loaderd.Loader(source="raw:" + root + "/../outside.bin",
                                     options={"record_bytes": RECORD}, batch_size=8, job="Z",
                                     socket=sock, framework="numpy", device="cpu"), "a .. escape")
    tree = os.path.join(root, "tree")
    os.makedirs(os.path.join(tree, "cls"))
    subprocess.run([harness.binary("mkjpeg"), os.path.join(tree, "cls", "a.jpg"), "--width", "16",
                    "--height", "16"], check=True)
    os.symlink(outside, os.path.join(tree, "cls", "b.jpg"))
    ch.expect(refused, ["cls/b.jpg", "a symlink to " + outside, "job_roots = " + os.path.realpath(root)],
              lambda: loaderd.Loader(source="imagefolder:" + tree, transform="resize(16, 16)",
                                     batch_size=1, job="Z", socket=sock, framework="numpy",
                                     device="cpu"), "a symlink in a listed directory that leads out")
    tree2 = os.path.join(root, "tree2", "cls")
    os.makedirs(tree2)
    for k in range(700):  # 8 bytes a file and its name: over 8 KiB
        os.link(os.path.join(tree, "cls", "a.jpg"), os.path.join(tree2, "%04d.jpg" % k))
    ch.expect(refused, ["its sample list needs 12288 bytes", "job_index_bytes = 8192"],
              lambda: loaderd.Loader(source="imagefolder:" + os.path.dirname(tree2),
                                     transform="resize(16, 16)", batch_size=4, job="Z", socket=sock,
                                     framework="numpy", device="cpu"), "a list over job_index_bytes")
    ch.expect(refused, ["a batch needs 30720 bytes", "job_batch_bytes = 16384"],
              lambda: new("Z", 480), "a batch over job_batch_bytes")
    ch.expect(refused, ['unknown key "bogus"', "declared by client pid %d" % os.getpid()],
              lambda: loaderd.Loader(source=src, options={"record_bytes": RECORD, "bogus": 1},
                                     batch_size=8, job="Z", socket=sock, framework="numpy",
                                     device="cpu"), "an unknown key")
    with harness.environ({"TORCHELASTIC_RUN_ID": None, "SLURM_JOB_ID": None}):
        ch.expect(refused, ["pass job="],
                  lambda: loaderd.Loader(source=src, options={"record_bytes": RECORD}, batch_size=8,
                                         rank=0, world_size=2, socket=sock, framework="numpy",
                                         device="cpu"), "world_size 2 without a job key")
    ch.expect(ValueError, ["exactly one"],
              lambda: loaderd.Loader("p", source=src, socket=sock), "pipeline= and source=")
    # An image swapped for a symlink that leads out after the listing: the
    # worker checks what it opened, and the client is told (on_error = fail).
    outside_jpeg = env.path("outside.jpg")
    subprocess.run([harness.binary("mkjpeg"), outside_jpeg, "--width", "16", "--height", "16"],
                   check=True)
    tree3 = os.path.join(root, "tree3")
    for cls in ("a", "b"):
        os.makedirs(os.path.join(tree3, cls))
        for k in range(20):
            os.link(os.path.join(tree, "cls", "a.jpg"), os.path.join(tree3, cls, "%03d.jpg" % k))
    t = loaderd.Loader(source="imagefolder:" + tree3, transform="resize(16, 16)", batch_size=4,
                       shuffle=False, options={"on_error": "fail"}, depth=1, job="T", socket=sock,
                       framework="numpy", device="cpu")
    it = iter(t)
    check(next(it).sample_indices() == [0, 1, 2, 3], "the first batch of an unshuffled tree")
    last = os.path.join(tree3, "b", "019.jpg")
    os.unlink(last)
    os.symlink(outside_jpeg, last)
    ch.expect(loaderd.LoaderdError, ["b/019.jpg", "Permission denied"], lambda: [b for b in it],
              "an image swapped for a symlink that leads out")
    t.close()
    check(not [p for p in declared(d.status()) if p.get("job") == "Z"],
          "a refused declaration left a pipeline: %s" % d.status()["pipelines"])

    # job_roots emptied by a reload: declarations are refused, naming it.
    env.config("decl", {}, **dict(daemon, job_roots=""))
    r = env.loaderctl(["--socket", sock, "reload"])
    check(r.returncode == 0 and "job_roots" in r.stdout, "reload: %s %s" % (r.stdout, r.stderr))
    ch.expect(refused, ["job_roots in [daemon]"], lambda: new("Z", 8), "no job_roots")
    d.stop()

    # A daemon with job_roots and nothing else: its staging slots take a
    # declared batch of a few MiB (48 MiB by default, not 4 KiB).
    d2 = env.start_daemon(env.config("roots-only", {}, job_roots=root))
    big = loaderd.Loader(source=src, options={"record_bytes": RECORD}, batch_size=N // 2, seed=3,
                         job="big", socket=d2.socket, framework="numpy", device="cpu")
    got = ch.flat(ch.epoch_indices(big))
    check(sorted(got) == list(range(N // 2 * 2)), "a roots-only daemon: %d samples" % len(got))
    big.close()

    # A megatron corpus with document_shuffle, declared: its block sums
    # reach the arena from the thread pool (never the loop), and its
    # batches are those of the same pipeline configured.
    rng = random.Random(9)
    lengths = [rng.randint(1, 40) for _ in range(200)]
    stream = [rng.randrange(60000) for _ in range(sum(lengths))]
    corpus = os.path.join(root, "corpus")
    harness.write_megatron(corpus, lengths, stream)
    keys = {"seq_len": 16, "document_shuffle": "on", "document_shuffle_block": 4}
    env.config("roots-only", {"m": dict(keys, source="megatron:" + corpus, batch_size=4, seed=5)},
               job_roots=root)
    r = env.loaderctl(["--socket", d2.socket, "reload"])
    check(r.returncode == 0, "reload adding pipeline m: %s %s" % (r.stdout, r.stderr))
    conf = loaderd.Loader("m", socket=d2.socket, framework="numpy", device="cpu")
    decl = loaderd.Loader(source="megatron:" + corpus, options=keys, batch_size=4, seed=5, job="M",
                          socket=d2.socket, framework="numpy", device="cpu")
    n = (len(stream) - 1) // 16
    for epoch in range(2):
        got = [[(b.sample_indices(), b["tokens"].tolist()) for b in x] for x in (conf, decl)]
        check(sum(len(i) for i, _ in got[0]) >= n - 3 and got[0] == got[1],
              "epoch %d: the declared megatron pipeline's batches differ from the configured "
              "one's (%d and %d batches)" % (epoch, len(got[0]), len(got[1])))
    print("a declared megatron corpus, document_shuffle on: %d batches an epoch, as configured"
          % len(got[0]))
    conf.close()
    decl.close()
    d2.stop()


if __name__ == "__main__":
    harness.run_test("test_py_declare", body)
