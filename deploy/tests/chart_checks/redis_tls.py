"""Redis TLS (redis.tls): its scenarios, the mounts and env every worker
gets, and nothing of it in any other pod or when disabled.
"""

from __future__ import annotations

import yaml

from .objects import by_kind, env_of, one, pods_of
from .render import RELEASE, resolved_models
from .report import check
from .secrets import SENTINELS, assert_no_secret_values, secret_scenario


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
