"""Runs the Python client against a live fleet and checks what it gets back.

Started by crates/fleet-worker/tests/clients.rs (part of `make test`)
with a broker, a Redis and two real workers (minilm, efficientnet_lite0;
each reading its bulk topic, infer.<model>.bulk, too); by hand: python3 clients/python/check_client.py --brokers 127.0.0.1:9092
--redis redis://127.0.0.1:6379 --photo <a photo of coffee>. Python puts this
file's folder first on sys.path, so that imports the fleet_client package
beside it; `python3 -P` checks the installed package (`pip install ./clients/python`)
instead. Exits non-zero
with the reason on the first check that fails; prints one line per check.
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time

import redis
from confluent_kafka import Producer

from fleet_client import (
    BULK,
    CANCELLED,
    DEFAULT_CANCEL_KEEP_S,
    EVENT_TYPE,
    JOB_HEADER,
    OK,
    SPEC_VERSION,
    STATUSES,
    TEXT,
    FleetClient,
    Overloaded,
    now_ms,
    rfc3339,
)

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
]
# A job's texts (send_job, collect): the four above and two more.
JOB_TEXTS = TEXTS + ["A woman is playing the violin.", "Two dogs run across a field."]


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--photo", required=True, help="a PNG of a cup of coffee")
    parser.add_argument("--run", default=str(now_ms()), help="makes this run's request ids unique")
    args = parser.parse_args()
    client = FleetClient(args.brokers, args.redis, source="check-client")

    # Send and wait.
    ids = [f"py-{args.run}-{i}" for i in range(len(TEXTS))]
    for request_id, text in zip(ids, TEXTS):
        client.send_text("minilm", request_id, text)
    client.flush()
    embeddings = []
    for request_id in ids:
        answer = client.wait(request_id, ["minilm"], timeout_s=60)["minilm"]
        check(answer["status"] == "ok", f"{request_id} answered ok")
        embeddings.append(answer["output"]["embedding"])
    check(all(len(e) == 384 for e in embeddings), "384-dimensional embeddings")
    check(all(abs(math.sqrt(cosine(e, e)) - 1) < 1e-2 for e in embeddings), "unit-length embeddings")
    check(
        cosine(embeddings[0], embeddings[1]) > cosine(embeddings[0], embeddings[3]),
        "eating food is nearer to eating bread than to riding a horse",
    )

    # Fan-out: a photo to the vision model and its caption to the text
    # model, one request id, ce_parts = 2.
    with open(args.photo, "rb") as f:
        photo = f.read()
    both = f"py-{args.run}-fanout"
    client.send_fanout(
        both,
        [("efficientnet_lite0", photo, "image/png"), ("minilm", b"A cup of coffee.", "text/plain; charset=utf-8")],
    )
    client.flush()
    answers = client.wait(both, ["efficientnet_lite0", "minilm"], timeout_s=60)
    top = answers["efficientnet_lite0"]["output"]["classes"][0]
    check(top["label"] == "espresso", f"the photo is an espresso (got {top['label']})")
    check(answers["minilm"]["status"] == "ok", "the caption answered in the same request")

    # A reused id within the result TTL gets the earlier answer back.
    client.send_text("minilm", ids[3], "Something else entirely.")
    client.flush()
    again = client.wait(ids[3], ["minilm"], timeout_s=60)["minilm"]
    check(again["output"]["embedding"] == embeddings[3], "a reused request id returns the earlier answer")

    # Predicted-wait admission: a report of a deep backlog refuses what
    # would expire; without it the same request is admitted.
    admin = redis.Redis.from_url(args.redis)
    backlog_key = client.backlog_key("minilm")
    admin.hset(backlog_key, "check-client-planted", f"100000 {now_ms()} 10.0")
    refused_id = f"py-{args.run}-refused"
    try:
        client.send_text("minilm", refused_id, "Too late anyway.", deadline_ms=now_ms() + 5_000, admit=True)
        check(False, "a request predicted to wait 10 000 s was refused")
    except Overloaded as refused:
        check(refused.predicted_wait_ms > 5_000, f"refused before sending: {refused}")
    admin.hdel(backlog_key, "check-client-planted")
    admitted = f"py-{args.run}-admitted"
    client.send_text("minilm", admitted, "Now there is room.", deadline_ms=now_ms() + 30_000, admit=True)
    client.flush()
    check(client.wait(admitted, ["minilm"], timeout_s=60)["minilm"]["status"] == "ok", "admitted and answered")
    check(client.poll(refused_id) == {}, "the refused request was never sent")

    # Lanes, jobs and replies: the client refuses, before sending, a lane, a
    # job id or a reply destination the fleet would not accept.
    not_sent = f"py-{args.run}-not-sent"
    refused_options = [{"lane": "urgent"}, {"job": "bad job!"}, {"job": ""}, {"job": "j" * 129}]
    refused_options += [{"reply_to": "s3"}, {"reply_to": ""}, {"reply_to": "kafka:infer.minilm.answers"}]
    for options in refused_options:
        try:
            client.send_text("minilm", not_sent, "Never sent.", **options)
            check(False, f"the client refuses {options}")
        except ValueError as refused:
            check(True, f"the client refuses {str(options)[:40]}: {str(refused)[:60]}")
    try:
        client.cancel("bad job!")
        check(False, "the client refuses to cancel an invalid job id")
    except ValueError:
        check(True, "the client refuses to cancel an invalid job id")
    check(client.poll(not_sent) == {}, "nothing the client refused was sent")

    # (a) The bulk lane (infer.minilm.bulk), in a job: answered like the
    # interactive lane. Its answers go to Kafka unless a request asks for
    # Redis too (ce_fleetreplyto), as this one does to be waited on.
    bulk_id = f"py-{args.run}-bulk"
    client.send_text("minilm", bulk_id, TEXTS[0], lane=BULK, job=f"py-{args.run}-job", reply_to="redis,kafka")
    client.flush()
    answer = client.wait(bulk_id, ["minilm"], timeout_s=60)["minilm"]
    check(answer["status"] == "ok", f"a text on the bulk lane, in a job, answered ok (got {answer['status']})")
    check(cosine(answer["output"]["embedding"], embeddings[0]) > 0.99, "the bulk lane computes the same embedding")

    # (b) A job cancelled before its requests are sent: each is answered
    # cancelled, never computed (no output, no error); in Redis, asked for.
    job = f"py-{args.run}-cancelled"
    client.cancel(job)
    ttl = admin.ttl(client.cancel_key(job))
    check(0 < ttl <= DEFAULT_CANCEL_KEEP_S, f"cancel marks {client.cancel_key(job)} for a week (ttl {ttl} s)")
    cancelled_ids = [f"py-{args.run}-cancelled-{i}" for i in range(3)]
    for request_id, text in zip(cancelled_ids, TEXTS):
        client.send_text("minilm", request_id, text, lane=BULK, job=job, reply_to="redis")
    client.flush()
    for request_id in cancelled_ids:
        answer = client.wait(request_id, ["minilm"], timeout_s=60)["minilm"]
        check(
            answer["status"] == CANCELLED
            and "output" not in answer
            and "error" not in answer
            and "timings_ms" in answer,
            f"{request_id} of the cancelled job answered cancelled (got {answer['status']})",
        )

    # (c) An invalid job id, sent raw (the client would refuse it): answered
    # error bad_request.
    raw_id = f"py-{args.run}-bad-job"
    raw = Producer({"bootstrap.servers": args.brokers})
    raw.produce(
        client.topic("minilm"),
        key=raw_id.encode(),
        value=b"A request whose job id is not valid.",
        headers=[
            ("ce_specversion", SPEC_VERSION.encode()),
            ("ce_type", EVENT_TYPE.encode()),
            ("ce_id", raw_id.encode()),
            ("ce_source", b"check-client"),
            ("ce_time", rfc3339(now_ms()).encode()),
            ("content-type", TEXT.encode()),
            (JOB_HEADER, b"bad job!"),
        ],
    )
    check(raw.flush(30) == 0, "the raw request with an invalid job id was acknowledged")
    answer = client.wait(raw_id, ["minilm"], timeout_s=60)["minilm"]
    code = (answer.get("error") or {}).get("code")
    check(
        answer["status"] == "error" and code == "bad_request",
        f"an invalid job id is answered error bad_request (got {answer['status']} {code})",
    )

    check_collected_job(client, args.run, embeddings[0])
    client.close()


def check_collected_job(client, run, first_embedding):
    """(d) A job sent with send_job and collected off Kafka (the bulk lane's
    answers go to infer.minilm.bulk.answers by default): one line per
    request, each once; collecting again, or after a kill cut the file
    mid-line, completes it without a repeat."""
    job = f"py-{run}-collected"
    delivered = client.send_job("minilm", JOB_TEXTS, job)
    check(delivered == len(JOB_TEXTS), f"send_job sent {len(JOB_TEXTS)} requests of {job} (delivered {delivered})")
    record = client.job_record(job) or {}
    check(
        record.get("state") == "sent"
        and record.get("requests") == len(JOB_TEXTS)
        and record.get("answers_topic") == client.answers_topic("minilm", BULK),
        f"{client.jobs_topic()} holds the job's final record (got {record})",
    )
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "answers.jsonl")

        def collected():
            with open(path, encoding="utf-8") as f:
                return [json.loads(line) for line in f]

        counts = client.collect(job, path, timeout_s=120)
        rows = collected()
        check(len(rows) == len(JOB_TEXTS), f"collect wrote {len(JOB_TEXTS)} lines (got {len(rows)})")
        check(len({row["request_id"] for row in rows}) == len(JOB_TEXTS), "one line per request id")
        check(all(row["status"] == OK for row in rows), f"every answer of the job is ok (counts {counts})")
        check(
            all(len(row["answer"]["output"]["embedding"]) == 384 for row in rows),
            "every collected answer holds a 384-dimensional embedding",
        )
        check(sorted(row["line"] for row in rows) == list(range(1, len(JOB_TEXTS) + 1)), "each line names its text")
        first = next(row for row in rows if row["line"] == 1)
        embedding = first["answer"]["output"]["embedding"]
        check(cosine(embedding, first_embedding) > 0.99, "line 1 is the first text's embedding")
        check(counts == {status: len(JOB_TEXTS) if status == OK else 0 for status in STATUSES}, f"counts {counts}")
        again = client.collect(job, path, timeout_s=60)
        check(len(collected()) == len(JOB_TEXTS) and again == counts, "collecting again adds no line")
        with open(path, "rb") as f:
            raw = f.read()
        cut = raw.index(b"\n", len(raw) // 2) + 10  # a kill in the middle of a line
        with open(path, "wb") as f:
            f.write(raw[:cut])
        client.collect(job, path, timeout_s=120)
        rows = collected()
        check(
            len(rows) == len(JOB_TEXTS) and len({row["request_id"] for row in rows}) == len(JOB_TEXTS),
            f"a file cut mid-line is completed, each request once (got {len(rows)} lines)",
        )
    status = client.job_status(job)
    check(status["answered"] == len(JOB_TEXTS) and status["waiting"] == 0, f"job_status: {status['by_status']}")


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"all checks passed in {time.monotonic() - started:.1f} s")
