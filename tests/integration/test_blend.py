#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A blend of token sources in one pipeline: `source = megatron:A 60,
megatron:B 36, llmc:C_{0..1}.bin 24` (docs/config.md, "Blending").

Written here: two uint16 Megatron datasets and two llm.c shards whose
tokens tell their member apart (member d's tokens in 1000*d .. 1000*d+999,
each token of a member distinct), with 60, 36 and 24 windows of seq_len + 1
= 8 tokens. Pipeline "b" blends them with weights equal to their sizes, so
that an epoch takes each member's windows exactly once; pipeline "o"
(blend_samples = 200, weights 5,3,2) takes more than the members hold and
repeats them. Two ranks consume two epochs of each
with --dump and --dump-data; then, computed here from the files and from
a literal Python computation of the greedy rule:
- blended sample i comes from the member the rule gives, and over every
  prefix of the blend each member's count is within one sample of its
  weight's share;
- every row is a real window of its member (its tokens as the files hold
  them), and in "b" each member's windows are each delivered exactly once
  an epoch, in an order that differs between the epochs and members;
- in "o" each pass over a member delivers each of its windows once;
- a daemon with 3 workers delivers the same dumps and bytes as one with 1;
- two ranks consuming 5 batches each, then three ranks resuming from the
  position token, deliver exactly the rest of the epoch's blended samples,
  the same bytes as an uninterrupted run.
Pipeline "t", a megatron and a tokens: member (blend_samples 110),
delivers the rule's members and real windows of the flat file too.
Pipeline "s" (document_shuffle on) delivers, for each megatron member and
epoch, windows that make one stream of its documents, each once, in an
order of the epoch's and the member's own. The valid split of pipeline "v"
(split = 6,3,1) is the members' valid windows only, blended by the rule;
asking for valid of a blend with an llm.c member, or of one whose member
has no valid window, is refused naming the reason. `loaderd status` shows
each member with its weight and sample counts.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
from test_llmc import write_shard  # noqa: E402
from test_megatron import megatron_split  # noqa: E402

SEQ, BATCH = 7, 4
SIZES = (60, 36, 24)          # windows of each member
ROW = (SEQ + 1) * 2


def greedy(weights, n):
    """Sample i's member by the rule, literally: argmax of w*(i+1) - count,
    the first maximum on ties."""
    total = float(sum(weights))
    w = [x / total for x in weights]
    count, out = [0] * len(w), []
    for i in range(n):
        err = [w[d] * (i + 1) - count[d] for d in range(len(w))]
        d = err.index(max(err))
        out.append(d)
        count[d] += 1
    return out, w


LENGTHS = (5, 17, 1, 40, 9, 33, 2, 60)  # the megatron members' documents, then the rest


def member_docs(d):
    t, docs, at = member_tokens(d, SIZES[d]), [], 0
    for length in LENGTHS:
        docs.append(t[at:at + length])
        at += length
    return docs + [t[at:]]


def chain(wins, docs, what):
    """The document order of one pass over a document-shuffled member:
    its windows overlap by one token and make one stream of whole
    documents, each once, and the start of one more."""
    firsts = {w[0]: w for w in wins}
    lasts = {w[-1] for w in wins}
    start = [w for w in wins if w[0] not in lasts]
    check(len(start) == 1 and len(firsts) == len(wins), "%s: the windows do not make one stream" % what)
    stream = list(start[0])
    while stream[-1] in firsts:
        stream += firsts[stream[-1]][1:]
    check(len(stream) == 1 + SEQ * len(wins), "%s: the stream of %d tokens does not hold the %d windows"
          % (what, len(stream), len(wins)))
    starts = {doc[0]: i for i, doc in enumerate(docs) if doc}
    order, at = [], 0
    while at < len(stream):
        i = starts.get(stream[at])
        check(i is not None and i not in order, "%s: token %d of the stream does not start a document "
              "not yet seen" % (what, at))
        part = stream[at:at + len(docs[i])]
        check(part == docs[i][:len(part)], "%s: document %d differs from the file's" % (what, i))
        order.append(i)
        at += len(docs[i])
    return order


def member_tokens(d, n_windows):
    return [1000 * d + i for i in range(n_windows * SEQ + 1)]


def write_members(env):
    tokens = [member_tokens(d, SIZES[d]) for d in range(2)]
    prefixes = []
    for d in range(2):
        prefix = env.path("m%d" % d)
        docs = member_docs(d)
        harness.write_megatron(prefix, [len(doc) for doc in docs], [t for doc in docs for t in doc])
        prefixes.append(prefix)
    # llm.c: two shards of 12 windows each, tokens 2000 on
    t = [2000 + i for i in range(2 * (12 * SEQ + 1))]
    shards = []
    for s in range(2):
        part = t[s * (12 * SEQ + 1):(s + 1) * (12 * SEQ + 1)]
        path = env.path("c_%d.bin" % s)
        write_shard(path, part)
        shards.append(part)
    windows = []
    for d in range(2):
        windows.append([tuple(tokens[d][k * SEQ:k * SEQ + SEQ + 1]) for k in range(SIZES[d])])
    windows.append([tuple(sh[k * SEQ:k * SEQ + SEQ + 1]) for sh in shards for k in range(12)])
    return prefixes, env.path("c_{0..1}.bin"), windows


def rows_of(dump, data):
    rows = harness.read_dump(dump)
    with open(data, "rb") as f:
        raw = f.read()
    check(len(raw) == len(rows) * ROW, "%s: %d bytes for %d rows" % (data, len(raw), len(rows)))
    return [(e, s, c, struct.unpack("<%dH" % (SEQ + 1), raw[i * ROW:(i + 1) * ROW]))
            for i, (e, _, s, c) in enumerate(rows)]


def run(env, name, pipelines, pipeline, workers, world=2, epochs=2):
    d = env.start_daemon(env.config(name, pipelines, workers=workers))
    jobs = [{"pipeline": pipeline, "rank": r, "world": world, "epochs": epochs,
             "dump": env.path("%s-%d.dump" % (name, r)),
             "extra": ["--dump-data", env.path("%s-%d.data" % (name, r))]} for r in range(world)]
    harness.consume_all(env, d.socket, jobs, timeout_s=60)
    status = d.status_text()
    d.stop()
    return [rows_of(env.path("%s-%d.dump" % (name, r)), env.path("%s-%d.data" % (name, r)))
            for r in range(world)], status


def by_sample(ranks, epoch, n, what):
    """{blended sample: window} of one epoch over all ranks, every sample
    0..n-1 delivered (DistributedSampler's padding repeats a few)."""
    out = {}
    for rows in ranks:
        for e, s, _, w in rows:
            if e != epoch:
                continue
            check(s not in out or out[s] == w, "%s: sample %d delivered as two windows" % (what, s))
            out[s] = w
    check(sorted(out) == list(range(n)), "%s: samples %s are not 0..%d" % (what, sorted(out)[:6], n - 1))
    return out


def check_blend(ranks, weights, n, windows, what):
    members, w = greedy(weights, n)
    orders = []
    for epoch in range(2):
        got = by_sample(ranks, epoch, n, "%s epoch %d" % (what, epoch))
        count = [0] * len(w)
        seen = [[] for _ in w]
        for i in range(n):
            win = got[i]
            d = win[0] // 1000
            check(d == members[i], "%s epoch %d: sample %d is member %d's, the rule gives %d"
                  % (what, epoch, i, d, members[i]))
            check(win in windows[d], "%s epoch %d: sample %d %s is not a window of member %d"
                  % (what, epoch, i, win[:3], d))
            count[d] += 1
            seen[d].append(windows[d].index(win))
            for e in range(len(w)):
                check(abs(count[e] - w[e] * (i + 1)) < 1, "%s: after %d samples member %d has %d, "
                      "its share is %.3f" % (what, i + 1, e, count[e], w[e] * (i + 1)))
        for d in range(len(w)):  # each pass over a member: each window once
            size = len(windows[d])
            for p in range(0, len(seen[d]), size):
                part = seen[d][p:p + size]
                check(len(set(part)) == len(part), "%s epoch %d: member %d's pass %d repeats a "
                      "window" % (what, epoch, d, p // size))
        orders.append(seen)
    return orders


def body(env):
    prefixes, pattern, windows = write_members(env)
    flat = [1000 + i for i in range(50 * SEQ + 1)]  # a tokens: member's file
    with open(env.path("flat.bin"), "wb") as f:
        f.write(struct.pack("<%dH" % len(flat), *flat))
    flat_windows = [tuple(flat[k * SEQ:k * SEQ + SEQ + 1]) for k in range(50)]
    src = "megatron:%s 60, megatron:%s 36, llmc:%s 24" % (prefixes[0], prefixes[1], pattern)
    pipelines = {
        "b": {"source": src, "seq_len": SEQ, "batch_size": BATCH, "seed": 3,
              "document_shuffle": "off"},
        "o": {"source": "megatron:%s 5, megatron:%s 3, llmc:%s 2" % (prefixes[0], prefixes[1], pattern),
              "seq_len": SEQ, "batch_size": BATCH, "seed": 4, "document_shuffle": "off",
              "blend_samples": 200},
        "s": {"source": "megatron:%s 60, megatron:%s 36" % (prefixes[0], prefixes[1]),
              "seq_len": SEQ, "batch_size": BATCH, "seed": 5},
        "v": {"source": "megatron:%s 1, megatron:%s 1" % (prefixes[0], prefixes[1]),
              "seq_len": SEQ, "batch_size": BATCH, "split": "6,3,1", "document_shuffle": "off"},
        "t": {"source": "megatron:%s 1, tokens:%s 1" % (prefixes[0], env.path("flat.bin")),
              "token_dtype": "uint16", "seq_len": SEQ, "batch_size": BATCH, "blend_samples": 110,
              "document_shuffle": "off"},
        "ml": {"source": "megatron:%s 1, llmc:%s 1" % (prefixes[0], pattern),
               "seq_len": SEQ, "batch_size": BATCH, "split": "6,3,1"},
        "ve": {"source": "megatron:%s 1, megatron:%s 1" % (prefixes[0], prefixes[1]),
               "seq_len": 60, "batch_size": 1, "split": "8,1,1"},  # valid: one 60-token document
    }
    n = sum(SIZES)
    one, status = run(env, "b1", pipelines, "b", 1)
    orders = check_blend(one, SIZES, n, windows, "b")
    for d in range(3):
        for epoch in range(2):
            check(sorted(orders[epoch][d]) == list(range(SIZES[d])), "b epoch %d: member %d's windows "
                  "are not each delivered once" % (epoch, d))
        check(orders[0][d] != orders[1][d], "b: member %d has the same order in both epochs" % d)
        check(orders[0][d] != sorted(orders[0][d]), "b: member %d is not shuffled" % d)
    print("b: %d samples an epoch, member orders %s..." % (n, [o[:5] for o in orders[0]]))
    st = harness.parse_status(status)
    blend = next(p for p in st["pipelines"] if p["name"] == "b")
    check(blend["source"] == "blend" and blend["samples"] == n, "status: pipeline b %s" % blend)
    sources = [("megatron", prefixes[0]), ("megatron", prefixes[1]), ("llmc", pattern)]
    for d, (kind, path) in enumerate(sources):
        mb = blend["members"][d]
        check(mb["source"] == "%s:%s" % (kind, path) and abs(mb["weight"] - SIZES[d] / n) < 1e-6
              and mb["splits"] == {"train": (SIZES[d], SIZES[d])},
              "status: blend member %d is %s" % (d + 1, mb))

    three, _ = run(env, "b3", pipelines, "b", 3)
    for r in range(2):
        check(one[r] == three[r], "rank %d: 1 and 3 workers delivered different rows" % r)

    over, _ = run(env, "o1", pipelines, "o", 2)
    oorders = check_blend(over, (5, 3, 2), 200, windows, "o")
    print("o: 200 samples an epoch, taken %s" % [len(x) for x in oorders[0]])
    check(len(oorders[0][2]) == 40 and len(oorders[0][0]) == 100, "o: %s samples taken"
          % [len(x) for x in oorders[0]])

    # A tokens: member, read at its windows' offsets in the flat file.
    tok, _ = run(env, "t1", pipelines, "t", 2)
    check_blend(tok, (1, 1), 110, [windows[0], flat_windows], "t")
    print("t: megatron and tokens members, 110 samples an epoch")

    # Document-shuffled megatron members: each epoch, each member's windows
    # are one stream of its documents in an order of their own.
    shuffled, _ = run(env, "s1", pipelines, "s", 3)
    orders = []
    members, _ = greedy(SIZES[:2], SIZES[0] + SIZES[1])
    for epoch in range(2):
        got = by_sample(shuffled, epoch, SIZES[0] + SIZES[1], "s epoch %d" % epoch)
        per = [[got[i] for i in range(len(got)) if members[i] == d] for d in range(2)]
        for d in range(2):
            check(all(t // 1000 == d for w in per[d] for t in w), "s epoch %d: member %d's rows hold "
                  "other tokens" % (epoch, d))
        orders.append([chain(per[d], member_docs(d), "s epoch %d member %d" % (epoch, d))
                       for d in range(2)])
    for d in range(2):
        check(orders[0][d] != orders[1][d] and orders[0][d] != sorted(orders[0][d]),
              "s: member %d's document orders %s, %s are not shuffled per epoch"
              % (d, orders[0][d], orders[1][d]))
    check(orders[0][0] != orders[0][1], "s: both members' documents in the same order %s"
          % orders[0][0])
    print("s: document orders %s / %s" % (orders[0], orders[1]))

    # Split valid of a blend of megatron members: each member's valid
    # documents only, blended by the rule over the valid windows.
    idx = megatron_split((6, 3, 1), len(LENGTHS) + 1)
    valid = [[t for doc in member_docs(d)[idx[1]:idx[2]] for t in doc] for d in range(2)]
    vsizes = [(len(v) - 1) // SEQ for v in valid]
    d = env.start_daemon(env.config("valid", pipelines))
    r = env.loaderctl(harness.consume_args(d.socket, "v", epochs=1, dump=env.path("v.dump"),
                                           extra=["--split", "valid", "--dump-data",
                                                  env.path("v.data"), "--quiet"]))
    check(r.returncode == 0, "consume --split valid exited %d: %s" % (r.returncode, r.stderr))
    for name, message in (("ml", 'pipeline "ml" has no split "valid": a blend has valid and test '
                                 'only when every member is a megatron source'),
                          ("ve", 'pipeline "ve": split "valid" is empty: blend member 1 (%s) has no '
                                 'window' % prefixes[0])):
        r = env.loaderctl(harness.consume_args(d.socket, name, epochs=1, extra=["--split", "valid"]))
        check(r.returncode != 0 and message in r.stderr, "consume --split valid of %s: exit %d, %s"
              % (name, r.returncode, r.stderr))
    d.stop()
    vrows = rows_of(env.path("v.dump"), env.path("v.data"))
    vmembers, _ = greedy(vsizes, sum(vsizes))
    vwindows = [[tuple(v[k * SEQ:k * SEQ + SEQ + 1]) for k in range(n)] for v, n in zip(valid, vsizes)]
    check(sorted(s for _, s, _, _ in vrows) == list(range(sum(vsizes))), "valid: samples are not 0..%d"
          % (sum(vsizes) - 1))
    for _, s, _, w in vrows:
        m = w[0] // 1000
        check(m == vmembers[s] and w in vwindows[m], "valid: sample %d %s is not a valid window of "
              "member %d" % (s, w[:3], vmembers[s]))
    print("valid: members' valid windows %s, blended" % vsizes)

    # Resume at another world size: 2 ranks x 5 batches, then 3 ranks.
    d = env.start_daemon(env.config("resume", pipelines, workers=2))
    res = harness.consume_all(env, d.socket, [
        {"pipeline": "b", "rank": r, "world": 2, "batches": 5, "dump": env.path("ra-%d.dump" % r)}
        for r in range(2)])
    tokens = {t for _, t, _ in res}
    check(len(tokens) == 1, "the ranks saved different tokens: %s" % tokens)
    token = tokens.pop()
    rest = harness.consume_all(env, d.socket, [
        {"pipeline": "b", "rank": r, "world": 3, "epochs": 1, "dump": env.path("rb-%d.dump" % r),
         "extra": ["--resume", token]} for r in range(3)])
    d.stop()
    ref = {}
    for rows in one:
        for e, s, c, _ in rows:
            if e == 0:
                ref[s] = c
    first = {s for _, _, rows in res for _, _, s, _ in rows}
    check(first == set(range(40)), "2 ranks x 5 batches consumed samples %s, not 0..39"
          % sorted(first)[:8])
    later = {}
    for _, _, rows in rest:
        for e, _, s, c in rows:
            check(e == 0, "the resumed run went past epoch 0 (epoch %d)" % e)
            later[s] = c
    check(sorted(later) == list(range(40, n)), "resumed at 40 with 3 ranks: samples %s..., not 40..%d"
          % (sorted(later)[:6], n - 1))
    for s, c in later.items():
        check(c == ref[s], "resumed sample %d differs from the uninterrupted run's" % s)
    print("resume: %s -> 3 ranks, samples 40..%d as in one run" % (token, n - 1))


if __name__ == "__main__":
    harness.run_test("blend", body)
