#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A client names its GPU as its own CUDA_VISIBLE_DEVICES shows it, whatever
the daemon's is: the daemon must resolve it by UUID, never by ordinal.

  (a) daemon with CUDA_VISIBLE_DEVICES unset; client with
      CUDA_VISIBLE_DEVICES=<uuid of GPU 0>, `--device 0`;
  (b) daemon with CUDA_VISIBLE_DEVICES=<that uuid>; client with it unset,
      `--device <uuid>`;
  (c) on a machine with 2 GPUs or more: daemon with
      CUDA_VISIBLE_DEVICES=1,0; client with it unset, `--device 1`.

The GPU the client means is taken from `loaderd --version` run with the
client's environment. While the client streams, status must give it that
GPU (and list that GPU); its summary's device must be that UUID; its dump
(2 epochs) must cover each sample once per epoch with the file's CRCs, and
be the same in every case. ("Unset" means unset for the whole test: a
CUDA_VISIBLE_DEVICES inherited from the caller is removed.)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

RECORD, N, BATCH, EPOCHS = 16 << 10, 208, 16, 2  # 256 KiB batches, 13 per epoch
VISIBLE = "CUDA_VISIBLE_DEVICES"
UNSET = {VISIBLE: None}


def shown(overrides):
    value = overrides.get(VISIBLE)
    return "unset" if value is None else value


def run_case(env, label, pipelines, crcs, daemon_env, client_env, device, ordinal):
    """One daemon and one client; the client means its CUDA ordinal
    `ordinal`. Returns the dump's text."""
    client_gpus = gpu_harness.require_gpus(client_env)
    check(ordinal < len(client_gpus), "(%s) the client's environment shows %d GPUs, no ordinal %d"
          % (label, len(client_gpus), ordinal))
    want = client_gpus[ordinal]["uuid"]

    d = gpu_harness.start_daemon(env, gpu_harness.gpu_config(env, "vis-" + label, pipelines),
                                 overrides=daemon_env)
    dump = env.path("vis-%s.dump" % label)
    p = gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
        d.socket, "train", device=device, epochs=EPOCHS, dump=dump,
        extra=["--step-ms", "50", "--name", "vis-" + label]), overrides=client_env)

    def attached(st):
        c = gpu_harness.client_by_pid(st, p.pid)
        return c is not None and c["gpu"] is not None
    st = d.wait_status(attached, 30, "(%s) the client to stream on a GPU" % label)
    c = gpu_harness.client_by_pid(st, p.pid)
    check(c["gpu"] == want, "(%s) status gives the client gpu %s; with %s %s, --device %s means %s"
          % (label, c["gpu"], VISIBLE, shown(client_env), device, want))
    g = gpu_harness.gpu_by_uuid(st, want)
    check(g is not None and g["clients"] >= 1, "(%s) status does not list %s with a client: %s"
          % (label, want, st["gpus"]))

    rc, out, err = harness.finish(p, 60, "(%s) consume" % label)
    check(rc == 0, "(%s) consume exited %d\nstdout: %s\nstderr: %s" % (label, rc, out, err))
    summary, _ = harness.parse_consume_output(out)
    check(summary["device"] == want, "(%s) summary says device=%s, expected %s"
          % (label, summary["device"], want))
    rows = harness.read_dump(dump)
    gpu_harness.check_epochs(rows, EPOCHS, N, "(%s)" % label)
    harness.check_dump_crcs(rows, crcs, "(%s)" % label)
    print("(%s) daemon %s %s, client %s %s, --device %s: GPU %s"
          % (label, VISIBLE, shown(daemon_env), VISIBLE, shown(client_env), device, want))
    d.wait_status(lambda s: not s["clients"], 15, "(%s) the client to be gone" % label)
    d.stop()
    return harness.read_text(dump)


def body(env):
    gpus = gpu_harness.require_gpus(UNSET)
    uuid0 = gpus[0]["uuid"]
    data = env.make_raw("data.bin", N, RECORD, seed=41)
    crcs = harness.raw_sample_crcs(data, RECORD)
    pipelines = {"train": {"source": "raw:" + data, "record_bytes": RECORD, "batch_size": BATCH,
                           "seed": 3}}

    dumps = [run_case(env, "a", pipelines, crcs, UNSET, {VISIBLE: uuid0}, "0", 0)]
    dumps.append(run_case(env, "b", pipelines, crcs, {VISIBLE: uuid0}, UNSET, uuid0, 0))
    if len(gpus) >= 2:
        dumps.append(run_case(env, "c", pipelines, crcs, {VISIBLE: "1,0"}, UNSET, "1", 1))
    else:
        print("(c) not run: this machine has one GPU")
    check(all(x == dumps[0] for x in dumps), "the dumps differ between the cases")


if __name__ == "__main__":
    harness.run_test("test_gpu_visible_devices", body)
