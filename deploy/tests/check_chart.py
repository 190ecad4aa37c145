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

The checks live beside this file in chart_checks/, one module per concern;
this entry point renders the scenarios and runs them in order. Prints one
line per check; exits 1 if any failed.
"""


from __future__ import annotations

import argparse
import sys

import yaml

from chart_checks.autoscaling import check_adapter, check_hpa, check_keda
from chart_checks.failures import check_failures
from chart_checks.lanes import (
    bulk_scenarios,
    check_bulk_hpa,
    check_bulk_hpa_uncapped,
    check_bulk_keda,
    check_bulk_keda_capped,
    check_bulk_queries,
)
from chart_checks.redis_tls import check_redis_tls, check_redis_tls_absent, redis_tls_scenarios
from chart_checks.release import (
    check_redis_acl,
    check_strimzi,
    check_threads_auto,
    check_topics_and_names,
    release_scenario,
)
from chart_checks.render import CHART, Helm, chart_values
from chart_checks.report import RESULTS, check
from chart_checks.schemas import validate_all
from chart_checks.secrets import check_secrets, render_notes, secret_scenario
from chart_checks.workloads import check_existing, check_monitoring, check_workloads


def keda_values(values):
    """The chart's values with values-keda.yaml over them, as helm merges
    them (the kafka and kafka.sasl maps key by key)."""
    keda = yaml.safe_load((CHART / "values-keda.yaml").read_text())
    return {**values, **keda, "kafka": {**values["kafka"], **keda["kafka"],
                                        "sasl": {**values["kafka"]["sasl"], **keda["kafka"]["sasl"]}}}


def scenario_values():
    """(label, values files, extra values) of every scenario rendered up front."""
    return (
        ("default", [], {}),
        ("keda", [CHART / "values-keda.yaml"], {}),
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
    ) + tuple((label, [], extra) for label, (extra, _) in redis_tls_scenarios().items())


def render_scenarios(helm):
    """label -> (rendered text, objects) of each scenario that rendered; a
    scenario that did not is a failed check of its own."""
    scenarios = {}
    for label, files, extra in scenario_values():
        try:
            scenarios[label] = helm.template(extra, files=files)
        except AssertionError as error:
            RESULTS.append((False, f"render {label}"))
            print(f"  FAIL  render {label}: {error}")
    return scenarios


def check_schemas(scenarios, kubernetes_version):
    @check("schema validation of every rendered object (all scenarios)")
    def schemas():
        return "; ".join(f"{label}: {validate_all(docs, label, kubernetes_version)}"
                         for label, (_, docs) in scenarios.items())

    schemas()


def run_checks(helm, args, scenarios, values):
    """Each check whose scenarios rendered, in the order they print."""
    docs = {label: rendered[1] for label, rendered in scenarios.items()}
    if "default" in docs:
        check_workloads(docs["default"], values)
        check_hpa(docs["default"], values)
        check_adapter(docs["default"])
        check_monitoring(docs["default"])
    if "keda" in docs:
        check_keda(docs["keda"], keda_values(values))
    if "secrets" in docs and "secrets-keda" in docs:
        notes = render_notes(args.helm, secret_scenario())
        check_secrets(scenarios["secrets"][0], docs["secrets"], docs["secrets-keda"], notes)
    if "existing" in docs:
        check_existing(docs["existing"])
    if "default" in docs and "release" in docs:
        check_topics_and_names(docs["default"], docs["release"])
        check_redis_acl(docs["default"], docs["release"])
        check_threads_auto(docs["release"])
    check_strimzi(helm, args.kubernetes_version)
    if "bulk-hpa" in docs:
        check_bulk_hpa(docs["bulk-hpa"], values)
    check_bulk_hpa_uncapped(helm)
    if "bulk-keda" in docs:
        check_bulk_keda(docs["bulk-keda"], values)
    if "bulk-keda-capped" in docs:
        check_bulk_keda_capped(docs["bulk-keda-capped"])
    if "bulk-hpa" in docs and "bulk-keda-capped" in docs:
        check_bulk_queries(docs["bulk-hpa"], docs["bulk-keda-capped"])
    tls = redis_tls_scenarios()
    if all(label in docs for label in tls):
        check_redis_tls({label: (docs[label], expected) for label, (_, expected) in tls.items()}, values)
    check_redis_tls_absent({label: objects for label, objects in docs.items() if label not in tls})
    check_failures(helm)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--kubernetes-version", default="1.30.0")
    args = parser.parse_args()
    helm = Helm(args.helm, CHART)
    values = chart_values()
    scenarios = render_scenarios(helm)
    check_schemas(scenarios, args.kubernetes_version)
    run_checks(helm, args, scenarios, values)
    failed = [name for ok, name in RESULTS if not ok]
    print(f"chart: {len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
