"""Bad values that must make `helm template` fail, each with the message that
says why; and two values that must not.
"""

from __future__ import annotations

from .objects import env_of, one, worker_name
from .report import check


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
