"""The bulk lane's autoscaling (autoscaling.bulk): its scenarios, its own
lag metric (HPA) or trigger (KEDA), its cap, and its queries run through
promtool on sample series.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from .objects import arg_after, one, topic_job_args, worker_name
from .render import RELEASE, ROOT, chart_values, resolved_models
from .report import check


BULK_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def bulk_scenarios():
    """label -> extra values of the bulk-lane scenarios (rendered with the others)."""
    return {
        # HPA, capped at 3 replicas, 500 bulk messages per replica; the bulk
        # topic's own retention.
        "bulk-hpa": {"autoscaling": {"bulk": {"enabled": True, "lagThreshold": 500, "maxReplicas": 3}},
                     "topics": {"bulkRetentionMs": 1209600000}},
        # KEDA without a cap: the Kafka scaler on the bulk topic.
        "bulk-keda": {"autoscaling": {"mode": "keda", "bulk": {"enabled": True, "lagThreshold": 500}}},
        # KEDA with a cap: KEDA's prometheus scaler on the clamped lag; a
        # model with fewer partitions than the cap is capped at its own max.
        "bulk-keda-capped": {"autoscaling": {"mode": "keda", "bulk": {
                                 "enabled": True, "lagThreshold": 500, "maxReplicas": 3,
                                 "prometheusServerAddress": BULK_PROMETHEUS}},
                             "models": [{"name": "minilm", "partitions": 8}, {"name": "small", "partitions": 2}]},
    }


def bulk_adapter_query(cap_lag):
    inner = "sum(max by (consumergroup, topic, partition) (<<.Series>>{<<.LabelMatchers>>})) or vector(0)"
    return f"clamp_max({inner}, {cap_lag})" if cap_lag else inner


def bulk_keda_query(group, topic, cap_lag):
    inner = (f'sum(max by (consumergroup, topic, partition) (kafka_consumergroup_lag{{consumergroup="{group}",'
             f'topic="{topic}"}})) or vector(0)')
    return f"clamp_max({inner}, {cap_lag})"


def external_metrics(hpa):
    return {m["external"]["metric"]["name"]: m["external"] for m in hpa["spec"]["metrics"] if m["type"] == "External"}


@check("lanes, HPA: bulk lag is a metric of its own (kafka_lag_bulk on infer.<model>.bulk, AverageValue 500) beside the unchanged kafka_lag; the adapter rule clamps it at 500 x 3")
def check_bulk_hpa(docs, values):
    models = resolved_models(values)
    for name, partitions, maximum in models:
        hpa = one(docs, "HorizontalPodAutoscaler", worker_name(name))
        metrics = external_metrics(hpa)
        assert set(metrics) == {"kafka_lag", "kafka_lag_bulk"}, sorted(metrics)
        # The interactive metric is exactly what it was without lanes.
        assert metrics["kafka_lag"]["metric"]["selector"]["matchLabels"] == {"topic": f"infer.{name}", "consumergroup": f"fleet.{name}"}
        assert metrics["kafka_lag"]["target"] == {"type": "AverageValue", "averageValue": "100"}
        bulk = metrics["kafka_lag_bulk"]
        assert bulk["metric"]["selector"]["matchLabels"] == {"topic": f"infer.{name}.bulk", "consumergroup": f"fleet.{name}"}, bulk
        assert bulk["target"] == {"type": "AverageValue", "averageValue": "500"}, bulk
        # Two metrics, not one sum: the HPA takes the larger proposal.
        assert [m["type"] for m in hpa["spec"]["metrics"]] == ["External", "External", "Resource"]
        assert hpa["spec"]["maxReplicas"] == maximum <= partitions
    config = yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-prometheus-adapter")["data"]["config.yaml"])
    rules = config["externalRules"]
    shipped = yaml.safe_load((ROOT / "helm/prometheus-adapter-values.yaml").read_text())["rules"]["external"]
    assert rules[: len(shipped)] == shipped, "the kafka_lag rule must stay as shipped"
    bulk_rules = [r for r in rules if r["name"]["as"] == "kafka_lag_bulk"]
    assert len(bulk_rules) == 1 and len(rules) == len(shipped) + 1, rules
    rule = bulk_rules[0]
    assert rule["seriesQuery"] == 'kafka_consumergroup_lag{consumergroup=~"fleet\\\\..+",topic=~".+\\\\.bulk"}', rule["seriesQuery"]
    assert rule["name"]["matches"] == "^kafka_consumergroup_lag$"
    assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}}}
    assert rule["metricsQuery"] == bulk_adapter_query(1500), rule["metricsQuery"]
    job = topic_job_args(docs)
    assert all(arg_after(c, "--bulk-retention-ms") == "1209600000" for c in job.values()), job
    return f"{len(models)} HPAs; adapter clamp 1500"


@check("lanes, HPA without bulk.maxReplicas: the bulk rule is not clamped; an adapter ConfigMap per release prefix")
def check_bulk_hpa_uncapped(helm):
    _, docs = helm.template({"autoscaling": {"bulk": {"enabled": True}},
                             "names": {"topicPrefix": "blue.infer.", "groupPrefix": "blue.fleet.", "redisPrefix": "blue:"}})
    hpa = one(docs, "HorizontalPodAutoscaler", worker_name("minilm"))
    bulk = external_metrics(hpa)["kafka_lag_bulk"]
    assert bulk["metric"]["selector"]["matchLabels"] == {"topic": "blue.infer.minilm.bulk", "consumergroup": "blue.fleet.minilm"}
    assert bulk["target"]["averageValue"] == str(chart_values()["autoscaling"]["bulk"]["lagThreshold"])
    rules = yaml.safe_load(one(docs, "ConfigMap", f"{RELEASE}-prometheus-adapter")["data"]["config.yaml"])["externalRules"]
    rule = next(r for r in rules if r["name"]["as"] == "kafka_lag_bulk")
    assert rule["metricsQuery"] == bulk_adapter_query(None), rule["metricsQuery"]
    assert 'consumergroup=~"blue\\\\.fleet\\\\..+"' in rule["seriesQuery"], rule["seriesQuery"]
    # The bulk topic is not counted by the interactive rule's HPA selector,
    # and the interactive topic not by the bulk rule's series query.
    assert "topic=~\".+\\\\.bulk\"" in rule["seriesQuery"]


@check("lanes, KEDA: a second kafka trigger on infer.<model>.bulk (lagThreshold 500), the interactive trigger unchanged")
def check_bulk_keda(docs, values):
    models = resolved_models(values)
    for name, _, _ in models:
        spec = one(docs, "ScaledObject", worker_name(name))["spec"]
        kafka = [t["metadata"] for t in spec["triggers"] if t["type"] == "kafka"]
        assert [m["topic"] for m in kafka] == [f"infer.{name}", f"infer.{name}.bulk"], kafka
        interactive, bulk = kafka
        assert interactive["lagThreshold"] == "100" and bulk["lagThreshold"] == "500"
        assert interactive["consumerGroup"] == bulk["consumerGroup"] == f"fleet.{name}"
        assert bulk["allowIdleConsumers"] == "false" and bulk["offsetResetPolicy"] == "earliest"
        assert bulk["activationLagThreshold"] == interactive["activationLagThreshold"]
        assert {k: v for k, v in interactive.items() if k not in ("topic", "lagThreshold")} == \
            {k: v for k, v in bulk.items() if k not in ("topic", "lagThreshold")}, "the two kafka triggers differ in more than topic and threshold"
        assert [t["type"] for t in spec["triggers"]] == ["kafka", "kafka", "cpu"]
    return f"{len(models)} ScaledObjects"


@check("lanes, KEDA with bulk.maxReplicas: the bulk trigger is KEDA's prometheus scaler on the lag clamped at 500 x min(3, the model's max)")
def check_bulk_keda_capped(docs):
    caps = {"minilm": 3, "small": 2}
    for name, cap in caps.items():
        spec = one(docs, "ScaledObject", worker_name(name))["spec"]
        assert [t["type"] for t in spec["triggers"]] == ["kafka", "prometheus", "cpu"], spec["triggers"]
        kafka = next(t for t in spec["triggers"] if t["type"] == "kafka")["metadata"]
        assert kafka["topic"] == f"infer.{name}" and kafka["lagThreshold"] == "100", kafka
        trigger = next(t for t in spec["triggers"] if t["type"] == "prometheus")
        assert trigger.get("metricType") == "AverageValue", trigger
        meta = trigger["metadata"]
        assert meta["serverAddress"] == BULK_PROMETHEUS
        assert meta["threshold"] == "500"
        assert meta["query"] == bulk_keda_query(f"fleet.{name}", f"infer.{name}.bulk", 500 * cap), meta["query"]
        assert "authenticationRef" not in trigger, "the prometheus trigger must not carry the Kafka credentials"
    return ", ".join(f"{n}: at most {c}" for n, c in caps.items())


def promtool_test_bulk_queries(promtool, adapter_query, keda_query):
    """Runs the bulk queries on sample series with `promtool test rules`:
    the adapter's (its selector filled in as the adapter does) and KEDA's."""
    selector = 'kafka_consumergroup_lag{topic="infer.minilm.bulk",consumergroup="fleet.minilm"}'
    adapter = adapter_query.replace("<<.Series>>{<<.LabelMatchers>>}", selector)
    absent = adapter.replace('fleet.minilm"', 'fleet.nobulk"').replace("infer.minilm.bulk", "infer.nobulk.bulk")
    uncapped = bulk_adapter_query(None).replace("<<.Series>>{<<.LabelMatchers>>}", selector)

    def series(job, topic, partition, lane, value):
        return {"series": f'kafka_consumergroup_lag{{job="{job}",consumergroup="fleet.minilm",topic="{topic}",'
                          f'partition="{partition}",lane="{lane}"}}', "values": f"{value}x5"}

    tmp = Path(tempfile.mkdtemp())
    # The adapter's query as a recording rule too: promtool parses it as
    # Prometheus would load it.
    (tmp / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "fleet-bulk-check", "rules": [
        {"record": "fleet:bulk_lag:adapter", "expr": adapter}]}]}, sort_keys=False))
    tests = {
        "rule_files": [str(tmp / "rules.yml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # fleet-lag and a worker export the same bulk partitions.
                series("fleet-lag", "infer.minilm.bulk", 0, "bulk", 3000),
                series("fleet-worker", "infer.minilm.bulk", 0, "bulk", 3000),
                series("fleet-lag", "infer.minilm.bulk", 1, "bulk", 2000),
                # The interactive lane: never part of the bulk metric.
                series("fleet-lag", "infer.minilm", 0, "interactive", 40000),
            ],
            "promql_expr_test": [
                {"expr": uncapped, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 5000}]},
                {"expr": adapter, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 1500}]},
                {"expr": "fleet:bulk_lag:adapter", "eval_time": "2m",
                 "exp_samples": [{"labels": 'fleet:bulk_lag:adapter', "value": 1500}]},
                {"expr": keda_query, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 1500}]},
                # No bulk topic (no series): 0, a value, not "no data".
                {"expr": absent, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 0}]},
            ],
        }],
    }
    (tmp / "test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    try:
        proc = subprocess.run([promtool, "test", "rules", str(tmp / "test.yml")], capture_output=True, text=True)
    finally:
        shutil.rmtree(tmp)
    assert proc.returncode == 0, f"promtool test rules failed:\n{proc.stdout}{proc.stderr}"


@check("lanes: the bulk queries (adapter rule, KEDA trigger) on sample series: deduplicated per partition, clamped, 0 without a bulk topic")
def check_bulk_queries(hpa_docs, keda_docs):
    promtool = os.environ.get("FLEET_PROMTOOL", "")
    if not promtool or not os.access(promtool, os.X_OK):
        return "skipped: FLEET_PROMTOOL is not set (scripts/test-deploy.sh sets it)"
    rules = yaml.safe_load(one(hpa_docs, "ConfigMap", f"{RELEASE}-prometheus-adapter")["data"]["config.yaml"])["externalRules"]
    adapter_query = next(r for r in rules if r["name"]["as"] == "kafka_lag_bulk")["metricsQuery"]
    spec = one(keda_docs, "ScaledObject", worker_name("minilm"))["spec"]
    keda_query = next(t for t in spec["triggers"] if t["type"] == "prometheus")["metadata"]["query"]
    promtool_test_bulk_queries(promtool, adapter_query, keda_query)
    return "5 expressions evaluated by promtool"
