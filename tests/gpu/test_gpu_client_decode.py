#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A device client that decodes its GPU's JPEGs in its own process
(client/decode.h), against host delivery and against the daemon's own
decoding.

The tree and pipelines of test_gpu_decode.py (photos, files the engines do
not take, bad files substituted), decode = gpu in uint8 NHWC and in
float16 NCHW. With LOADERD_CLIENT_DECODE=1 the Python client decodes:
- its batches hold the same samples and labels as host delivery, every
  image within 1.0 level of the CPU's decode;
- the same bytes as the daemon decoding them (LOADERD_CLIENT_DECODE=0),
  and the same bytes again in another run with another worker count;
- Loader.stats() says it decoded, with images on the engines and a
  decoding thread that spent CPU time; the daemon's status line of the
  client shows its DECODEDs; the client's thread is a copying lane
  (loaderd-gpu0), not the decoding one;
- two clients on one GPU, each decoding its own, get what one alone got;
- with the read-ahead thread (LOADERD_CLIENT_READ_AHEAD=1), one client and
  two at once get the same bytes;
- a client killed in the middle of decoding leaves the daemon and another
  client whole (its staging slots come back: a client after it runs
  through two epochs);
- a decoder the client cannot open (gpu_decode_memory over the GPU's
  memory) fails the attach, naming the key and LOADERD_CLIENT_DECODE=0;
- with nvJPEG not loadable in the client (LOADERD_NVJPEG_LIBRARY pointing
  nowhere) the daemon decodes, and stats() says why.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402
import test_gpu_decode as tgd  # noqa: E402  (the tree, the batches, the comparisons)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import client_harness as ch  # noqa: E402

KILLED_CLIENT = r"""
import os, sys, time
import loaderd
x = loaderd.Loader(sys.argv[2], socket=sys.argv[1], device=0)
n = 0
while True:
    for b in x:
        n += 1
        if n == 3:
            print("decoding", flush=True)
"""

NO_NVJPEG_CLIENT = r"""
import sys
import loaderd
x = loaderd.Loader(sys.argv[2], socket=sys.argv[1], device=0)
for b in x:
    pass
st = x.stats()
print("%s\t%s" % (st["decoding"], st["decode_why_not"]))
"""


def with_decode(value, fn, *args):
    old = os.environ.get("LOADERD_CLIENT_DECODE")
    os.environ["LOADERD_CLIENT_DECODE"] = value
    try:
        return fn(*args)
    finally:
        os.environ["LOADERD_CLIENT_DECODE"] = old if old is not None else "0"


