#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python package on a GPU: zero-copy torch tensors, ordered by the
caller's streams, and distributed ranks.

A raw pipeline of 16 MiB batches (256 KiB records, 64 per batch, 6 batches
an epoch), shuffled, device_slots 3, on a daemon with GPU delivery.

- Placement and zero copy: a loader with no `device` delivers to the
  current CUDA device; every tensor is on it, uint8 (64, 262144),
  contiguous, and its data_ptr() is the address of the daemon's slot as
  the C library mapped it (so torch.from_dlpack made a view, not a copy);
  over two epochs the tensors cycle through the ring's 3 slots. Every row
  equals the data file's record of its sample.
- A busy current stream: a ~1 s spin kernel is enqueued on the current
  stream before iterating. Taking two batches and their tensors does not
  wait for it (host time well under the spin, the stream still busy); then
  11 batches (more than the ring holds) are each cloned on that stream and
  released. Once the GPU is done, every clone equals the file: the
  daemon's refills waited for the released events recorded on the busy
  stream.
- The same on a side stream (torch.cuda.stream(s)), where the tensors are
  taken and used.
- Two streams: each batch is exported on an idle stream and (through
  batch.dlpack) on a busy one that clones it; the release covers both
  streams. Control: the same with batch.release(stream=idle) must give
  mismatches, else the check could not see a release on the wrong stream.
