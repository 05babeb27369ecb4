#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Data files swapped after start never block a worker, and a batch that
fails says which on_error policy applied and why it could not help.

loaderd checks every data file at start; a worker opens each file when it
first needs it, by which time it may have been replaced. Each case starts
a daemon (one worker), swaps a file before any client came, and consumes:

- raw: the file is now a FIFO; tokens: a symlink to /dev/zero. The client
  gets an error naming the pipeline, file and sample, "not a regular file
  any more (replaced since start)"; nothing hangs; the daemon goes on
  serving its other pipeline.
- imagefolder, on_error = substitute (the default): one image is now a
  FIFO; a full epoch is delivered, the bad sample replaced (status counts
  it). With on_error = fail, an image now a directory fails the client
  with its path, "not a regular file" and "(on_error = fail)".
- imagefolder whose every image is bad (text named .jpg; the first one
  empty), default on_error: no replacement can be found, and the error
  says so: "(on_error = substitute, and none of the 8 other samples tried
  could replace it)", never "(on_error = fail)"; the reason given is the
  named file's own ("empty or truncated"), not a replacement's.
- megatron with document_shuffle: its .idx rewritten (the same bytes, a
  new file) fails the client with the .idx's path and "not the index
  checked at start any more"; an .idx now a FIFO, with "not a regular file
  any more"; a third megatron pipeline is served on.
- tar, two shards: the first is now a FIFO. Its samples cannot be replaced
  from their own shard: "(on_error = substitute, and none of the 8 other
  samples of shard SHARD tried could replace it)", with the shard, member
  and "not a regular file (replaced since start)".
