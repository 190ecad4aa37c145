#!/usr/bin/env python3
"""Offline checks of the Grafana dashboard and of the queries in the alert rules.

* deploy/grafana/dashboards/fleet.json parses, is a Grafana dashboard
  (schemaVersion, uid, unique panel ids, 24-column grid), has a `model`
  variable and the panels operators look for (lag, throughput, queue depth,
  TTL drops, batch size, padding efficiency, p99 latency, GPU memory, dead
  letters, cache hit ratio, serving version and swaps, load failures, error
  rate by code, in-flight limit, drain rate, OOM splits, producer refusals,
  HPA desired vs current replicas against lag, worker RSS, CPU and file
  descriptors, Kafka prefetch, reply queue and rebalances);
* every panel query is valid PromQL: the queries (Grafana variables
  replaced) are written as recording rules and run through
  `promtool check rules`, i.e. Prometheus' own parser;
* every lag sum, in the dashboard and in the alerts, first deduplicates
  with max by (consumergroup, topic, partition) (fleet-lag and every worker export
  the same series);
* every metric the dashboard and the alerts name (dashboard_metrics.py) is
  one the workers, fleet-lag or producers export (docs/metrics.md), or
  kube-state-metrics' HPA status;
* every alert's runbook_url names its heading in docs/operations.md.

Prints one line per check; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import Checks  # noqa: E402
from dashboard_metrics import alert_exprs, dashboard_exprs, metric_names  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/grafana/dashboards/fleet.json"
ALERTS = ROOT / "deploy/prometheus/alerts.yml"

# What workers and fleet-lag export (base names; histograms without suffixes).
EXPORTED = {
    "fleet_requests_total", "fleet_ttl_dropped_total", "fleet_queue_depth",
    "fleet_batch_size", "fleet_batch_tokens", "fleet_padding_efficiency",
    "fleet_queue_wait_seconds", "fleet_inference_seconds", "fleet_e2e_seconds",
    "fleet_image_decode_bytes_in_use", "fleet_dlq_total", "fleet_model_rows_total",
    "fleet_feature_cache_hits_total", "fleet_feature_cache_misses_total",
    "fleet_feature_cache_saved_seconds", "fleet_consumer_paused", "fleet_worker_ready",
    "kafka_consumergroup_lag", "kafka_consumergroup_lag_sum",
    "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes",
    "fleet_errors_total", "fleet_model_version", "fleet_model_swaps_total", "fleet_model_load_failures_total",
    "fleet_in_flight_limit", "fleet_drain_rate", "fleet_oom_splits_total",
    # librdkafka's statistics and the process's own figures (what a soak watches).
    "fleet_kafka_fetch_queue_messages", "fleet_kafka_fetch_queue_bytes",
    "fleet_kafka_reply_queue_ops", "fleet_kafka_rebalances_total",
    "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_threads",
    "fleet_heap_in_use_bytes",
    # Producers (fleet-producer's admission), when they serve metrics.
    "fleet_admission_refused_total", "fleet_admission_predicted_wait_seconds",
}
# Not the fleet's, but standard in a cluster that runs an HPA.
KUBE_STATE_METRICS = {
    "kube_horizontalpodautoscaler_status_desired_replicas",
    "kube_horizontalpodautoscaler_status_current_replicas",
}
OPERATIONS = ROOT / "docs/operations.md"

# Panel titles (lower case) that must exist, each with a metric it must query.
EXPECTED_PANELS = {
    "consumer lag by topic": "kafka_consumergroup_lag",
    "throughput by status": "fleet_requests_total",
    "queue depth": "fleet_queue_depth",
    "ttl drops": "fleet_ttl_dropped_total",
    "batch size": "fleet_batch_size",
    "padding efficiency": "fleet_padding_efficiency",
    "end-to-end latency p99": "fleet_e2e_seconds",
    "queue wait p99": "fleet_queue_wait_seconds",
    "inference p99": "fleet_inference_seconds",
    "gpu memory": "nv_gpu_memory_used_bytes",
    "dead letters": "fleet_dlq_total",
    "feature cache hit ratio": "fleet_feature_cache_hits_total",
    "serving version and swaps": "fleet_model_version",
    "load failures": "fleet_model_load_failures_total",
    "error rate by code": "fleet_errors_total",
    "in-flight limit and queue depth": "fleet_in_flight_limit",
    "drain rate": "fleet_drain_rate",
    "oom splits": "fleet_oom_splits_total",
    "producer refusals": "fleet_admission_refused_total",
    "hpa: desired vs current vs lag": "kube_horizontalpodautoscaler_status_desired_replicas",
    "worker memory (rss)": "process_resident_memory_bytes",
    "worker cpu": "process_cpu_seconds_total",
    "open file descriptors": "process_open_fds",
    "kafka prefetch": "fleet_kafka_fetch_queue_bytes",
    "consumer reply queue and rebalances": "fleet_kafka_rebalances_total",
}

GRAFANA_VARIABLES = {
    r"\$\{model(:[a-z]+)?\}|\$model\b": "minilm",
    r"\$__rate_interval\b": "5m",
    r"\$__interval\b": "1m",
    r"\$__range\b": "1h",
}

CHECKS = Checks("dashboard")
report = CHECKS.report


def all_panels(dashboard):
    out = []

    def walk(panels):
        for panel in panels:
            out.append(panel)
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    return out


def substitute(expr):
    for pattern, value in GRAFANA_VARIABLES.items():
        expr = re.sub(pattern, value, expr)
    assert "$" not in expr, f"unknown Grafana variable in {expr}"
    return expr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promtool", required=True)
    args = parser.parse_args()

    dashboard = json.loads(DASHBOARD.read_text())
    panels = all_panels(dashboard)
    queries = [p for p in panels if p.get("type") != "row"]

    def structure():
        assert 36 <= dashboard["schemaVersion"] <= 41, dashboard["schemaVersion"]
        assert dashboard["uid"] and dashboard["title"]
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), "panel ids must be unique"
        for p in panels:
            grid = p["gridPos"]
            assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, f"{p['title']}: gridPos {grid}"
        for p in queries:
            assert p["targets"], f"{p['title']}: no query"
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), f"{p['title']}: duplicate refIds"
            assert p["datasource"]["uid"] == "${datasource}", f"{p['title']}: datasource not templated"
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        model = variables["model"]
        assert model["type"] == "query" and model["multi"] and model["includeAll"]
        return f"{len(queries)} panels, schemaVersion {dashboard['schemaVersion']}"

    def expected_panels():
        titles = {p["title"].lower(): p for p in queries}
        for title, metric in EXPECTED_PANELS.items():
            assert title in titles, f"no panel {title!r}"
            names = set().union(*(metric_names(t["expr"]) for t in titles[title]["targets"]))
            assert metric in names, f"panel {title!r} does not query {metric}"
        p99 = [t["expr"] for t in titles["end-to-end latency p99"]["targets"]]
        assert any("histogram_quantile(0.99, sum by (le, model, lane) (rate(fleet_e2e_seconds_bucket" in e for e in p99), p99
        return f"{len(EXPECTED_PANELS)} panels present"

    def promql_valid():
        rules = [{"record": f"dashboard:panel{p['id']}_{t['refId'].lower()}:check", "expr": substitute(t["expr"])}
                 for p in queries for t in p["targets"]]
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
            yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, handle)
        proc = subprocess.run([args.promtool, "check", "rules", handle.name], capture_output=True, text=True)
        Path(handle.name).unlink()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return f"{len(rules)} queries parsed by promtool"

    def lag_deduplicated():
        exprs = [t["expr"] for p in queries for t in p["targets"]] + alert_exprs(ALERTS)
        checked = 0
        for expr in exprs:
            if "kafka_consumergroup_lag" in expr and "kafka_consumergroup_lag_sum" not in expr:
                flat = re.sub(r"\s+", " ", expr)
                assert "max by (consumergroup, topic, partition)" in flat or flat.startswith("max by (topic, partition)"), \
                    f"lag not deduplicated per partition: {flat}"
                checked += 1
        assert checked >= 3
        return f"{checked} lag queries"

    def metrics_exported():
        names = set()
        for expr in dashboard_exprs(DASHBOARD) + alert_exprs(ALERTS):
            names |= metric_names(expr)
        unknown = sorted(names - EXPORTED - KUBE_STATE_METRICS)
        assert not unknown, f"not exported by the fleet: {unknown}"
        return f"{len(names)} metric names"

    report("dashboard JSON: structure, variables, unique ids, grid", structure)
    report("dashboard has the expected panels", expected_panels)
    report("dashboard queries are valid PromQL", promql_valid)
    report("every lag sum deduplicates per partition first (dashboard and alerts)", lag_deduplicated)
    def runbooks():
        rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r]
        headings = {m.group(1).lower() for m in re.finditer(r"^### (\S+)\s*$", OPERATIONS.read_text(), re.M)}
        for rule in rules:
            url = rule.get("annotations", {}).get("runbook_url", "")
            assert url == f"docs/operations.md#{rule['alert'].lower()}", f"{rule['alert']}: runbook_url {url!r}"
            assert rule["alert"].lower() in headings, f"docs/operations.md has no runbook heading for {rule['alert']}"
        return f"{len(rules)} alerts"

    report("every metric in the dashboard and alerts is one the fleet exports", metrics_exported)
    report("every alert's runbook_url names its runbook in docs/operations.md", runbooks)
    return CHECKS.summary()


if __name__ == "__main__":
    sys.exit(main())
