#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`loaderctl metrics` prints the status in Prometheus's text exposition
format (version 0.0.4), as node_exporter's textfile collector reads it.

A strict parser of the format reads it whole: every line a HELP, a TYPE or
a sample; names and label names of the format's alphabet; label values
with only its three escapes; a TYPE (counter, gauge or histogram) once per metric,
before its samples, which are contiguous; no sample twice; counters named
`_total`; a histogram's samples NAME_bucket (with le), NAME_sum and
NAME_count, its buckets cumulative, +Inf equal to the count. Then
prometheus_client's own parser reads it too. The figures are the status's: the pipelines' samples and batch
sizes, a sample per worker, the attached clients (labels client,
pipeline, rank) with their batches and their names and pids (in
loaderd_client_info), the configured workers; and a client whose name
has a quote comes out with the format's escape.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

WORKERS = 2
NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_labels(text, where):
    labels, at = {}, 0
    while at < len(text):
        m = LABEL_RE.match(text, at)
        check(m is not None, "%s: bad label at %r" % (where, text[at:]))
        check(m.group(1) not in labels, "%s: label %s twice" % (where, m.group(1)))
        labels[m.group(1)] = re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), m.group(2))
        at = m.end()
        if at < len(text):
            check(text[at] == ",", "%s: %r after a label" % (where, text[at:]))
            at += 1
            check(at < len(text), "%s: a trailing comma" % where)
    return labels


def parse_exposition(text):
    """{name: {"type", "help", "samples": {labels tuple: value}}}; fails on
    anything the format does not allow."""
    check(text.endswith("\n"), "the exposition does not end with a newline")
    metrics, current, done = {}, None, set()
    for n, line in enumerate(text.splitlines(), 1):
        where = "line %d %r" % (n, line)
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            kind, rest = line[2:6], line[7:]
            name, _, arg = rest.partition(" ")
            check(NAME_RE.fullmatch(name) is not None and arg, "%s: bad %s" % (where, kind))
            check(name not in done, "%s: %s comes again after its samples" % (where, name))
            m = metrics.setdefault(name, {"type": None, "help": None, "samples": {}})
            check(not m["samples"], "%s: %s after the samples" % (where, kind))
            if kind == "TYPE":
                check(m["type"] is None and arg in ("counter", "gauge", "histogram"),
                      "%s: TYPE twice or unknown" % where)
                check(arg != "counter" or name.endswith("_total"), "%s: a counter not named _total" % where)
            else:
                check(m["help"] is None, "%s: HELP twice" % where)
            m["type" if kind == "TYPE" else "help"] = arg
            if current is not None and current != name:
                done.add(current)
            current = name
            continue
        check(not line.startswith("#") and line.strip() == line and line, "%s: not a sample" % where)
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        check(m is not None, "%s: not a sample" % where)
        name = m.group(1)
        for suffix in ("_bucket", "_sum", "_count"):  # a histogram's series
            base = name[:-len(suffix)]
            if name.endswith(suffix) and metrics.get(base, {}).get("type") == "histogram":
                name = base
                break
        check(name in metrics and metrics[name]["type"] and name not in done,
              "%s: a sample without its TYPE before it, or apart from its metric's" % where)
        if current != name:
            done.add(current)
            current = name
        labels = tuple(sorted(parse_labels(m.group(2) or "", where).items()))
        if m.group(1) != name:  # the histogram's series, by its own name
            labels = ((".series", m.group(1)),) + labels
        check(labels not in metrics[name]["samples"], "%s: the same sample twice" % where)
        try:
            value = float(m.group(3))
        except ValueError:
            check(False, "%s: value %r is not a number" % (where, m.group(3)))
        metrics[name]["samples"][labels] = value
    return metrics


def histograms(metrics, name):
    """{labels (without le): {"buckets": [(le, count)], "sum", "count"}}, its
    invariants checked: every series has its +Inf bucket, _sum and _count;
    buckets cumulative in le's order; +Inf equal to _count."""
    check(metrics.get(name, {}).get("type") == "histogram", "%s is not a histogram" % name)
    out = {}
    for labels, value in metrics[name]["samples"].items():
        series, rest = labels[0][1], dict(labels[1:])
        le = rest.pop("le", None)
        h = out.setdefault(tuple(sorted(rest.items())), {"buckets": [], "sum": None, "count": None})
        if series == name + "_bucket":
            check(le is not None, "%s%s: a bucket without le" % (series, labels))
            h["buckets"].append((float(le), value))  # float() reads "+Inf" too
        else:
            check(le is None, "%s%s: le on %s" % (series, labels, series))
            h["sum" if series == name + "_sum" else "count"] = value
    for labels, h in out.items():
        h["buckets"].sort()
        les = [le for le, _ in h["buckets"]]
        check(les and les[-1] == float("inf") and len(set(les)) == len(les),
              "%s %s: no +Inf bucket, or one le twice: %s" % (name, labels, les))
        counts = [n for _, n in h["buckets"]]
        check(all(a <= b for a, b in zip(counts, counts[1:])), "%s %s: buckets not cumulative: %s"
              % (name, labels, counts))
        check(h["count"] is not None and h["sum"] is not None and counts[-1] == h["count"],
              "%s %s: +Inf %s, _count %s" % (name, labels, counts[-1], h["count"]))
        check(h["sum"] >= 0 and (h["count"] > 0 or h["sum"] == 0), "%s %s: _sum %s for _count %s"
              % (name, labels, h["sum"], h["count"]))
    return out


def samples(metrics, name):
    check(name in metrics, "no metric %s" % name)
    return {k: v for k, v in metrics[name]["samples"].items()}


