"""Secrets: the SASL, TLS and Redis values reach nothing but the chart's
Secrets (NOTES.txt included, rendered here through a copy of the chart),
and every client mounts or references them.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
from pathlib import Path

import yaml

from .objects import by_kind, env_of, one
from .render import CHART, RELEASE, Helm
from .report import check


# Values that must only ever appear inside Secrets.
SENTINELS = {
    "kafka.sasl.password": "sasl-pw-Zq8XrT1",
    "kafka.tls.key": "-----BEGIN PRIVATE KEY-----\nKEY-Zq8XrT2\n-----END PRIVATE KEY-----",
    "redis.password": "redis-pw-Zq8XrT3",
}


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
