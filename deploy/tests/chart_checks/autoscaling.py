"""Autoscaling on the interactive lane: the HPA on kafka_lag and CPU, the
prometheus-adapter rule that makes kafka_lag, and KEDA's ScaledObjects in
its place.
"""

from __future__ import annotations

import yaml

from .objects import by_kind, one, worker_name
from .render import RELEASE, ROOT, resolved_models
from .report import check


@check("HPA mode: kafka_lag AverageValue 100, CPU 70 %, scale-down window 300 s, maxReplicas <= partitions")
def check_hpa(docs, values):
    assert not by_kind(docs, "ScaledObject"), "no ScaledObject in hpa mode"
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    models = resolved_models(values)
    assert len(hpas) == len(models)
    for name, partitions, maximum in models:
        hpa = one(docs, "HorizontalPodAutoscaler", worker_name(name))
        spec = hpa["spec"]
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": worker_name(name)}
        external = [m["external"] for m in spec["metrics"] if m["type"] == "External"]
        assert len(external) == 1, f"{name}: bulk lane scaling must be off by default: {external}"
        assert external[0]["metric"]["name"] == "kafka_lag"
        assert external[0]["metric"]["selector"]["matchLabels"]["topic"] == f"infer.{name}"
        assert external[0]["metric"]["selector"]["matchLabels"]["consumergroup"] == f"fleet.{name}"
        assert external[0]["target"] == {"type": "AverageValue", "averageValue": "100"}
        cpu = [m["resource"] for m in spec["metrics"] if m["type"] == "Resource"]
        assert cpu == [{"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}]
        assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
        assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
        assert spec["maxReplicas"] <= partitions, f"{name}: maxReplicas {spec['maxReplicas']} > {partitions} partitions"
        assert spec["maxReplicas"] == maximum and spec["minReplicas"] >= 1
    return ", ".join(f"{n}: max {m}/{p} partitions" for n, p, m in models)


@check("prometheus-adapter rule: kafka_consumergroup_lag -> kafka_lag, deduplicated per partition")
def check_adapter(docs):
    values = yaml.safe_load((ROOT / "helm/prometheus-adapter-values.yaml").read_text())
    rules = values["rules"]["external"]
    assert len(rules) == 1
    rule = rules[0]
    assert rule["seriesQuery"].startswith("kafka_consumergroup_lag{") and 'consumergroup=~"fleet\\\\..+"' in rule["seriesQuery"], rule["seriesQuery"]
    assert rule["name"] == {"matches": "^kafka_consumergroup_lag$", "as": "kafka_lag"}
    assert rule["metricsQuery"] == "sum by (consumergroup, topic) (max by (consumergroup, topic, partition) (<<.Series>>{<<.LabelMatchers>>}))"
    assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
    configmap = one(docs, "ConfigMap", f"{RELEASE}-prometheus-adapter")
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config == {"externalRules": rules}, "the chart's ConfigMap differs from helm/prometheus-adapter-values.yaml"


@check("KEDA mode: no HPA; ScaledObject per model with lagThreshold 100, its topic and group; TriggerAuthentication")
def check_keda(docs, values):
    assert not by_kind(docs, "HorizontalPodAutoscaler"), "KEDA mode must render no HPA"
    assert not [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("prometheus-adapter")]
    models = resolved_models(values)
    scaled = by_kind(docs, "ScaledObject")
    assert len(scaled) == len(models)
    auths = {a["metadata"]["name"] for a in by_kind(docs, "TriggerAuthentication")}
    for name, partitions, maximum in models:
        obj = one(docs, "ScaledObject", worker_name(name))
        spec = obj["spec"]
        assert spec["scaleTargetRef"]["name"] == worker_name(name)
        assert spec["maxReplicaCount"] <= partitions and spec["maxReplicaCount"] == maximum
        kafka = [t for t in spec["triggers"] if t["type"] == "kafka"]
        assert len(kafka) == 1, f"{name}: bulk lane scaling must be off by default: {kafka}"
        assert not [t for t in spec["triggers"] if t["type"] == "prometheus"]
        meta = kafka[0]["metadata"]
        assert meta["lagThreshold"] == "100"
        assert meta["topic"] == f"infer.{name}" and meta["consumerGroup"] == f"fleet.{name}"
        assert meta["offsetResetPolicy"] == "earliest"
        assert meta["allowIdleConsumers"] == "false" and meta["limitToPartitionsWithLag"] == "false"
        assert meta["activationLagThreshold"] == "10"
        assert meta["bootstrapServers"] == values["kafka"]["brokers"]
        if values["kafka"]["sasl"]["enabled"]:
            assert kafka[0]["authenticationRef"]["name"] in auths
            assert meta["sasl"] == "scram_sha512"
        cpu = [t for t in spec["triggers"] if t["type"] == "cpu"]
        assert cpu and cpu[0]["metadata"]["value"] == "70" and cpu[0]["metricType"] == "Utilization"
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    return ", ".join(f"{n}: max {m}/{p} partitions" for n, p, m in models)
