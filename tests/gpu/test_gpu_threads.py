#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Several GPU threads for one GPU (`gpu_threads = 3`).

For each pin mode, a daemon with `gpu_threads = 3` (and, for `pin = copy`,
`pinned_slots = 2`, fewer page-locked buffers than clients, so that the
threads hand buffers to each other):
- status says "3 threads per GPU", and the daemon has the threads
  loaderd-gpu0, loaderd-gpu0.1 and loaderd-gpu0.2;
- six slow device clients attached at once (two per pipeline: raw records
  through staging, the same records with `direct = on`, uint16 tokens) are
  spread over the three threads, two each, as status shows them;
- six fast device clients at once, 3 epochs each: every one delivers each
  sample once per epoch with the CRC of its bytes in the file, and the two
  clients of a pipeline (and the direct one's and the staging one's) give
  the same dump;
- afterwards no client is left and the GPU's device_bytes is 0.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_harness  # noqa: E402
import harness  # noqa: E402  (gpu_harness put tests/integration on the path)
from harness import check  # noqa: E402

THREADS = 3
RECORD, N, BATCH = 16 << 10, 600, 16  # 256 KiB batches
TOK_SEQ, TOK_N, TOK_BATCH = 511, 800, 64
EPOCHS = 3


def thread_names(pid):
    names = set()
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                names.add(f.read().strip())
        except OSError:
            pass
    return names


def body(env):
    uuid = gpu_harness.require_gpus()[0]["uuid"]
    raw = env.make_raw("raw.bin", N, RECORD, seed=21)
    tok = env.make_tokens("tok.bin", TOK_N * TOK_SEQ + 1, "uint16", seed=22)
    pipelines = {
        "raw": {"source": "raw:" + raw, "record_bytes": RECORD, "batch_size": BATCH, "seed": 3},
        "raw_direct": {"source": "raw:" + raw, "record_bytes": RECORD, "batch_size": BATCH,
                       "seed": 3, "direct": "on"},
        "tok": {"source": "tokens:" + tok, "token_dtype": "uint16", "seq_len": TOK_SEQ,
                "batch_size": TOK_BATCH, "seed": 4},
    }
    expected = {
        "raw": (N, harness.raw_sample_crcs(raw, RECORD)),
        "raw_direct": (N, harness.raw_sample_crcs(raw, RECORD)),
        "tok": (TOK_N, harness.token_sample_crcs(tok, 2, 2, TOK_SEQ)),
    }
    want_threads = {"loaderd-gpu0"} | {"loaderd-gpu0.%d" % k for k in range(1, THREADS)}

    for pin in ("register", "copy"):
        extra_keys = {"pinned_slots": 2} if pin == "copy" else {}
        cfg = gpu_harness.gpu_config(env, "threads-" + pin, pipelines, pin=pin, workers=4,
                                     gpu_threads=THREADS, **extra_keys)
        d = gpu_harness.start_daemon(env, cfg)
        st = gpu_harness.check_delivery(d, pin)
        check("%d threads per GPU" % THREADS in st["delivery"],
              "pin %s: status says delivery: %s; expected %d threads per GPU"
              % (pin, st["delivery"], THREADS))
        have = thread_names(d.main_pid())
        check(want_threads <= have, "pin %s: the daemon's threads are %s; expected %s among them"
              % (pin, sorted(have), sorted(want_threads)))

        # Six slow clients at once: two on each thread.
        slow = []
        for name in pipelines:
            for k in range(2):
                slow.append(gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
                    d.socket, name, device="0", epochs=1, dump=env.path("slow-%s-%d" % (name, k)),
                    extra=["--step-ms", "20", "--name", "slow-%s-%d" % (name, k)])))
        pids = {p.pid for p in slow}

        def all_attached(s):
            mine = [c for c in s["clients"] if c["pid"] in pids]
            return len(mine) == len(pids) and all(c["thread"] for c in mine)
        st = d.wait_status(all_attached, 30, "the six slow clients to be attached at once")
        per_thread = {}
        for c in st["clients"]:
            if c["pid"] in pids:
                check(c["gpu"] == uuid, "pin %s: client %s on gpu %s, expected %s"
                      % (pin, c["name"], c["gpu"], uuid))
                per_thread[c["thread"]] = per_thread.get(c["thread"], 0) + 1
        print("pin %s: clients per thread %s" % (pin, per_thread))
        check(per_thread == {t: 2 for t in want_threads},
              "pin %s: six clients over the threads %s; expected two on each of %s"
              % (pin, per_thread, sorted(want_threads)))
        for p in slow:
            check(p.wait(60) == 0, "pin %s: a slow client exited %d: %s"
                  % (pin, p.returncode, p.stderr.read()))

        # Six fast clients at once, every batch checked.
        fast = []
        for name in pipelines:
            for k in range(2):
                dump = env.path("fast-%s-%s-%d.dump" % (pin, name, k))
                fast.append((name, dump, gpu_harness.spawn_loaderctl(env, gpu_harness.consume_cmd(
                    d.socket, name, device="0", epochs=EPOCHS, dump=dump))))
        texts = {}
        for name, dump, p in fast:
            out, err = p.communicate(timeout=120)
            what = "pin %s, %s, %s" % (pin, name, os.path.basename(dump))
            check(p.returncode == 0, "%s: loaderctl exited %d: %s" % (what, p.returncode, err))
            summary, _ = harness.parse_consume_output(out)
            check(summary["device"] == uuid, "%s: summary says device %s" % (what, summary["device"]))
            rows = harness.read_dump(dump)
            n, crcs = expected[name]
            gpu_harness.check_epochs(rows, EPOCHS, n, what)
            harness.check_dump_crcs(rows, crcs, what)
            texts.setdefault(name.replace("_direct", ""), []).append((what, harness.read_text(dump)))
        for dumps in texts.values():
            gpu_harness.check_same_dumps(dumps)
        d.wait_status(lambda s: not s["clients"] and all(g["device_bytes"] == 0 for g in s["gpus"]),
                      15, "no client and every GPU's device_bytes 0 (pin %s)" % pin)
        d.stop()


if __name__ == "__main__":
    harness.run_test("test_gpu_threads", body)
