#!/usr/bin/env python3
"""Checks of docker-compose.yml beyond its schema (scripts/test-deploy.sh
validates it against the Compose Specification schema first).

What a schema cannot see: services that depend on missing services, bind
mounts of files that are not in the repository, Prometheus scrape targets
that are not compose services on the worker's metrics port, a broker whose
size limits refuse 20 MB images, Grafana provisioning that points elsewhere
than where the dashboards are mounted.

Prints one line per check; exits 1 if any failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import Checks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("minilm", "efficientnet_lite0")
# fleet_proto::limits::MAX_MESSAGE_BYTES: 20 MB of image + 64 KiB of headers.
MAX_MESSAGE_BYTES = 20_000_000 + 64 * 1024

CHECKS = Checks("compose")
report = CHECKS.report


def main():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    prometheus = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())

    def dependencies():
        for name, service in services.items():
            depends = service.get("depends_on", [])
            for target in depends if isinstance(depends, list) else depends.keys():
                assert target in services, f"{name} depends on unknown service {target}"
        for name in ("worker-minilm", "worker-efficientnet-lite0"):
            assert services[name]["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        return f"{len(services)} services"

    def mounts():
        checked = 0
        for name, service in services.items():
            for volume in service.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("./"):
                    if source == "./models":
                        continue  # made by `make setup`
                    assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repository"
                    checked += 1
                else:
                    assert source in compose.get("volumes", {}), f"{name} uses undeclared volume {source}"
        return f"{checked} bind mounts exist"

    def workers():
        for model in MODELS:
            service = services[f"worker-{model.replace('_', '-')}"]
            env = service["environment"]
            assert env["FLEET_MODEL"] == model
            assert env["FLEET_MODEL_REPO"] == "/models"
            assert env["FLEET_METRICS_ADDR"] == "0.0.0.0:9464"
            assert env["FLEET_BROKERS"] == "kafka:19092"
            assert "./models:/models:ro" in service["volumes"]
            assert service["build"]["dockerfile"] == "Dockerfile"
        topics = services["topics"]["command"]
        assert topics[:4] == ["fleet-produce", "--brokers", "kafka:19092", "topics"]
        assert [topics[i + 1] for i, arg in enumerate(topics) if arg == "--model"] == list(MODELS)
        assert services["fleet-lag"]["command"] == ["fleet-lag", "serve"]
        lag = services["fleet-lag"]["environment"]
        assert lag["FLEET_LAG_MODELS"].split(",") == list(MODELS) and lag["FLEET_METRICS_ADDR"] == "0.0.0.0:9466"

    def scrape_targets():
        jobs = {job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
                for job in prometheus["scrape_configs"]}
        expected = {"fleet-worker": {f"worker-{m.replace('_', '-')}:9464" for m in MODELS}, "fleet-lag": {"fleet-lag:9466"}}
        for job, targets in expected.items():
            assert set(jobs[job]) == targets, f"job {job}: {jobs[job]}"
        assert prometheus["rule_files"] == ["alerts.yml"]
        assert "./deploy/prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
        assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]

    def kafka_limits():
        env = services["kafka"]["environment"]
        assert "broker" in env["KAFKA_PROCESS_ROLES"] and "controller" in env["KAFKA_PROCESS_ROLES"], "KRaft combined mode"
        assert "ZOOKEEPER" not in " ".join(env), "KRaft: no ZooKeeper"
        for key in ("KAFKA_MESSAGE_MAX_BYTES", "KAFKA_REPLICA_FETCH_MAX_BYTES"):
            assert int(env[key]) >= MAX_MESSAGE_BYTES, f"{key} {env[key]} < {MAX_MESSAGE_BYTES}"
        assert services["kafka"]["image"].startswith("apache/kafka:")
        assert "INTERNAL://kafka:19092" in env["KAFKA_ADVERTISED_LISTENERS"]

    def grafana():
        volumes = services["grafana"]["volumes"]
        assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in volumes
        assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in volumes
        provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/fleet.yml").read_text())
        assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
        datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
        assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
        assert datasource["datasources"][0]["type"] == "prometheus"

    report("compose: every depends_on names a service", dependencies)
    report("compose: bind mounts exist, named volumes declared", mounts)
    report("compose: a worker per model with /models read-only, topics and fleet-lag for both", workers)
    report("compose: Prometheus scrapes the workers and fleet-lag, loads alerts.yml", scrape_targets)
    report("compose: Kafka in KRaft mode takes 20 MB images", kafka_limits)
    report("compose: Grafana provisioning points at the mounted dashboards and Prometheus", grafana)
    return CHECKS.summary()


if __name__ == "__main__":
    sys.exit(main())
