#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tar shard pipelines (source = tar:PATTERN): the same images as
test_images.py's tree, written as WebDataset shards, must be delivered
exactly as the imagefolder pipeline delivers them; bad images are replaced
from the same shard; malformed shards are refused at start, naming the
shard and the offset.

The tree's samples, in torchvision ImageFolder order, go into three shards
`shards/train-{000..002}.tar`, one per class (Cat, ant, bee: labels 0, 1,
2), as KEY.jpg + KEY.cls with KEY = s00000, s00001, ... Each shard is
written in another tar format (GNU, pax, ustar), and carries what a reader
must skip: a directory entry, a KEY.json member, a `__meta__.txt` file, and
in the pax shard member names over 100 bytes (pax `path` records). One
extra sample in the bee shard has a .png image instead of a .jpg: left out,
with a warning, so sample numbers stay those of the tree.

- Same rows: `random_resized_crop(48) hflip(0.5)` with the same seed, 2
  epochs, 3 workers: every row of a good sample is byte-identical between
  the tar and the imagefolder pipeline, labels included; both cover every
  sample once per epoch.
- Same shard: every bad image is in the bee shard; on_error = substitute
  must replace it with another bee sample (label 2), where the imagefolder
  pipeline may take any class. Status counts them; the log names the shard
  and member of each bad one once.
