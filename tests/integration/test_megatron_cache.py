#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A megatron index's check and block sums cached on disk ([daemon]
cache_dir): a start with a valid cache skips the pass over the index, and
delivers exactly the bytes a start without one does.

A uint16 dataset of 400 documents, some of several sequences and some
empty, read by pipeline p (split = 6,3,1, document_shuffle_block 8: the
splits' ends fall inside documents) and pipeline w (no split, block 16):
two epochs of p's train split, one of its valid split and one of w are
consumed with --dump and --dump-data, from
- a start without cache_dir (the reference);
- a start that writes the cache ("no index cache yet", "the index cache
  is written");
- a start from the cache ("checked before (index cache ...)", "the pass
  over its 400 documents is skipped", and no "checking ... in full");
- after the .idx is touched, the .bin replaced by a copy (another inode),
  the cache cut short, given another version, one of its payload's bytes
  flipped: each logged with its reason ("PREFIX.idx changed since it was
  checked (mtime", "PREFIX.bin changed since it was checked (inode",
  "truncated", "version 2, this loaderd reads version 1", "checksum
  mismatch (corrupt)"), the index checked in full, the cache rewritten,
  and the next start reads it again;
and every run's batches are byte for byte the reference's, with the same
position token (the data identity). Then `loaderd --check-config`: with
the cache it says the index was checked before and which cache; without
one it checks in full and writes it, and a start then reads it. A reload
that adds p (its block sums copied into the arena on the thread pool),
with and without the cache, delivers the reference's batches. As root, a
cache owned by another user is refused with the reason.
"""

import os
import random
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

DOCS = 400


def make_dataset(prefix):
    rng = random.Random(5)
    lengths, doc_index, stream = [], [0], []
    for d in range(DOCS):
        n_seqs = 0 if d % 37 == 5 else rng.choice((1, 1, 1, 2, 3))
        for _ in range(n_seqs):
            n = rng.randint(1, 30)
            lengths.append(n)
            stream += [rng.randint(0, 60000) for _ in range(n)]
        doc_index.append(len(lengths))
    harness.write_megatron(prefix, lengths, stream, doc_index=doc_index)
    age(prefix)


def age(prefix, exts=(".idx", ".bin")):
    """The files' mtimes 10 s back: a file changed within 0.1 s of its
    check is not cached."""
    for ext in exts:
        st = os.stat(prefix + ext)
        os.utime(prefix + ext, (st.st_atime - 10, st.st_mtime - 10))


def pipelines(prefix):
    return {"p": {"source": "megatron:" + prefix, "seq_len": 7, "batch_size": 4,
                  "split": "6,3,1", "document_shuffle_block": 8},
            "w": {"source": "megatron:" + prefix, "seq_len": 5, "batch_size": 2,
                  "document_shuffle_block": 16}}


def consume(env, d, name):
    """What a run delivers: for each stream, its token and its bytes."""
    out = []
    for pipe, split, epochs in (("p", "train", 2), ("p", "valid", 1), ("w", "train", 1)):
        dump = env.path("%s-%s-%s.dump" % (name, pipe, split))
        data = env.path("%s-%s-%s.data" % (name, pipe, split))
        r = env.loaderctl(harness.consume_args(d.socket, pipe, epochs=epochs, dump=dump,
                                               extra=["--split", split, "--dump-data", data,
                                                      "--quiet"]))
        check(r.returncode == 0, "%s: consume %s %s exited %d: %s" % (name, pipe, split,
                                                                      r.returncode, r.stderr))
        _, token = harness.parse_consume_output(r.stdout)
        with open(data, "rb") as f:
            out.append((pipe, split, token, harness.read_text(dump), f.read()))
    return out


def run(env, name, prefix, ref, log_has, log_lacks=(), cache=None):
    keys = {"workers": 2}
    if cache is not None:
        keys["cache_dir"] = cache
    d = env.start_daemon(env.config(name, pipelines(prefix), **keys))
    got = consume(env, d, name)
    d.stop()
    log = d.log()
    for want in log_has:
        check(want in log, "%s: the log does not say %r:\n%s" % (name, want, log))
    for unwanted in log_lacks:
        check(unwanted not in log, "%s: the log says %r:\n%s" % (name, unwanted, log))
    if ref is not None:
        for a, b in zip(got, ref):
            check(a[2] == b[2], "%s: %s %s: token %s, the reference's %s" % (name, a[0], a[1],
                                                                           a[2], b[2]))
            check(a[3] == b[3] and a[4] == b[4], "%s: %s %s: other batches than the reference's"
                  % (name, a[0], a[1]))
    return got


def cache_file(cache):
    return harness.only_file(cache, ".idxcache")


def check_config(env, name, prefix, cache):
    path = env.config(name, pipelines(prefix), workers=2, cache_dir=cache)
    r = subprocess.run([harness.binary("loaderd"), "--check-config", "--config", path],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "%s: --check-config exited %d:\n%s" % (name, r.returncode, r.stderr))
    return r.stderr


def body(env):
    os.environ.pop("CACHE_DIRECTORY", None)
    prefix = env.path("corpus")
    make_dataset(prefix)
    cache = env.path("cache")
    idx = prefix + ".idx"
    full = "checking the index in full"
    warm_says = ["checked before (index cache %s/megatron-" % cache,
                 "the pass over its %d documents is skipped" % DOCS]

    ref = run(env, "nocache", prefix, None, [], log_lacks=["index cache"])
    run(env, "cold", prefix, ref, ["no index cache yet", full, "the index cache is written"],
        cache=cache)
    run(env, "warm", prefix, ref, warm_says, log_lacks=[full, "is written"], cache=cache)
    path = cache_file(cache)
    check(os.stat(path).st_mode & 0o777 == 0o600, "the cache file's mode is %o, not 600"
          % (os.stat(path).st_mode & 0o777))

    st = os.stat(idx)
    os.utime(idx, (st.st_atime, st.st_mtime - 5))
    run(env, "touched", prefix, ref, ["%s changed since it was checked (mtime" % idx, full,
                                      "the index cache is written"], cache=cache)
    run(env, "touched-warm", prefix, ref, warm_says, log_lacks=[full], cache=cache)

    shutil.copyfile(prefix + ".bin", prefix + ".bin.new")
    os.rename(prefix + ".bin.new", prefix + ".bin")
    age(prefix, (".bin",))
    run(env, "replaced", prefix, ref, ["%s.bin changed since it was checked (inode" % prefix,
                                       full, "the index cache is written"], cache=cache)
    run(env, "replaced-warm", prefix, ref, warm_says, log_lacks=[full], cache=cache)

    size = os.path.getsize(path)
    harness.patch_file(path, 0, size=size - 3)
    run(env, "short", prefix, ref, ["truncated", full, "the index cache is written"], cache=cache)
    harness.patch_file(path, 8, data=struct.pack("=I", 2))
    run(env, "version", prefix, ref, ["version 2, this loaderd reads version 1", full,
                                      "the index cache is written"], cache=cache)
    harness.patch_file(path, os.path.getsize(path) // 2, data=bytes([open(path, "rb").read()[
        os.path.getsize(path) // 2] ^ 0x01]))
    run(env, "flipped", prefix, ref, ["checksum mismatch (corrupt)", full,
                                      "the index cache is written"], cache=cache)
    run(env, "flipped-warm", prefix, ref, warm_says, log_lacks=[full], cache=cache)

    # --check-config: with the cache, then without one (it writes it)
    err = check_config(env, "check-warm", prefix, cache)
    for want in warm_says:
        check(want in err, "--check-config with a cache does not say %r:\n%s" % (want, err))
    check(full not in err, "--check-config with a cache checked the index:\n%s" % err)
    os.unlink(path)
    err = check_config(env, "check-cold", prefix, cache)
    for want in ("no index cache yet", full, "the index cache is written"):
        check(want in err, "--check-config without a cache does not say %r:\n%s" % (want, err))
    run(env, "after-check", prefix, ref, warm_says, log_lacks=[full], cache=cache)

    # a reload adding p (its block sums placed into the arena off the loop),
    # from the cache, then without one: the same batches
    for name, keys, says in (("reload-warm", {"cache_dir": cache}, warm_says),
                             ("reload-nocache", {}, [])):
        only_w = {"w": pipelines(prefix)["w"]}
        d = env.start_daemon(env.config(name, only_w, workers=2, **keys))
        env.config(name, pipelines(prefix), workers=2, **keys)
        r = env.loaderctl(["--socket", d.socket, "reload"])
        check(r.returncode == 0, "%s: reload exited %d: %s" % (name, r.returncode, r.stderr))
        got = consume(env, d, name)
        d.stop()
        log = d.log()
        for want in says + ["pipeline \"p\" added"]:
            check(want in log, "%s: the log does not say %r:\n%s" % (name, want, log))
        check(got == ref, "%s: a reload's pipeline delivers other batches than a start's" % name)

    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        run(env, "foreign", prefix, ref, ["owned by uid 65534, not by this user (uid 0) or root",
                                          full, "the index cache is written"], cache=cache)
        check(os.stat(path).st_uid == 0, "the foreign cache was not replaced")


if __name__ == "__main__":
    harness.run_test("test_megatron_cache", body)
