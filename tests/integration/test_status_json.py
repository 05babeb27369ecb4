#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`loaderctl status --json` and `loaderctl status` say the same thing.

- The JSON validates against docs/status.schema.json (every field
  documented, no other) and names its schema, "loaderd.status/1".
- With three workers, a raw and a token pipeline, and three clients
  attached (one alone, two in a group) and then idle, the JSON and the
  text, taken while nothing changes between two texts, agree on every
  worker, pipeline and client, figure by figure (the means the text
  rounds to 0.1 us, within that rounding; the times that grow by the
  clock, uptime and wait_pct, not compared).
- The JSON is one document whatever its size: `status --json` keeps every
  client of a status whose text is cut (tests/integration/test_status_long.py
  shows the text's cut; here the JSON of 256 clients, max_clients' default, with long names).
- A STATUS_REQ with the JSON flag (a connection made by hand) is
  answered by STATUS frames, several for those 256 clients, each but the
  last with the MORE flag, whose texts join to the document.
"""

import array
import json
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
import rawconn  # noqa: E402
import test_client_names as names  # noqa: E402  (hello(), written out there)

WORKERS, SLOTS, CLIENTS = 3, 16, 256
JSON_FLAG, MORE_FLAG = 0x2, 0x4  # proto/proto.h, PROTO_FLAG_JSON and PROTO_FLAG_MORE
VOLATILE = ("uptime", "wait_pct", "wait_ms")  # grow with the clock, not with events


def schema_validator():
    jsonschema = harness.import_or_fail("test_status_json", "jsonschema")
    with open(os.path.join(harness.SOURCE_DIR, "docs", "status.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate(validator, doc, what):
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    check(not errors, "%s does not follow docs/status.schema.json:\n%s" % (what, "\n".join(
        "  %s: %s" % ("/".join(str(p) for p in e.path) or "(top)", e.message) for e in errors[:10])))


def stable(st):
    """st without the fields that move with the clock alone."""
    out = {k: v for k, v in st.items() if k not in VOLATILE + ("json", "workers_busy", "stages")}
    rounded = ("stages_us", "gpu_share", "data_wait_s", "ready_wait_s")
    out["clients"] = [{k: v for k, v in c.items() if k not in VOLATILE + rounded}
                      for c in st["clients"]]
    out["workers"] = [{k: v for k, v in w.items() if k not in ("busy", "io_wait")} for w in st["workers"]]
    out["config"] = dict(st["config"])
    return out


def agree(text_st, json_st):
    """Every field of the text's parse equals the JSON's; means within the
    text's rounding."""
    a, b = stable(text_st), stable(json_st)
    for key in sorted(set(a) | set(b)):
        check(a.get(key) == b.get(key), "status %s: text says %r, JSON says %r" % (key, a.get(key), b.get(key)))
    for ct, cj in zip(text_st["clients"], json_st["clients"]):
        for stage, v in ct["stages_us"].items():
            w = cj["stages_us"][stage]
            check((v is None) == (w is None) and (v is None or abs(v - w) <= 0.051),
                  "client %d stage %s: text %r, JSON %r" % (ct["id"], stage, v, w))
        check(abs(ct["gpu_share"] - cj["gpu_share"]) <= 0.0051, "client %d gpu_share: text %r, JSON %r"
              % (ct["id"], ct["gpu_share"], cj["gpu_share"]))
        for key in ("data_wait_s", "ready_wait_s"):  # %.3f in the text
            check(abs(ct[key] - cj[key]) <= 0.00051, "client %d %s: text %r, JSON %r"
                  % (ct["id"], key, ct[key], cj[key]))
    for wt, wj in zip(text_st["workers"], json_st["workers"]):
        for key in ("busy", "io_wait"):  # %.2f in the text
            check(abs(wt[key] - wj[key]) <= 0.0051, "worker %d %s: text %r, JSON %r"
                  % (wt["index"], key, wt[key], wj[key]))
    check(abs(text_st["workers_busy"] - json_st["workers_busy"]) <= 0.0051,
          "workers busy: text %r, JSON %r" % (text_st["workers_busy"], json_st["workers_busy"]))
    check(sorted(text_st["stages"]) == sorted(json_st["stages"]), "stages of pipelines: text %r, JSON %r"
          % (sorted(text_st["stages"]), sorted(json_st["stages"])))
    for pipe, st in text_st["stages"].items():
        check(sorted(st) == sorted(json_st["stages"][pipe]), "pipeline %s stages: text %r, JSON %r"
              % (pipe, sorted(st), sorted(json_st["stages"][pipe])))
        for name, s in st.items():  # quantiles: 3 significant digits in the text
            j = json_st["stages"][pipe][name]
            check(s["count"] == j["count"], "pipeline %s stage %s count: text %d, JSON %d"
                  % (pipe, name, s["count"], j["count"]))
            for q in ("p50_ms", "p99_ms"):
                check(abs(s[q] - j[q]) <= 0.0051 * max(j[q], 1e-3), "pipeline %s stage %s %s: text %r, JSON %r"
                      % (pipe, name, q, s[q], j[q]))


def settled(d):
    """A text and a JSON taken between two texts that agree on everything
    but the clock: nothing moved while the JSON was taken."""
    def cond():
        t1 = harness.parse_status(d.status_text())
        doc = d.status_json()
        t2 = harness.parse_status(d.status_text())
        return (t1, doc) if stable(t1) == stable(t2) else None
    return harness.wait_for(cond, 20, "two status texts alike around a JSON", interval_s=0.1)