"""

import io
import os
import shutil
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

TIMEOUT_S = 30


def consume(env, d, pipeline, epochs=1):
    return env.loaderctl(harness.consume_args(d.socket, pipeline, epochs=epochs) + ["--quiet"],
                         timeout_s=TIMEOUT_S)


def expect_failure(r, texts, what):
    check(r.returncode != 0, "%s: consume exited 0, expected an error" % what)
    for text in texts:
        check(text in r.stderr, "%s: the error lacks %r:\n%s" % (what, text, r.stderr))
    print("%s: %s" % (what, r.stderr.strip().splitlines()[-1]))


def swap(path, make):
    """Replaces path by what make(tmp) creates, atomically (rename); a
    directory cannot be renamed over a file: that one is unlinked first."""
    if make is os.mkdir:
        os.unlink(path)
        os.mkdir(path)
        return
    tmp = path + ".new"
    make(tmp)
    os.rename(tmp, path)


def raw_and_tokens(env):
    raw = env.make_raw("raw.bin", 64, 64)
    tok = env.make_tokens("tok.bin", 200, "uint16")
    keep = env.make_raw("keep.bin", 64, 64)
    d = env.start_daemon(env.config("rt", {
        "raw": {"source": "raw:" + raw, "record_bytes": 64, "batch_size": 8, "shuffle": "false"},
        "tok": {"source": "tokens:" + tok, "token_dtype": "uint16", "seq_len": 7, "batch_size": 4,
                "shuffle": "false"},
        "keep": {"source": "raw:" + keep, "record_bytes": 64, "batch_size": 8}}, workers=1))
    swap(raw, os.mkfifo)
    swap(tok, lambda p: os.symlink("/dev/zero", p))
    expect_failure(consume(env, d, "raw"), ['pipeline "raw": %s: sample 0 (bytes 0..64): not a regular '
                                            'file any more (replaced since start)' % raw], "raw now a FIFO")
    expect_failure(consume(env, d, "tok"), ['pipeline "tok": %s: sample 0 (bytes 0..16): not a regular '
                                            'file any more (replaced since start)' % tok],
                   "tokens now a symlink to /dev/zero")
    r = consume(env, d, "keep")
    check(r.returncode == 0, "the other pipeline fails after the swaps: %s" % r.stderr)
    d.stop()


def make_tree(env, name, files):
    """files: relative path -> "good" (a JPEG), "text" (not one) or "empty"."""
    root = env.path(name)
    for i, (rel, how) in enumerate(sorted(files.items())):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if how == "good":
            subprocess.run([harness.binary("mkjpeg"), path, "--width", "24", "--height", "20",
                            "--seed", str(i)], check=True)
        else:
            with open(path, "w") as f:
                f.write("not a JPEG\n" if how == "text" else "")
    return root


def images(env):
    good = {"%s/%s%d.jpg" % (c, c, i): "good" for c in ("ant", "bee") for i in range(4)}
    tree = make_tree(env, "tree", good)
    tree2 = make_tree(env, "tree2", good)
    bad_files = {"%s/%s%d.jpg" % (c, c, i): "text" for c in ("ant", "bee") for i in range(3)}
    bad_files["ant/ant0.jpg"] = "empty"
    bad = make_tree(env, "bad", bad_files)
    common = {"batch_size": 4, "transform": "center_crop(16)", "shuffle": "false"}
    d = env.start_daemon(env.config("img", {
        "sub": dict(common, source="imagefolder:" + tree),
        "strict": dict(common, source="imagefolder:" + tree2, on_error="fail"),
        "allbad": dict(common, source="imagefolder:" + bad)}, workers=1))
    swap(os.path.join(tree, "ant", "ant1.jpg"), os.mkfifo)
    r = consume(env, d, "sub")
    check(r.returncode == 0, "on_error = substitute: an image now a FIFO fails the client: %s" % r.stderr)
    st = d.status()
    check(st["bad_images"] >= 1 and st["substituted"] >= 1,
          "status does not count the replaced image: %s" % st)
    check("%s/ant/ant1.jpg: not a regular file (replaced since start); replaced by another sample"
          % tree in d.log(), "the log does not name the replaced FIFO:\n%s" % d.log())

    swap(os.path.join(tree2, "bee", "bee2.jpg"), os.mkdir)
    expect_failure(consume(env, d, "strict"),
                   ['pipeline "strict": %s/bee/bee2.jpg: sample 6: not a regular file (replaced since '
                    'start) (on_error = fail)' % tree2], "on_error = fail, an image now a directory")

    r = consume(env, d, "allbad")
    expect_failure(r, ['pipeline "allbad": %s/ant/ant0.jpg: sample 0: empty or truncated '
                       '(on_error = substitute, and none of the 8 other samples tried could replace '
                       'it)' % bad], "every image bad, on_error = substitute")
    check("on_error = fail" not in r.stderr, "on_error = substitute is reported as fail: %s" % r.stderr)
    d.stop()


def write_shard(path, samples):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, jpeg, label in samples:
            for name, data in ((key + ".jpg", jpeg), (key + ".cls", b"%d" % label)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def tar_shard(env):
    jpeg = env.path("one.jpg")
    subprocess.run([harness.binary("mkjpeg"), jpeg, "--width", "24", "--height", "20"], check=True)
    with open(jpeg, "rb") as f:
        data = f.read()
    os.makedirs(env.path("shards"))
    shards = [env.path("shards", "s-%d.tar" % i) for i in range(2)]
    for i, path in enumerate(shards):
        write_shard(path, [("k%d_%d" % (i, j), data, i) for j in range(4)])
    d = env.start_daemon(env.config("tar", {
        "t": {"source": "tar:" + env.path("shards", "s-{0..1}.tar"), "batch_size": 2,
              "transform": "center_crop(16)", "shuffle": "false"}}, workers=1))
    swap(shards[0], os.mkfifo)
    r = consume(env, d, "t")
    expect_failure(r, ['pipeline "t": %s: member k0_0.jpg (data at offset 512): sample 0: not a regular '
                       'file (replaced since start) (on_error = substitute, and none of the 8 other '
                       'samples of shard %s tried could replace it)' % (shards[0], shards[0])],
                   "tar shard now a FIFO")
    d.stop()


def megatron_index(env):
    """A document-shuffled megatron pipeline: its workers read the
    documents' bounds from the .idx itself. An index rewritten since start
    (the same bytes, another file) fails the batch naming the .idx; one
    now a FIFO too; the pipeline beside it is served on."""
    docs = [[60000 + d] + list(range(1, 1 + d % 13)) for d in range(40)]
    prefixes = []
    for name in ("web", "fifo", "keep"):
        prefix = env.path(name)
        harness.write_megatron(prefix, [len(x) for x in docs], [t for x in docs for t in x])
        prefixes.append(prefix)
    d = env.start_daemon(env.config("mg", {
        name: {"source": "megatron:" + prefix, "seq_len": 7, "batch_size": 4, "seed": 3}
        for name, prefix in zip(("web", "fifo", "keep"), prefixes)}, workers=1))

    def rewrite(tmp):
        shutil.copyfile(prefixes[0] + ".idx", tmp)
    swap(prefixes[0] + ".idx", rewrite)
    swap(prefixes[1] + ".idx", os.mkfifo)
    expect_failure(consume(env, d, "web"), ['pipeline "web": epoch 0 sample ', '%s.idx: not the index '
                                            'checked at start any more' % prefixes[0],
                                            'replaced or rewritten since start'], "megatron .idx rewritten")
    expect_failure(consume(env, d, "fifo"), ['%s.idx: not a regular file any more (replaced since start)'
                                             % prefixes[1]], "megatron .idx now a FIFO")
    r = consume(env, d, "keep")
    check(r.returncode == 0, "the other megatron pipeline fails after the swaps: %s" % r.stderr)
    d.stop()


def body(env):
    megatron_index(env)
    raw_and_tokens(env)
    images(env)
    tar_shard(env)


if __name__ == "__main__":
    harness.run_test("test_swapped_files", body)
