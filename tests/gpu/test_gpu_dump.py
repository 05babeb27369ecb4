#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Device delivery is byte-exact: the same bytes as host delivery.

Three pipelines: raw records (1 MiB batches), uint16 tokens delivered as
uint16 (256 KiB batches) and the same tokens widened to int32 (512 KiB);
and the first two again with `direct = on` (device batches straight from
the page-locked file), whose dumps must match theirs: same file, same
seed, so the same batches.
For each pin mode (a daemon with `pin = register`, then one with
`pin = copy`; `gpu = required` so neither can fall back to host delivery),
each pipeline is consumed for 2 epochs with `--device 0 --dump` and with
host delivery. Every dump must cover each sample once per epoch with the
CRC of its bytes in the file, and all four dumps of a pipeline (device and
host, both pin modes, direct or not) must be identical; the daemon log
must say each direct file was locked. A device summary must name the
UUID `loaderd --version` gives GPU 0; a host one, `host`. When the
consumers are gone, the GPU's device_bytes must be back to 0.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

RAW_RECORD, RAW_N, RAW_BATCH = 32 << 10, 400, 32  # 1 MiB batches, 13 per epoch (the last short)
TOK_SEQ, TOK_N, TOK_BATCH = 1023, 600, 128  # 256 KiB (uint16) / 512 KiB (int32) batches
EPOCHS = 2
PINS = ("register", "copy")


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]

    raw = env.make_raw("raw.bin", RAW_N, RAW_RECORD, seed=11)
    # A few tokens past the last whole window, which no sample may include.
    tok = env.make_tokens("tok.bin", TOK_N * TOK_SEQ + 1 + 300, "uint16", seed=12)
    tok_keys = {"source": "tokens:" + tok, "token_dtype": "uint16", "seq_len": TOK_SEQ,
                "batch_size": TOK_BATCH, "seed": 6}
    pipelines = {
        "raw": {"source": "raw:" + raw, "record_bytes": RAW_RECORD, "batch_size": RAW_BATCH,
                "seed": 5},
        "tok16": dict(tok_keys),
        "tok32": dict(tok_keys, token_output="int32"),
    }
    # name -> the pipeline whose dumps it must equal
    same_as = {name: name for name in pipelines}
    for name in ("raw", "tok16"):
        pipelines[name + "_direct"] = dict(pipelines[name], direct="on")
        same_as[name + "_direct"] = name
    # pipeline -> (samples, bytes per sample, CRC of every sample)
    expected = {
        "raw": (RAW_N, RAW_RECORD, harness.raw_sample_crcs(raw, RAW_RECORD)),
        "tok16": (TOK_N, (TOK_SEQ + 1) * 2, harness.token_sample_crcs(tok, 2, 2, TOK_SEQ)),
        "tok32": (TOK_N, (TOK_SEQ + 1) * 4, harness.token_sample_crcs(tok, 2, 4, TOK_SEQ)),
    }
    for name, base in same_as.items():
        expected[name] = expected[base]
    for name, (n, _, crcs) in expected.items():
        check(len(crcs) == n, "reference for %s has %d samples, expected %d" % (name, len(crcs), n))

    dumps = {name: [] for name in set(same_as.values())}  # base pipeline -> [(what, dump text)]
    for pin in PINS:
        cfg = gpu_harness.gpu_config(env, "dump-" + pin, pipelines, pin=pin, workers=4)
        d = gpu_harness.start_daemon(env, cfg)
        st = gpu_harness.check_delivery(d, pin)
        check(gpu_harness.gpu_by_uuid(st, uuid) is not None,
              "status lists GPUs %s, not %s" % ([g["uuid"] for g in st["gpus"]], uuid))
        log = harness.read_text(d.log_path)
        for name in ("raw_direct", "tok16_direct"):
            check('pipeline "%s": direct device delivery from' % name in log,
                  "pin %s: the daemon log does not say %s's file was locked:\n%s" % (pin, name, log))
        for name in pipelines:
            n, row_bytes, crcs = expected[name]
            for device in ("0", None):
                what = "%s, pin %s, %s" % (name, pin, "device 0" if device else "host")
                dump = env.path("%s-%s-%s.dump" % (name, pin, "device" if device else "host"))
                summary, rows = gpu_harness.consume(env, d.socket, name, dump, device=device,
                                                    epochs=EPOCHS)
                want = uuid if device else "host"
                check(summary["device"] == want, "%s: summary says device=%s, expected %s"
                      % (what, summary["device"], want))
                check(summary["epochs"] == EPOCHS and summary["samples"] == EPOCHS * n
                      and summary["bytes"] == EPOCHS * n * row_bytes,
                      "%s: summary %s; expected %d epochs, %d samples, %d bytes"
                      % (what, summary, EPOCHS, EPOCHS * n, EPOCHS * n * row_bytes))
                gpu_harness.check_epochs(rows, EPOCHS, n, what)
                harness.check_dump_crcs(rows, crcs, what)
                dumps[same_as[name]].append((what, harness.read_text(dump)))
        d.wait_status(lambda s: not s["clients"] and all(g["device_bytes"] == 0 for g in s["gpus"]),
                      15, "no client and every GPU's device_bytes 0 (pin %s)" % pin)
        d.stop()

    for texts in dumps.values():
        gpu_harness.check_same_dumps(texts)


if __name__ == "__main__":
    harness.run_test("test_gpu_dump", body)
