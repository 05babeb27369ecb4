#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Loader against a daemon that is still starting.

The daemon lists an imagefolder of 400,000 files (hard links of one JPEG,
in a tmpfs) before it is up. A Loader with attach_timeout=0.3 raises
AttachTimeoutError (a TimeoutError and a LoaderdError, errno ETIMEDOUT)
saying "daemon is starting: pipeline big: listing ROOT: N files so far";
loaderd.status() answers meanwhile with state "starting"; a Loader with
the default attach timeout waits and gets its batches once the daemon is
up.
"""

import errno
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

CLASSES, PER_CLASS = 4, 100000


def make_tree(root):
    one = os.path.join(root, "one.jpg")
    for c in range(CLASSES):
        subprocess.run([harness.binary("mkjpeg"), one, "--width", "16", "--height", "16",
                        "--seed", str(c)], check=True)
        d = os.path.join(root, "class%d" % c)
        os.mkdir(d)
        for i in range(PER_CLASS):
            os.link(one, os.path.join(d, "%06d.jpg" % i))
        os.unlink(one)


def body(env):
    loaderd = ch.import_loaderd()
    framework = ch.frameworks()[0]
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    root = tempfile.mkdtemp(prefix="ldr-pystart-", dir=shm)
    try:
        make_tree(root)
        pipe = {"source": "imagefolder:" + root, "batch_size": 4,
                "transform": "resize(8) center_crop(8)"}
        d = env.start_daemon(env.config("ps", {"big": pipe}, workers=1), wait_ready=False)

        def starting():
            check(d.alive(), "loaderd exited %s while starting" % d.proc.returncode)
            try:
                doc = loaderd.status(socket=d.socket, json=True)
            except loaderd.DaemonUnavailableError:
                return None
            return doc if doc["state"] == "starting" and doc["scans"] else None
        doc = harness.wait_for(starting, 60, "loaderd.status() to say starting, with a scan",
                               interval_s=0.05)
        check(doc["scans"][0]["pipeline"] == "big", "the scan in status is %r" % doc["scans"])

        e = ch.expect(loaderd.AttachTimeoutError,
                      ["daemon is starting: pipeline big: listing %s: " % root, "files so far",
                       "within 300 ms"],
                      lambda: loaderd.Loader("big", socket=d.socket, device="cpu",
                                             framework=framework, attach_timeout=0.3),
                      "Loader(attach_timeout=0.3) while the daemon starts")
        check(isinstance(e, TimeoutError) and isinstance(e, loaderd.LoaderdError)
              and e.errno == errno.ETIMEDOUT,
              "AttachTimeoutError %r is not a TimeoutError and LoaderdError with ETIMEDOUT" % e)
        check(loaderd.status(socket=d.socket, json=True)["state"] == "starting",
              "the scan ended before the checks: make the tree larger")

        loader = loaderd.Loader("big", socket=d.socket, device="cpu", framework=framework)
        batch = next(iter(loader))
        check(batch.rows == 4 and loader.dataset_size == CLASSES * PER_CLASS,
              "the Loader that waited got %d rows of a dataset of %d" % (batch.rows, loader.dataset_size))
        del batch
        loader.close()
        d.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    harness.run_test("test_py_starting", body)
