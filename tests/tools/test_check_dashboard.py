#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""unit.dashboard: the Grafana dashboard (docs/grafana/loaderd.json) uses
only metrics the renderer (common/promtext.c) emits, and charts what an
operator looks at first; and tools/check_dashboard.py catches a
dashboard that drifted (a metric the renderer lacks, a label taken for a
metric, a panel off the ${DS_PROMETHEUS} input).
"""
import copy
import json
import os
import sys
import tempfile

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import check_dashboard  # noqa: E402

DASHBOARD = os.path.join(SOURCE_DIR, "docs", "grafana", "loaderd.json")
# What the dashboard must chart: the clients' batch rate and data wait,
# staging slots in use, the workers' items, the decode by where, the GPU
# share, errors and reloads.
REQUIRED = {"loaderd_client_batches_sent_total", "loaderd_client_data_wait_seconds_total",
            "loaderd_stage_seconds_bucket", "loaderd_worker_busy_ratio",
            "loaderd_staging_slots_in_use", "loaderd_worker_items_total", "loaderd_decode_images_total",
            "loaderd_client_gpu_share", "loaderd_read_errors_total", "loaderd_bad_images_total",
            "loaderd_reloads_total", "loaderd_reloads_refused_total"}


def fail(msg):
    print("unit.dashboard: FAIL: " + msg)
    sys.exit(1)


def faults_of(doc):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        return check_dashboard.check(SOURCE_DIR, f.name)
    finally:
        os.unlink(f.name)


def main():
    faults = check_dashboard.check(SOURCE_DIR, DASHBOARD)
    if faults:
        fail("the dashboard:\n" + "\n".join(faults))
    with open(DASHBOARD) as f:
        doc = json.load(f)
    used = set()
    for p in doc["panels"]:
        for t in p.get("targets", []):
            used.update(check_dashboard.metric_names(t["expr"], [], "x"))
    if not REQUIRED <= used:
        fail("the dashboard does not chart %s" % sorted(REQUIRED - used))
    known = check_dashboard.renderer_names(SOURCE_DIR)

    def base(name):  # a histogram's series, by the histogram's own name
        for suffix in check_dashboard.HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[:-len(suffix)] in known:
                return name[:-len(suffix)]
        return name
    if not {base(n) for n in used} <= known or "loaderd_client_info" not in known or "loaderd_metrics_scrapes_total" not in known:
        fail("the renderer's names: %s" % sorted(known))

    # Drift is caught: a metric the renderer lacks, `up` (Prometheus's,
    # not the renderer's), a label mistaken for a metric, a bad function,
    # a panel on another datasource.
    cases = [
        ("rate(loaderd_client_batches_shipped_total[5m])", "loaderd_client_batches_shipped_total"),
        ("up", "up is not a metric"),
        ("sum by (pipeline) (rate(loaderd_worker_items_total[5m])) / pipeline", "pipeline is not a metric"),
        ("rates(loaderd_worker_items_total[5m])", "rates( is not a PromQL function"),
    ]
    for expr, want in cases:
        bad = copy.deepcopy(doc)
        bad["panels"][1]["targets"][0]["expr"] = expr
        got = faults_of(bad)
        if not any(want in x for x in got):
            fail("%r: the check says %s, not %r" % (expr, got, want))
    ok = copy.deepcopy(doc)
    ok["panels"][1]["targets"][0]["expr"] = ('histogram_quantile(0.9, sum by (le) (rate(loaderd_uptime_seconds_bucket'
                                             '{instance=~"$instance", x="a{b"}[5m]))) > bool 0')
    if faults_of(ok):
        fail("a histogram's _bucket of a known name, a string with a brace: %s" % faults_of(ok))
    bad = copy.deepcopy(doc)
    bad["panels"][1]["datasource"] = {"type": "prometheus", "uid": "prod"}
    if not any("not ${DS_PROMETHEUS}" in x for x in faults_of(bad)):
        fail("a panel on another datasource is not caught")
    bad = copy.deepcopy(doc)
    del bad["__inputs"]
    if not any("DS_PROMETHEUS" in x for x in faults_of(bad)):
        fail("a dashboard without its input is not caught")
    print("unit.dashboard: %d panels, %d metrics used, all among the renderer's %d" %
          (len(doc["panels"]), len(used), len(known)))


if __name__ == "__main__":
    main()
