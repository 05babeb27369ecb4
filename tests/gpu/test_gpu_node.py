#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One daemon feeds every GPU of the node: N ranks, one per GPU (N = every
GPU `loaderd --version` lists; skipped with fewer than 2).

Every rank is a `loaderctl consume --device 0` with CUDA_VISIBLE_DEVICES
set to its own GPU's ordinal, as a torchrun job that gives each rank one
visible device does; the daemon sees all of them and must resolve each
rank's "device 0" to that rank's GPU by UUID.

  (a) a raw pipeline, one epoch at world N: status gives every rank its
      own GPU's UUID and lists each GPU with one client and its ring's
      device memory; the ranks' dumps cover each sample exactly once (plus
      the sampler's padding) with the file's CRCs; afterwards every GPU's
      device memory is back to none.
  (b) an image pipeline with `decode = gpu`, one epoch at world N: each
      GPU's JPEG engines decode its rank's images (status: images_gpu on
      every GPU), coverage exactly once, and every sample's bytes equal
      the same sample's from one rank on GPU 0: the engines of different
      GPUs decode identically. Skipped when status reports no nvJPEG.
  (c) resume: the N ranks consume K batches and print one position token;
      all ranks of world 1 and of world N + 1 (ranks placed on the GPUs in
      turn) resume from it, and with the K batches already consumed every
      sample is seen once per epoch.
  (d) a rank dies: the N ranks resume from that token again, rank 1 is
      killed (SIGKILL) mid-epoch; the other ranks keep receiving batches,
      status drops the dead client and frees its ring on its GPU (device
      memory back to none there while the others stream), and then the
      job restarts all N ranks from the token, as an elastic restart from
      the last checkpoint does: their dumps equal (c)'s world-N resume, so
      nothing was lost or changed by the death.
