#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The daemon serves its socket while start-up scans the data.

An imagefolder pipeline over 800,000 files (hard links, in a tmpfs)
takes the scan (one scan thread) a few seconds. Meanwhile:
- `loaderctl status --json` answers state "starting" with the scan's
  pipeline, what, unit and a growing count (the JSON follows
  docs/status.schema.json), and the text says the same;
- a client attaching is held (the status counts it waiting) and gets its
  batches once the daemon is up; one whose attach timeout strikes first
  fails saying "daemon is starting: pipeline big: listing ...";
- systemd hears the watchdog (WATCHDOG=1, from the loop's timer) and
  progress (STATUS=), and READY=1 only once the daemon is up.
SIGTERM during the scan stops it: the daemon exits 0 well before the scan
would have ended, without an error line. A start whose scan then finds a
bad pipeline tells the held client why, in the log's words, and exits 1.
A reload that adds a pipeline shows its listing's progress in status
(JSON and text) while it runs, and SIGTERM stops such a listing too.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

CLASSES, PER_CLASS = 8, 100000
FILES = CLASSES * PER_CLASS


def make_tree(root, classes, per_class):
    """classes directories of per_class .jpg files, each class's hard links
    of one small JPEG (quick to make, and a batch of them decodes)."""
    os.makedirs(root, exist_ok=True)
    one = os.path.join(root, "one.jpg")
    for c in range(classes):
        subprocess.run([harness.binary("mkjpeg"), one, "--width", "16", "--height", "16",
                        "--seed", str(c)], check=True)
        d = os.path.join(root, "class%d" % c)
        os.mkdir(d)
        for i in range(per_class):
            os.link(one, os.path.join(d, "%06d.jpg" % i))
        os.unlink(one)


def status_doc(d):
    """The status JSON (loaded), or None while the daemon does not answer."""
    r = d.env.loaderctl(["--socket", d.socket, "status", "--json"], timeout_s=10)
    return json.loads(r.stdout) if r.returncode == 0 else None


def starting_scan(d, above=0, waiting=0):
    """Waits for a "starting" status whose scan has counted more than
    `above` files, with at least `waiting` clients held; returns it."""
    def cond():
        check(d.alive(), "loaderd exited %s while starting" % d.proc.returncode)
        doc = status_doc(d)
        if doc is None or doc["state"] != "starting":
            check(doc is None, "the daemon is %s before the checks of its start-up"
                  " were done (the scan was too quick)" % (doc or {}).get("state"))
            return None
        ok = doc["scans"] and doc["scans"][0]["count"] > above
        return doc if ok and doc["starting"]["clients_waiting"] >= waiting else None
    return harness.wait_for(cond, 60, "a starting status with more than %d files listed and %d "
                            "clients waiting" % (above, waiting), interval_s=0.05)


def check_starting(validator, doc, root):
    harness.check(not sorted(validator.iter_errors(doc), key=str),
                  "the starting status does not follow docs/status.schema.json: %s" %
                  [e.message for e in validator.iter_errors(doc)][:5])
    scan = doc["scans"][0]
    check(scan["pipeline"] == "big" and scan["what"] == "listing " + root and scan["unit"] == "files"
          and 0 < scan["count"] <= FILES and scan["seconds"] >= 0,
          "the scan in status is %r, expected pipeline big listing %s in files" % (scan, root))
    check("arena" not in doc and "pipelines" not in doc and doc["config"]["workers"] == 1,
          "the starting status has %s" % sorted(doc))


def schema_validator():
    jsonschema = harness.import_or_fail("test_startup_status", "jsonschema")
    with open(os.path.join(harness.SOURCE_DIR, "docs", "status.schema.json")) as f:
        return jsonschema.Draft202012Validator(json.load(f))


def served_while_starting(env, root, validator):
    pipe = {"source": "imagefolder:" + root, "batch_size": 4, "transform": "resize(8) center_crop(8)"}
    os.environ["WATCHDOG_USEC"] = "200000"  # a ping every 100 ms, from the loop
    d = env.start_daemon(env.config("st", {"big": pipe}, workers=1, scan_threads=1),
                         wait_ready=False)
    del os.environ["WATCHDOG_USEC"]
    first = starting_scan(d)
    check_starting(validator, first, root)

    early = env.spawn_loaderctl(harness.consume_args(d.socket, "big", batches=3) + ["--quiet"])
    second = starting_scan(d, above=first["scans"][0]["count"], waiting=1)
    check_starting(validator, second, root)
    text = harness.parse_status(d.status_text())
    check(text["state"] == "starting" and text["scans"] and text["scans"][0]["pipeline"] == "big"
          and text["scans"][0]["what"] == "listing " + root,
          "the text status while starting is %r" % text)

    impatient = env.spawn_loaderctl(harness.consume_args(d.socket, "big", batches=1)
                                    + ["--attach-timeout-ms", "300"])
    rc, out, err = harness.finish(impatient, 30, "consume with a 300 ms attach timeout")
    check(rc != 0 and "daemon is starting: pipeline big: listing %s: " % root in err
          and "files so far" in err and "no answer to HELLO within 300 ms" in err,
          "a client whose attach timed out while the daemon started said (exit %d): %s" % (rc, err))
    check(d.alive() and status_doc(d)["state"] == "starting",
          "the scan ended before the impatient client's check: make the tree larger")

    d.wait_ready(60)
    rc, out, err = harness.finish(early, 60, "consume attached while the daemon started")
    check(rc == 0, "the client held while the daemon started exited %d: %s" % (rc, err))
    summary, _ = harness.parse_consume_output(out)
    check(summary["batches"] == 3, "the held client got %d batches, expected 3" % summary["batches"])

    ready = d.notes.index("READY=1")
    progress = [i for i, x in enumerate(d.notes) if x.startswith("STATUS=pipeline big: listing ")]
    check(progress and max(progress) < ready, "STATUS= progress lines %s, READY=1 at %d: %r"
          % (progress, ready, d.notes))
    check("WATCHDOG=1" in d.notes[:ready], "no WATCHDOG=1 before READY=1 (a start of %d files): %r"
          % (FILES, d.notes[:ready + 1]))
    st = d.status()
    check(st["state"] == "running" and st["scans"] == [] and st["pipelines"][0]["samples"] == FILES,
          "the status once up: state %r, scans %r" % (st["state"], st["scans"]))
    log = d.log()
    check("client pid %d waits for loaderd to start" % early.pid in log,
          "the log does not say the early client waited:\n%s" % log)
    d.stop()


def sigterm_while_starting(env, root):
    pipe = {"source": "imagefolder:" + root, "batch_size": 4, "transform": "resize(8) center_crop(8)"}
    d = env.start_daemon(env.config("term", {"big": pipe}, workers=1, scan_threads=1),
                         wait_ready=False)
    starting_scan(d)
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    try:
        rc = d.proc.wait(timeout=20)
    except Exception:
        raise harness.TestFailure("loaderd did not exit within 20 s of SIGTERM while starting")
    took = time.monotonic() - t0
    log = d.log()
    check(rc == 0, "loaderd exited %d after SIGTERM while starting:\n%s" % (rc, log))
    check(took < 1.5, "loaderd took %.2f s to exit after SIGTERM during its scan" % took)
    check("files in all" not in log and "start-up stopped" in log and "SIGTERM: stopping" in log
          and "stopping the scan: pipeline big: listing " + root in log,
          "the log does not say the scan was stopped:\n%s" % log)
    check("error" not in log.lower(), "a start stopped by SIGTERM logged an error:\n%s" % log)
    check(not os.path.exists(d.socket), "loaderd left its socket %s behind" % d.socket)
    d.drain_notes()
    check("STOPPING=1" in d.notes and "READY=1" not in d.notes,
          "systemd heard %r from a start stopped by SIGTERM" % d.notes)
    d.check_log_clean()


def failed_start(env, root):
    bad = env.path("bad")
    os.makedirs(bad)
    img = {"batch_size": 4, "transform": "resize(8) center_crop(8)"}
    pipes = {"big": dict(img, source="imagefolder:" + root),
             "bad": dict(img, source="imagefolder:" + bad)}
    d = env.start_daemon(env.config("fail", pipes, workers=1, scan_threads=1),
                         wait_ready=False)
    starting_scan(d)
    held = env.spawn_loaderctl(harness.consume_args(d.socket, "big", batches=1))
    starting_scan(d, waiting=1)
    rc = d.proc.wait(timeout=60)
    log = d.log()
    check(rc == 1, "loaderd exited %d after a failed start, expected 1:\n%s" % (rc, log))
    rc, out, err = harness.finish(held, 30, "consume held by a start that failed")
    why = "%s: no class directory in it" % bad
    lines = [l for l in log.splitlines() if why in l]
    check(lines, "the log does not say %r:\n%s" % (why, log))
    told = lines[0].split("error: ", 1)[-1]
    check(rc != 0 and told in err and "not started" in err,
          "the held client was told (exit %d) %r, the log says %r" % (rc, err, told))
    check(not os.path.exists(d.socket), "loaderd left its socket %s behind" % d.socket)


def reload_scan(env, root):
    small = env.path("small")
    make_tree(small, 2, 4)
    img = {"batch_size": 4, "transform": "resize(8) center_crop(8)"}
    pipes = {"p": dict(img, source="imagefolder:" + small)}
    room = {"workers": 1, "runtime_index_bytes": 128 << 20, "shm_bytes": 512 << 20,
            "scan_threads": 1}
    cfg = env.config("rl", pipes, **room)  # room for the added pipeline's 800,000 paths
    d = env.start_daemon(cfg)
    pipes["added"] = dict(img, source="imagefolder:" + root)
    env.config("rl", pipes, **room)
    reload = env.spawn_loaderctl(["--socket", d.socket, "reload"])

    def scanning(above):
        def cond():
            st = d.try_status()
            scans = [s for s in (st or {}).get("scans", []) if s["pipeline"] == "added"]
            return scans[0] if scans and scans[0]["count"] > above else None
        return harness.wait_for(cond, 60, "status to show the added pipeline's listing past %d"
                                % above, interval_s=0.05)
    first = scanning(0)
    check(first["what"] == "listing " + root and first["unit"] == "files",
          "the reload's scan in status is %r" % first)
    second = scanning(first["count"])
    text = harness.parse_status(d.status_text())
    check(any(s["pipeline"] == "added" and s["count"] >= second["count"] for s in text["scans"]),
          "the text status during the reload's scan lists %r" % text["scans"])
    rc, out, err = harness.finish(reload, 60, "loaderctl reload adding a pipeline")
    check(rc == 0, "the reload exited %d: %s" % (rc, err))
    st = d.status()
    check(st["scans"] == [] and any(p["name"] == "added" and p["samples"] == FILES
                                    for p in st["pipelines"]),
          "after the reload: scans %r, pipelines %r" % (st["scans"], st["pipelines"]))

    # SIGTERM while a reload lists a pipeline: the listing gives up.
    pipes["again"] = pipes.pop("added")
    env.config("rl", pipes, **room)
    reload = env.spawn_loaderctl(["--socket", d.socket, "reload"])
    harness.wait_for(lambda: any(s["pipeline"] == "again" and s["count"] > 0
                                 for s in (d.try_status() or {}).get("scans", [])),
                     60, "the second reload's scan in status", interval_s=0.05)
    t0 = time.monotonic()
    d.stop()
    took = time.monotonic() - t0
    check(took < 2.0, "loaderd took %.2f s to stop during a reload's scan" % took)
    harness.finish(reload, 30, "loaderctl reload interrupted by SIGTERM")


def body(env):
    os.environ["LOADERD_PROGRESS_MS"] = "100"
    validator = schema_validator()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    root = tempfile.mkdtemp(prefix="ldr-startup-", dir=shm)
    try:
        make_tree(root, CLASSES, PER_CLASS)
        served_while_starting(env, root, validator)
        sigterm_while_starting(env, root)
        failed_start(env, root)
        reload_scan(env, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    harness.run_test("test_startup_status", body)
