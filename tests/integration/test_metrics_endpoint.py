#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The daemon's GET /metrics (metrics_listen) on a Unix socket path, and
its life with the daemon's.

- A stale socket file at the path (left by a daemon that died) is
  replaced at start; the socket gets socket_mode (0660 by default).
- Over AF_UNIX, GET /metrics answers 200 with Prometheus's Content-Type
  and the very text `loaderctl metrics` prints (one renderer: the lines
  differ only in the uptime and the scrape counter); HEAD answers the
  same headers and no body; another path 404, another method 405 with
  Allow: GET, HEAD; each counted (scrapes, refused) in the status text
  ("metrics: PATH scrapes N refused M") and JSON.
- A reload that changes metrics_listen is refused, naming the key and
  that it takes a restart; the endpoint goes on where it was.
- Stopping the daemon removes the socket file.
- A loopback port another process holds: the daemon does not start, and
  says so naming the file and line of metrics_listen.
"""

import http.client
import os
import re
import socket
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=5)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.unix_path)


def request(path, method, url):
    c = UnixHTTPConnection(path)
    try:
        c.request(method, url)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def comparable(text):
    """The exposition without the lines that change between two renderings."""
    return [x for x in text.splitlines()
            if not x.startswith(("loaderd_uptime_seconds ", "loaderd_metrics_scrapes_total "))]


def body(env):
    raw = env.make_raw("raw.bin", 400, 32)
    msock = env.path("run", "metrics.sock")
    os.makedirs(os.path.dirname(msock))
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(msock)
    stale.close()  # a socket file nobody serves
    cfg = env.config("me", {"p": {"source": "raw:" + raw, "record_bytes": 32, "batch_size": 8}},
                     metrics_listen=msock)
    d = env.start_daemon(cfg)
    mode = stat.S_IMODE(os.stat(msock).st_mode)
    check(stat.S_ISSOCK(os.stat(msock).st_mode) and mode == 0o660, "the metrics socket's mode is %o" % mode)

    code, headers, text = request(msock, "GET", "/metrics")
    check(code == 200 and headers.get("Content-Type") == "text/plain; version=0.0.4; charset=utf-8",
          "GET /metrics: %s %s" % (code, headers))
    r = env.loaderctl(["--socket", d.socket, "metrics"])
    check(r.returncode == 0, "loaderctl metrics exited %d: %s" % (r.returncode, r.stderr))
    check(comparable(text.decode()) == comparable(r.stdout),
          "GET /metrics and loaderctl metrics differ:\n%s\n----\n%s" % (text.decode(), r.stdout))
    check("loaderd_metrics_scrapes_total 0\n" in text.decode() and "loaderd_metrics_scrapes_total 1\n" in r.stdout,
          "the scrape counter: the first scrape must show 0, the next 1")
    code, headers, head_body = request(msock, "HEAD", "/metrics")
    check(code == 200 and head_body == b"" and int(headers["Content-Length"]) > 1000,
          "HEAD /metrics: %s %s %r" % (code, headers, head_body[:100]))
    code, headers, text = request(msock, "GET", "/")
    check(code == 404 and b"/metrics" in text, "GET /: %s %r" % (code, text))
    code, headers, text = request(msock, "DELETE", "/metrics")
    check(code == 405 and headers.get("Allow") == "GET, HEAD", "DELETE /metrics: %s %s" % (code, headers))

    st = d.status_json()["metrics"]
    check(st == {"listen": msock, "scrapes": 2, "refused": 2}, "status JSON metrics: %s" % st)
    line = d.status_text().rstrip("\n").splitlines()[-1]
    check(line == "metrics: %s scrapes 2 refused 2" % msock, "the status line: %r" % line)

    # A reload that moves the endpoint is refused.
    with open(cfg) as f:
        conf = f.read()
    with open(cfg, "w") as f:
        f.write(conf.replace("metrics_listen = " + msock, "metrics_listen = 127.0.0.1:9"))
    r = env.loaderctl(["--socket", d.socket, "reload"])
    out = r.stdout + r.stderr
    check(r.returncode != 0 and "[daemon] metrics_listen" in out and "takes a restart" in out,
          "a reload moving metrics_listen: exit %d: %s" % (r.returncode, out))
    check(request(msock, "GET", "/metrics")[0] == 200, "the endpoint after a refused reload")
    print("reload: %s" % out.strip())
    d.stop()
    check(not os.path.exists(msock), "the metrics socket file is left after the daemon stopped")

    # A port in use: no start, and where it was set.
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    cfg2 = env.config("busy", {"p": {"source": "raw:" + raw, "record_bytes": 32, "batch_size": 8}},
                      metrics_listen="127.0.0.1:%d" % port)
    d2 = env.start_daemon(cfg2, wait_ready=False)
    rc = d2.proc.wait(timeout=20)
    holder.close()
    line_no = [n for n, x in enumerate(open(cfg2).read().splitlines(), 1) if x.startswith("metrics_listen")][0]
    want = "%s:%d: [daemon] metrics_listen = 127.0.0.1:%d: bind: Address already in use" % (cfg2, line_no, port)
    check(rc == 1 and want in d2.log(), "a busy port: exit %d, log:\n%s" % (rc, d2.log()))
    check(not os.path.exists(d2.socket), "the daemon's socket is left after a refused start")
    print("busy port: %s" % want)


if __name__ == "__main__":
    harness.run_test("test_metrics_endpoint", body)
