"""A Python client of the inference fleet (docs/clients.md, docs/protocol.md).

Sends requests to the model topics with confluent-kafka (CloudEvents 1.0,
binary mode: the raw input as the value, metadata in headers) and waits for
the answers in Redis with redis-py (BLPOP on the request's ready list, then
HGETALL of its result hash). One Redis server or a Redis Cluster alike: a
request's two keys share a hash tag, so they live in one slot.

    client = FleetClient("127.0.0.1:9092", "redis://127.0.0.1:6379")
    client.send_text("minilm", "req-1", "A man is eating food.")
    answers = client.wait("req-1", ["minilm"], timeout_s=30)

Lanes and jobs: `lane="bulk"` sends to the model's bulk topic
(`infer.<model>.bulk`), which workers serve with the capacity interactive
requests leave; `job="backfill-7"` tags a request with a job
(`ce_fleetjob`), and `cancel("backfill-7")` makes workers answer every
request of that job they have not computed yet with status "cancelled".

Admission: `admit(model, deadline_ms)` reads the workers' backlog reports and
refuses (raises Overloaded) a request whose predicted wait, backlog / drain
rate, would outlast its deadline: the same rule as the Rust producer's
BacklogGuard, so a refused request is never sent only to expire unanswered.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections import deque
from datetime import datetime, timezone

import redis
from confluent_kafka import Producer

SPEC_VERSION = "1.0"
EVENT_TYPE = "fleet.infer.v1"
TEXT = "text/plain; charset=utf-8"
# Largest value (20 MB) plus room for key and headers: the topics'
# max.message.bytes. librdkafka's default (1 MB) would refuse images.
MAX_MESSAGE_BYTES = 20_000_000 + 64 * 1024
# What a worker applies when a request carries no ce_deadline.
DEFAULT_REQUEST_TTL_MS = 30_000
# A worker's report counts this long; reports come every second.
MAX_REPORT_AGE_MS = 5_000
# Below this drain rate (answers/s) nothing is predicted: the fleet is idle
# or starting, and the request is admitted.
MIN_DRAIN_PER_S = 0.5
MAX_PARTS = 16
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Lanes: interactive requests go to infer.<model>, bulk ones to
# infer.<model>.bulk (same message contract).
INTERACTIVE = "interactive"
BULK = "bulk"
LANES = (INTERACTIVE, BULK)
_LANE_SUFFIX = {INTERACTIVE: "", BULK: ".bulk"}
# The job a request belongs to (a CloudEvents extension attribute); same
# alphabet and length as a request id.
JOB_HEADER = "ce_fleetjob"
# How long a cancel lasts unless told otherwise: a week, Kafka's default
# retention, so a cancelled job's messages read late are not computed either.
DEFAULT_CANCEL_KEEP_S = 7 * 24 * 3600
# An answer's status (docs/answer.schema.json). Only "ok" has an output,
# only "error" an error; "expired" and "cancelled" were never computed.
OK, ERROR, EXPIRED, CANCELLED = "ok", "error", "expired", "cancelled"
STATUSES = (OK, ERROR, EXPIRED, CANCELLED)


def check_request_id(request_id: str, what: str = "request id") -> None:
    """Raises ValueError unless `request_id` is 1-128 characters of
    A-Z a-z 0-9 . _ : - (the rule for request ids and job ids alike)."""
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        raise ValueError(f"{what} {request_id!r}: 1-128 characters of A-Z a-z 0-9 . _ : -")


def check_lane(lane: str) -> None:
    if lane not in LANES:
        raise ValueError(f"lane {lane!r} is not one of {', '.join(LANES)}")


class Overloaded(Exception):
    """The model's predicted wait exceeds the request's deadline: not sent."""

    def __init__(self, model: str, predicted_wait_ms: int, deadline_left_ms: int):
        super().__init__(
            f"{model}: predicted wait {predicted_wait_ms} ms exceeds the deadline's "
            f"{deadline_left_ms} ms; shed or retry later"
        )
        self.model = model
        self.predicted_wait_ms = predicted_wait_ms
        self.deadline_left_ms = deadline_left_ms


class Timeout(Exception):
    """Not every model answered within the wait's timeout."""

    def __init__(self, request_id: str, missing: list[str], present: dict):
        super().__init__(f"request {request_id}: no answer from {missing} (have {sorted(present)})")
        self.missing = missing
        self.present = present


