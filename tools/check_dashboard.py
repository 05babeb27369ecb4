#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_dashboard: the Grafana dashboard (docs/grafana/loaderd.json)
against the metrics the daemon can emit, so that the two cannot drift.

    tools/check_dashboard.py [SOURCE_DIR] [DASHBOARD]

The metric names are those of the renderer's table, common/promtext.c
(every "loaderd_..." string in it: the table's rows and the few samples
written beside it); a histogram's _bucket, _sum and _count series count
as its name's. The dashboard must be an importable Grafana dashboard:
a title and uid, panels each with an id, a type, a gridPos and (except
rows) targets, the datasource an input ${DS_PROMETHEUS} of the
prometheus plugin, declared in __inputs. Every PromQL expression of a
target or a template variable is read by a small lexer: strings,
label matchers {...}, ranges [...] and grouping clauses (by, without,
on, ignoring, group_left, group_right) are set aside, a name followed by
"(" is a function (which must be one of PromQL's), and every other name
must be an operator keyword or a metric the renderer emits.

Prints one line per fault and exits 1 when there is any, else 0. Run by
CTest as unit.dashboard (tests/CMakeLists.txt), which also checks that a
dashboard naming a metric the renderer lacks is caught.
"""
import json
import os
import re
import sys

FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "count_over_time", "day_of_month", "day_of_week", "days_in_month", "delta", "deriv",
    "exp", "floor", "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "max_over_time",
    "min_over_time", "minute", "month", "predict_linear", "quantile_over_time", "rate", "resets",
    "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time",
    "sum_over_time", "time", "timestamp", "vector", "year",
    # aggregations
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile",
    # Grafana's template functions (label_values(metric, label) names a metric too)
    "label_values", "query_result",
}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def renderer_names(source_dir):
    with open(os.path.join(source_dir, "common", "promtext.c"), encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r'"(loaderd_[a-z0-9_]+)', text))


def metric_names(expr, faults, where):
    """The metric names expr uses; unknown functions go to faults."""
    names = []
    i, n = 0, len(expr)
    after_grouping = False
    while i < n:
        c = expr[i]
        if c in "\"'`":
            end = expr.find(c, i + 1)
            while end > 0 and expr[end - 1] == "\\":
                end = expr.find(c, end + 1)
            i = n if end < 0 else end + 1
            continue
        if c in "{[":
            close = "}" if c == "{" else "]"
            end = expr.find(close, i)
            if end < 0:
                faults.append("%s: unbalanced %r in %r" % (where, c, expr))
                return names
            i = end + 1
            continue
        if c == "(" and after_grouping:  # by (label, ...): labels, not metrics
            end = expr.find(")", i)
            i = n if end < 0 else end + 1
            after_grouping = False
            continue
        if c == "$":  # a Grafana variable ($__rate_interval, $instance)
            m = NAME.match(expr, i + 1)
            i = i + 1 + (len(m.group(0)) if m else 0)
            continue
        m = NAME.match(expr, i)
        if m and (i == 0 or not (expr[i - 1].isalnum() or expr[i - 1] in "_.")):
            word = m.group(0)
            j = m.end()
            while j < n and expr[j] == " ":
                j += 1
            k = NAME.match(expr, j)
            if word in GROUPING:
                after_grouping = True
            elif word == "label_values" and j < n and expr[j] == "(":
                # label_values(metric, label): the label is no metric
                end = expr.find(")", j)
                args = expr[j + 1:n if end < 0 else end].split(",")
                if len(args) == 2:
                    names.extend(metric_names(args[0], faults, where))
                i = n if end < 0 else end + 1
                continue
            elif (j < n and expr[j] == "(") or (k and k.group(0) in ("by", "without")):
                # a call, or an aggregation with its grouping first: sum by (x) (...)
                if word not in FUNCTIONS:
                    faults.append("%s: %s( is not a PromQL function: %r" % (where, word, expr))
            elif word not in KEYWORDS:
                names.append(word)
            i = m.end()
            continue
        i += 1
    return names


def check(source_dir, dashboard):
    faults = []
    known = renderer_names(source_dir)
    if len(known) < 20:
        faults.append("common/promtext.c: only %d metric names found; is its table still there?" % len(known))
    with open(dashboard, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            return ["%s: not JSON: %s" % (dashboard, e)]
    inputs = doc.get("__inputs", [])
    if not any(x.get("name") == "DS_PROMETHEUS" and x.get("type") == "datasource" and
               x.get("pluginId") == "prometheus" for x in inputs):
        faults.append("%s: no __inputs entry DS_PROMETHEUS (a prometheus datasource)" % dashboard)
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in doc:
            faults.append("%s: no %r" % (dashboard, key))
    exprs = []
    ids = set()
    for p in doc.get("panels", []):
        where = "%s: panel %r" % (dashboard, p.get("title"))
        for key in ("id", "type", "gridPos", "title"):
            if key not in p:
                faults.append("%s: no %r" % (where, key))
        if p.get("id") in ids:
            faults.append("%s: id %s twice" % (where, p.get("id")))
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
            faults.append("%s: its datasource is not ${DS_PROMETHEUS}" % where)
        if not p.get("targets"):
            faults.append("%s: no targets" % where)
        for t in p.get("targets", []):
            if not t.get("expr"):
                faults.append("%s: a target without an expression" % where)
            exprs.append((where, t.get("expr", "")))
    for v in doc.get("templating", {}).get("list", []):
        q = v.get("query")
        exprs.append(("%s: variable %r" % (dashboard, v.get("name")), q.get("query", "") if isinstance(q, dict) else q or ""))
    used = set()
    for where, expr in exprs:
        for name in metric_names(expr, faults, where):
            used.add(name)
            base = name
            for suffix in HISTOGRAM_SUFFIXES:
                if name.endswith(suffix) and name[:-len(suffix)] in known:
                    base = name[:-len(suffix)]
            if base not in known:
                faults.append("%s: %s is not a metric common/promtext.c emits: %r" % (where, name, expr))
    if not used:
        faults.append("%s: its expressions name no metric" % dashboard)
    return faults


def main(argv):
    source_dir = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dashboard = argv[2] if len(argv) > 2 else os.path.join(source_dir, "docs", "grafana", "loaderd.json")
    faults = check(source_dir, dashboard)
    for f in faults:
        print(f)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
