#!/usr/bin/env python3
"""Offline checks of the Helm chart (helm/fleet), run by scripts/test-deploy.sh.

Renders the chart with `helm template` in several scenarios and checks:

* every rendered object against the Kubernetes OpenAPI schemas of
  kubernetes-validate (strict: unknown fields fail) for one Kubernetes
  version; the custom resources it has no schema for (ServiceMonitor,
  PrometheusRule, ScaledObject, TriggerAuthentication) are checked
  structurally here instead (required fields and their types);
* what autoscaling must look like: the HPA scales on the external metric
  kafka_lag (AverageValue 100) and CPU 70 %, scales down after a 300 s
  window, and never past the topic's partitions; in KEDA mode no HPA is
  rendered and each ScaledObject reads the model's topic and group with
  lagThreshold 100;
* lanes (autoscaling.bulk): off by default (one lag metric/trigger, on the
  interactive topic); on, the bulk topic's lag is a metric (HPA, with its
  adapter rule) or trigger (KEDA) of its own with its own target, and a
  bulk.maxReplicas cap clamps it (adapter rule, or KEDA's prometheus
  scaler); with promtool (FLEET_PROMTOOL) the bulk queries are run on
  sample series: deduplicated, clamped, 0 when there is no bulk topic;
* that asking for more replicas than partitions (and other bad values)
  makes `helm template` fail;
* that no secret value reaches anything but a Secret (NOTES.txt included);
* Redis TLS (redis.tls): every worker Deployment, and nothing else, mounts
  the TLS Secret read-only and names its files in FLEET_REDIS_CA_FILE (and
  FLEET_REDIS_CLIENT_CERT/KEY for mutual TLS); nothing of it when disabled;
* topic settings (broker defaults unless set), a release's own name
  prefixes in every workload, HPA selector, alert and adapter rule, Strimzi
  KafkaTopic resources, and the Redis ACL users' ConfigMap;
* workers, fleet-lag, the topic job, probes, security settings, and that the
  PrometheusRule, adapter rule and dashboard ConfigMap carry the repository's
  own files.

Prints one line per check; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm/fleet"
RELEASE = "fleet"
NAMESPACE = "fleet"

CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
}

# Values that must only ever appear inside Secrets.
SENTINELS = {
    "kafka.sasl.password": "sasl-pw-Zq8XrT1",
    "kafka.tls.key": "-----BEGIN PRIVATE KEY-----\nKEY-Zq8XrT2\n-----END PRIVATE KEY-----",
    "redis.password": "redis-pw-Zq8XrT3",
}

RESULTS: list[tuple[bool, str]] = []


def check(name):
    def wrap(fn):
        def run(*args, **kwargs):
            try:
                detail = fn(*args, **kwargs)
                RESULTS.append((True, name))
                print(f"  ok    {name}" + (f" ({detail})" if detail else ""))
            except Exception as error:  # noqa: BLE001 - report every failure, keep going
                RESULTS.append((False, name))
                print(f"  FAIL  {name}: {error}")
                if not isinstance(error, AssertionError):
                    traceback.print_exc()
        return run
    return wrap


class Helm:
    def __init__(self, binary: str, chart: Path):
        self.binary = binary
        self.chart = chart

    def template(self, values: dict | None = None, files: list[Path] = (), expect_failure=False):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
            yaml.safe_dump(values or {}, handle)
            extra = handle.name
        cmd = [self.binary, "template", RELEASE, str(self.chart), "--namespace", NAMESPACE]
        for f in files:
            cmd += ["-f", str(f)]
        cmd += ["-f", extra]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        Path(extra).unlink()
        stderr = "\n".join(l for l in proc.stderr.splitlines() if "found symbolic link" not in l)
        if expect_failure:
            return proc.returncode, stderr
        if proc.returncode != 0:
            raise AssertionError(f"helm template failed: {stderr.strip()}")
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return proc.stdout, docs


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def one(docs, kind, name):
    found = [d for d in docs if d.get("kind") == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def chart_values():
    return yaml.safe_load((CHART / "values.yaml").read_text())


def resolved_models(values):
    """(name, partitions, max) per model, as the chart resolves them."""
    defaults = values["modelDefaults"]
    out = []
    for model in values["models"]:
        partitions = int(model.get("partitions", defaults["partitions"]))
        replicas = {**defaults.get("replicas", {}), **model.get("replicas", {})}
        maximum = replicas.get("max")
        maximum = partitions if maximum in (None, "") else int(maximum)
        out.append((model["name"], partitions, maximum))
    return out


def dns(name):
    return name.replace("_", "-")


def worker_name(model):
    return f"{RELEASE}-worker-{dns(model)}"


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


# --------------------------------------------------------------- schemas

def validate_builtin(doc, version):
    import kubernetes_validate  # noqa: WPS433 - only in the ops venv

    kubernetes_validate.validate(doc, version, strict=True)


def require(obj, path, kind):
    cur = obj
    for part in path.split("."):
        assert isinstance(cur, dict) and part in cur, f"missing {path}"
        cur = cur[part]
    assert isinstance(cur, kind), f"{path} should be {kind.__name__}, is {type(cur).__name__}"
    return cur


def validate_crd(doc):
    kind = doc["kind"]
    require(doc, "metadata.name", str)
    spec = require(doc, "spec", dict)
    if kind == "ServiceMonitor":
        require(spec, "selector.matchLabels", dict)
        for endpoint in require(spec, "endpoints", list):
            assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "relabelings", "metricRelabelings", "scheme", "honorLabels"}, endpoint
            assert isinstance(endpoint.get("port"), str)
            for relabel in endpoint.get("relabelings", []):
                assert set(relabel) <= {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}, relabel
    elif kind == "PrometheusRule":
        for group in require(spec, "groups", list):
            assert isinstance(group.get("name"), str)
            for rule in group["rules"]:
                assert ("alert" in rule) != ("record" in rule) and isinstance(rule["expr"], str), rule
                assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule
    elif kind == "ScaledObject":
        target = require(spec, "scaleTargetRef", dict)
        assert isinstance(target.get("name"), str)
        assert set(spec) <= {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
                             "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "advanced", "triggers",
                             "fallback"}, sorted(spec)
        for key in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount"):
            assert isinstance(spec.get(key), int), key
        behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
        if behavior is not None:
            # The same shape as an HPA's behavior: check it with the HPA schema.
            probe = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": {"name": "probe"},
                     "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 1,
                              "behavior": behavior}}
            validate_builtin(probe, ARGS.kubernetes_version)
        for trigger in require(spec, "triggers", list):
            assert isinstance(trigger.get("type"), str)
            metadata = require(trigger, "metadata", dict)
            assert all(isinstance(v, str) for v in metadata.values()), f"trigger metadata values must be strings: {metadata}"
            if "authenticationRef" in trigger:
                require(trigger, "authenticationRef.name", str)
    elif kind == "KafkaTopic":
        assert isinstance(doc["metadata"].get("labels", {}).get("strimzi.io/cluster"), str), "strimzi.io/cluster label"
        assert set(spec) <= {"topicName", "partitions", "replicas", "config"}, sorted(spec)
        assert isinstance(spec.get("topicName"), str) and isinstance(spec.get("partitions"), int), spec
        assert isinstance(spec.get("replicas", 1), int), spec
        assert all(isinstance(v, str) for v in spec.get("config", {}).values()), "config values must be strings"
    elif kind == "TriggerAuthentication":
        for ref in require(spec, "secretTargetRef", list):
            assert set(ref) == {"parameter", "name", "key"}, ref
            assert all(isinstance(v, str) and v for v in ref.values()), ref


def validate_all(docs, label):
    builtin = crds = 0
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key in CRD_KINDS:
            try:
                validate_crd(doc)
            except AssertionError as error:
                raise AssertionError(f"{label}: {key[1]} {doc['metadata']['name']}: {error}") from None
            crds += 1
        else:
            try:
                validate_builtin(doc, ARGS.kubernetes_version)
            except Exception as error:  # kubernetes_validate's own error types
                message = getattr(error, "message", str(error))
                path = ".".join(str(p) for p in getattr(error, "path", []))
                raise AssertionError(f"{label}: {key[1]} {doc['metadata']['name']}: {path}: {message}") from None
            builtin += 1
    return f"{builtin} objects against Kubernetes {ARGS.kubernetes_version}, {crds} custom resources structurally"


# --------------------------------------------------------------- checks

@check("default values: workers, services, PDBs, fleet-lag, topic job")
def check_workloads(docs, values):
    models = resolved_models(values)
    drain = int(values["modelDefaults"]["drainTimeoutSeconds"])
    for name, partitions, _ in models:
        deployment = one(docs, "Deployment", worker_name(name))
        pod = deployment["spec"]["template"]["spec"]
        worker = next(c for c in pod["containers"] if c["name"] == "worker")
        env = env_of(worker)
        assert env["FLEET_MODEL"]["value"] == name
        assert env["FLEET_MODEL_REPO"]["value"] == "/models"
        assert env["FLEET_METRICS_ADDR"]["value"] == "0.0.0.0:9464"
        assert env["FLEET_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["FLEET_DRAIN_TIMEOUT"]["value"] == f"{drain}s"
        assert int(env["FLEET_INTRA_OP_THREADS"]["value"]) >= 1
        for var in ("FLEET_BROKERS", "FLEET_REDIS_URL", "FLEET_DEVICE"):
            assert var in env, var
        assert pod["terminationGracePeriodSeconds"] > drain, "grace period must exceed the drain"
        assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert worker["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
        startup = worker["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "startup probe must allow warm-up"
        for probe in ("startup", "liveness", "readiness"):
            assert worker[f"{probe}Probe"]["timeoutSeconds"] == int(values["probes"][probe]["timeoutSeconds"]), probe
        assert worker["ports"][0]["containerPort"] == 9464
        security = worker["securityContext"]
        assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
        assert security["capabilities"]["drop"] == ["ALL"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        mounts = {m["mountPath"]: m for m in worker["volumeMounts"]}
        assert mounts["/models"].get("readOnly") is True
        assert "/tmp" in mounts
        init = pod["initContainers"][0]
        assert env_of(init)["FLEET_MODEL"]["value"] == name and "/repo" in init["command"][-1]
        assert "replicas" not in deployment["spec"], "an autoscaled Deployment must leave replicas to the autoscaler"
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        service = one(docs, "Service", worker_name(name))
        assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
        pdb = one(docs, "PodDisruptionBudget", worker_name(name))
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    lag = one(docs, "Deployment", f"{RELEASE}-lag")
    container = lag["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert container["command"] == ["fleet-lag", "serve"], container["command"]
    assert env["FLEET_LAG_MODELS"]["value"] == ",".join(n for n, _, _ in models)
    assert env["FLEET_METRICS_ADDR"]["value"] == "0.0.0.0:9466"
    assert container["ports"][0]["containerPort"] == 9466
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    job = one(docs, "Job", f"{RELEASE}-topics")
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert sorted(hooks) == ["pre-install", "pre-upgrade"], hooks
    commands = [c["command"] for c in job["spec"]["template"]["spec"]["containers"]]
    for name, partitions, _ in models:
        expected = ["fleet-produce", "--brokers", "$(FLEET_BROKERS)", "topics", "--model", name, "--partitions", str(partitions)]
        assert any(c[: len(expected)] == expected for c in commands), f"no topics command for {name}: {commands}"
    return f"{len(models)} models"


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


@check("PrometheusRule and ServiceMonitors carry deploy/prometheus/alerts.yml and the scrape jobs")
def check_monitoring(docs):
    rule = one(docs, "PrometheusRule", RELEASE)
    alerts = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], "PrometheusRule differs from deploy/prometheus/alerts.yml"
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "ServiceMonitor")}
    jobs = {}
    for name, monitor in monitors.items():
        endpoint = monitor["spec"]["endpoints"][0]
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        jobs[name] = [r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
    assert jobs == {f"{RELEASE}-worker": ["fleet-worker"], f"{RELEASE}-lag": ["fleet-lag"]}, jobs
    selector = monitors[f"{RELEASE}-worker"]["spec"]["selector"]["matchLabels"]
    services = [s for s in by_kind(docs, "Service") if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())]
    assert len(services) == len(resolved_models(chart_values())), "worker ServiceMonitor must select every worker Service"


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


# --------------------------------------------------------------- lanes

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


def secret_scenario():
    return {
        "kafka": {
            "sasl": {"enabled": True, "mechanism": "SCRAM-SHA-512", "username": "fleet",
                     "password": SENTINELS["kafka.sasl.password"]},
            "tls": {"enabled": True, "ca": "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----",
                    "cert": "-----BEGIN CERTIFICATE-----\nCERT\n-----END CERTIFICATE-----",
                    "key": SENTINELS["kafka.tls.key"]},
            "extraProperties": {"client.rack": "zone-a"},
        },
        "redis": {"url": "redis://redis-master:6379/0", "username": "fleet",
                  "password": SENTINELS["redis.password"]},
    }


def assert_no_secret_values(text_docs, where):
    needles = []
    for value in SENTINELS.values():
        for piece in [value] + value.splitlines():
            if len(piece) >= 8 and "-----" not in piece:
                needles += [piece, base64.b64encode(piece.encode()).decode()]
    for label, text in text_docs:
        for needle in needles:
            assert needle not in text, f"a secret value appears in {where} {label}"


@check("secrets: SASL/TLS/Redis values only inside Secrets; clients mount kafka.properties; Redis URL by secretKeyRef")
def check_secrets(raw, docs, keda_docs, notes):
    secrets = {s["metadata"]["name"]: s for s in by_kind(docs, "Secret")}
    assert set(secrets) == {f"{RELEASE}-kafka", f"{RELEASE}-kafka-hook", f"{RELEASE}-redis"}, sorted(secrets)
    properties = secrets[f"{RELEASE}-kafka"]["stringData"]["kafka.properties"].splitlines()
    for line in ("security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512", "sasl.username=fleet",
                 f"sasl.password={SENTINELS['kafka.sasl.password']}", "ssl.ca.location=/etc/fleet/kafka/ca.crt",
                 "ssl.certificate.location=/etc/fleet/kafka/tls.crt", "ssl.key.location=/etc/fleet/kafka/tls.key",
                 "client.rack=zone-a"):
        assert line in properties, f"kafka.properties lacks {line!r}"
    assert all("=" in line for line in properties if line.strip()), "kafka.properties: key=value lines only"
    url = secrets[f"{RELEASE}-redis"]["stringData"]["redis-url"]
    assert url == f"redis://fleet:{SENTINELS['redis.password']}@redis-master:6379/0", url
    hook = secrets[f"{RELEASE}-kafka-hook"]["metadata"]["annotations"]
    assert int(hook["helm.sh/hook-weight"]) < int(one(docs, "Job", f"{RELEASE}-topics")["metadata"]["annotations"]["helm.sh/hook-weight"])
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")]
    for pod in pods:
        for container in pod["containers"]:
            env = env_of(container)
            assert env["FLEET_KAFKA_PROPERTIES_FILE"]["value"] == "/etc/fleet/kafka/kafka.properties"
            assert any(m["mountPath"] == "/etc/fleet/kafka" and m["name"] == "kafka" for m in container["volumeMounts"])
            if "FLEET_REDIS_URL" in env:
                assert env["FLEET_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": f"{RELEASE}-redis", "key": "redis-url"}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["kafka"]["secret"]["secretName"] in (f"{RELEASE}-kafka", f"{RELEASE}-kafka-hook")
    auth = one(keda_docs, "TriggerAuthentication", f"{RELEASE}-kafka")
    params = {r["parameter"]: r["key"] for r in auth["spec"]["secretTargetRef"]}
    assert params == {"username": "username", "password": "password", "ca": "ca.crt", "cert": "tls.crt", "key": "tls.key"}, params
    for scenario, scenario_docs in (("hpa", docs), ("keda", keda_docs)):
        assert_no_secret_values([(f"{d['kind']} {d['metadata']['name']}", yaml.safe_dump(d))
                                 for d in scenario_docs if d["kind"] != "Secret"], f"{scenario} mode,")
    assert_no_secret_values([("NOTES.txt", notes)], "the rendered")
    for value in SENTINELS.values():
        needle = value.splitlines()[1] if "\n" in value else value
        assert needle in raw, "sentinel missing: the check would prove nothing"
    return f"{len(pods)} pods checked"


REDIS_TLS_DIR = "/etc/fleet/redis-tls"
REDIS_TLS_ENV = ("FLEET_REDIS_CA_FILE", "FLEET_REDIS_CLIENT_CERT", "FLEET_REDIS_CLIENT_KEY")


def redis_tls_scenarios():
    """label -> (extra values, the redis.tls settings the pods must show)."""
    return {
        # CA only, default key, the URL in values.
        "redis-tls": ({"redis": {"url": "rediss://redis-master:6379/0",
                                 "tls": {"enabled": True, "existingSecret": "fleet-redis-tls"}}},
                      {"secret": "fleet-redis-tls", "ca": "ca.crt", "client": None}),
        # Mutual TLS with its own key names, the URL (with credentials) in a
        # chart-made Secret, next to the Kafka Secret mount, KEDA mode.
        "redis-mtls": ({**secret_scenario(),
                        "autoscaling": {"mode": "keda"},
                        "redis": {"url": "rediss://redis-master:6380/0", "username": "fleet",
                                  "password": SENTINELS["redis.password"],
                                  "tls": {"enabled": True, "existingSecret": "redis-client-tls",
                                          "clientCertificate": True, "caKey": "ca.pem",
                                          "certKey": "client.pem", "keyKey": "client-key.pem"}}},
                       {"secret": "redis-client-tls", "ca": "ca.pem", "client": ("client.pem", "client-key.pem")}),
        # The URL from an existing Secret: the chart cannot see its scheme.
        "redis-tls-existing": ({"redis": {"existingSecret": "redis-url", "existingSecretKey": "url",
                                          "tls": {"enabled": True, "existingSecret": "redis-tls",
                                                  "clientCertificate": True}}},
                               {"secret": "redis-tls", "ca": "ca.crt", "client": ("tls.crt", "tls.key")}),
    }


def pods_of(docs):
    """(label, pod spec, is a worker) of every Deployment and Job."""
    out = []
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            component = doc["metadata"]["labels"].get("app.kubernetes.io/component")
            out.append((f"{doc['kind']} {doc['metadata']['name']}", doc["spec"]["template"]["spec"], component == "worker"))
    return out


def assert_no_redis_tls(label, pod):
    for container in pod["containers"] + pod.get("initContainers", []):
        env = env_of(container)
        assert not [v for v in REDIS_TLS_ENV if v in env], f"{label}: {container['name']} has Redis TLS env"
        assert not [m for m in container.get("volumeMounts", []) if m["name"] == "redis-tls" or m["mountPath"] == REDIS_TLS_DIR], \
            f"{label}: {container['name']} mounts the Redis TLS Secret"
    assert not [v for v in pod.get("volumes", []) if v["name"] == "redis-tls"], f"{label}: has a redis-tls volume"


@check("Redis TLS: every worker mounts the TLS Secret read-only and names its files; fleet-lag and the topic job do not")
def check_redis_tls(rendered, values):
    models = resolved_models(values)
    details = []
    for label, (docs, expected) in rendered.items():
        workers = 0
        keys = [expected["ca"]] + list(expected["client"] or ())
        for name, pod, is_worker in pods_of(docs):
            if not is_worker:
                assert_no_redis_tls(f"{label}: {name}", pod)
                continue
            workers += 1
            worker = next(c for c in pod["containers"] if c["name"] == "worker")
            env = env_of(worker)
            assert env["FLEET_REDIS_CA_FILE"] == {"name": "FLEET_REDIS_CA_FILE", "value": f"{REDIS_TLS_DIR}/{expected['ca']}"}, \
                f"{label}: {name}: {env.get('FLEET_REDIS_CA_FILE')}"
            if expected["client"]:
                cert, key = expected["client"]
                assert env["FLEET_REDIS_CLIENT_CERT"]["value"] == f"{REDIS_TLS_DIR}/{cert}", f"{label}: {name}"
                assert env["FLEET_REDIS_CLIENT_KEY"]["value"] == f"{REDIS_TLS_DIR}/{key}", f"{label}: {name}"
            else:
                assert "FLEET_REDIS_CLIENT_CERT" not in env and "FLEET_REDIS_CLIENT_KEY" not in env, \
                    f"{label}: {name}: client certificate env without clientCertificate"
            assert "FLEET_REDIS_URL" in env
            mounts = [m for m in worker["volumeMounts"] if m["name"] == "redis-tls"]
            assert mounts == [{"name": "redis-tls", "mountPath": REDIS_TLS_DIR, "readOnly": True}], f"{label}: {name}: {mounts}"
            volumes = [v for v in pod["volumes"] if v["name"] == "redis-tls"]
            assert len(volumes) == 1, f"{label}: {name}: {len(volumes)} redis-tls volumes"
            secret = volumes[0]["secret"]
            assert secret["secretName"] == expected["secret"], secret
            assert secret["defaultMode"] == 0o440, f"{label}: {name}: defaultMode {secret['defaultMode']:o}"
            assert secret["items"] == [{"key": k, "path": k} for k in keys], secret["items"]
            # 0440 files are read through the group: the pod must run with fsGroup.
            assert pod["securityContext"].get("fsGroup") is not None, f"{label}: {name}: no fsGroup"
            # The init container copying the model needs none of it.
            for init in pod.get("initContainers", []):
                assert not [v for v in REDIS_TLS_ENV if v in env_of(init)]
                assert not [m for m in init["volumeMounts"] if m["name"] == "redis-tls"]
            if label == "redis-mtls":
                assert any(m["mountPath"] == "/etc/fleet/kafka" for m in worker["volumeMounts"]), "the Kafka mount must stay"
        assert workers == len(models), f"{label}: {workers} worker Deployments, {len(models)} models"
        # The TLS Secret is the user's: the chart makes none for it.
        made = {d["metadata"]["name"] for d in by_kind(docs, "Secret")}
        assert expected["secret"] not in made, f"{label}: the chart rendered the TLS Secret {expected['secret']}"
        details.append(f"{label}: {workers} workers, {len(keys)} files")
    docs = rendered["redis-mtls"][0]
    url = one(docs, "Secret", f"{RELEASE}-redis")["stringData"]["redis-url"]
    assert url == f"rediss://fleet:{SENTINELS['redis.password']}@redis-master:6380/0", url
    assert_no_secret_values([(f"{d['kind']} {d['metadata']['name']}", yaml.safe_dump(d))
                             for d in docs if d["kind"] != "Secret"], "redis-mtls,")
    return "; ".join(details)


@check("Redis TLS disabled (default): no TLS env, volume or mount in any pod")
def check_redis_tls_absent(rendered):
    pods = 0
    for label, docs in rendered.items():
        for name, pod, _ in pods_of(docs):
            assert_no_redis_tls(f"{label}: {name}", pod)
            pods += 1
    return f"{pods} pods in {len(rendered)} scenarios"


@check("existing Secrets, a model PVC, fixed replicas: nothing chart-made, nothing autoscaled")
def check_existing(docs):
    assert not by_kind(docs, "Secret")
    assert not by_kind(docs, "HorizontalPodAutoscaler") and not by_kind(docs, "ScaledObject")
    assert not by_kind(docs, "ServiceMonitor")
    for deployment in by_kind(docs, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["kafka"]["secret"]["secretName"] == "kafka-client"
        if deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "worker":
            assert deployment["spec"]["replicas"] == 2
            assert "initContainers" not in pod
            assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "fleet-models", "readOnly": True}
            mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "models")
            assert mount["subPath"] == "repository" and mount["readOnly"]
            env = env_of(pod["containers"][0])
            assert env["FLEET_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "redis-url", "key": "url"}
            assert env["FLEET_DEVICE"]["value"] == "cuda"
            if deployment["metadata"]["labels"]["fleet/model"] == "minilm":
                # minilm takes modelDefaults.resources; efficientnet_lite0 sets its own.
                assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
                assert env["FLEET_INTRA_OP_THREADS"]["value"] == "1"  # 500m rounds to 1
    job = one(docs, "Job", f"{RELEASE}-topics")
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["kafka"]["secret"]["secretName"] == "kafka-client"
    dashboard = one(docs, "ConfigMap", f"{RELEASE}-dashboard")
    assert json.loads(dashboard["data"]["fleet.json"]) == json.loads((ROOT / "deploy/grafana/dashboards/fleet.json").read_text())


def release_scenario():
    """A second release beside the default one: its own prefixes, a Redis
    Cluster, production topic settings, Strimzi topics."""
    return {
        "names": {"topicPrefix": "blue.infer.", "groupPrefix": "blue.fleet.", "redisPrefix": "blue:"},
        "redis": {"cluster": True},
        "topics": {"replicationFactor": 3, "minInsyncReplicas": 2, "retentionMs": 86400000},
        "prometheusRule": {"runbookBaseUrl": "https://git.example.com/fleet/blob/main/"},
        "grafanaDashboard": {"enabled": True},
        # The worker chooses its threads by measurement: no FLEET_INTRA_OP_THREADS.
        "modelDefaults": {"intraOpThreads": "auto"},
    }


@check("intraOpThreads: auto leaves the thread count to the worker's measurement")
def check_threads_auto(release_docs):
    workers = [d for d in release_docs if d.get("kind") == "Deployment" and "worker" in d["metadata"]["name"]]
    assert workers, "no worker Deployment rendered"
    for deployment in workers:
        worker = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "worker")
        env = env_of(worker)
        assert "FLEET_INTRA_OP_THREADS" not in env, f"{deployment['metadata']['name']}: {env['FLEET_INTRA_OP_THREADS']}"
    return f"{len(workers)} workers"


def topic_job_args(docs):
    job = one(docs, "Job", f"{RELEASE}-topics")
    return {c["name"]: c["command"] for c in job["spec"]["template"]["spec"]["containers"]}


def arg_after(command, flag):
    return command[command.index(flag) + 1] if flag in command else None


@check("topic settings: broker defaults unless set; a release's own prefixes everywhere")
def check_topics_and_names(default_docs, release_docs):
    for name, command in topic_job_args(default_docs).items():
        for flag in ("--replication-factor", "--min-insync-replicas", "--retention-ms", "--bulk-retention-ms"):
            assert flag not in command, f"{name}: {flag} set though the broker's default was asked"
        assert arg_after(command, "--dlq-retention-ms") == "604800000", command
        assert arg_after(command, "--answers-retention-ms") == "604800000", command
    for name, command in topic_job_args(release_docs).items():
        assert arg_after(command, "--replication-factor") == "3", command
        assert arg_after(command, "--min-insync-replicas") == "2", command
        assert arg_after(command, "--retention-ms") == "86400000", command
    pods = [d for d in release_docs if d.get("kind") in ("Deployment", "Job")]
    for pod in pods:
        for container in pod["spec"]["template"]["spec"]["containers"]:
            env = {k: v.get("value") for k, v in env_of(container).items()}
            assert env.get("FLEET_TOPIC_PREFIX") == "blue.infer.", f"{pod['metadata']['name']}: {env}"
            assert env.get("FLEET_GROUP_PREFIX") == "blue.fleet." and env.get("FLEET_REDIS_PREFIX") == "blue:"
    workers = [d for d in release_docs if d.get("kind") == "Deployment" and "worker" in d["metadata"]["name"]]
    assert workers and all(
        env_of(w["spec"]["template"]["spec"]["containers"][0]).get("FLEET_REDIS_CLUSTER", {}).get("value") == "true"
        for w in workers)
    hpa = one(release_docs, "HorizontalPodAutoscaler", worker_name("minilm"))
    labels = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]
    assert labels == {"topic": "blue.infer.minilm", "consumergroup": "blue.fleet.minilm"}, labels
    # PromQL regex `blue\.fleet\..+` inside a PromQL string (backslashes doubled).
    wanted = 'consumergroup=~"blue\\\\.fleet\\\\..+"'
    exprs = [r["expr"] for g in by_kind(release_docs, "PrometheusRule")[0]["spec"]["groups"] for r in g["rules"]]
    assert any(wanted in e for e in exprs), "the alert rules do not select the release's groups"
    assert not any('"fleet\\\\..+"' in e for e in exprs), "an alert rule still selects the default groups"
    adapter = one(release_docs, "ConfigMap", f"{RELEASE}-prometheus-adapter")["data"]["config.yaml"]
    assert wanted in adapter, adapter
    dashboard = json.loads(one(release_docs, "ConfigMap", f"{RELEASE}-dashboard")["data"]["fleet.json"])
    lag = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "kafka_consumergroup_lag" in t["expr"]]
    # Every lane's panel: the interactive topics, and the bulk lane's (...($model)\\.bulk").
    assert lag and all(wanted in e and ('topic=~"blue\\\\.infer\\\\.($model)"' in e
                                        or 'topic=~"blue\\\\.infer\\\\.($model)\\\\.bulk"' in e) for e in lag), lag
    assert any(".bulk" in e for e in lag), "the dashboard lost its bulk lane panel"
    assert not any('"infer\\\\.' in e for e in lag), "a lag panel still selects the default topic prefix"
    urls = [r["annotations"]["runbook_url"] for g in by_kind(release_docs, "PrometheusRule")[0]["spec"]["groups"]
            for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://git.example.com/fleet/blob/main/docs/operations.md#") for u in urls), urls


@check("Strimzi: KafkaTopic resources instead of the topic job")
def check_strimzi(helm):
    _, docs = helm.template({"topics": {"strimzi": {"enabled": True, "cluster": "my-kafka"}, "replicationFactor": 3,
                                        "minInsyncReplicas": 2}})
    assert not by_kind(docs, "Job"), "the topic job is rendered beside Strimzi's topics"
    topics = {d["spec"]["topicName"]: d for d in by_kind(docs, "KafkaTopic")}
    models = [name for name, _, _ in resolved_models(chart_values())]
    per_model = ("", ".bulk", ".dlq", ".answers", ".bulk.answers")
    assert set(topics) == {f"infer.{m}{s}" for m in models for s in per_model} | {"infer.fleet.jobs"}, sorted(topics)
    answers, jobs = topics["infer.minilm.bulk.answers"], topics["infer.fleet.jobs"]
    assert answers["spec"]["partitions"] == 8 and answers["spec"]["config"]["retention.ms"] == "604800000", answers
    assert jobs["spec"]["partitions"] == 1 and jobs["spec"]["config"]["cleanup.policy"] == "compact,delete", jobs
    request, bulk, dlq = topics["infer.minilm"], topics["infer.minilm.bulk"], topics["infer.minilm.dlq"]
    # The bulk lane's topic: the request topic's partitions and limits, its
    # own retention (the broker's unless topics.bulkRetentionMs).
    assert bulk["spec"] == {**request["spec"], "topicName": "infer.minilm.bulk"}, bulk["spec"]
    assert bulk["metadata"]["name"] == "infer-minilm-bulk"
    assert request["metadata"]["labels"]["strimzi.io/cluster"] == "my-kafka"
    assert (request["spec"]["partitions"], request["spec"]["replicas"]) == (8, 3), request["spec"]
    assert request["spec"]["config"]["min.insync.replicas"] == "2" and "retention.ms" not in request["spec"]["config"]
    assert request["spec"]["config"]["max.message.bytes"] == "20065536"
    assert dlq["spec"]["partitions"] == 1 and dlq["spec"]["config"]["retention.ms"] == "604800000"
    _, docs = helm.template({"topics": {"strimzi": {"enabled": True, "cluster": "my-kafka"}, "retentionMs": 86400000,
                                        "bulkRetentionMs": 1209600000}})
    topics = {d["spec"]["topicName"]: d["spec"]["config"] for d in by_kind(docs, "KafkaTopic")}
    assert topics["infer.minilm"]["retention.ms"] == "86400000", topics["infer.minilm"]
    assert topics["infer.minilm.bulk"]["retention.ms"] == "1209600000", topics["infer.minilm.bulk"]
    assert topics["infer.minilm.dlq"]["retention.ms"] == "604800000", topics["infer.minilm.dlq"]
    return validate_all(docs, "strimzi")


@check("Redis ACL ConfigMap: the worker and client users' rules for the release's prefix")
def check_redis_acl(default_docs, release_docs):
    rules = (ROOT / "deploy/redis/acl.conf").read_text()
    for docs, prefix in ((default_docs, "fleet:"), (release_docs, "blue:")):
        data = one(docs, "ConfigMap", f"{RELEASE}-redis-acl")["data"]
        assert set(data) == {"worker.acl", "client.acl"}, sorted(data)
        assert data["worker.acl"].startswith("ACL SETUSER fleet-worker reset on >PASSWORD ~" + prefix + "* "), data
        assert f"%R~{prefix}result:*" in data["client.acl"] and "+hset" not in data["client.acl"], data
        assert "PREFIX" not in data["worker.acl"] + data["client.acl"]
    assert "+blpop" in rules


@check("bad values make `helm template` fail with a clear message")
def check_failures(helm):
    cases = [
        ("replicas.max above partitions (hpa)",
         {"models": [{"name": "minilm", "partitions": 4, "replicas": {"max": 8}}]}, "exceeds the topic's 4 partitions"),
        ("replicas.max above partitions (keda)",
         {"autoscaling": {"mode": "keda"}, "models": [{"name": "minilm", "partitions": 2, "replicas": {"max": 3}}]},
         "exceeds the topic's 2 partitions"),
        ("replicas.max above partitions (modelDefaults)",
         {"modelDefaults": {"partitions": 4, "replicas": {"min": 1, "max": 6}}}, "exceeds the topic's 4 partitions"),
        ("grace period not above the drain",
         {"modelDefaults": {"drainTimeoutSeconds": 30, "terminationGracePeriodSeconds": 30}}, "must exceed drainTimeoutSeconds"),
        ("unknown autoscaling mode", {"autoscaling": {"mode": "vpa"}}, "autoscaling.mode must be"),
        ("SASL without a password", {"kafka": {"sasl": {"enabled": True, "username": "u"}}}, "needs kafka.sasl.username and kafka.sasl.password"),
        ("min 0 with an HPA", {"models": [{"name": "minilm", "replicas": {"min": 0}}]}, "needs autoscaling.mode keda"),
        ("no model repository", {"modelRepository": {"image": {"repository": ""}}}, "modelRepository"),
        ("bad device", {"models": [{"name": "minilm", "device": "tpu"}]}, "models.0.device must be one of the following"),
        ("a password in redis.url", {"redis": {"url": "redis://fleet:hunter2@redis:6379"}}, "must not hold a password"),
        ("Redis TLS without its Secret",
         {"redis": {"url": "rediss://redis:6379", "tls": {"enabled": True}}}, "redis.tls.enabled needs redis.tls.existingSecret"),
        ("Redis TLS with a redis:// URL",
         {"redis": {"url": "redis://redis:6379", "tls": {"enabled": True, "existingSecret": "t"}}},
         "redis.tls.enabled needs a rediss:// URL"),
        ("Redis TLS with a redis:// URL and a password (chart-made URL)",
         {"redis": {"url": "redis://redis:6379", "username": "fleet", "password": "p",
                    "tls": {"enabled": True, "existingSecret": "t"}}}, "redis.tls.enabled needs a rediss:// URL"),
        ("Redis Cluster with TLS files (the worker refuses them)",
         {"redis": {"url": "rediss://redis-0:6379,rediss://redis-1:6379", "cluster": True,
                    "tls": {"enabled": True, "existingSecret": "t"}}},
         "redis.cluster and redis.tls.enabled do not go together"),
        ("Redis mutual TLS without a key",
         {"redis": {"url": "rediss://redis:6379", "tls": {"enabled": True, "existingSecret": "t",
                                                           "clientCertificate": True, "keyKey": ""}}},
         "needs redis.tls.certKey and redis.tls.keyKey"),
        ("Redis TLS key that is no Secret key",
         {"redis": {"url": "rediss://redis:6379", "tls": {"enabled": True, "existingSecret": "t", "caKey": "certs/ca.crt"}}},
         "is not a valid Secret key"),
        ("Redis mutual TLS with one key twice",
         {"redis": {"url": "rediss://redis:6379", "tls": {"enabled": True, "existingSecret": "t",
                                                           "clientCertificate": True, "certKey": "ca.crt"}}},
         "must be three different keys"),
        # values.schema.json: a key the chart does not know is an error, not ignored.
        ("a misspelled model setting", {"modelDefaults": {"partition": 4}}, "Additional property partition is not allowed"),
        ("a misspelled top-level key", {"autoscalling": {"mode": "keda"}}, "Additional property autoscalling is not allowed"),
        ("a misspelled per-model key", {"models": [{"name": "minilm", "replica": {"max": 2}}]},
         "Additional property replica is not allowed"),
        ("a model name the worker refuses", {"models": [{"name": "mini.lm"}]}, "models.0.name"),
        ("a Redis prefix with a brace (it would move the hash tag)", {"names": {"redisPrefix": "fleet{x}:"}},
         "names.redisPrefix"),
        ("a topic prefix Kafka refuses", {"names": {"topicPrefix": "in fer."}}, "names.topicPrefix"),
        ("replication factor 0", {"topics": {"replicationFactor": 0}}, "topics.replicationFactor"),
        ("a misspelled topic setting", {"topics": {"replication": 3}}, "Additional property replication is not allowed"),
        ("Strimzi topics without the cluster's name", {"topics": {"strimzi": {"enabled": True}}},
         "topics.strimzi.cluster"),
        ("waiting for replicas of a Redis Cluster (the worker refuses it)",
         {"redis": {"cluster": True, "waitReplicas": 1}}, "redis.waitReplicas does not go with redis.cluster"),
        ("a negative replica count", {"redis": {"waitReplicas": -1}}, "redis.waitReplicas"),
        # Lanes: the bulk trigger's values.
        ("a bulk cap in keda mode without Prometheus (KEDA's Kafka scaler cannot cap one trigger)",
         {"autoscaling": {"mode": "keda", "bulk": {"enabled": True, "maxReplicas": 2}}},
         "autoscaling.bulk.maxReplicas in keda mode needs autoscaling.bulk.prometheusServerAddress"),
        ("a bulk lag threshold of 0", {"autoscaling": {"bulk": {"enabled": True, "lagThreshold": 0}}},
         "autoscaling.bulk.lagThreshold"),
        ("a bulk lag threshold that is no number", {"autoscaling": {"bulk": {"lagThreshold": "lots"}}},
         "autoscaling.bulk.lagThreshold"),
        ("a bulk cap of 0 replicas", {"autoscaling": {"bulk": {"enabled": True, "maxReplicas": 0}}},
         "autoscaling.bulk.maxReplicas"),
        ("a bulk cap that is no number", {"autoscaling": {"bulk": {"enabled": True, "maxReplicas": "two"}}},
         "autoscaling.bulk.maxReplicas"),
        ("bulk enabled as a string", {"autoscaling": {"bulk": {"enabled": "yes"}}}, "autoscaling.bulk.enabled"),
        ("a misspelled bulk setting", {"autoscaling": {"bulk": {"enabled": True, "lagTreshold": 10}}},
         "Additional property lagTreshold is not allowed"),
        ("a Prometheus address without a scheme",
         {"autoscaling": {"mode": "keda", "bulk": {"enabled": True, "maxReplicas": 2,
                                                   "prometheusServerAddress": "prometheus:9090"}}},
         "autoscaling.bulk.prometheusServerAddress"),
        ("a bulk metric name the adapter cannot serve", {"autoscaling": {"bulk": {"externalMetricName": "kafka lag"}}},
         "autoscaling.bulk.externalMetricName"),
        ("a bulk retention below -1", {"topics": {"bulkRetentionMs": -2}}, "topics.bulkRetentionMs"),
    ]
    for label, values, message in cases:
        code, stderr = helm.template(values, expect_failure=True)
        assert code != 0, f"{label}: helm template succeeded"
        assert message in stderr, f"{label}: expected {message!r} in: {stderr.strip()}"
    # Replica acknowledgements asked for: every worker waits for them.
    _, docs = helm.template({"redis": {"waitReplicas": 1}})
    worker = one(docs, "Deployment", worker_name("minilm"))
    assert env_of(worker["spec"]["template"]["spec"]["containers"][0])["FLEET_REDIS_WAIT_REPLICAS"]["value"] == "1"
    # Clamped the other way: max = partitions when unset.
    _, docs = helm.template({"models": [{"name": "minilm", "partitions": 3}]})
    assert one(docs, "HorizontalPodAutoscaler", worker_name("minilm"))["spec"]["maxReplicas"] == 3
    return f"{len(cases)} refused"


def render_notes(helm_binary, values):
    """NOTES.txt is not rendered by `helm template`: render it as a ConfigMap in a copy of the chart."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "fleet"
        shutil.copytree(CHART, chart, symlinks=False)
        notes = (chart / "templates/NOTES.txt").read_text()
        (chart / "templates/NOTES.txt").unlink()
        (chart / "templates/zz-notes.yaml").write_text(
            '{{- define "fleet.testNotes" -}}\n' + notes + "\n{{- end -}}\n"
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
            'data:\n  notes: {{ include "fleet.testNotes" . | quote }}\n')
        _, docs = Helm(helm_binary, chart).template(values)
        return one(docs, "ConfigMap", "notes")["data"]["notes"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--kubernetes-version", default="1.30.0")
    global ARGS
    ARGS = parser.parse_args()
    helm = Helm(ARGS.helm, CHART)
    values = chart_values()
    keda_file = CHART / "values-keda.yaml"
    keda_values = yaml.safe_load(keda_file.read_text())
    merged_keda = {**values, **keda_values, "kafka": {**values["kafka"], **keda_values["kafka"],
                                                       "sasl": {**values["kafka"]["sasl"], **keda_values["kafka"]["sasl"]}}}

    scenarios = {}
    for label, files, extra in (
        ("default", [], {}),
        ("keda", [keda_file], {}),
        ("secrets", [], secret_scenario()),
        ("secrets-keda", [], {**secret_scenario(), "autoscaling": {"mode": "keda"}}),
        ("release", [], release_scenario()),
        *((label, [], extra) for label, extra in bulk_scenarios().items()),
        ("existing", [], {
            "kafka": {"existingSecret": "kafka-client", "sasl": {"enabled": True}},
            "redis": {"existingSecret": "redis-url", "existingSecretKey": "url"},
            "modelRepository": {"existingClaim": "fleet-models", "subPath": "repository"},
            "autoscaling": {"mode": "none"},
            "modelDefaults": {"replicas": {"min": 2}, "device": "cuda",
                              "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                            "limits": {"memory": "2Gi", "nvidia.com/gpu": 1}}},
            "serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
            "grafanaDashboard": {"enabled": True},
        }),
    ) + tuple((label, [], extra) for label, (extra, _) in redis_tls_scenarios().items()):
        try:
            scenarios[label] = helm.template(extra, files=files)
        except AssertionError as error:
            RESULTS.append((False, f"render {label}"))
            print(f"  FAIL  render {label}: {error}")

    @check("schema validation of every rendered object (all scenarios)")
    def schemas():
        return "; ".join(f"{label}: {validate_all(docs, label)}" for label, (_, docs) in scenarios.items())

    schemas()
    if "default" in scenarios:
        check_workloads(scenarios["default"][1], values)
        check_hpa(scenarios["default"][1], values)
        check_adapter(scenarios["default"][1])
        check_monitoring(scenarios["default"][1])
    if "keda" in scenarios:
        check_keda(scenarios["keda"][1], merged_keda)
    if "secrets" in scenarios and "secrets-keda" in scenarios:
        notes = render_notes(ARGS.helm, secret_scenario())
        check_secrets(scenarios["secrets"][0], scenarios["secrets"][1], scenarios["secrets-keda"][1], notes)
    if "existing" in scenarios:
        check_existing(scenarios["existing"][1])
    if "default" in scenarios and "release" in scenarios:
        check_topics_and_names(scenarios["default"][1], scenarios["release"][1])
        check_redis_acl(scenarios["default"][1], scenarios["release"][1])
        check_threads_auto(scenarios["release"][1])
    check_strimzi(helm)
    if "bulk-hpa" in scenarios:
        check_bulk_hpa(scenarios["bulk-hpa"][1], values)
    check_bulk_hpa_uncapped(helm)
    if "bulk-keda" in scenarios:
        check_bulk_keda(scenarios["bulk-keda"][1], values)
    if "bulk-keda-capped" in scenarios:
        check_bulk_keda_capped(scenarios["bulk-keda-capped"][1])
    if "bulk-hpa" in scenarios and "bulk-keda-capped" in scenarios:
        check_bulk_queries(scenarios["bulk-hpa"][1], scenarios["bulk-keda-capped"][1])
    tls = redis_tls_scenarios()
    if all(label in scenarios for label in tls):
        check_redis_tls({label: (scenarios[label][1], expected) for label, (_, expected) in tls.items()}, values)
    check_redis_tls_absent({label: docs for label, (_, docs) in scenarios.items() if label not in tls})
    check_failures(helm)

    failed = [name for ok, name in RESULTS if not ok]
    print(f"chart: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
