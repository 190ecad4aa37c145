"""A second release beside the default one: its own name prefixes in every
object, its topic settings, Strimzi topics, the Redis ACL users, and
threads left to the worker.
"""

from __future__ import annotations

import json

from .objects import arg_after, by_kind, env_of, one, topic_job_args, worker_name
from .render import RELEASE, ROOT, chart_values, resolved_models
from .report import check
from .schemas import validate_all


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
def check_strimzi(helm, kubernetes_version):
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
    return validate_all(docs, "strimzi", kubernetes_version)


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