def now_ms() -> int:
    return int(time.time() * 1000)


def rfc3339(ms: int) -> str:
    """ce_time: UTC with milliseconds, e.g. 2026-12-02T17:00:00.123Z."""
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def load_from_reports(reports: dict, at_ms: int):
    """The model's (backlog, drain per s or None, oldest report ms) from the
    workers' fresh reports ("<backlog> <unix ms> <drain per s>"), or None."""
    backlog, drain, oldest, fresh = 0, None, None, False
    for raw in reports.values():
        fields = (raw.decode() if isinstance(raw, bytes) else raw).split(" ")
        try:
            count, stamp = int(fields[0]), int(fields[1])
            rate = float(fields[2]) if len(fields) > 2 else None
        except (ValueError, IndexError):
            continue
        if rate is not None and not (math.isfinite(rate) and rate >= 0):
            continue
        if stamp + MAX_REPORT_AGE_MS < at_ms:
            continue
        fresh = True
        backlog += count
        if rate is not None:
            drain = rate if drain is None else drain + rate
        oldest = stamp if oldest is None else min(oldest, stamp)
    return (backlog, drain, oldest) if fresh else None


def predicted_wait_ms(backlog: int, drain_per_s, report_ms: int, sent_since: int, at_ms: int):
    """backlog / drain, with the backlog projected to `at_ms`: plus what this
    client sent after the report, minus what drained since. None: no rate."""
    if drain_per_s is None or drain_per_s < MIN_DRAIN_PER_S:
        return None
    drained = drain_per_s * max(0, at_ms - report_ms) / 1000.0
    projected = max(0.0, backlog + sent_since - drained)
    return math.ceil(round(projected) / drain_per_s * 1000.0)


class FleetClient:
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
        """
        check_request_id(request_id)
        check_lane(lane)
        if job is not None:
            check_request_id(job, "job id")
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
        topic = self.topic(model, lane)
        while True:
            try:
                self._producer.produce(topic, key=request_id.encode(), value=value, headers=headers)
                break
            except BufferError:
                # The local queue is full: let deliveries drain it.
                self._producer.poll(0.01)
        self._producer.poll(0)
        with self._lock:
            self._sent.setdefault(model, deque()).append(created)

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

    # -- admission -----------------------------------------------------------

    def admit(self, model: str, deadline_ms: int | None = None, *, at_ms: int | None = None) -> None:
        """Raises Overloaded when the model's predicted wait exceeds the time
        left to the deadline (default: the worker's 30 s). No fresh report,
        no drain rate, or Redis unreadable: admitted (admission may shed
        load, never stop traffic on its own failure)."""
        at_ms = now_ms() if at_ms is None else at_ms
        left_ms = (deadline_ms - at_ms) if deadline_ms is not None else DEFAULT_REQUEST_TTL_MS
        try:
            reports = self._redis.hgetall(self.backlog_key(model))
        except redis.RedisError:
            return
        load = load_from_reports(reports, at_ms)
        if load is None:
            return
        backlog, drain, report_ms = load
        with self._lock:
            sent = self._sent.setdefault(model, deque())
            while sent and sent[0] + MAX_REPORT_AGE_MS < at_ms:
                sent.popleft()
            sent_since = sum(1 for t in sent if t > report_ms)
        wait = predicted_wait_ms(backlog, drain, report_ms, sent_since, at_ms)
        if wait is not None and wait > left_ms:
            raise Overloaded(model, wait, left_ms)

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
