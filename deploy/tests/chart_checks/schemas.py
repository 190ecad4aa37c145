"""Schema validation: every rendered object against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), and the custom resources it has no
schema for (ServiceMonitor, PrometheusRule, ScaledObject,
TriggerAuthentication, KafkaTopic) structurally.
"""

from __future__ import annotations


CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
}


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


def validate_crd(doc, version):
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
            validate_builtin(probe, version)
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


def validate_all(docs, label, version):
    builtin = crds = 0
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key in CRD_KINDS:
            try:
                validate_crd(doc, version)
            except AssertionError as error:
                raise AssertionError(f"{label}: {key[1]} {doc['metadata']['name']}: {error}") from None
            crds += 1
        else:
            try:
                validate_builtin(doc, version)
            except Exception as error:  # kubernetes_validate's own error types
                message = getattr(error, "message", str(error))
                path = ".".join(str(p) for p in getattr(error, "path", []))
                raise AssertionError(f"{label}: {key[1]} {doc['metadata']['name']}: {path}: {message}") from None
            builtin += 1
    return f"{builtin} objects against Kubernetes {version}, {crds} custom resources structurally"
