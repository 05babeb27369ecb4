#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A long start-up scan says how far it is, in the log and to systemd.

An imagefolder pipeline over 200,000 (empty) files is listed at start;
with LOADERD_PROGRESS_MS=100 (the interval of progress lines) the daemon
must, before READY=1, send STATUS= lines naming the pipeline, the tree
and a growing file count, each with EXTEND_TIMEOUT_USEC= (so that a slow
start does not hit TimeoutStartSec), and log the same lines, the last of
them with the whole count. A small tree, listed in well under the
interval, says nothing of the kind.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

CLASSES = 4
PER_CLASS = 50000
LINE_RE = re.compile(r"pipeline big: listing (\S+): ([\d,]+) files (so far|in all), \d+ s$")


def make_tree(root, classes, per_class):
    """classes directories of per_class empty .jpg files (hard links of one
    file a class: quicker to make than as many inodes)."""
    os.makedirs(root)
    empty = os.path.join(root, "empty")
    for c in range(classes):
        open(empty, "w").close()
        d = os.path.join(root, "class%d" % c)
        os.mkdir(d)
        for i in range(per_class):
            os.link(empty, os.path.join(d, "%06d.jpg" % i))
        os.unlink(empty)


def body(env):
    os.environ["LOADERD_PROGRESS_MS"] = "100"
    root = env.path("tree")
    make_tree(root, CLASSES, PER_CLASS)
    small = env.path("small")
    make_tree(small, 2, 4)
    pipe = {"source": "imagefolder:" + root, "batch_size": 4,
            "transform": "resize(8) center_crop(8)"}
    d = env.start_daemon(env.config("pr", {"big": pipe}, workers=1), timeout_s=120)

    ready = d.notes.index("READY=1")
    statuses = [i for i, x in enumerate(d.notes[:ready])
                if x.startswith("STATUS=pipeline big: listing ")]
    check(statuses, "no STATUS= progress line before READY=1: %r" % d.notes[:ready + 1])
    counts = []
    for i in statuses:
        text = d.notes[i][len("STATUS="):]
        m = LINE_RE.match(text)
        check(m is not None and m.group(1) == root and m.group(3) == "so far",
              "STATUS= line %r does not say how far listing %s is" % (text, root))
        counts.append(int(m.group(2).replace(",", "")))
        extend = d.notes[i + 1] if i + 1 < len(d.notes) else ""
        check(re.match(r"EXTEND_TIMEOUT_USEC=\d+$", extend) is not None
              and int(extend.split("=")[1]) >= 10_000_000,
              "STATUS= %r came without EXTEND_TIMEOUT_USEC= of 10 s or more (next: %r)"
              % (text, extend))
    check(counts == sorted(counts) and 0 < counts[0] <= CLASSES * PER_CLASS,
          "the STATUS= counts %s do not grow up to %d" % (counts, CLASSES * PER_CLASS))

    log = [l[len("loaderd: "):] for l in d.log().splitlines() if LINE_RE.search(l)]
    check(len(log) >= len(statuses) + 1, "the log has %d progress lines, systemd got %d "
          "(the log adds the last one):\n%s" % (len(log), len(statuses), d.log()))
    last = LINE_RE.search(log[-1])
    check(last.group(3) == "in all" and last.group(2) == "{:,}".format(CLASSES * PER_CLASS),
          "the last progress line is %r, expected %s files in all" % (log[-1], "{:,}".format(CLASSES * PER_CLASS)))
    d.stop()

    # A quick scan: no progress line at all.
    os.environ["LOADERD_PROGRESS_MS"] = "60000"
    pipe["source"] = "imagefolder:" + small
    q = env.start_daemon(env.config("quick", {"big": pipe}, workers=1))
    check(not any(x.startswith("EXTEND_TIMEOUT_USEC=") for x in q.notes),
          "a quick scan sent %r" % q.notes)
    check(not LINE_RE.search(q.log()), "a quick scan logged progress:\n%s" % q.log())
    q.stop()


if __name__ == "__main__":
    harness.run_test("test_startup_progress", body)