- on_error = fail: the client's error names the shard and member, also
  when the shard was removed after start (the worker's open fails).
- Refused at start (`loaderd --check-config`): a shard the pattern names
  that does not exist, a damaged header checksum, a member cut short, a
  sample without .cls, a label that is not a number, a second .jpg in one
  sample; each message names the shard and the byte offset of the header
  concerned. A pattern with an unclosed brace is a configuration error
  naming its line.
"""

import io
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

np = harness.import_or_fail("test_tar", "numpy")
import test_images  # noqa: E402  (the tree and its reference order)

FORMATS = (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT)
EPOCHS = 2
SIZE = 48


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    tar.addfile(info, io.BytesIO(data))


def write_shards(env, samples, root):
    """One shard per class; returns the pattern and [(shard path, [sample index])]."""
    os.makedirs(env.path("shards"))
    by_label = {}
    for i, (_, label) in enumerate(samples):
        by_label.setdefault(label, []).append(i)
    shards = []
    for label, fmt in zip(sorted(by_label), FORMATS):
        path = env.path("shards", "train-%03d.tar" % label)
        long_dir = "d" * 120 + "/" if fmt == tarfile.PAX_FORMAT else ""
        with tarfile.open(path, "w", format=fmt) as tar:
            dir_info = tarfile.TarInfo("class%d" % label)
            dir_info.type = tarfile.DIRTYPE
            tar.addfile(dir_info)
            add_member(tar, "__meta__.txt", b"shard %d\n" % label)
            for i in by_label[label]:
                key = "%ss%05d" % (long_dir, i)
                with open(samples[i][0], "rb") as f:
                    add_member(tar, key + ".jpg", f.read())
                add_member(tar, key + ".cls", b"%d\n" % label)
                add_member(tar, key + ".json", b'{"path": "%s"}' % os.path.relpath(
                    samples[i][0], root).encode())
            if label == 2:
                add_member(tar, "png00001.png", b"\x89PNG\r\n\x1a\n")
                add_member(tar, "png00001.cls", b"2")
        shards.append((path, by_label[label]))
    return env.path("shards", "train-{000..%03d}.tar" % (len(shards) - 1)), shards


def rows_by_key(rows, data, row_bytes):
    return {(e, b, s): data[k * row_bytes:(k + 1) * row_bytes] for k, (e, b, s, _) in enumerate(rows)}


def check_same_rows(samples, bad, fold, tar, row_bytes):
    (frows, fdata), (trows, tdata) = fold, tar
    check([r[:3] for r in frows] == [r[:3] for r in trows],
          "the tar and imagefolder pipelines delivered different (epoch, batch, sample) rows")
    for epoch in range(EPOCHS):
        got = sorted(s for e, _, s, _ in trows if e == epoch)
        check(got == list(range(len(samples))), "tar: epoch %d delivered %s, expected each of "
              "0..%d once" % (epoch, got, len(samples) - 1))
    f, t = rows_by_key(frows, fdata, row_bytes), rows_by_key(trows, tdata, row_bytes)
    same = 0
    for key, row in t.items():
        label = int(np.frombuffer(row, np.int64, 1, row_bytes - 8)[0])
        path = samples[key[2]][0]
        if path in bad:
            check(label == 2, "bad sample %s (bee shard) was replaced by a sample with label %d, "
                  "not one of its shard" % (path, label))
            continue
        check(row == f[key], "epoch %d batch %d sample %d (%s): the tar row differs from the "
              "imagefolder row" % (key[0], key[1], key[2], path))
        same += 1
    check(same == EPOCHS * (len(samples) - len(bad)), "compared %d good rows" % same)


def body(env):
    root = test_images.make_tree(env)
    samples = test_images.imagefolder_samples(root)
    bad = {os.path.join(root, rel) for rel, _ in test_images.BAD}
    bad.add(os.path.join(root, test_images.MAYBE_BAD[0]))
    pattern, shards = write_shards(env, samples, root)
    common = {"batch_size": 4, "seed": 3, "transform": "random_resized_crop(%d) hflip(0.5)" % SIZE,
              "max_image_pixels": test_images.MAX_PIXELS}
    pipelines = {"fold": dict(common, source="imagefolder:" + root),
                 "tar": dict(common, source="tar:" + pattern),
                 "strict": dict(common, source="tar:" + pattern, on_error="fail")}
    d = env.start_daemon(env.config("tar", pipelines, workers=3))
    st = d.status()
    n = len(samples)
    check([p["samples"] for p in st["pipelines"]] == [n, n, n],
          "status gives samples %s, expected %d each" % (st["pipelines"], n))
    fold = test_images.consume(env, d, "fold", "fold")
    before = d.status()["bad_images"]
    tar = test_images.consume(env, d, "tar", "tar")
    st = d.status()
    met = st["bad_images"] - before
    check(met >= EPOCHS * len(test_images.BAD), "tar: status counted %d bad images" % met)
    check_same_rows(samples, bad, fold, tar, 3 * SIZE * SIZE + 8)

    log = harness.read_text(d.log_path)
    bee_shard = shards[2][0]
    for path in sorted(bad):
        key = "s%05d.jpg" % next(i for i, (p, _) in enumerate(samples) if p == path)
        count = log.count("%s: member %s (data at offset" % (bee_shard, key))
        check(count == 1 or (count == 0 and path.endswith(test_images.MAYBE_BAD[0])),
              "the log names %s (%s) %d times, expected once:\n%s" % (key, path, count, log))
    check("1 samples whose image is not a JPEG" in log and "in 3 tar shards" in log,
          "the log does not report the skipped .png sample and the shards:\n%s" % log)
    r = test_images.consume(env, d, "strict", "strict", epochs=1, expect_ok=False)
    check(r.returncode != 0 and bee_shard + ": member s" in r.stderr
          and "on_error = fail" in r.stderr,
          "on_error = fail: consume exited %d, stderr %r; expected the shard and member"
          % (r.returncode, r.stderr))
    d.stop()
    check_shard_gone(env, pattern, shards, common)
    check_refusals(env, shards)


def check_shard_gone(env, pattern, shards, common):
    """A shard removed after start: its samples cannot be read (no worker
    has it open yet); on_error = fail names the shard, the member and the
    reason."""
    d = env.start_daemon(env.config("gone", {
        "gone": dict(common, source="tar:" + pattern, on_error="fail", shuffle="false")},
        workers=1))
    gone = shards[0][0]
    os.rename(gone, gone + ".away")
    try:
        r = test_images.consume(env, d, "gone", "gone", epochs=1, expect_ok=False)
    finally:
        os.rename(gone + ".away", gone)
    check(r.returncode != 0 and "%s: member s00000.jpg (data at offset" % gone in r.stderr
          and "No such file or directory" in r.stderr,
          "a shard gone after start: consume exited %d, stderr %r; expected the shard, member "
          "and reason" % (r.returncode, r.stderr))
    d.stop()


def damaged_copies(env, shards):
    """(what, path, offset of the header concerned, message) for each broken shard."""
    src, indexes = shards[0]
    with open(src, "rb") as f:
        good = f.read()
    members = []
    with tarfile.open(src) as tar:
        for m in tar.getmembers():
            members.append(m)
    first_jpg = next(m for m in members if m.name.endswith(".jpg"))
    cases = []

    def write(name, data):
        path = env.path("shards", name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    broken = bytearray(good)
    broken[first_jpg.offset + 10] ^= 0x20  # a letter of the name: the checksum no longer holds
    cases.append(("bad checksum", write("checksum.tar", bytes(broken)), first_jpg.offset,
                  "bad header checksum"))
    cut = first_jpg.offset_data + 100
    cases.append(("cut short", write("cut.tar", good[:cut]), first_jpg.offset,
                  "runs past the end of the file"))

    def one_sample(name, pairs):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for member, data in pairs:
                add_member(tar, member, data)
        return write(name, buf.getvalue())
    jpeg = good[first_jpg.offset_data:first_jpg.offset_data + first_jpg.size]
    cases.append(("no label", one_sample("nocls.tar", [("a.jpg", jpeg), ("b.jpg", jpeg),
                                                        ("b.cls", b"1")]), 0,
                  'sample "a" has no .cls member'))
    cases.append(("label not a number", one_sample("badcls.tar", [("a.jpg", jpeg),
                                                                 ("a.cls", b"cat")]),
                  512 + (len(jpeg) + 511) // 512 * 512, 'the label "cat" is not a decimal integer'))
    cases.append(("two images", one_sample("twojpg.tar", [("a.jpg", jpeg), ("a.cls", b"1"),
                                                         ("a.jpeg", jpeg)]),
                  2 * 512 + (len(jpeg) + 511) // 512 * 512 + 512,
                  'sample "a" has a second image member'))
    return cases


def check_refusals(env, shards):
    sock = env.path("refuse.sock")
    cases = damaged_copies(env, shards)
    missing = env.path("shards", "train-{000..003}.tar")
    runs = [("missing shard", missing, env.path("shards", "train-003.tar") + ": No such file")]
    # a single shard: the pattern is its path, named once
    runs += [(what, path, '"bad": %s: offset %d: ' % (path, offset)) for what, path, offset, _ in cases]
    messages = {what: message for what, _, _, message in cases}
    for what, source, expected in runs:
        cfg = harness.write_config(env.path("refuse.ini"), {"socket": sock, "workers": 1}, {
            "bad": {"source": "tar:" + source, "batch_size": 1, "transform": "center_crop(8)"}})
        r = subprocess.run([harness.binary("loaderd"), "--check-config", "--config", cfg],
                           capture_output=True, text=True, timeout=15)
        check(r.returncode != 0, "%s: --check-config exited 0" % what)
        check(expected in r.stderr and messages.get(what, "") in r.stderr,
              "%s: stderr does not contain %r and %r:\n%s"
              % (what, expected, messages.get(what, ""), r.stderr))
        print("%s: %s" % (what, r.stderr.strip().splitlines()[-1]))
    cfg = env.path("brace.ini")
    with open(cfg, "w") as f:
        f.write("[daemon]\nsocket = %s\n\n[pipeline.bad]\nsource = tar:%s\nbatch_size = 1\n"
                "transform = center_crop(8)\n" % (sock, env.path("train-{000..003.tar")))
    r = subprocess.run([harness.binary("loaderd"), "--check-config", "--config", cfg],
                       capture_output=True, text=True, timeout=15)
    check(r.returncode != 0 and "%s:5:" % cfg in r.stderr and "without its '}'" in r.stderr,
          "an unclosed brace: exit %d, stderr %r; expected line 5 named" % (r.returncode, r.stderr))


if __name__ == "__main__":
    harness.run_test("test_tar", body)
