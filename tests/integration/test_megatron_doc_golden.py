#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""megatron:PREFIX with document_shuffle delivers, byte for byte, the
batches recorded here (SHA-256 of each run's --dump lines and --dump-data
bytes), for several seeds, block sizes, splits and epochs.

The dataset is written here from a fixed seed in Megatron's layout with
what the format allows and a simpler test would miss: documents of 0 to 4
sequences (so that the ends of `split`, which are ranges of sequences,
fall inside documents and cut them; an empty split too, at a document
boundary and inside a document), empty sequences, empty documents
(runs of them too, one at the very end), int32 tokens in one copy. The
recorded digests are what loaderd delivered when its document bounds were
a table in the arena; the workers now read them from the .idx itself, and
any difference in any window of any epoch fails this test. The same
pipelines added by a reload (their blocks summed on the thread pool)
deliver the same.
"""

import hashlib
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

SEQ, BATCH, EPOCHS = 7, 3, 3

# (pipeline, split): sha256 of the dump's lines, sha256 of the data
GOLDEN = {
    'gap_cut/test': ('44556ebfabd2b11df7a90f3cc342c1223a06e324b7fb2072d4c434438a87cd5c', 'bb91add33b832791a373a4c1d9d822ba0f04eb4347311615105c3adff5f0a1a2', 30432),
    'gap_cut/train': ('4fc37fa2b667203573bf5f8770f0e276a0943b0ed40bfb1b2f86808b0f486c90', '36d635a062cbd0252739d47f7e04dcf975feb80ef7d49debdc7557930f7c95ba', 19104),
    'split3/test': ('8adb25f1a0c90eec25e2dd97c88314e1f3a55669381100b3da08d3faf61ff64a', '9f7a4f3e752bcbb19d4c6425fd35e3f06cddd2dbbfc2bd91bbefce3f0fbf7eb6', 5040),
    'split3/train': ('8caed082a7bd250a1179f2041b738bcea1e396df9807ea4cdb1d0d4819f3b500', '9ac88ea0b991cfb2e582a98e2fbe221bb78e00987006432b4b64fb7560ab977b', 28656),
    'split3/valid': ('16c46b97696a820072aaa0170ae1e04042719342a8ca8319afc941251c482c09', 'af6a9d5f4f750132dad7675014d4f9d84232d1a9d0ef427751d18044be4a9a38', 15792),
    'split_gap/test': ('ac3a52bf48b8e7c8bdd82272cf60a10697808766a277beb8600daf75df1a4267', 'c08bd7845e2e3a236aa8167fbdb2c4773ac0f798f9a0b568c66dceb3be19a3cf', 26016),
    'split_gap/train': ('1fc9ec877a3c88e4eb16a22f051a22dff5955190b95a303e1a1a1360bedcbd58', '103280a95bf145c1e14ced933300ffa4429cce110a6c0bd3e3019578262d2730', 23520),
    'thirds/test': ('1b5e5fe2ca1d6d20bc001634c31934c6c22fe1a9e6c320a7224b0c0c9c2b7b7f', 'ef9c92546414381920f379f973dfa58a9f78c8883d1b01cd6886ac2192b975ae', 17232),
    'thirds/train': ('d9321dc4ec873d5dbd17d59a50cbef44b289101e3f82fbf74c50df4047df3c4f', '4226edd07cabed364051b5c1ffb190be2907d51b610d1963e477dba79a01c652', 15840),
    'thirds/valid': ('e68f24d6d5157605e4a09d2defb0f24e76f2e97f9fbb9d7def3951a4483c812d', '5d6ce82b697f86932c07314276af66f92a4a56761c7a039310e0e90209f8b602', 16464),
    'whole/train': ('501c3c19a86e42297660845f705c5ee7ad84df290ed551ca88bdb0459e98987f', 'f21f0b4f2fa9e0bd02e17c7b1ff4beb0912ab9e5e44e9b8b2be12835d573b99c', 49584),
    'whole4/train': ('9c7d09df4b75735397cf76293a1d66ee60740a48b1dbbec349102b8ce37fb9f8', 'dc2095b99ae92f6b1d41ba07ea9c660d58457f2ef308440959ee337a57d9d598', 49584),
    'wide/test': ('13359ed5245c60f6607f95290fedf26fc04667eb2813f15362f531203d1d36c7', '07a5b0789b84ac4681705333d4e28686ceb722379a8a6d75d68de32d8bc1c9a5', 3456),
    'wide/train': ('0c35aad1cef68c64560ea80bd53a88e4e6246ca80aa2b70bbcf28b5d07a1c035', '3e4ad83bef71d4d6ec42accd85aea612e21d5e8a7e7e09e543d67ce4858cb151', 88992),
    'wide/valid': ('90b73363098813a75ddbb59de0be90f0b245a8c3d5577899dce6bbdb37dcb6e7', 'f113adb7d99b83d2b83e95500cdf022a2b77079b7b1e91148c1fdbda90315cd8', 6528),
}


def make_dataset(prefix, dtype):
    rng = random.Random(20261127)
    lengths, doc_index, stream = [], [0], []
    for d in range(240):
        if d % 37 == 5 or d == 239:
            n_seq = 0  # an empty document
        else:
            n_seq = rng.choice((1, 1, 2, 3, 4))
        for _ in range(n_seq):
            n = 0 if rng.random() < 0.08 else rng.randint(1, 30)
            lengths.append(n)
            stream += [rng.randint(1, 60000) for _ in range(n)]
        doc_index.append(len(lengths))
        if d == 100:  # a run of empty documents
            doc_index += [len(lengths)] * 3
    harness.write_megatron(prefix, lengths, stream, dtype=dtype, doc_index=doc_index)


PIPELINES = {
    "whole4": {"seed": 1, "document_shuffle_block": 4},
    "whole": {"seed": 7},
    "split3": {"seed": 2, "document_shuffle_block": 3, "split": "6,3,1"},
    "split_gap": {"seed": 3, "document_shuffle_block": 2, "split": "5,0,5"},
    # valid empty where train and test meet inside a document: one empty document
    "gap_cut": {"seed": 5, "document_shuffle_block": 2, "split": "4,0,6"},
    "thirds": {"seed": 4, "document_shuffle_block": 5, "split": "1,1,1"},
    "wide": {"seed": 9, "document_shuffle_block": 6, "split": "90,7,3", "int32": True},
}


def splits_of(name):
    spec = PIPELINES[name].get("split")
    if not spec:
        return ["train"]
    parts = [float(x) for x in spec.split(",")]
    return [s for s, w in zip(("train", "valid", "test"), parts) if w > 0]


def consume_every(env, d, tag):
    """{pipeline/split: (sha256 of the dump, sha256 of the data, bytes)}
    of EPOCHS epochs of every split of every pipeline."""
    got = {}
    for name in PIPELINES:
        for split in splits_of(name):
            dump = env.path("%s-%s-%s.dump" % (tag, name, split))
            data = env.path("%s-%s-%s.data" % (tag, name, split))
            r = env.loaderctl(harness.consume_args(d.socket, name, epochs=EPOCHS, dump=dump,
                                                   extra=["--split", split, "--dump-data", data,
                                                          "--quiet"]))
            check(r.returncode == 0, "%s %s %s: consume exited %d: %s" % (tag, name, split, r.returncode,
                                                                          r.stderr))
            with open(dump, "rb") as f:
                lines = hashlib.sha256(f.read()).hexdigest()
            with open(data, "rb") as f:
                raw = f.read()
            got["%s/%s" % (name, split)] = (lines, hashlib.sha256(raw).hexdigest(), len(raw))
    return got


def body(env):
    prefix16, prefix32 = env.path("web16"), env.path("web32")
    make_dataset(prefix16, "uint16")
    make_dataset(prefix32, "int32")
    pipelines = {}
    for name, p in PIPELINES.items():
        keys = {"source": "megatron:" + (prefix32 if p.get("int32") else prefix16),
                "seq_len": SEQ, "batch_size": BATCH, "seed": p["seed"]}
        if "document_shuffle_block" in p:
            keys["document_shuffle_block"] = p["document_shuffle_block"]
        if "split" in p:
            keys["split"] = p["split"]
        pipelines[name] = keys
    d = env.start_daemon(env.config("golden", pipelines, workers=2))
    got = consume_every(env, d, "start")
    d.stop()
    # the same pipelines added by a reload: their documents spanned and
    # their blocks summed on the thread pool, the sums written then
    small = env.make_raw("small.bin", 64, 64)
    first = {"small": {"source": "raw:" + small, "record_bytes": 64, "batch_size": 8}}
    d = env.start_daemon(env.config("reload", first, workers=2))
    env.config("reload", dict(first, **pipelines), workers=2)
    r = env.loaderctl(["--socket", d.socket, "reload"], timeout_s=60)
    check(r.returncode == 0, "reload adding the megatron pipelines exited %d: %s %s"
          % (r.returncode, r.stdout, r.stderr))
    added = consume_every(env, d, "reload")
    d.stop()
    check(added == got, "the pipelines added by a reload delivered %s, at start %s" % (added, got))
    if os.environ.get("LOADERD_GOLDEN_PRINT"):
        for k in sorted(got):
            print("    %r: %r," % (k, got[k]))
        return
    check(sorted(got) == sorted(GOLDEN), "runs %s, recorded %s" % (sorted(got), sorted(GOLDEN)))
    for k in sorted(got):
        check(got[k] == GOLDEN[k], "%s: delivered %s, recorded %s" % (k, got[k], GOLDEN[k]))
        print("%s: %d bytes as recorded" % (k, got[k][2]))


if __name__ == "__main__":
    harness.run_test("test_megatron_doc_golden", body)
