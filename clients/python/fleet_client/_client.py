"""FleetClient: the connections (a producer and a Redis client), the names
of topics and keys, sending, and waiting for answers in Redis. Admission,
jobs and collecting are mixed in from their own modules (`_admission.py`,
`_jobs.py`, `_collect.py`, `_reading.py`), which use the attributes set
here.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque

import redis
from confluent_kafka import Producer

from ._admission import _Admission
from ._collect import _Collect
from ._errors import Timeout
from ._jobs import _Jobs
from ._protocol import (
    _LANE_SUFFIX,
    DEFAULT_CANCEL_KEEP_S,
    EVENT_TYPE,
    INTERACTIVE,
    JOB_HEADER,
    MAX_MESSAGE_BYTES,
    MAX_PARTS,
    REPLY_TO_HEADER,
    SPEC_VERSION,
    TEXT,
    check_lane,
    check_reply_to,
    check_request_id,
    now_ms,
    rfc3339,
)
from ._reading import _JobReading


class FleetClient(_Admission, _Jobs, _Collect, _JobReading):
    """Sends requests and waits for answers. Thread-safe for sends."""

    def __init__(
        self,
        brokers: str,
        redis_url: str,
        *,
        topic_prefix: str = "infer.",
        redis_prefix: str = "fleet:",
        source: str = "python-client",
        cluster: bool = False,
        kafka_config: dict | None = None,
    ):
        config = {
            "bootstrap.servers": brokers,
            # Retried batches never duplicate a request.
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.max.bytes": MAX_MESSAGE_BYTES,
        }
        config.update(kafka_config or {})
        self._producer = Producer(config)
        # Readers of the jobs and answers topics connect as the producer
        # does (the same security settings).
        self._brokers = brokers
        self._kafka_config = dict(kafka_config or {})
        if cluster:
            self._redis = redis.RedisCluster.from_url(redis_url)
        else:
            self._redis = redis.Redis.from_url(redis_url)
        self._topic_prefix = topic_prefix
        self._redis_prefix = redis_prefix
        self._source = source
        self._sent = {}  # model -> deque of send times (ms), for admission
        self._lock = threading.Lock()

    # -- names ---------------------------------------------------------------

    def topic(self, model: str, lane: str = INTERACTIVE) -> str:
        """`infer.<model>` (interactive) or `infer.<model>.bulk` (bulk)."""
        check_lane(lane)
        return f"{self._topic_prefix}{model}{_LANE_SUFFIX[lane]}"

    def answers_topic(self, model: str, lane: str = INTERACTIVE) -> str:
        """`infer.<model>.answers` or `infer.<model>.bulk.answers`: where
        workers put the lane's answers that go to Kafka."""
        return f"{self.topic(model, lane)}.answers"

    def jobs_topic(self) -> str:
        """`infer.fleet.jobs`: every job's record, keyed by job id (compacted)."""
        return f"{self._topic_prefix}fleet.jobs"

    def result_key(self, request_id: str) -> str:
        return f"{self._redis_prefix}result:{{{request_id}}}"

    def ready_key(self, request_id: str) -> str:
        return f"{self._redis_prefix}ready:{{{request_id}}}"

    def cancel_key(self, job: str) -> str:
        return f"{self._redis_prefix}cancel:{{{job}}}"

    def backlog_key(self, model: str) -> str:
        return f"{self._redis_prefix}backlog:{model}"

    # -- sending -------------------------------------------------------------

    def send(
        self,
        model: str,
        request_id: str,
        value: bytes,
        content_type: str,
        *,
        deadline_ms: int | None = None,
        parts: int = 1,
        admit: bool = False,
        lane: str = INTERACTIVE,
        job: str | None = None,
        reply_to: str | None = None,
        on_delivery=None,
    ) -> None:
        """Enqueues one request; `flush()` waits for the broker's acks.

        The key is the request id (ce_id equals it); ce_time is this host's
        clock, and without `deadline_ms` the worker's default deadline counts
        from it. Reusing an id within the result TTL returns the earlier
        answer: the first answer of each model wins.

        `lane` is "interactive" (`infer.<model>`, the default) or "bulk"
        (`infer.<model>.bulk`: served with the capacity interactive requests
        leave). `job` (header ce_fleetjob, same rule as a request id) makes
        the request part of a job that `cancel(job)` stops; to make a single
        request cancellable, send it with its own id as its job.

        `reply_to` (header ce_fleetreplyto) is where the answer goes:
        "redis" (what `wait` reads), "kafka" (the lane's answers topic,
        `answers_topic(model, lane)`, durable, what `collect` reads) or
        "redis,kafka"; None leaves it to the lane's default in the model's
        config (interactive: redis, bulk: kafka). `on_delivery(err, msg)`
        is confluent-kafka's delivery callback: called from `poll`/`flush`
        once the broker acknowledged (err None) or refused the request.
        """
        check_request_id(request_id)
        check_lane(lane)
        if job is not None:
            check_request_id(job, "job id")
        if reply_to is not None:
            check_reply_to(reply_to)
        if not 1 <= parts <= MAX_PARTS:
            raise ValueError(f"parts must be 1-{MAX_PARTS}")
        created = now_ms()
        if admit:
            self.admit(model, deadline_ms, at_ms=created)
        headers = [
            ("ce_specversion", SPEC_VERSION.encode()),
            ("ce_type", EVENT_TYPE.encode()),
            ("ce_id", request_id.encode()),
            ("ce_source", self._source.encode()),
            ("ce_time", rfc3339(created).encode()),
            ("content-type", content_type.encode()),
        ]
        if deadline_ms is not None:
            headers.append(("ce_deadline", str(deadline_ms).encode()))
        if parts > 1:
            headers.append(("ce_parts", str(parts).encode()))
        if job is not None:
            headers.append((JOB_HEADER, job.encode()))
        if reply_to is not None:
            headers.append((REPLY_TO_HEADER, reply_to.encode()))
        self._produce(self.topic(model, lane), request_id.encode(), value, headers, on_delivery)
        with self._lock:
            self._sent.setdefault(model, deque()).append(created)

    def _produce(self, topic: str, key: bytes, value: bytes, headers=None, on_delivery=None) -> None:
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                # The local queue is full: let deliveries drain it.
                self._producer.poll(0.01)
        self._producer.poll(0)

    def send_text(self, model: str, request_id: str, text: str, **options) -> None:
        self.send(model, request_id, text.encode("utf-8"), TEXT, **options)

    def send_fanout(self, request_id: str, parts: list, **options) -> None:
        """One request to several models at once, e.g. an image to a vision
        model and its caption to a text model: `parts` is a list of
        (model, value bytes, content type). Each message carries
        ce_parts = len(parts); wait for all the models."""
        for model, value, content_type in parts:
            self.send(model, request_id, value, content_type, parts=len(parts), **options)

    def cancel(self, job: str, keep_s: float = DEFAULT_CANCEL_KEEP_S) -> None:
        """Cancels `job`: from now on workers answer each of its requests
        that they have not computed yet with status "cancelled" (no output,
        no error) instead of computing it; a batch already in a model is
        finished. The mark is `SET <redis prefix>cancel:{<job>} <now ms> EX
        <keep_s>`: keep it as long as the job's messages can wait in Kafka
        (default a week, Kafka's default retention). Cancelling twice, or a
        job no request named, is harmless. A single request is cancellable
        this way only if it was sent with its id as its job."""
        check_request_id(job, "job id")
        if isinstance(keep_s, bool) or not isinstance(keep_s, (int, float)) or not 1 <= keep_s < math.inf:
            raise ValueError(f"keep_s {keep_s!r}: at least 1 second")
        self._redis.set(self.cancel_key(job), now_ms(), ex=math.ceil(keep_s))

    def flush(self, timeout_s: float = 30.0) -> None:
        left = self._producer.flush(timeout_s)
        if left:
            raise RuntimeError(f"{left} requests not acknowledged by the broker within {timeout_s} s")

    # -- answers -------------------------------------------------------------

    def poll(self, request_id: str) -> dict:
        """The answers present now, by model (possibly none)."""
        raw = self._redis.hgetall(self.result_key(request_id))
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def wait(self, request_id: str, models: list, timeout_s: float = 30.0) -> dict:
        """Blocks until every model in `models` has answered, or raises Timeout.

        Every status is an answer that ends the wait: "ok" (with `output`),
        "error" (with `error`: `code`, `message`), "expired" and
        "cancelled" (neither: the request was never computed; "cancelled"
        means its job was cancelled). Look at each answer's `status` before
        its `output`."""
        deadline = time.monotonic() + timeout_s
        answers = self.poll(request_id)
        while not all(m in answers for m in models):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(request_id, [m for m in models if m not in answers], answers)
            # BLPOP takes seconds; 0 would block forever.
            self._redis.blpop([self.ready_key(request_id)], timeout=max(left, 0.01))
            answers = self.poll(request_id)
        return answers

    def close(self) -> None:
        self._producer.flush(5)
        self._redis.close()