def attach(path, pipeline, name):
    """A connection attached to pipeline under name, its WELCOME read and
    the descriptors it carried closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    s.settimeout(10)
    s.connect(path)
    s.send(names.hello(pipeline, name=name))
    data, anc, _, _ = s.recvmsg(70000, socket.CMSG_SPACE(4 * 4))
    for level, kind, fds in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            for fd in array.array("i", fds[:len(fds) - len(fds) % 4]):
                os.close(fd)
    ftype = struct.unpack_from("<H", data, 6)[0] if len(data) >= 8 else None
    check(ftype == rawconn.WELCOME, "client %r: answer type %s, expected WELCOME" % (name, ftype))
    return s


def status_frames(path):
    """STATUS_REQ with the JSON flag on a connection made by hand: the
    STATUS frames that answer it, as (MORE flag, text), up to the close."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    s.settimeout(10)
    s.connect(path)
    s.send(struct.pack("<IHHIIQ", rawconn.MAGIC, rawconn.VERSION, rawconn.STATUS_REQ, JSON_FLAG, 0, 9))
    out = []
    while True:
        data = s.recv(70000)
        if not data:
            break
        magic, _, ftype, flags, length, rid = struct.unpack_from("<IHHIIQ", data)
        check(magic == rawconn.MAGIC and ftype == rawconn.STATUS and rid == 9 and length == len(data) - 24,
              "answer to a JSON STATUS_REQ: type %d flags %#x length %d of %d, request %d"
              % (ftype, flags, length, len(data), rid))
        n = struct.unpack_from("<I", data, 24)[0]
        out.append((bool(flags & MORE_FLAG), data[28:28 + n]))
    s.close()
    return out


def body(env):
    validator = schema_validator()
    raw = env.make_raw("raw.bin", 600, 64)
    tok = env.make_tokens("tok.bin", 2000, "uint16")
    cfg = env.config("sj", {
        "images": {"source": "raw:" + raw, "record_bytes": 64, "batch_size": 8, "seed": 3},
        "text": {"source": "tokens:" + tok, "token_dtype": "uint16", "seq_len": 10, "batch_size": 4,
                 "shuffle": "false", "drop_last": "true"},
    }, workers=WORKERS, staging_slots=SLOTS)
    d = env.start_daemon(cfg)

    doc = d.status_json()
    validate(validator, doc, "the idle daemon's status JSON")
    check(doc["schema"] == "loaderd.status/1", "schema %r" % doc["schema"])
    check(doc["daemon"]["pid"] == d.pid and len(doc["workers"]) == WORKERS and doc["clients"] == [],
          "idle status JSON: %s" % json.dumps(doc)[:2000])

    # Three clients that fill their depth and then hold it (a step far
    # longer than the test): afterwards nothing moves but the clock.
    hold = ["--step-ms", "600000", "--quiet", "--depth", "2"]
    clients = [env.spawn_loaderctl(harness.consume_args(d.socket, "images", rank=0, world=1, epochs=1,
                                                        extra=hold + ["--name", 'alone "q"']))]
    for r in range(2):
        clients.append(env.spawn_loaderctl(harness.consume_args(
            d.socket, "text", rank=0, world=1, epochs=1,
            extra=hold + ["--name", "tp%d" % r, "--group", "g1", "--group-size", "2"])))
    d.wait_status(lambda s: len(s["clients"]) == 3 and all(c["sent"] >= 2 for c in s["clients"]), 20,
                  "three clients holding their batches")
    text_st, doc = settled(d)
    validate(validator, doc, "the status JSON with clients")
    json_st = harness.parse_status_json(doc)
    agree(text_st, json_st)
    names = sorted(c["name"] for c in doc["clients"])
    check(names == sorted(['alone \\"q\\"', "tp0", "tp1"]), "client names in the JSON: %s" % names)
    groups = [c.get("group") for c in doc["clients"] if c["pipeline"] == "text"]
    check(len(groups) == 2 and all(g and g["key"] == "g1" and g["size"] == 2 and g["joined"] == 2
                                   and not g["waiting"] and not g["ended"] for g in groups),
          "group members' JSON: %s" % groups)
    print("text and JSON agree: %d workers, %d pipelines, %d clients"
          % (len(doc["workers"]), len(doc["pipelines"]), len(doc["clients"])))

    for c in clients:
        c.kill()
        c.wait()
    d.wait_status(lambda s: not s["clients"], 15, "the clients gone")

    # Many clients with long names: the text is cut, the JSON keeps them all.
    many = [attach(d.socket, b"images", b"client-%03d-" % i + b"\xe2\x82\xac" * 16) for i in range(CLIENTS)]
    doc = d.status_json()
    validate(validator, doc, "the status JSON of %d clients" % CLIENTS)
    size = len(json.dumps(doc))
    st = harness.parse_status(d.status_text())
    check(len(doc["clients"]) == CLIENTS and st["omitted"].get("clients", 0) > 0,
          "%d clients: the JSON lists %d, the text %d and %s more" % (CLIENTS, len(doc["clients"]), len(st["clients"]),
                                                                      st["omitted"].get("clients")))
    print("%d clients: JSON %d bytes, all listed; the text lists %d" % (CLIENTS, size, len(st["clients"])))
    frames = status_frames(d.socket)
    check(len(frames) >= 2 and all(f[0] for f in frames[:-1]) and not frames[-1][0],
          "JSON status frames' MORE flags: %s" % [f[0] for f in frames])
    joined = json.loads(b"".join(f[1] for f in frames))
    check(len(joined["clients"]) == CLIENTS, "the frames' JSON lists %d clients" % len(joined["clients"]))
    print("the JSON of %d clients came in %d STATUS frames" % (CLIENTS, len(frames)))
    for s in many:
        s.close()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_status_json", body)
