"""The default release's workloads: workers (env, probes, security, mounts),
their Services and PDBs, fleet-lag, the topic job; the monitoring objects;
and a release that brings its own Secrets and model volume.
"""

from __future__ import annotations

import json

import yaml

from .objects import by_kind, env_of, one, worker_name
from .render import RELEASE, ROOT, chart_values, resolved_models
from .report import check


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
