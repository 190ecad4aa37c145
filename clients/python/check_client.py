"""Runs the Python client against a live fleet and checks what it gets back.

Started by crates/fleet-worker/tests/clients.rs (part of `make test`)
with a broker, a Redis and two real workers (minilm, efficientnet_lite0); by
hand: python3 clients/python/check_client.py --brokers 127.0.0.1:9092
--redis redis://127.0.0.1:6379 --photo <a photo of coffee>. Python puts this
file's folder first on sys.path, so that imports the fleet_client.py beside
it; `python3 -P` checks the installed package (`pip install ./clients/python`)
instead. Exits non-zero
with the reason on the first check that fails; prints one line per check.
"""

import argparse
import math
import sys
import time

import redis

from fleet_client import FleetClient, Overloaded, now_ms

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
]


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
    client.close()


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"all checks passed in {time.monotonic() - started:.1f} s")