def body(env):
    raw = env.make_raw("raw.bin", 400, 32)
    tok = env.make_tokens("tok.bin", 2000, "uint16")
    cfg = env.config("mx", {
        "images": {"source": "raw:" + raw, "record_bytes": 32, "batch_size": 8},
        "text": {"source": "tokens:" + tok, "token_dtype": "uint16", "seq_len": 10, "batch_size": 4},
    }, workers=WORKERS)
    d = env.start_daemon(cfg)
    hold = ["--step-ms", "600000", "--quiet", "--depth", "2"]
    c1 = env.spawn_loaderctl(harness.consume_args(d.socket, "images", rank=1, world=2, epochs=1,
                                                  extra=hold + ["--name", 'say "hi"']))
    c2 = env.spawn_loaderctl(harness.consume_args(d.socket, "text", rank=0, world=1, epochs=1,
                                                  extra=hold + ["--name", "tok"]))
    st = d.wait_status(lambda s: len(s["clients"]) == 2 and all(c["sent"] >= 2 for c in s["clients"]), 20,
                       "two clients holding their batches")

    r = env.loaderctl(["--socket", d.socket, "metrics"], timeout_s=10)
    check(r.returncode == 0, "loaderctl metrics exited %d: %s" % (r.returncode, r.stderr))
    m = parse_exposition(r.stdout)
    print("%d metrics, %d samples" % (len(m), sum(len(x["samples"]) for x in m.values())))

    info = samples(m, "loaderd_info")
    check(list(info) == [(("pid", str(d.pid)), ("version", st["version"]))], "loaderd_info: %s" % info)
    check(samples(m, "loaderd_pipeline_samples") == {(("pipeline", "images"),): 400.0,
                                                     (("pipeline", "text"),): 199.0},
          "pipeline samples: %s" % samples(m, "loaderd_pipeline_samples"))
    check(samples(m, "loaderd_pipeline_batch_size") == {(("pipeline", "images"),): 8.0,
                                                        (("pipeline", "text"),): 4.0},
          "pipeline batch sizes: %s" % samples(m, "loaderd_pipeline_batch_size"))
    check(sorted(samples(m, "loaderd_worker_items_total")) == [(("worker", str(i)),) for i in range(WORKERS)],
          "worker samples: %s" % samples(m, "loaderd_worker_items_total"))
    check(samples(m, "loaderd_config_workers") == {(): float(WORKERS)}, "config workers")
    sent = samples(m, "loaderd_client_batches_sent_total")
    want = {(("client", str(c["id"])), ("pipeline", c["pipeline"]), ("rank", str(c["rank"]))):
            float(c["sent"]) for c in st["clients"]}
    check(set(sent) == set(want), "client labels: %s, expected %s" % (sorted(sent), sorted(want)))
    check(all(sent[k] >= want[k] for k in want), "client batches sent: %s, status had %s" % (sent, want))
    info = samples(m, "loaderd_client_info")
    want = {(("client", str(c["id"])), ("name", c["name"]), ("pid", str(c["pid"]))): 1.0 for c in st["clients"]}
    check(info == want, "loaderd_client_info: %s, expected %s" % (info, want))
    check(any(dict(k)["name"] == 'say \\"hi\\"' for k in info), "the quoted name's label: %s" % sorted(info))
    stages = {dict(k)["stage"] for k in samples(m, "loaderd_client_stage_seconds")}
    check(stages == {"fill", "order", "gpu", "held"}, "stages: %s" % stages)
    check(m["loaderd_client_wait_seconds_total"]["type"] == "counter"
          and m["loaderd_staging_slots_in_use"]["type"] == "gauge", "types")

    # The stages' histograms: every pipeline, every stage, the same buckets.
    hs = histograms(m, "loaderd_stage_seconds")
    want = {(("pipeline", p), ("stage", s)) for p in ("images", "text") for s in harness.STAGE_NAMES}
    check(set(hs) == want, "stage histograms: %s" % sorted(hs))
    bounds = {tuple(le for le, _ in h["buckets"]) for h in hs.values()}
    check(len(bounds) == 1 and len(next(iter(bounds))) == 23 and next(iter(bounds))[0] == 16e-6,
          "the histograms' bounds differ or are not 16 us * 2^i: %s" % bounds)
    for p in ("images", "text"):  # both clients took batches: samples were read
        check(hs[(("pipeline", p), ("stage", "read"))]["count"] >= 2, "pipeline %s: read %s" % (p, hs[(("pipeline", p), ("stage", "read"))]))
    for name in ("loaderd_client_data_wait_seconds_total", "loaderd_client_ready_wait_seconds_total",
                 "loaderd_client_bytes_total"):
        check(m[name]["type"] == "counter" and len(samples(m, name)) == 2, "%s: %s" % (name, samples(m, name)))
    busy = samples(m, "loaderd_worker_busy_ratio")
    check(sorted(busy) == [(("worker", str(i)),) for i in range(WORKERS)] and
          all(0 <= v <= 1 for v in busy.values()), "worker busy: %s" % busy)
    check(list(samples(m, "loaderd_workers_busy_ratio")) == [()], "workers busy")

    # Prometheus' own parser of the format reads it all, histograms whole.
    parser = harness.import_or_fail("test_metrics", "prometheus_client.parser")
    families = {f.name: f for f in parser.text_string_to_metric_families(r.stdout)}
    check(families["loaderd_stage_seconds"].type == "histogram", "prometheus_client: %s"
          % families["loaderd_stage_seconds"].type)
    check(len(families) == len(m), "prometheus_client read %d metrics, the strict parser %d"
          % (len(families), len(m)))
    for c in (c1, c2):
        c.kill()
        c.wait()
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_metrics", body)
