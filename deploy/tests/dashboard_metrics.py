#!/usr/bin/env python3
"""Prints every metric name the dashboard and the alert rules query.

One name per line, sorted, no duplicates, nothing else on stdout:

    fleet_batch_size
    fleet_requests_total
    kafka_consumergroup_lag
    nv_gpu_memory_used_bytes
    ...

Names are base names as a worker exports them in its # TYPE lines:
histogram series (`_bucket`, `_sum`, `_count`) are folded into their base
name, `up` (made by Prometheus, not by a target) and recording-rule names
(with a colon) are left out. A test can compare this list with a scrape of
a real worker (nv_gpu_* appear only on CUDA).

Usage: dashboard_metrics.py [--dashboard FILE] [--alerts FILE]
       (defaults: deploy/grafana/dashboards/fleet.json, deploy/prometheus/alerts.yml)
Only the standard library is needed, plus PyYAML when --alerts is read
(a plain-text fallback reads `expr:` blocks without it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DASHBOARD = ROOT / "deploy/grafana/dashboards/fleet.json"
DEFAULT_ALERTS = ROOT / "deploy/prometheus/alerts.yml"

# Words of PromQL that look like identifiers but are not metrics.
KEYWORDS = {
    # aggregations
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    # modifiers and operators
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "atan2",
    # literals
    "inf", "nan",
}
# Series Prometheus makes itself rather than scraping them from a target.
NOT_EXPORTED = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_series_added"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by one PromQL expression (Grafana variables allowed)."""
    text = expr
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)          # double-quoted strings
    text = re.sub(r"'(?:\\.|[^'\\])*'", "''", text)          # single-quoted strings
    text = re.sub(r"`[^`]*`", "``", text)                    # raw strings
    text = re.sub(r"\$\{[^}]*\}|\$\w+", " ", text)           # Grafana variables
    text = re.sub(r"\{[^}]*\}", " ", text)                   # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                  # ranges and subqueries
    # label lists after by/without/on/ignoring/group_left/group_right
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ", text)
    text = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?[a-zA-Z]*\b", " ", text)  # numbers, durations
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        rest = text[match.end():].lstrip()
        if rest.startswith("("):      # a function call
            continue
        if word.lower() in KEYWORDS or word in NOT_EXPORTED or ":" in word:
            continue
        names.add(base_name(word))
    return names


def base_name(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def dashboard_exprs(path: Path) -> list[str]:
    dashboard = json.loads(path.read_text())
    exprs = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    exprs.append(target["expr"])
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable.get("type") == "query" and isinstance(query, str):
            inner = re.fullmatch(r"\s*label_values\((.*?)(,\s*\w+)?\)\s*", query)
            exprs.append(inner.group(1) if inner else query)
    return exprs


def alert_exprs(path: Path) -> list[str]:
    try:
        import yaml  # type: ignore
    except ImportError:
        return re.findall(r"expr:\s*\|?\n?((?:.+\n?)+?)(?=\n\s*\w+:)", path.read_text())
    rules = yaml.safe_load(path.read_text())
    return [rule["expr"] for group in rules.get("groups", []) for rule in group.get("rules", []) if "expr" in rule]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dashboard", type=Path, default=DEFAULT_DASHBOARD)
    parser.add_argument("--alerts", type=Path, default=DEFAULT_ALERTS)
    args = parser.parse_args()
    names: set[str] = set()
    for expr in dashboard_exprs(args.dashboard) + alert_exprs(args.alerts):
        names |= metric_names(expr)
    sys.stdout.write("".join(f"{name}\n" for name in sorted(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
