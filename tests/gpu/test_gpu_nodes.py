#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two nodes on one machine of 4 GPUs, with device delivery: the job of
tests/examples/test_example_nodes.py (2 nodes x 2 ranks, gloo,
examples/epoch_check.py) with `--device cuda`. Node k is GPUs 2k and
2k + 1: its daemon and its ranks see only those (CUDA_VISIBLE_DEVICES), as
on two real nodes, and each rank takes cuda:LOCAL_RANK.

  (a) one epoch, every sample exactly once across the two nodes; each
      daemon served ranks 2k and 2k + 1 of world 4, and put each on its
      own GPU (its log names the GPU by UUID: node k's two, as many
      clients on each);
  (b) 3 batches a rank on 2 nodes, resumed on 1 node of 2 ranks: every
      sample once.

Skipped (77) with fewer than 4 GPUs, without torch, and in a sanitizer
build.
"""

import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
import test_example_nodes as nodes_test  # noqa: E402
from harness import TestSkip, check  # noqa: E402


def attached_gpus(d):
    """The GPU UUIDs the daemon's log says device clients attached on."""
    with open(d.log_path, errors="replace") as f:
        return re.findall(r"attaching to pipeline \"lm\" as rank \d+ of \d+ on GPU (GPU-[0-9a-f-]+)",
                          f.read())


def body(env):
    gpus = gpu_harness.require_gpus()
    if len(gpus) < 4:
        raise TestSkip("needs 4 GPUs (2 nodes of 2 ranks, a GPU each); this machine has %d" % len(gpus))
    launcher = nodes_test.pick_launcher()
    pipes = nodes_test.pipelines(env)
    visible = ["%d,%d" % (2 * k, 2 * k + 1) for k in range(2)]
    nodes = [gpu_harness.start_daemon(env, gpu_harness.gpu_config(env, "node%d" % k, pipes),
                                      overrides={"CUDA_VISIBLE_DEVICES": visible[k]})
             for k in range(2)]
    before = [attached_gpus(d) for d in nodes]
    check(before == [[], []], "clients attached before the job: %s" % before)
    nodes_test.run(env, nodes, launcher, ["--device", "cuda"], visible)
    # every job's ranks of node k: one on each of its GPUs
    for k, d in enumerate(nodes):
        got = collections.Counter(attached_gpus(d))
        mine = sorted(g["uuid"] for g in gpus[2 * k:2 * k + 2])
        check(sorted(got) == mine and got[mine[0]] == got[mine[1]],
              "node %d's daemon put its clients on GPUs %s; expected as many on each of %s"
              % (k, dict(got), mine))
    print("each node's daemon delivered to its own two GPUs, one rank each")
    for d in nodes:
        d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_nodes", body)