"""

import collections
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import TestSkip, check  # noqa: E402

RECORD, N_RAW, BATCH, SEED, K = 16 << 10, 1000, 16, 41, 6
CLASSES, PER_CLASS, SIZE = 4, 40, 64
VISIBLE = "CUDA_VISIBLE_DEVICES"


def spawn_rank(env, d, pipeline, rank, world, gpu, what, epochs=None, batches=None, resume=None,
               step_ms=None):
    """A rank: loaderctl consume on "device 0" with only GPU `gpu` visible.
    Returns (process, dump path)."""
    dump = env.path("%s-%d-of-%d.dump" % (what, rank, world))
    extra = ["--rank", str(rank), "--world", str(world), "--name", "%s-rank%d" % (what, rank)]
    if resume:
        extra += ["--resume", resume]
    if step_ms:
        extra += ["--step-ms", str(step_ms)]
    p = gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
        d.socket, pipeline, device="0", epochs=epochs, batches=batches, dump=dump, extra=extra),
        overrides={VISIBLE: str(gpu)})
    return p, dump


def finish_ranks(ranks, what, timeout_s=120):
    """[(summary, token, rows)] of ranks that must all exit 0."""
    out = []
    for r, (p, dump) in enumerate(ranks):
        rc, stdout, stderr = harness.finish(p, timeout_s, "%s rank %d" % (what, r))
        check(rc == 0, "%s rank %d exited %d\nstdout: %s\nstderr: %s" % (what, r, rc, stdout, stderr))
        summary, token = harness.parse_consume_output(stdout)
        out.append((summary, token, harness.read_dump(dump)))
    return out


def check_once(samples, n, world, what, already=0):
    """Every sample of an epoch seen, and no more deliveries than the
    sampler's padding for `world` ranks over the n - already left."""
    counts = collections.Counter(samples)
    missing = n - len([s for s in counts if 0 <= s < n])
    check(missing == 0 and len(counts) == n, "%s: %d of %d samples never delivered" % (what, missing, n))
    left = n - already
    pad = -(-left // world) * world - left
    check(len(samples) == n + pad and max(counts.values()) <= 2,
          "%s: %d deliveries for %d samples, expected %d (padding %d)" % (what, len(samples), n, n + pad, pad))


def streaming_status(d, pids, what):
    def ready(st):
        cs = [gpu_harness.client_by_pid(st, pid) for pid in pids]
        return all(c is not None and c["gpu"] is not None and c["sent"] > 0 for c in cs)
    return d.wait_status(ready, 60, "%s: every rank to stream on its GPU" % what)


def raw_epoch(env, d, gpus, crcs):
    n = len(gpus)
    ranks = [spawn_rank(env, d, "raw", r, n, r, "raw", epochs=1, step_ms=50) for r in range(n)]
    st = streaming_status(d, [p.pid for p, _ in ranks], "raw")
    for r, (p, _) in enumerate(ranks):
        c = gpu_harness.client_by_pid(st, p.pid)
        check(c["gpu"] == gpus[r]["uuid"], "rank %d (%s=%d, --device 0) streams on %s, not its GPU %s"
              % (r, VISIBLE, r, c["gpu"], gpus[r]["uuid"]))
        check(c["rank"] == r and c["world"] == n, "status gives rank %d rank %d world %d"
              % (r, c["rank"], c["world"]))
    for g in gpus:
        s = gpu_harness.gpu_by_uuid(st, g["uuid"])
        check(s is not None and s["clients"] == 1 and s["device_bytes"] > 0,
              "status lists GPU %s as %s; expected one client and its ring" % (g["uuid"], s))
    print("raw: %s" % "; ".join("rank %d on %s, %d device bytes" % (r, g["uuid"], gpu_harness.gpu_by_uuid(
        st, g["uuid"])["device_bytes"]) for r, g in enumerate(gpus)))
    res = finish_ranks(ranks, "raw epoch")
    samples = []
    for r, (summary, _, rows) in enumerate(res):
        check(summary["device"] == gpus[r]["uuid"], "rank %d's summary says device %s, expected %s"
              % (r, summary["device"], gpus[r]["uuid"]))
        harness.check_dump_crcs(rows, crcs, "raw rank %d" % r)
        samples += [s for e, _, s, _ in rows if e == 0]
    check_once(samples, N_RAW, n, "raw epoch at world %d" % n)
    st = d.wait_status(lambda s: not s["clients"] and all(g["device_bytes"] == 0 for g in s["gpus"]), 15,
                       "the ranks' rings to be freed")
    print("raw: one epoch over %d ranks, each sample once, every ring freed" % n)


def image_epoch(env, d, gpus):
    n = len(gpus)
    st = d.status()
    if st["decode_library"] != "nvJPEG":
        print("image: skipped: status says decode: (%s)" % st["decode_library"])
        return
    ref = spawn_rank(env, d, "img", 0, 1, 0, "img-ref", epochs=1)
    (_, _, ref_rows), = finish_ranks([ref], "image reference")
    ref_crc = {s: crc for e, _, s, crc in ref_rows}
    ranks = [spawn_rank(env, d, "img", r, n, r, "img", epochs=1) for r in range(n)]
    samples = []
    for r, (_, _, rows) in enumerate(finish_ranks(ranks, "image epoch")):
        for e, b, s, crc in rows:
            check(ref_crc.get(s) == crc, "image rank %d batch %d sample %d: CRC %08x, but %08x from one "
                  "rank on GPU 0" % (r, b, s, crc, ref_crc.get(s, 0)))
            samples.append(s)
    total = CLASSES * PER_CLASS
    check_once(samples, total, n, "image epoch at world %d" % n)
    st = d.status()
    by_gpu = {x["gpu"]: x for x in st["decode"] if x["pipeline"] == "img"}
    for g in gpus:
        x = by_gpu.get(g["index"])
        check(x is not None and x["images_gpu"] > 0, "GPU %d's engines decoded no image of pipeline img: %s"
              % (g["index"], st["decode"]))
    print("image: one epoch over %d ranks, every sample equal to GPU 0's decode; images_gpu %s"
          % (n, ", ".join("GPU %d %d" % (k, v["images_gpu"]) for k, v in sorted(by_gpu.items()))))


def first_part(env, d, n, crcs):
    ranks = [spawn_rank(env, d, "raw", r, n, r, "first", batches=K) for r in range(n)]
    res = finish_ranks(ranks, "first %d batches" % K)
    tokens = {token for _, token, _ in res}
    check(len(tokens) == 1, "the ranks print different positions: %s" % sorted(tokens))
    consumed = []
    for r, (_, _, rows) in enumerate(res):
        harness.check_dump_crcs(rows, crcs, "first part rank %d" % r)
        consumed += [s for _, _, s, _ in rows]
    check(len(consumed) == K * BATCH * n, "the first part delivered %d rows, expected %d"
          % (len(consumed), K * BATCH * n))
    return tokens.pop(), consumed


def resume_world(env, d, gpus, token, consumed, world, crcs, what):
    ranks = [spawn_rank(env, d, "raw", r, world, r % len(gpus), what, epochs=1, resume=token)
             for r in range(world)]
    rest, texts = [], []
    for r, (summary, _, rows) in enumerate(finish_ranks(ranks, what)):
        harness.check_dump_crcs(rows, crcs, "%s rank %d" % (what, r))
        rest += [s for e, _, s, _ in rows if e == 0]
        texts.append(harness.read_text(ranks[r][1]))
    check_once(consumed + rest, N_RAW, world, "%s: first part and the rest" % what, already=len(consumed))
    print("%s: the rest of the epoch over %d ranks, each sample once" % (what, world))
    return texts


def killed_rank(env, d, gpus, token, expected_texts):
    n = len(gpus)
    # 100 ms a batch, 4 epochs: the survivors stream for about 10 s
    ranks = [spawn_rank(env, d, "raw", r, n, r, "doomed", epochs=4, resume=token, step_ms=100)
             for r in range(n)]
    pids = [p.pid for p, _ in ranks]
    streaming_status(d, pids, "before the kill")
    victim, victim_gpu = ranks[1][0], gpus[1]["uuid"]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    killed_at = time.monotonic()
    others = [r for r in range(n) if r != 1]

    def freed(st):
        return (gpu_harness.client_by_pid(st, victim.pid) is None
                and gpu_harness.gpu_by_uuid(st, victim_gpu)["device_bytes"] == 0)
    st = d.wait_status(freed, 15, "the killed rank's client to go and its ring on %s to be freed" % victim_gpu)
    freed_s = time.monotonic() - killed_at
    for r in others:
        c = gpu_harness.client_by_pid(st, pids[r])
        check(c is not None, "rank %d is gone from status after rank 1 was killed" % r)
    before = {r: len(gpu_harness.read_complete_dump_lines(ranks[r][1])) for r in others}
    time.sleep(1.5)
    for r in others:
        grown = len(gpu_harness.read_complete_dump_lines(ranks[r][1])) - before[r]
        check(grown >= 5 * BATCH, "rank %d received %d rows in the 1.5 s after rank 1's ring was freed "
              "(at 100 ms a batch): stalled" % (r, grown))
    for r in others:
        ranks[r][0].send_signal(signal.SIGTERM)
        harness.finish(ranks[r][0], 30, "rank %d after SIGTERM" % r)
    d.wait_status(lambda s: not s["clients"] and all(g["device_bytes"] == 0 for g in s["gpus"]), 15,
                  "every ring to be freed")
    print("rank 1 killed: its ring on %s freed within %.2f s; the other ranks kept receiving batches"
          % (victim_gpu, freed_s))
    again = [spawn_rank(env, d, "raw", r, n, r, "restarted", epochs=1, resume=token) for r in range(n)]
    finish_ranks(again, "restarted job")
    texts = [harness.read_text(dump) for _, dump in again]
    for r, (text, want) in enumerate(zip(texts, expected_texts)):
        check(text == want, "the restarted job's rank %d received other batches than a resume that was "
              "never interrupted" % r)
    print("restarted job: all %d ranks from the checkpoint's token, the same batches as an uninterrupted "
          "resume" % n)


def body(env):
    gpus = gpu_harness.require_gpus({VISIBLE: None})
    if len(gpus) < 2:
        raise TestSkip("one daemon for several GPUs needs 2 GPUs or more; loaderd --version lists %d"
                       % len(gpus))
    n = len(gpus)
    data = env.make_raw("data.bin", N_RAW, RECORD, seed=17)
    crcs = harness.raw_sample_crcs(data, RECORD)
    root = gpu_harness.make_jpeg_tree(env, CLASSES, PER_CLASS, 300, 120, 300)
    pipelines = {
        "raw": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH, "seed": SEED},
        "img": {"source": "imagefolder:" + root, "batch_size": BATCH, "seed": SEED,
                "transform": "random_resized_crop(%d) hflip(0.5)" % SIZE, "layout": "nhwc",
                "decode": "gpu", "max_image_bytes": "256K"},
    }
    cfg = gpu_harness.gpu_config(env, "node", pipelines, workers=4, device_slots=4)
    d = gpu_harness.start_daemon(env, cfg, overrides={VISIBLE: None})
    gpu_harness.check_delivery(d, "register")
    raw_epoch(env, d, gpus, crcs)
    image_epoch(env, d, gpus)
    token, consumed = first_part(env, d, n, crcs)
    print("first part: %d batches on each of %d ranks, position %s" % (K, n, token))
    resume_world(env, d, gpus, token, consumed, 1, crcs, "resume at world 1")
    resume_world(env, d, gpus, token, consumed, n + 1, crcs, "resume at world %d" % (n + 1))
    texts = resume_world(env, d, gpus, token, consumed, n, crcs, "resume at world %d" % n)
    killed_rank(env, d, gpus, token, texts)
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_node", body)
