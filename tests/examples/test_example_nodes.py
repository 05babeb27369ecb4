#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""examples/epoch_check.py across two nodes: two daemons on this machine,
one per "node", and a torchrun job of 2 nodes x 2 ranks (static
rendezvous on localhost, gloo), each node's ranks attached to their own
node's daemon. Where this torch's torchrun cannot start (torch 1.13 under
Python 3.11), each rank is started with the environment torchrun would
give it (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT).

(a) One epoch of a token pipeline (samples dividing evenly over the 4
    ranks' batches): the job saw every sample exactly once, each daemon
    served two clients, and they were ranks 0-1 and 2-3 of world 4.
(b) The same job stopped after 3 batches a rank, its position saved; a job
    of one node and 2 ranks (world 2) resumes there on the first daemon
    and finishes the epoch: the two jobs together saw every sample exactly
    once (the rest of the epoch re-sharded over the new world).

Skipped (77) when torch cannot be imported, and in a sanitizer build.
tests/gpu/test_gpu_nodes.py runs the same job with device delivery, each
node's daemon and ranks on GPUs of their own.
"""

import json
import os
import re
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example_harness as eh  # noqa: E402
import harness  # noqa: E402  (example_harness put tests/integration on the path)
from harness import check  # noqa: E402

EXAMPLE = eh.example("epoch_check.py")
SEQ, BATCH, WORLD = 16, 4, 4
SAMPLES = 96  # divides by WORLD x BATCH: no padding, no tail


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_works():
    """Whether this torch's torchrun starts a process (torch 1.13 under
    Python 3.11 fails in its own argument handling before any rank runs)."""
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
                        "1", "--master_port", str(free_port()), "-m", "platform"],
                       capture_output=True, text=True, timeout=120)
    return r.returncode == 0


def node(env, daemon, nnodes, node_rank, port, args, launcher, visible=None):
    """One node's 2 ranks, attached to `daemon`: started by torchrun, or
    (launcher "env") each rank started here with the environment torchrun
    gives it. visible: the node's GPUs (CUDA_VISIBLE_DEVICES), or None."""
    e = dict(os.environ, OMP_NUM_THREADS="1", LOADERD_SOCKET=daemon.socket)
    if visible is not None:
        e["CUDA_VISIBLE_DEVICES"] = visible
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--node_rank",
               str(node_rank), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
               str(port), EXAMPLE] + args
        ranks = [(cmd, e)]
    else:
        ranks = [([sys.executable, EXAMPLE] + args,
                  dict(e, RANK=str(2 * node_rank + k), LOCAL_RANK=str(k), WORLD_SIZE=str(2 * nnodes),
                       LOCAL_WORLD_SIZE="2", GROUP_RANK=str(node_rank), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))) for k in range(2)]
    procs = []
    for cmd, environ in ranks:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=environ)
        env.procs.append(p)
        procs.append(p)
    return procs


def job(env, daemons, args, what, launcher, visible=None):
    """A job of len(daemons) nodes (visible[k]: node k's GPUs); rank 0's
    JSON line."""
    port = free_port()
    procs = [p for k, d in enumerate(daemons)
             for p in node(env, d, len(daemons), k, port, args, launcher, visible[k] if visible else None)]
    out = []
    for k, p in enumerate(procs):
        rc, stdout, stderr = harness.finish(p, eh.RUN_TIMEOUT_S, "%s: process %d" % (what, k))
        check(rc == 0, "%s: process %d exited %d:\n%s\n%s" % (what, k, rc, stdout, stderr[-4000:]))
        out.append(stdout)
    lines = [l for l in out[0].splitlines() if l.startswith("{")]
    check(len(lines) == 1 and not any(l.startswith("{") for o in out[1:] for l in o.splitlines()),
          "%s: expected one JSON line, from rank 0: %r" % (what, out))
    return json.loads(lines[0])


def served_ranks(d):
    """(rank, world) of each client the daemon's log says attached."""
    with open(d.log_path, errors="replace") as f:
        return sorted((int(r), int(w)) for r, w in re.findall(r"rank (\d+) of (\d+)", f.read()))


def pipelines(env):
    path = env.make_tokens("tokens.bin", SAMPLES * SEQ + 1, "uint16", seed=5, vocab=300)
    return {"lm": {"source": "tokens:" + path, "token_dtype": "uint16", "seq_len": SEQ,
                   "batch_size": BATCH, "seed": 11}}


def pick_launcher():
    eh.require_modules("torch")
    if torchrun_works():
        return "torchrun"
    print("this torch's torchrun fails before starting a rank: each rank is started with the "
          "environment torchrun gives it")
    return "env"


def run(env, nodes, launcher, extra=(), visible=None):
    """(a) and (b) on the two started daemons `nodes`; extra: epoch_check's
    further arguments (--device cuda)."""
    a = ["--pipeline", "lm"] + list(extra)
    # (a)
    f = job(env, nodes, a, "one epoch on 2 nodes", launcher, visible)
    check(f["world"] == WORLD and f["samples"] == SAMPLES and f["duplicates"] == 0 and f["missing"] == 0
          and f["distinct"] == SAMPLES, "2 nodes x 2 ranks, one epoch: %s" % f)
    for k, d in enumerate(nodes):
        ranks = served_ranks(d)
        want = [(2 * k, WORLD), (2 * k + 1, WORLD)]
        check(ranks == want, "node %d's daemon served ranks %s; expected %s" % (k, ranks, want))
    print("2 nodes x 2 ranks: %d samples, each once" % f["distinct"])

    # (b)
    pos, seen = env.path("position.json"), env.path("seen.json")
    f = job(env, nodes, a + ["--batches", "3", "--save", pos, "--seen", seen],
            "3 batches a rank on 2 nodes", launcher, visible)
    check(f["seen"] == 3 * BATCH * WORLD and f["duplicates"] == 0, "the first part: %s" % f)
    f = job(env, nodes[:1], a + ["--resume", pos, "--seen", seen], "the rest on 1 node", launcher,
            visible[:1] if visible else None)
    check(f["world"] == 2 and f["duplicates"] == 0 and f["missing"] == 0 and f["seen"] == SAMPLES,
          "resumed on 1 node x 2 ranks after 3 batches of 2 nodes: %s" % f)
    print("3 batches on 2 nodes, the rest on 1 node of 2 ranks: %d samples, each once (%s)"
          % (f["seen"], f["positions"][0]))


def body(env):
    launcher = pick_launcher()
    pipes = pipelines(env)
    nodes = [env.start_daemon(env.config("node%d" % k, pipes, gpu="off")) for k in range(2)]
    run(env, nodes, launcher)
    for d in nodes:
        d.stop()


if __name__ == "__main__":
    harness.run_test("test_example_nodes", body)
