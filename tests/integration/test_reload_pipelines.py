#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A reload adds, removes and replaces pipelines while loaderd runs, and the
clients of the pipelines it leaves alone notice nothing.

- Under a consumer stepping slowly through an epoch of pipeline p,
  `loaderctl reload` adds q and removes r at once: its answer names both;
  r's client (streaming) gets ERROR naming r and the reload; q streams an
  epoch of its own data with its own batch size (every sample once, each
  one's bytes those of its record); p's consumer ends with the dump of a
  run without reloads (no batch lost or repeated).
- q removed, then s added (another file, another record size) at the table
  entry q had: s's samples are s's bytes (the workers dropped what they
  kept of q's entry); status shows no removed pipeline still draining.
- s changed while no client is attached: replaced (status shows its new
  batch_size). Changed while a client streams: refused, naming the key.
- SIGHUP adds a pipeline too.
- Refused whole, each naming the problem, with status unchanged: an added
  pipeline whose file is missing (FILE:LINE), one whose batch needs more
  than a staging slot (staging_slot_bytes), one with direct = on, an
  imagefolder whose sample list needs more than runtime_index_bytes has
  free.
"""

import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH, STEP_MS = 1200, 512, 16, 30  # 75 batches, >= 2 s
NQ, RECORD_Q, BATCH_Q = 400, 256, 8
NS, RECORD_S, BATCH_S = 300, 96, 12
SLOT = 64 << 10


def raw(path, record, batch, **extra):
    return dict({"source": "raw:" + path, "record_bytes": record, "batch_size": batch, "seed": 5,
                 "chunk": 4}, **extra)


def write(env, pipelines, **daemon):
    return env.config("rp", pipelines, workers=2, staging_slot_bytes=SLOT, runtime_index_bytes="8K",
                      **daemon)


def reload(env, d, want_rc, want_texts, what):
    r = env.loaderctl(["--socket", d.socket, "reload"], timeout_s=60)
    out = r.stdout if want_rc == 0 else r.stderr
    check(r.returncode == want_rc and all(t in out for t in want_texts),
          "%s: loaderctl reload exited %d (expected %d); expected %r in its output\nstdout: %s\nstderr: %s"
          % (what, r.returncode, want_rc, want_texts, r.stdout, r.stderr))
    return out


def names(st):
    return sorted(p["name"] for p in st["pipelines"])


def check_refused(env, d, want_text, what):
    before = d.status()
    reload(env, d, 1, [want_text], what)
    st = d.status()
    check(st["config"]["refused"] == before["config"]["refused"] + 1, "%s: not counted as refused" % what)
    check(names(st) == names(before) and st["runtime_index"]["taken"] == before["runtime_index"]["taken"],
          "%s: a refused reload changed the pipelines: %s, before %s" % (what, st["pipelines"],
                                                                         before["pipelines"]))


def one_epoch(env, d, pipeline, crcs, n, batch, tag):
    dump = env.path(tag + ".dump")
    (summary, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": pipeline, "epochs": 1,
                                                              "dump": dump}])
    harness.check_dump_crcs(rows, crcs, "pipeline %s" % pipeline)
    check(sorted(r[2] for r in rows) == list(range(n)),
          "pipeline %s: an epoch is not every sample once (%d rows)" % (pipeline, len(rows)))
    sizes = {}
    for _, b, _, _ in rows:
        sizes[b] = sizes.get(b, 0) + 1
    check(all(v == batch for b, v in sizes.items() if b != max(sizes)),
          "pipeline %s: batches of %s rows, expected %d" % (pipeline, sorted(set(sizes.values())), batch))


def spawn_stream(env, d, pipeline, name):
    p = env.spawn_loaderctl(harness.consume_args(
        d.socket, pipeline, epochs=1000, extra=["--step-ms", "20", "--name", name, "--quiet"]))
    d.wait_status(lambda st: any(c["pid"] == p.pid and c["released"] >= 2 for c in st["clients"]),
                  15, "the client of %s to stream" % pipeline)
    return p


def body(env):
    data_p = env.make_raw("p.bin", N, RECORD, seed=31)
    data_q = env.make_raw("q.bin", NQ, RECORD_Q, seed=32)
    data_r = env.make_raw("r.bin", 200, 128, seed=33)
    data_s = env.make_raw("s.bin", NS, RECORD_S, seed=34)
    cfg = write(env, {"p": raw(data_p, RECORD, BATCH), "r": raw(data_r, 128, 4)})
    d = env.start_daemon(cfg)
    st = d.status()
    check(names(st) == ["p", "r"] and st["slot_bytes"] == SLOT, "at start: %s slot %d" % (st["pipelines"],
                                                                                         st["slot_bytes"]))
    ref_dump = harness.reference_epoch(env, d, harness.raw_sample_crcs(data_p, RECORD), N)

    # q added and r removed under a slow consumer of p and a client of r.
    slow, slow_dump = harness.spawn_slow_consumer(env, d, STEP_MS)
    r_client = spawn_stream(env, d, "r", "r-client")
    write(env, {"p": raw(data_p, RECORD, BATCH), "q": raw(data_q, RECORD_Q, BATCH_Q)})
    reload(env, d, 0, ["pipeline r removed", "pipeline q added"], "adding q, removing r")
    rc, _, err = harness.finish(r_client, 20, "the client of the removed pipeline")
    check(rc != 0 and 'pipeline "r" was removed by a reload of %s' % cfg in err,
          "the client of r: exit %d, stderr %r" % (rc, err))
    st = d.status()
    check(names(st) == ["p", "q"], "pipelines after the reload: %s" % st["pipelines"])
    check(slow.poll() is None, "p's consumer ended before q was consumed")
    one_epoch(env, d, "q", harness.raw_sample_crcs(data_q, RECORD_Q), NQ, BATCH_Q, "q")
    rc, out, err = harness.finish(slow, 60, "the slow consumer")
    check(rc == 0, "p's consumer exited %d across the reload\nstdout: %s\nstderr: %s" % (rc, out, err))
    harness.check_same_dump(slow_dump, ref_dump, "p's dump across the reload differs from the reference")

    # q's entry used again by s, of other records.
    write(env, {"p": raw(data_p, RECORD, BATCH)})
    reload(env, d, 0, ["pipeline q removed"], "removing q")
    write(env, {"p": raw(data_p, RECORD, BATCH), "s": raw(data_s, RECORD_S, BATCH_S)})
    reload(env, d, 0, ["pipeline s added"], "adding s")
    one_epoch(env, d, "s", harness.raw_sample_crcs(data_s, RECORD_S), NS, BATCH_S, "s")
    st = d.wait_status(lambda s: s["runtime_index"]["draining"] == 0, 10, "no removed pipeline draining")
    check("its table entry" in d.log(), "the log does not say a removed pipeline's entry was freed")

    # s changed: replaced without clients, refused with one.
    write(env, {"p": raw(data_p, RECORD, BATCH), "s": raw(data_s, RECORD_S, BATCH_S * 2)})
    reload(env, d, 0, ["pipeline s replaced"], "changing s without clients")
    st = d.status()
    check([p["batch_size"] for p in st["pipelines"] if p["name"] == "s"] == [BATCH_S * 2],
          "s's batch_size after it was replaced: %s" % st["pipelines"])
    s_client = spawn_stream(env, d, "s", "s-client")
    write(env, {"p": raw(data_p, RECORD, BATCH), "s": raw(data_s, RECORD_S, BATCH_S)})
    check_refused(env, d, "[pipeline.s] batch_size, which takes a restart", "changing s with a client")
    check(s_client.poll() is None, "the refused reload stopped s's client")
    s_client.kill()
    s_client.wait()
    write(env, {"p": raw(data_p, RECORD, BATCH), "s": raw(data_s, RECORD_S, BATCH_S * 2)})

    # SIGHUP adds one too.
    base = {"p": raw(data_p, RECORD, BATCH), "s": raw(data_s, RECORD_S, BATCH_S * 2)}
    write(env, dict(base, u=raw(data_q, RECORD_Q, 4)))
    os.kill(d.pid, signal.SIGHUP)
    d.wait_status(lambda s: "u" in names(s), 15, "SIGHUP to add pipeline u")
    one_epoch(env, d, "u", harness.raw_sample_crcs(data_q, RECORD_Q), NQ, 4, "u")
    base["u"] = raw(data_q, RECORD_Q, 4)

    # Refused whole.
    missing = env.path("missing.bin")
    cfg_text = write(env, dict(base, t=raw(missing, 64, 4), v=raw(data_q, RECORD_Q, 2)))
    with open(cfg_text) as f:
        line = f.read().splitlines().index("source = raw:" + missing) + 1
    check_refused(env, d, '%s:%d: pipeline "t": %s: No such file or directory' % (cfg, line, missing),
                  "an added pipeline without its file")
    write(env, dict(base, t=raw(data_p, RECORD, 256)))
    check_refused(env, d, 'pipeline "t": a batch needs a staging slot of 131072 bytes; the slots are '
                  '65536 bytes', "a batch over the staging slots")
    check("raise staging_slot_bytes" in d.log(), "the refusal does not name staging_slot_bytes")
    write(env, dict(base, t=raw(data_p, RECORD, 4, direct="on")))
    check_refused(env, d, 'pipeline "t": direct = on is for pipelines configured when loaderd starts',
                  "direct = on")
    tree = env.path("tree")
    os.makedirs(os.path.join(tree, "a"))
    one = os.path.join(tree, "a", "0000.jpg")
    subprocess.run([harness.binary("mkjpeg"), one, "--width", "16", "--height", "16"], check=True)
    for k in range(1, 900):  # 8 bytes a file and its name: over 8 KiB
        shutil.copy(one, os.path.join(tree, "a", "%04d.jpg" % k))
    write(env, dict(base, t={"source": "imagefolder:" + tree, "batch_size": 4,
                             "transform": "resize(16) center_crop(16)"}))
    check_refused(env, d, "(runtime_index_bytes in [daemon]) are taken: raise runtime_index_bytes",
                  "a sample list over runtime_index_bytes")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_reload_pipelines", body)
