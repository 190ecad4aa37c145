"""Finding things in rendered objects: by kind, by name, a worker's name, a
container's env, the topic job's commands, every pod. Shared by every check
so each reads as what it asserts.
"""

from __future__ import annotations

from .render import RELEASE


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def one(docs, kind, name):
    found = [d for d in docs if d.get("kind") == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def dns(name):
    return name.replace("_", "-")


def worker_name(model):
    return f"{RELEASE}-worker-{dns(model)}"


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def topic_job_args(docs):
    job = one(docs, "Job", f"{RELEASE}-topics")
    return {c["name"]: c["command"] for c in job["spec"]["template"]["spec"]["containers"]}


def arg_after(command, flag):
    return command[command.index(flag) + 1] if flag in command else None


def pods_of(docs):
    """(label, pod spec, is a worker) of every Deployment and Job."""
    out = []
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            component = doc["metadata"]["labels"].get("app.kubernetes.io/component")
            out.append((f"{doc['kind']} {doc['metadata']['name']}", doc["spec"]["template"]["spec"], component == "worker"))
    return out
