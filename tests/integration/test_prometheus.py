#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus scrapes the daemon's GET /metrics (metrics_listen).

A daemon with a pipeline and a client consuming it serves its metrics on
a free loopback port; Debian's prometheus, started with a prometheus.yml
that scrapes that port every second, must see the target up (its
/api/v1/targets), and a query through /api/v1/query must give back a
positive rate of the client's batches (rate(loaderd_client_batches_sent_
total[5s])) labelled with the client's pipeline and rank, the workers'
items counter, and the endpoint's own scrape counter. Skipped (77) only
where there is no prometheus program; scripts/install-deps.sh installs it.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read().decode())


def query(api, expr):
    """The instant vector of expr now: [(labels, value)]."""
    doc = get_json(api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    check(doc.get("status") == "success", "query %s: %s" % (expr, doc))
    return [(r["metric"], float(r["value"][1])) for r in doc["data"]["result"]]


def body(env):
    prometheus = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK)
                                                else None)
    if not prometheus:
        raise harness.TestSkip("no prometheus program (Debian's prometheus package; "
                               "scripts/install-deps.sh installs it)")
    raw = env.make_raw("raw.bin", 4000, 64)
    port = free_port()
    cfg = env.config("pm", {"p": {"source": "raw:" + raw, "record_bytes": 64, "batch_size": 16}},
                     metrics_listen="127.0.0.1:%d" % port)
    d = env.start_daemon(cfg)
    client = env.spawn_loaderctl(harness.consume_args(d.socket, "p", rank=0, world=1, epochs=1000,
                                                      extra=["--step-ms", "20", "--quiet", "--name", "scraped"]))
    d.wait_status(lambda st: any(c["released"] >= 2 for c in st["clients"]), 15, "the client consuming")

    web = free_port()
    yml = env.path("prometheus.yml")
    with open(yml, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: loaderd\n    scrape_interval: 1s\n"
                "    scrape_timeout: 1s\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % port)
    log = open(env.path("prometheus.log"), "w")
    prom = subprocess.Popen([prometheus, "--config.file=" + yml, "--storage.tsdb.path=" + env.path("tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % web, "--log.level=warn"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    env.procs.append(prom)
    api = "http://127.0.0.1:%d" % web
    started = time.monotonic()
    try:
        def target_up():
            check(prom.poll() is None, "prometheus exited %s" % prom.returncode)
            try:
                doc = get_json(api + "/api/v1/targets")
            except (urllib.error.URLError, ConnectionError, OSError):
                return None
            active = doc["data"]["activeTargets"]
            return active if active and all(t["health"] == "up" for t in active) else None
        targets = harness.wait_for(target_up, 20, "prometheus to see its target up", interval_s=0.2)
        check(targets[0]["labels"]["instance"] == "127.0.0.1:%d" % port and
              targets[0]["scrapeUrl"] == "http://127.0.0.1:%d/metrics" % port, "targets: %s" % targets)

        def rate_positive():
            check(prom.poll() is None, "prometheus exited %s" % prom.returncode)
            got = query(api, "rate(loaderd_client_batches_sent_total[5s])")
            return got if got and all(v > 0 for _, v in got) else None
        rates = harness.wait_for(rate_positive, 20, "a positive rate of the client's batches", interval_s=0.25)
        labels, rate = rates[0]
        check(labels.get("pipeline") == "p" and labels.get("rank") == "0" and labels.get("job") == "loaderd",
              "the rate's labels: %s" % labels)
        items = query(api, "loaderd_worker_items_total")
        check(len(items) == 2 and sum(v for _, v in items) > 0, "worker items: %s" % items)
        scrapes = query(api, "loaderd_metrics_scrapes_total")
        check(len(scrapes) == 1 and scrapes[0][1] >= 1, "the endpoint's scrape counter: %s" % scrapes)
        up = query(api, "up")
        check(up and up[0][1] == 1.0, "up: %s" % up)
        print("prometheus scraped 127.0.0.1:%d; rate(loaderd_client_batches_sent_total[5s]) = %.1f/s "
              "after %.1f s" % (port, rate, time.monotonic() - started))
        st = d.status()
        check(st["metrics"]["listen"] == "127.0.0.1:%d" % port and st["metrics"]["scrapes"] >= 2,
              "status metrics: %s" % st["metrics"])
    except harness.TestFailure:
        log.flush()
        with open(env.path("prometheus.log")) as f:
            print("---- prometheus log ----\n" + f.read()[-3000:], file=sys.stderr)
        raise
    finally:
        prom.terminate()
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        log.close()
    client.kill()
    client.wait()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_prometheus", body)
