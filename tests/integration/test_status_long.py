#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A status text longer than one STATUS frame keeps its summary and says
what it left out.

- 500 clients attached by hand-made HELLOs, each named with 59 bytes that
  status shows escaped (`\\xNN`, four characters each): their lines come to
  far more than the 65504 bytes of a STATUS frame. `loaderctl status`
  must still end with the errors:, config: and connections: lines, parse
  by the contract (harness.parse_status), and list whole client lines,
  each one of the clients attached with its name escaped, followed by
  `  ... N more clients (the status text holds at most 65504 bytes)`
  where N is exactly the number not listed.
- 64 pipelines whose source is a path of about 3000 bytes: the pipelines
  list is cut the same way (`... N more pipelines`), and clients:,
  errors:, config: and connections: still follow.
"""

import array
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
import rawconn  # noqa: E402
import test_client_names as names  # noqa: E402  (hello() and escaped(), written out there)

CLIENTS, PIPELINES = 500, 64
STATUS_TEXT_MAX = 65504  # proto/proto.h, PROTO_STATUS_TEXT_MAX
N, RECORD, BATCH = 64, 64, 8


def client_name(i):
    return b"%03d " % i + bytes(0x80 + (i + k) % 128 for k in range(59))


def attach(path, name):
    """A connection attached to pipeline p under name, its WELCOME read
    and the descriptors it carried closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    s.settimeout(10)
    s.connect(path)
    s.send(names.hello(b"p", name=name))
    data, anc, _, _ = s.recvmsg(70000, socket.CMSG_SPACE(4 * 4))
    for level, kind, fds in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            for fd in array.array("i", fds[:len(fds) - len(fds) % 4]):
                os.close(fd)
    ftype = struct.unpack_from("<H", data, 6)[0] if len(data) >= 8 else None
    check(ftype == rawconn.WELCOME, "client %r: answer type %s, expected WELCOME" % (name, ftype))
    return s


def check_summary(text, st, what):
    check(len(text.encode()) <= STATUS_TEXT_MAX + 1,
          "%s: status is %d bytes, over one frame" % (what, len(text.encode())))
    last = text.rstrip("\n").splitlines()
    check(last[-1].startswith("metrics: ") and last[-2].startswith("connections: ")
          and any(x.startswith("errors: ") for x in last)
          and any(x.startswith("config: ") for x in last),
          "%s: the summary lines are missing:\n...%s" % (what, text[-1000:]))
    check(st["read_errors"] == 0 and st["config"]["workers"] == 1, "%s: summary %s %s"
          % (what, st["read_errors"], st["config"]))


def many_clients(env):
    raw = env.make_raw("raw.bin", N, RECORD)
    cfg = env.config("clients", {"p": {"source": "raw:" + raw, "record_bytes": RECORD,
                                       "batch_size": BATCH}},
                     workers=1, max_clients=CLIENTS + 10)
    d = env.start_daemon(cfg)
    rawconn.raise_own_fd_limit(CLIENTS + 64)
    socks = [attach(d.socket, client_name(i)) for i in range(CLIENTS)]
    text = d.status_text()
    st = harness.parse_status(text)
    check_summary(text, st, "500 clients")
    listed = st["clients"]
    omitted = st["omitted"].get("clients", 0)
    check(0 < len(listed) < CLIENTS and len(listed) + omitted == CLIENTS,
          "%d clients listed, %d left out, expected some of each and %d in all"
          % (len(listed), omitted, CLIENTS))
    want = {names.escaped(client_name(i)) for i in range(CLIENTS)}
    got = [c["name"] for c in listed]
    check(set(got) <= want and len(set(got)) == len(got),
          "listed client names are not those attached: %s" % got[:3])
    check(text.endswith("\n") and "  ... %d more clients (the status text holds at most %d bytes)\n"
          % (omitted, STATUS_TEXT_MAX) in text, "no line says how many clients were left out")
    print("500 clients: %d bytes, %d listed, '... %d more clients', summary kept"
          % (len(text), len(listed), omitted))
    for s in socks:
        s.close()
    d.wait_status(lambda x: x["clients"] == [] and "clients" not in x["omitted"], 20,
                  "every client to be gone")
    d.stop()


def many_pipelines(env):
    deep = env.path(*["d%03d" % k + "x" * 196 for k in range(15)])
    os.makedirs(deep)
    raw = os.path.join(deep, "raw.bin")
    os.rename(env.make_raw("long.bin", N, RECORD), raw)
    check(len(raw) > 3000, "the long path is only %d bytes" % len(raw))
    pipelines = {"p%02d" % i: {"source": "raw:" + raw, "record_bytes": RECORD,
                               "batch_size": BATCH} for i in range(PIPELINES)}
    d = env.start_daemon(env.config("pipelines", pipelines, workers=1))
    text = d.status_text()
    st = harness.parse_status(text)
    check_summary(text, st, "64 long pipelines")
    omitted = st["omitted"].get("pipelines", 0)
    check(0 < len(st["pipelines"]) < PIPELINES and len(st["pipelines"]) + omitted == PIPELINES,
          "%d pipelines listed, %d left out" % (len(st["pipelines"]), omitted))
    check(st["clients"] == [], "clients listed with none attached: %s" % st["clients"])
    print("64 pipelines of %d-byte paths: %d bytes, %d listed, '... %d more pipelines'"
          % (len(raw), len(text), len(st["pipelines"]), omitted))
    d.stop()


def body(env):
    many_clients(env)
    many_pipelines(env)


if __name__ == "__main__":
    harness.run_test("test_status_long", body)
