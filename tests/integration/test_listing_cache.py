#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An imagefolder's listing cached on disk ([daemon] cache_dir) gives the
same pipeline as a scan, and is used only while the tree is unchanged.

The tree is test_imagefolder_names' (names that are not plain UTF-8,
nested directories two and three levels down), with a class that is a
symlink to another, a JPEG that is a symlink, and files that are not
JPEGs (.png, .txt). Every directory's mtime is set 10 s back first, so
that the listing may be cached (a directory changed within 0.1 s of the
scan leaves it uncached). One shuffled epoch is consumed and dumped from:
- a scan by one thread, without a cache (the reference);
- a scan by four threads that writes the cache ("no listing cached yet");
- the cache read back ("listed from the cache"), with the same dump and
  the same position token (the data identity) as the reference;
- a cache with a byte of its payload flipped, of another version, and
  cut short: each refused with its reason logged ("checksum mismatch",
  "version 2", "truncated"), the tree listed again, the same dump;
- the cache found through $CACHE_DIRECTORY, systemd's CacheDirectory=,
  with no cache_dir in the file;
- a file added three levels down: the cache is out of date (logged), the
  epoch holds one more sample.
Then a JPEG rewritten in place with another size, which no directory
shows: the cache is used, and the sample's read fails naming the file
(on_error = fail).
"""

import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_imagefolder_names import make_tree, Image  # noqa: E402
import random  # noqa: E402


def age(root):
    """Every directory's times 10 s back (symlinks followed)."""
    for d, _, _ in os.walk(root, followlinks=False):
        st = os.stat(d)
        os.utime(d, (st.st_atime - 10, st.st_mtime - 10))


def run(env, name, root, expect, log_has, cache=None, threads=4, extra=None):
    """One daemon over root, one shuffled epoch dumped: (token, dump text)."""
    keys = {"workers": 1, "scan_threads": threads}
    if cache is not None:
        keys["cache_dir"] = cache
    pipe = {"source": "imagefolder:" + os.fsdecode(root), "batch_size": 4, "shuffle": "true",
            "transform": "resize(8) center_crop(8)"}
    pipe.update(extra or {})
    d = env.start_daemon(env.config(name, {"p": pipe}, **keys))
    dump = env.path(name + ".dump")
    r = env.loaderctl(harness.consume_args(d.socket, "p", epochs=1, dump=dump,
                                           extra=["--quiet"]), timeout_s=60)
    check(r.returncode == 0, "%s: consume exited %d: %s" % (name, r.returncode, r.stderr))
    d.stop()
    log = read_log(d)
    for want in log_has:
        check(want in log, "%s: the log does not say %r:\n%s" % (name, want, log))
    _, token = harness.parse_consume_output(r.stdout)
    samples = int(token.split(":")[4])
    check(samples == expect, "%s: %d samples, expected %d" % (name, samples, expect))
    return token, harness.read_text(dump)


def read_log(d):
    with open(d.log_path, "rb") as f:  # names in it are not all UTF-8
        return f.read().decode(errors="replace")


def cache_file(cache):
    return harness.only_file(cache, ".list")


def body(env):
    os.environ.pop("CACHE_DIRECTORY", None)
    root = env.path("tree").encode()
    files = make_tree(root, random.Random(11))
    classes = sorted(os.listdir(root))
    os.symlink(classes[0], os.path.join(root, b"zz_linked_class"))
    first_class = os.path.join(root, classes[0])
    jpegs = sorted(f for f in os.listdir(first_class) if f.lower().endswith((b".jpg", b".jpeg")))
    os.symlink(jpegs[0], os.path.join(first_class, b"linked.jpg"))
    Image.new("RGB", (8, 8)).save(os.path.join(first_class, b"other.png"), "PNG")
    with open(os.path.join(first_class, b"notes.txt"), "w") as f:
        f.write("not an image\n")
    n_first = sum(1 for dp, _, fs in os.walk(first_class) for f in fs
                  if f.lower().endswith((b".jpg", b".jpeg")))
    n = len(files) + 1 + n_first  # the linked JPEG, and the linked class's files
    age(root)
    cache = env.path("cache")

    ref = run(env, "one", root, n, ["images in"], threads=1)
    cold = run(env, "cold", root, n, ["no listing cached yet"], cache=cache)
    check(cold == ref, "4 scan threads give another epoch (or identity) than 1")
    warm = run(env, "warm", root, n, ["files listed from the cache"], cache=cache)
    check(warm == ref, "the cached listing gives another epoch (or identity) than the scan")
    path = cache_file(cache)
    size = os.path.getsize(path)

    harness.patch_file(path, size // 2, data=b"\x5a")
    got = run(env, "corrupt", root, n, ["checksum mismatch", "listing the tree"], cache=cache)
    check(got == ref, "after a corrupt cache: another epoch")
    harness.patch_file(path, 8, data=struct.pack("=I", 2))
    got = run(env, "version", root, n, ["version 2, this loaderd reads version 1"], cache=cache)
    check(got == ref, "after a cache of another version: another epoch")
    harness.patch_file(path, 0, size=os.path.getsize(path) - 3)
    got = run(env, "short", root, n, ["truncated", "listing the tree"], cache=cache)
    check(got == ref, "after a truncated cache: another epoch")

    os.environ["CACHE_DIRECTORY"] = cache
    try:
        got = run(env, "env", root, n, ["files listed from the cache"])
    finally:
        os.environ.pop("CACHE_DIRECTORY")
    check(got == ref, "the cache found through $CACHE_DIRECTORY: another epoch")

    deep = max((dp for dp, _, _ in os.walk(root)), key=lambda p: p.count(b"/"))
    Image.new("RGB", (16, 16), (1, 2, 3)).save(os.path.join(deep, b"added.jpg"), "JPEG")
    run(env, "added", root, n + 1 + (deep.startswith(first_class + b"/")),
        ["out of date", "changed since it was listed"], cache=cache)
    age(root)
    run(env, "recached", root, n + 1 + (deep.startswith(first_class + b"/")),
        ["images in"], cache=cache)

    # a JPEG rewritten in place, shorter: no directory changes
    victim = os.path.join(first_class, jpegs[-1])
    with open(victim, "r+b") as f:
        f.truncate(100)
    keys = {"workers": 1, "cache_dir": cache}
    pipe = {"source": "imagefolder:" + os.fsdecode(root), "batch_size": 4,
            "transform": "resize(8) center_crop(8)", "on_error": "fail", "shuffle": "false"}
    d = env.start_daemon(env.config("rewritten", {"p": pipe}, **keys))
    r = subprocess.run([harness.binary("loaderctl")] +  # stderr as bytes: names not UTF-8
                       harness.consume_args(d.socket, "p", epochs=1, extra=["--quiet"]),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    d.stop()
    log = read_log(d)
    check("files listed from the cache" in log, "a file rewritten in place: the cache was not "
          "used:\n%s" % log)
    check(r.returncode == 1 and victim[len(root):] in r.stderr and
          b"empty or truncated" in r.stderr, "a file rewritten in place with another size: "
          "consume exited %d, stderr %r; expected exit 1 naming %r" % (r.returncode, r.stderr,
                                                                       victim))
    print("rewritten in place: %s" % r.stderr.decode(errors="replace").strip())


if __name__ == "__main__":
    harness.run_test("test_listing_cache", body)