def body(env):
    gpu_harness.require_gpus()
    torch = gpu_harness.torch_cuda()
    loaderd = ch.import_loaderd()
    root = tgd.make_tree(env)
    base = {"source": "imagefolder:" + root, "batch_size": tgd.BATCH, "seed": tgd.SEED,
            "transform": tgd.TRANSFORM}
    f16 = {"dtype": "float16", "layout": "nchw", "mean": "0.485,0.456,0.406",
           "std": "0.229,0.224,0.225"}
    pipelines = {
        "gpu": dict(base, decode="gpu", layout="nhwc", max_image_bytes="256K"),
        "gpu16": dict(base, decode="gpu", max_image_bytes="256K", **f16),
    }
    cfg = gpu_harness.gpu_config(env, "cdecode", pipelines, workers=4, device_slots=4)
    d = gpu_harness.start_daemon(env, cfg)
    gpu_harness.check_delivery(d, "register")

    # The client decodes: its thread is a copying lane, its stats and status say so.
    os.environ["LOADERD_CLIENT_DECODE"] = "1"
    # a bounded wait (timeout), as a training's, waits for a batch being decoded
    x = loaderd.Loader("gpu", socket=d.socket, device=0, timeout=60)
    it = iter(x)
    for _ in range(3):
        next(it)
    st = x.stats()
    print("stats after 3 batches: %s" % st)
    check(st["decoding"], "the client does not decode: %s" % st["decode_why_not"])
    check(st["images_gpu"] > 0 and st["decode_thread_cpu_s"] > 0,
          "stats after 3 batches: %s; expected images on the engines and the thread's CPU" % st)
    check(0 <= st["decode_wait_s"] + st["decode_late_s"] <= st["wait_s"],
          "stats after 3 batches: %s; expected a wait for the decoding within the data wait" % st)
    clients = d.status()["clients"]
    check(len(clients) == 1 and clients[0]["thread"] == "loaderd-gpu0" and
          clients[0]["client_decode"] is not None,
          "status of a decoding client: %s; expected thread loaderd-gpu0 and client_decode" % clients)
    x.close()
    d.wait_status(lambda s: not s["clients"], 15, "no client left")

    client_runs, daemon_runs = {}, {}
    for name in pipelines:
        dev = tgd.batches(loaderd, d.socket, name, 0, torch)
        host = tgd.batches(loaderd, d.socket, name, "cpu", torch)
        tgd.compare(torch, dev, host, "client decode %s" % name, exact=False)
        client_runs[name] = dev
        daemon_runs[name] = with_decode("0", tgd.batches, loaderd, d.socket, name, 0, torch)
        tgd.same(dev, daemon_runs[name], "decode %s: the client's decoding against the daemon's"
                 % name)
    print("client decode: the same bytes as the daemon's decoding, for uint8 and float16")

    for k, run in enumerate(tgd.batches_two(loaderd, d.socket, "gpu", torch)):
        tgd.same(run, client_runs["gpu"], "two decoding clients at once, client %d, against one"
                 % (k + 1))
    print("two clients on one GPU, each decoding its own: what one alone got")

    os.environ["LOADERD_CLIENT_READ_AHEAD"] = "1"
    try:
        for name in pipelines:
            tgd.same(tgd.batches(loaderd, d.socket, name, 0, torch), client_runs[name],
                     "client decode %s with the read-ahead thread" % name)
        for k, run in enumerate(tgd.batches_two(loaderd, d.socket, "gpu", torch)):
            tgd.same(run, client_runs["gpu"], "two decoding clients with the read-ahead thread, "
                     "client %d, against one without" % (k + 1))
    finally:
        del os.environ["LOADERD_CLIENT_READ_AHEAD"]
    print("the read-ahead thread: the same bytes, one client and two")

    # A client killed while it decodes.
    script = env.path("killed_client.py")
    with open(script, "w") as f:
        f.write(KILLED_CLIENT)
    p = subprocess.Popen([sys.executable, script, d.socket, "gpu"], stdout=subprocess.PIPE,
                         text=True, env=gpu_harness.proc_env({"LOADERD_CLIENT_DECODE": "1"}))
    try:
        line = p.stdout.readline()
        check(line.strip() == "decoding", "the client to be killed said %r" % line)
        time.sleep(0.3)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    d.wait_status(lambda s: not s["clients"], 30, "the killed client to be gone")
    again = tgd.batches(loaderd, d.socket, "gpu", 0, torch)
    tgd.same(again, client_runs["gpu"], "a decoding client after another was killed mid-decode")
    st = d.wait_status(lambda s: not s["clients"], 15, "no client left")
    check(st["in_use"] == 0, "%d staging slots still in use after every client left, one "
          "killed while it decoded" % st["in_use"])
    print("a client killed while decoding: the daemon and the next client whole")
    d.stop()

    # Another run, two workers: the same bytes, decoded by the client.
    cfg = gpu_harness.gpu_config(env, "cdecode2", pipelines, workers=2, device_slots=2)
    d = gpu_harness.start_daemon(env, cfg)
    for name in pipelines:
        tgd.same(tgd.batches(loaderd, d.socket, name, 0, torch), client_runs[name],
                 "client decode %s with 2 workers against 4" % name)
    print("client decode: byte-identical across two runs (4 workers, then 2)")

    # Batches with no row for the GPU between ones with rows (seqs with gaps
    # among those the client decodes): a class of progressive files, which
    # the workers decode, read first, in order.
    mixed = env.path("mixed")
    mkjpeg = harness.binary("mkjpeg")
    for c, extra in (("a", ["--progressive"]), ("b", [])):
        os.makedirs(os.path.join(mixed, c))
        for i in range(24):
            subprocess.run([mkjpeg, os.path.join(mixed, c, "%02d.jpg" % i), "--seed", str(i),
                            "--width", "160", "--height", "120"] + extra, check=True)
    d.stop()
    mix = {"source": "imagefolder:" + mixed, "batch_size": 8, "seed": 3, "shuffle": "off",
           "transform": "random_resized_crop(96) hflip(0.5)", "decode": "gpu", "layout": "nhwc",
           "max_image_bytes": "256K"}
    cfg = gpu_harness.gpu_config(env, "cdecode3", {"mixed": mix}, workers=2, device_slots=4)
    d = gpu_harness.start_daemon(env, cfg)
    os.environ["LOADERD_CLIENT_DECODE"] = "1"
    dev = tgd.batches(loaderd, d.socket, "mixed", 0, torch)
    host = tgd.batches(loaderd, d.socket, "mixed", "cpu", torch)
    tgd.compare(torch, dev, host, "client decode, batches with and without rows to decode",
                exact=False)

    # nvJPEG not loadable in a client (another process: this one has it
    # loaded for good): the daemon decodes, and the client says why not.
    script = env.path("no_nvjpeg_client.py")
    with open(script, "w") as f:
        f.write(NO_NVJPEG_CLIENT)
    r = subprocess.run([sys.executable, script, d.socket, "mixed"], capture_output=True, text=True,
                       timeout=120, env=gpu_harness.proc_env({
                           "LOADERD_CLIENT_DECODE": "1",
                           "LOADERD_NVJPEG_LIBRARY": env.path("no-such-libnvjpeg.so.13")}))
    check(r.returncode == 0, "the client without nvJPEG exited %d: %s" % (r.returncode, r.stderr))
    decoding, why = r.stdout.strip().split("\t", 1)
    check(decoding == "False" and "no-such-libnvjpeg" in why,
          "without nvJPEG in the client: decoding %s, why %r; expected the daemon to decode, "
          "saying why" % (decoding, why))
    print("without nvJPEG in the client: %s" % why)

    # A decoder the training's process cannot open (more device memory than
    # the GPU has): the attach fails, saying what and what to do.
    d.stop()
    cfg = gpu_harness.gpu_config(env, "cdecode4", {"mixed": mix}, workers=2, device_slots=4,
                                 gpu_decode_memory="1T")
    d = gpu_harness.start_daemon(env, cfg)
    try:
        x = loaderd.Loader("mixed", socket=d.socket, device=0)
        next(iter(x))
        raise harness.TestFailure("a client whose decoder cannot open was not refused")
    except loaderd.LoaderdError as e:
        print("a decoder that cannot open: %s" % e)
        check("gpu_decode_memory" in str(e) and "LOADERD_CLIENT_DECODE=0" in str(e),
              "a client whose decoder cannot open: %r; expected gpu_decode_memory and what to "
              "do named" % str(e))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_client_decode", body)
