#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The metrics endpoint under abuse never holds the daemon's loop.

While a data client consumes batches at a steady pace (it sleeps 10 ms
a batch, so a loop held for even a fraction of each second shows), the
endpoint (127.0.0.1:PORT) gets: bad request lines and binary junk (each
answered 4xx/5xx or closed, never 200), a header over the request limit
(431), requests for another path (404) and with another method (405);
then, all at once and held, clients that send half a request and stall,
slow readers that pipeline many GETs through a tiny receive buffer and
never read, and more idle connections than the limits allow (16 at once, 8 from one address). During
that, the client's pace must stay within a bound of its pace before
(measured), every `loaderctl status --json` must answer promptly, the
half requests must be closed by the endpoint's idle timeout, the
connections over the limit turned away and counted as refused, and the
daemon must not spin (under half a core while the abusers wait); and once
the abusers go, a scrape is answered again.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

CONNECTIONS_MAX = 16   # daemon/server/metricsd.h
PER_IP_MAX = 8
IDLE_S = 5
REQUEST_BYTES = 8192


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def exchange(port, data, timeout_s=5, half_close=False):
    """Sends data on a fresh connection (then shuts its sending side, with
    half_close: all there is to read), reads until the endpoint closes it
    or a whole response has come; the status code, or None when it closed
    without a response."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # the endpoint answered and closed before all of it went
            pass
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
            head, sep, rest = got.partition(b"\r\n\r\n")
            if sep:
                length = [int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")]
                if length and len(rest) >= length[0]:
                    break
    finally:
        s.close()
    if not got:
        return None
    check(got.startswith(b"HTTP/1."), "not an HTTP response: %r" % got[:200])
    return int(got.split(b" ", 2)[1])


def closed_by_peer(s):
    """Whether the endpoint has closed s (without blocking)."""
    s.setblocking(False)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def released(d):
    return sum(c["released"] for c in d.status_json()["clients"])


def pace(d, seconds, status_times):
    """Batches released per second over about `seconds`, polling the
    status (each answer's latency goes to status_times)."""
    t0 = time.monotonic()
    n0 = released(d)
    while time.monotonic() - t0 < seconds:
        s = time.monotonic()
        d.status_json()
        status_times.append(time.monotonic() - s)
        time.sleep(0.1)
    return (released(d) - n0) / (time.monotonic() - t0)


def body(env):
    raw = env.make_raw("raw.bin", 4000, 64)
    port = free_port()
    cfg = env.config("ab", {"p": {"source": "raw:" + raw, "record_bytes": 64, "batch_size": 16}},
                     metrics_listen="127.0.0.1:%d" % port)
    d = env.start_daemon(cfg)
    client = env.spawn_loaderctl(harness.consume_args(d.socket, "p", epochs=1000,
                                                      extra=["--step-ms", "10", "--quiet", "--name", "data"]))
    d.wait_status(lambda st: any(c["released"] >= 5 for c in st["clients"]), 15, "the data client consuming")
    quiet_times = []
    before = pace(d, 2.0, quiet_times)
    check(before > 10, "the data client's pace before the abuse: %.1f batches/s" % before)

    # Requests answered (or closed), one connection each.
    for junk in (b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n",
                 b"\x00\xff\xfe\x01" * 64 + b"\r\n\r\n", b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
                 b"GET " + b"/" * 20000 + b" HTTP/1.1\r\n\r\n"):
        t = time.monotonic()
        code = exchange(port, junk, timeout_s=IDLE_S + 5, half_close=True)
        print("%r...: %s after %.2f s" % (junk[:16], code, time.monotonic() - t))
        check(code is None or 400 <= code < 600, "%r...: answered %s" % (junk[:30], code))
    big = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (2 * REQUEST_BYTES) + b"\r\n\r\n")
    check(big == 431, "a header over the limit: answered %s, not 431" % big)
    check(exchange(port, b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") == 404, "another path")
    check(exchange(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
          == 405, "another method")
    check(exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") == 200, "a scrape")
    refused_before = d.status_json()["metrics"]["refused"]

    # Held at once: half requests, slow readers, and a flood over the limit.
    half = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metr")
        half.append(s)
    slow = []
    for _ in range(3):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 64)
        slow.append(s)
    abuse_start = time.monotonic()
    flood = []
    for _ in range(3 * CONNECTIONS_MAX):
        try:
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    abuse_times = []
    cpu0, wall0 = d.cpu_seconds(), time.monotonic()
    during = pace(d, 3.0, abuse_times)
    cpu_share = (d.cpu_seconds() - cpu0) / (time.monotonic() - wall0)
    turned_away = sum(closed_by_peer(s) for s in flood)
    refused_after = d.status_json()["metrics"]["refused"]

    # The half requests go at the idle timeout.
    harness.wait_for(lambda: all(closed_by_peer(s) for s in half), IDLE_S + 10,
                     "the half requests to be closed by the idle timeout")
    half_closed_s = time.monotonic() - abuse_start
    for s in half + slow + flood:
        s.close()

    def scrape_again():
        try:
            return exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2) == 200
        except OSError:
            return False
    harness.wait_for(scrape_again, IDLE_S + 10, "a scrape answered after the abuse", interval_s=0.2)

    worst = max(abuse_times)
    print("data client: %.1f batches/s before, %.1f during the abuse (%.0f%%); status answered in at most "
          "%.0f ms during (%.0f ms before); %d of %d flood connections turned away, refused %d -> %d; "
          "half requests closed after %.1f s; the daemon used %.0f%% of a core meanwhile"
          % (before, during, 100 * during / before, worst * 1000, max(quiet_times) * 1000, turned_away,
             len(flood), refused_before, refused_after, half_closed_s, 100 * cpu_share))
    check(cpu_share < 0.5, "the daemon used %.0f%% of a core while the abusers waited: a busy loop?"
          % (100 * cpu_share))
    check(during >= 0.7 * before, "the data client slowed from %.1f to %.1f batches/s under the abuse"
          % (before, during))
    check(worst < 1.0, "a status took %.0f ms during the abuse" % (worst * 1000))
    held = len(flood) - turned_away
    check(held <= PER_IP_MAX, "%d flood connections from 127.0.0.1 held at once, over the limit of %d"
          % (held, PER_IP_MAX))
    check(turned_away >= len(flood) - PER_IP_MAX, "only %d of %d connections over the limit were turned away"
          % (turned_away, len(flood)))
    check(refused_after - refused_before == turned_away,
          "refused went from %d to %d with %d connections turned away" % (refused_before, refused_after, turned_away))
    check(half_closed_s < IDLE_S + 8, "the half requests stayed %.1f s" % half_closed_s)
    check(d.alive(), "loaderd died")
    client.kill()
    client.wait()
    d.stop()
    d.check_log_clean()


if __name__ == "__main__":
    harness.run_test("test_metrics_abuse", body)
