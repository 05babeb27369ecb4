#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""examples/train_tokens.py as two ranks of one job (examples/ddp.py), on
the CPU, against one loaderd.

The two processes get the environment torchrun gives its ranks (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and join one gloo
process group; the model is DistributedDataParallel. Both must exit 0;
rank 1 prints nothing on stdout, rank 0 one JSON line with world 2, both
ranks' figures (rank 0 and 1, each fed by loaderd shard [rank, 2]), the
node's tokens/s (2 x steps x batch x seq_len over the longer window) and
the larger data-wait fraction. The two attach as rank 0 and rank 1 of
world 2 (the daemon's log; status, when it is looked at in time, agrees). A rank given
--device cuda under torchrun-style launch is refused with the reason.

Skipped (77) when torch cannot be imported, and in a sanitizer build.
"""

import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example_harness as eh  # noqa: E402
import harness  # noqa: E402  (example_harness put tests/integration on the path)
from harness import check  # noqa: E402

EXAMPLE = eh.example("train_tokens.py")
TOKENS, VOCAB, SEQ, BATCH, STEPS = 40000, 500, 32, 8, 12


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(env, args, world=2):
    port = str(free_port())
    procs = []
    for r in range(world):
        e = dict(os.environ, OMP_NUM_THREADS="1", RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                 LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        p = subprocess.Popen([sys.executable, EXAMPLE] + args, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        env.procs.append(p)
        procs.append(p)
    return procs


def body(env):
    eh.require_modules("torch")
    path = env.make_tokens("tokens.bin", TOKENS, "uint16", seed=8, vocab=VOCAB)
    d = env.start_daemon(env.config("ddp", {"lm": {
        "source": "tokens:" + path, "token_dtype": "uint16", "token_output": "int64", "seq_len": SEQ,
        "batch_size": BATCH}}, gpu="off"))
    args = ["--device", "cpu", "--socket", d.socket, "--pipeline", "lm", "--vocab", "512",
            "--d-model", "32", "--layers", "1", "--heads", "2", "--steps", str(STEPS), "--warmup", "2",
            "--json"]
    procs = spawn_ranks(env, args)

    # While they train, status shows them (a rank may finish before a
    # look at the status sees it on a loaded machine: the daemon's log
    # says how each attached, whatever the timing).
    seen = set()
    deadline = time.monotonic() + eh.RUN_TIMEOUT_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs) and len(seen) < 2:
        st = d.status()
        seen |= {(c["rank"], c["world"]) for c in st["clients"] if c["pipeline"] == "lm"}
        time.sleep(0.05)
    out = []
    for r, p in enumerate(procs):
        rc, stdout, stderr = harness.finish(p, eh.RUN_TIMEOUT_S, "rank %d" % r)
        check(rc == 0, "rank %d exited %d:\n%s" % (r, rc, stderr[-4000:]))
        out.append(stdout)
    check(seen <= {(0, 2), (1, 2)}, "status showed the clients as (rank, world) %s; expected rank 0 and 1 "
          "of world 2" % sorted(seen))
    with open(d.log_path, errors="replace") as f:
        attached = sorted((int(r), int(w)) for r, w in re.findall(
            r'attached to pipeline "lm" as rank (\d+) of (\d+)', f.read()))
    check(attached == [(0, 2), (1, 2)], "the daemon's log says the clients attached as (rank, world) %s; "
          "expected rank 0 and 1 of world 2" % attached)
    check(out[1] == "", "rank 1 printed on stdout: %r" % out[1])
    f = eh.figures(subprocess.CompletedProcess([], 0, out[0], ""), "rank 0")
    check(f.get("world") == 2 and [x["rank"] for x in f.get("ranks", [])] == [0, 1],
          "rank 0's figures: world %r, ranks %r" % (f.get("world"), f.get("ranks")))
    check([x["shard"] for x in f["ranks"]] == [[0, 2], [1, 2]],
          "the ranks' loaderd shards are %s, expected [0, 2] and [1, 2]" % [x["shard"] for x in f["ranks"]])
    longest = max(x["seconds"] for x in f["ranks"])
    node = 2 * STEPS * BATCH * SEQ / longest
    check(abs(f.get("node_tokens_per_s", 0) - node) <= 0.01 * node,
          "node_tokens_per_s %r, expected %.1f (2 x %d x %d x %d over %.4f s)"
          % (f.get("node_tokens_per_s"), node, STEPS, BATCH, SEQ, longest))
    check(f.get("data_wait_fraction_max") == max(x["data_wait_fraction"] for x in f["ranks"]),
          "data_wait_fraction_max %r is not the larger rank's" % f.get("data_wait_fraction_max"))
    print("two ranks: node %.1f tokens/s; %s" % (f["node_tokens_per_s"], "; ".join(
        "rank %d shard %s %.1f tokens/s" % (x["rank"], x["shard"], x["tokens_per_s"]) for x in f["ranks"])))

    bad = [a if a != "cpu" else "cuda:1" for a in args]
    procs = spawn_ranks(env, bad)
    for r, p in enumerate(procs):
        rc, _, stderr = harness.finish(p, eh.RUN_TIMEOUT_S, "rank %d with --device cuda:1" % r)
        check(rc != 0 and "leave --device out" in stderr, "rank %d with --device cuda:1 exited %d:\n%s"
              % (r, rc, stderr[-2000:]))
    check(not d.status()["clients"], "clients still attached after the ranks exited")
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_example_ddp", body)