- Two processes with torch.distributed (gloo), both on this GPU, rank and
  world size taken from the process group: each gets its shard of the
  epoch (DistributedSampler's), values match, and the shards together are
  the whole dataset.
- CuPy, where installed: cupy.from_dlpack(batch.dlpack("data")) sees the
  same bytes (reported as skipped otherwise).
"""

import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import client_harness as ch  # noqa: E402

RECORD, N, BATCH, SLOTS, SEED = 256 << 10, 384, 64, 3, 8
SPIN_S = 1.0


def spin_cycles(torch, seconds):
    """torch.cuda._sleep cycles that take about `seconds` on this GPU."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return int(cycles * seconds * 1000 / max(start.elapsed_time(end), 1e-3))


def next_batch(loader, it):
    """The next batch, into the next epoch when this one ends."""
    try:
        return it, next(it)
    except StopIteration:
        it = iter(loader)
        return it, next(it)


def check_clones(clones, recs, what):
    bad = 0
    for indices, t in clones:
        host = t.cpu().numpy()
        bad += sum(1 for r, s in enumerate(indices) if host[r].tobytes() != recs[s])
    return bad


def placement(loaderd, torch, sock, recs):
    x = loaderd.Loader("train", socket=sock)
    want = "cuda:%d" % torch.cuda.current_device()
    check(x.device == want, "default device %s, want the current one, %s" % (x.device, want))
    check(x.device_uuid.startswith("GPU-"), "device_uuid %r" % x.device_uuid)
    pointers = set()
    for epoch in range(2):
        for b in x:
            t = b["data"]
            check(str(t.device) == want and t.dtype == torch.uint8 and tuple(t.shape) == (BATCH, RECORD)
                  and t.is_contiguous(), "batch %d: %s %s %s" % (b.seq, t.device, t.dtype, tuple(t.shape)))
            ptr = b._c.tensors[0].data
            check(t.data_ptr() == ptr, "batch %d: tensor at 0x%x, the slot the library mapped at 0x%x: "
                  "from_dlpack copied" % (b.seq, t.data_ptr(), ptr))
            pointers.add(ptr)
            bad = check_clones([(b.sample_indices(), t)], recs, "placement")
            check(bad == 0, "batch %d: %d rows differ from the file" % (b.seq, bad))
    check(2 <= len(pointers) <= SLOTS, "two epochs used %d distinct device addresses, the ring has %d "
          "slots" % (len(pointers), SLOTS))
    x.close()


def busy_stream(loaderd, torch, sock, recs, cycles, side):
    what = "side stream" if side else "current stream"
    stream = torch.cuda.Stream() if side else torch.cuda.current_stream()
    x = loaderd.Loader("train", socket=sock, device=0)
    time.sleep(0.5)  # the daemon fills the ring before the stream is made busy
    clones = []
    with torch.cuda.stream(stream):
        it = iter(x)
        torch.cuda._sleep(cycles)
        start = time.monotonic()
        for _ in range(2):
            b = next(it)
            clones.append((b.sample_indices(), b["data"].clone()))
        host_s = time.monotonic() - start
        still_busy = not stream.query()
        for _ in range(11):
            it, b = next_batch(x, it)
            clones.append((b.sample_indices(), b["data"].clone()))
        b.release()
    check(host_s < SPIN_S / 2 and still_busy, "%s: taking 2 batches took %.3f s of host time with a %.1f s "
          "spin queued (stream still busy: %s): the host waited for the GPU" % (what, host_s, SPIN_S, still_busy))
    torch.cuda.synchronize()
    bad = check_clones(clones, recs, what)
    check(bad == 0, "%s: %d of %d rows differ from the file: the daemon refilled slots the busy stream had "
          "yet to read" % (what, bad, len(clones) * BATCH))
    x.close()
    print("%s: 13 batches behind a %.1f s spin, host took %.3f s for the first two; all rows match" %
          (what, SPIN_S, host_s))


def two_streams(loaderd, torch, sock, recs, cycles, release_on_idle_only):
    idle, busy = torch.cuda.Stream(), torch.cuda.Stream()
    x = loaderd.Loader("train", socket=sock, device=0)
    time.sleep(0.5)
    clones = []
    with torch.cuda.stream(busy):
        torch.cuda._sleep(cycles)
    it = iter(x)
    for _ in range(11):
        it, b = next_batch(x, it)
        with torch.cuda.stream(idle):
            b["data"].sum()
        with torch.cuda.stream(busy):
            view = torch.utils.dlpack.from_dlpack(b.dlpack("data"))
            clones.append((b.sample_indices(), view.clone()))
        if release_on_idle_only:
            b.release(stream=idle.cuda_stream)
        else:
            b.release()
    torch.cuda.synchronize()
    x.close()
    return check_clones(clones, recs, "two streams")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(sock, out):
    """One rank of the torch.distributed job (run as a separate process)."""
    import torch
    import torch.distributed as dist
    import loaderd
    dist.init_process_group("gloo")
    x = loaderd.Loader("train", socket=sock)
    rows, indices, bad = torch.zeros(1), [], 0
    data_file = os.environ["LOADERD_TEST_DATA"]
    recs = ch.records(data_file, RECORD)
    for b in x:
        indices += b.sample_indices()
        bad += check_clones([(b.sample_indices(), b["data"])], recs, "rank")
        rows += b.rows
    dist.all_reduce(rows)
    with open(out, "w") as f:
        json.dump({"rank": x.rank, "world": x.world_size, "device": x.device, "indices": indices,
                   "bad": bad, "total_rows": int(rows.item())}, f)
    x.close()
    dist.destroy_process_group()


def distributed(env, sock, data):
    port = free_port()
    procs = []
    for r in range(2):
        e = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE="2",
                 LOCAL_RANK=str(r), LOADERD_TEST_DATA=data)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", sock,
                                       env.path("rank%d.json" % r)], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        check(p.returncode == 0, "torch.distributed rank %d exited %d: %s" % (r, p.returncode, err[-1500:]))
        with open(env.path("rank%d.json" % r)) as f:
            results.append(json.load(f))
    for r, res in enumerate(results):
        check(res["rank"] == r and res["world"] == 2 and res["device"] == "cuda:0" and res["bad"] == 0,
              "rank %d reported %s" % (r, {k: v for k, v in res.items() if k != "indices"}))
        check(res["total_rows"] == N, "all_reduce of the rows: %d, want %d" % (res["total_rows"], N))
    a, b = (set(res["indices"]) for res in results)
    check(not (a & b) and sorted(a | b) == list(range(N)) and len(a) == len(b) == N // 2,
          "the two ranks' shards: %d and %d samples, %d shared, %d together (want %d each, disjoint, all %d)"
          % (len(a), len(b), len(a & b), len(a | b), N // 2, N))


def cupy_view(loaderd, sock, recs):
    try:
        import cupy
    except ImportError:
        print("cupy: skipped (not installed)")
        return
    x = loaderd.Loader("train", socket=sock, device=0)
    b = next(iter(x))
    arr = cupy.from_dlpack(b.dlpack("data"))
    host = cupy.asnumpy(arr)
    bad = sum(1 for r, s in enumerate(b.sample_indices()) if host[r].tobytes() != recs[s])
    check(bad == 0 and arr.data.ptr == b._c.tensors[0].data, "cupy: %d rows differ; at 0x%x, slot 0x%x" %
          (bad, arr.data.ptr, b._c.tensors[0].data))
    x.close()
    print("cupy: a zero-copy view with the file's bytes")


def body(env):
    gpu_harness.require_gpus()
    torch = gpu_harness.torch_cuda()
    loaderd = ch.import_loaderd()
    data = env.make_raw("data.bin", N, RECORD, seed=3)
    recs = ch.records(data, RECORD)
    pipelines = {"train": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH,
                           "shuffle": "true", "seed": SEED}}
    cfg = gpu_harness.gpu_config(env, "py", pipelines, workers=4, staging_slots=6, device_slots=SLOTS)
    d = gpu_harness.start_daemon(env, cfg)
    gpu_harness.check_delivery(d, "register")

    placement(loaderd, torch, d.socket, recs)
    cycles = spin_cycles(torch, SPIN_S)
    busy_stream(loaderd, torch, d.socket, recs, cycles, side=False)
    busy_stream(loaderd, torch, d.socket, recs, cycles, side=True)
    bad = two_streams(loaderd, torch, d.socket, recs, cycles, release_on_idle_only=False)
    check(bad == 0, "two streams: %d rows differ although the release covered the busy stream" % bad)
    bad = two_streams(loaderd, torch, d.socket, recs, cycles, release_on_idle_only=True)
    check(bad > 0, "control: releasing on the idle stream only gave no mismatch: the check cannot see "
          "a release on the wrong stream")
    print("two streams: no mismatch; control (release on the idle stream only): %d rows overwritten" % bad)
    distributed(env, d.socket, data)
    cupy_view(loaderd, d.socket, recs)
    d.wait_status(lambda s: not s["clients"], 15, "no client left")
    d.stop()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        harness.run_test("test_gpu_python", body)
