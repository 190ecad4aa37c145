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

Where answers go: `reply_to="kafka"` (header `ce_fleetreplyto`: `redis`,
`kafka` or `redis,kafka`) asks for the answer on the model's answers topic
(`infer.<model>[.bulk].answers`) instead of, or beside, Redis; without it
the lane's default applies (interactive: Redis, bulk: Kafka). A job sent
with `send_job` is collected from Kafka, hours later or on another machine,
with `collect(job, "answers.jsonl")`: resumable, each request once.

    client.send_job("minilm", texts, "reembed-7")
    counts = client.collect("reembed-7", "answers.jsonl")
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections import deque
from datetime import datetime, timezone

import redis
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

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
# Where a request's answer goes (a CloudEvents extension attribute):
# `redis`, `kafka` or both, comma-separated. It names destinations, never a
# topic: the worker writes to the model's answers topic of the request's
# lane, `<topic prefix><model>[.bulk].answers`.
REPLY_TO_HEADER = "ce_fleetreplyto"
REDIS, KAFKA = "redis", "kafka"
DESTINATIONS = (REDIS, KAFKA)
# An answer record's status header: a reader counts a job's answers from
# the headers alone.
STATUS_HEADER = "ce_fleetstatus"
# Answers are looked for this long before a job's start: record timestamps
# are the workers' clocks, the start is the sender's.
CLOCK_SKEW_ALLOWANCE_MS = 10 * 60 * 1000
# A job record's states: still sending (`requests` grows), or every request
# sent (`requests` is the job's size).
SENDING, SENT = "sending", "sent"
# A reader of the jobs and answers topics joins no group (it assigns its
# partitions and commits nothing); librdkafka still wants a group.id.
READER_GROUP = "fleet-job-reader"
# How long a broker call (metadata, watermarks, offsets for times) may take.
BROKER_TIMEOUT_S = 10.0
# Reading the jobs topic to its end takes at most this long.
JOBS_READ_TIMEOUT_S = 60.0


def check_request_id(request_id: str, what: str = "request id") -> None:
    """Raises ValueError unless `request_id` is 1-128 characters of
    A-Z a-z 0-9 . _ : - (the rule for request ids and job ids alike)."""
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        raise ValueError(f"{what} {request_id!r}: 1-128 characters of A-Z a-z 0-9 . _ : -")


def check_lane(lane: str) -> None:
    if lane not in LANES:
        raise ValueError(f"lane {lane!r} is not one of {', '.join(LANES)}")


def check_reply_to(reply_to: str) -> None:
    """Raises ValueError unless `reply_to` is a comma list of `redis` and
    `kafka` (e.g. "kafka", "redis,kafka"): a worker answers a request that
    names anything else (a topic, say) error bad_request."""
    words = reply_to.split(",") if isinstance(reply_to, str) else None
    if not words or any(word.strip() not in DESTINATIONS for word in words):
        raise ValueError(f"reply_to {reply_to!r}: a comma list of {', '.join(DESTINATIONS)}")


def line_of(job: str, request_id: str):
    """The input line a request id names when it was made from one
    (`<job>-<n>`, as send_job and fleet-produce bulk make them); None for
    any other id."""
    rest = request_id[len(job) + 1 :] if request_id.startswith(job + "-") else ""
    return int(rest) if rest.isascii() and rest.isdigit() else None


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


class NoJobRecord(LookupError):
    """The jobs topic has no record of the job: nothing says how many
    answers to wait for, or where."""

    def __init__(self, job: str, topic: str):
        super().__init__(
            f"no record of job {job} on {topic}: was it sent with send_job or `fleet-produce bulk`, "
            "to this broker, under this topic prefix?"
        )
        self.job = job
        self.topic = topic


class JobTimeout(TimeoutError):
    """A collect did not get every answer of its job in time. What it
    collected stays in its file: collect again to go on."""

    def __init__(self, job: str, collected: int, record: dict, timeout_s: float):
        expected = record["requests"] if record.get("state") == SENT else "not yet known"
        super().__init__(
            f"job {job}: {collected} answers collected in {timeout_s} s, "
            f"of {expected} (the job's record says {record.get('state')})"
        )
        self.job = job
        self.collected = collected
        self.record = record


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


def open_answers_file(path):
    """Opens a JSON lines file of collected answers for appending: the
    requests it holds already (request id -> status) and the file. A last
    line without its newline (a collector killed while writing it) is cut
    off; a line that is not a collected answer raises ValueError (it is
    not such a file)."""
    held, whole = {}, 0
    if os.path.exists(path):
        with open(path, "rb") as existing:
            for number, raw in enumerate(existing, start=1):
                if not raw.endswith(b"\n"):
                    break
                try:
                    entry = json.loads(raw)
                except ValueError as e:
                    raise ValueError(
                        f"{path}: line {number} is not a collected answer ({e}); is this another file?"
                    ) from e
                entry = entry if isinstance(entry, dict) else {}
                request_id, status = entry.get("request_id"), entry.get("status")
                if not isinstance(request_id, str) or status not in STATUSES:
                    raise ValueError(
                        f"{path}: line {number} is not a collected answer (no request_id, or no known status); "
                        "is this another file?"
                    )
                held.setdefault(request_id, status)
                whole += len(raw)
    out = open(path, "a", encoding="utf-8", newline="")
    out.truncate(whole)
    return held, out


def _partitions(consumer: Consumer, topic: str) -> list:
    """The partitions of `topic`; LookupError naming it when it does not exist."""
    found = consumer.list_topics(topic, timeout=BROKER_TIMEOUT_S).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise LookupError(f"the topic {topic} does not exist: create the release's topics (fleet-produce topics)")
    return sorted(found.partitions)


def _read_to_ends(consumer: Consumer, ends: dict, topic: str):
    """The messages of the assigned partitions, until each partition in
    `ends` (partition -> high watermark) is read to its end."""
    ends = dict(ends)
    deadline = time.monotonic() + JOBS_READ_TIMEOUT_S
    while ends:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {topic} to its end took longer than {JOBS_READ_TIMEOUT_S} s")
        for message in consumer.consume(500, timeout=0.5):
            if message.error():
                raise KafkaException(message.error())
            yield message
            if message.offset() + 1 >= ends.get(message.partition(), math.inf):
                del ends[message.partition()]


def _parse_record(value) -> dict | None:
    """A job record's JSON, or None for a value that is not one."""
    try:
        record = json.loads(value)
    except (TypeError, ValueError):
        return None
    fields = ("job", "answers_topic", "state", "requests", "started_ms")
    return record if isinstance(record, dict) and all(f in record for f in fields) else None


def _answers_from_ms(record: dict) -> int:
    return max(0, record["started_ms"] - CLOCK_SKEW_ALLOWANCE_MS)


def _job_done(record: dict, held: dict) -> bool:
    """Every request of the job has an answer. A sender whose ack was lost
    may have had one more request delivered than it counted: more answers
    than requests ends the job too."""
    return record.get("state") == SENT and len(held) >= record.get("requests", 0)


def _answer_of(message, job: str):
    """(request id, status) of an answer record of `job`, from its key and
    headers alone; None for another job's answer or a record that is not
    a fleet answer."""
    headers = {}
    for name, value in message.headers() or []:
        headers.setdefault(name.lower(), value)
    if headers.get(JOB_HEADER) != job.encode():
        return None
    raw_id = message.key() or headers.get("ce_id") or b""
    request_id = raw_id.decode("utf-8", "replace")
    status = (headers.get(STATUS_HEADER) or b"").decode("utf-8", "replace")
    if not _REQUEST_ID.fullmatch(request_id) or status not in STATUSES:
        return None
    return request_id, status


def _answer_line(job: str, request_id: str, status: str, value) -> str:
    """One line of a collected job: the answer as the worker wrote it when
    it is JSON, as a string when not."""
    try:
        answer = json.loads(value)
    except (TypeError, ValueError):
        answer = (value or b"").decode("utf-8", "replace")
    row = {"request_id": request_id, "line": line_of(job, request_id), "status": status, "answer": answer}
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n"


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

    # -- jobs ------------------------------------------------------------------

    def send_job(self, model: str, texts, job: str, reply_to: str | None = None, *, input: str | None = None) -> int:
        """Sends each of `texts` to the model's bulk lane as one request of
        job `job`, with request ids `<job>-1`, `<job>-2`, ... (`collect`
        gives each answer its n back as `line`), and records the job on the
        jobs topic so that anyone can collect it later, from any machine:
        one record before the first request (state "sending"), one after
        the broker acknowledged the last (state "sent", `requests` = how
        many it acknowledged, the answers a collector waits for). A job sent
        again under the same id keeps its first start, so the answers of
        its first run are still found. `reply_to` as in `send` (None: the
        bulk lane's default, Kafka); `input` names what the texts came from,
        for people. Returns the requests delivered; raises RuntimeError when
        some were not (the record counts only the delivered ones)."""
        check_request_id(job, "job id")
        if reply_to is not None:
            check_reply_to(reply_to)
        texts = list(texts)
        # The longest id the job will use: refused now, not half-way.
        check_request_id(f"{job}-{max(len(texts), 1)}", "the job's request id")
        started = now_ms()
        earlier = self.job_record(job)
        record = {
            "job": job,
            "model": model,
            "lane": BULK,
            "answers_topic": self.answers_topic(model, BULK),
            "reply_to": reply_to,
            "state": SENDING,
            "requests": 0,
            "started_ms": min(earlier["started_ms"], started) if earlier else started,
            "updated_ms": started,
            "input": input,
        }
        self._write_record(record)
        delivered = []  # one bool per acknowledged or refused request

        def on_delivery(err, _message):
            delivered.append(err is None)

        for n, text in enumerate(texts, start=1):
            self.send_text(model, f"{job}-{n}", text, lane=BULK, job=job, reply_to=reply_to, on_delivery=on_delivery)
        # No timeout: each request is acknowledged or refused within
        # librdkafka's message.timeout.ms, and the count must be final.
        self._producer.flush()
        record.update(state=SENT, requests=sum(delivered), updated_ms=now_ms())
        self._write_record(record)
        if record["requests"] < len(texts):
            raise RuntimeError(
                f"{len(texts) - record['requests']} of {len(texts)} requests of job {job} were not delivered"
            )
        return record["requests"]

    def _write_record(self, record: dict) -> None:
        """Writes a job record and waits until the broker holds it: a
        collector trusts what the jobs topic says."""
        outcome = []
        value = json.dumps(record, separators=(",", ":")).encode()
        self._produce(self.jobs_topic(), record["job"].encode(), value, on_delivery=lambda err, _m: outcome.append(err))
        self._producer.flush()
        if outcome and outcome[0] is not None:
            raise KafkaException(outcome[0])

    def job_record(self, job: str) -> dict | None:
        """The latest record of `job` on the jobs topic (read from its start
        to the end it has now), or None when it has none."""
        check_request_id(job, "job id")
        return self._read_record(job)[0]

    def collect(self, job: str, path, timeout_s: float | None = None) -> dict:
        """Collects the answers of `job` from its answers topic into the JSON
        lines file `path`, one line per request: `{"request_id", "line",
        "status", "answer"}` (`line`: n of an id `<job>-<n>`, else null;
        `answer`: the answer JSON as the worker wrote it). Returns the
        requests collected by status (every status present), once the job's
        record says it is sent and the file holds an answer for as many
        requests as it counts.

        Resumable, each request once: the file is the only memory. What it
        holds is read first (a last line cut short, without its newline, is
        cut off and collected again) and only the other requests are
        appended; a request answered twice on the topic (delivery is at
        least once) is written once, its first answer. The topic is read
        from the job's start less CLOCK_SKEW_ALLOWANCE_MS on every
        partition (records before cannot be the job's). Raises NoJobRecord,
        and JobTimeout after `timeout_s` (None: wait as long as it takes);
        what was collected stays in the file."""
        check_request_id(job, "job id")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        record, jobs_ends = self._read_record(job)
        if record is None:
            raise NoJobRecord(job, self.jobs_topic())
        reply_to = record.get("reply_to")
        if reply_to is not None and KAFKA not in (word.strip() for word in reply_to.split(",")):
            raise ValueError(
                f"job {job}'s requests asked for their answers in {reply_to}: only answers on Kafka can be collected"
            )
        held, out = open_answers_file(path)
        counts = {status: 0 for status in STATUSES}
        for status in held.values():
            counts[status] += 1
        jobs_topic = self.jobs_topic()
        consumer = None
        try:
            if not _job_done(record, held):
                consumer = self._reader()
                starts, _ = self._answers_from(consumer, record["answers_topic"], _answers_from_ms(record))
                # The jobs topic from where `_read_record` stopped: each
                # later record of the job (its final count) is seen.
                consumer.assign(starts + [TopicPartition(jobs_topic, p, end) for p, end in jobs_ends.items()])
            flushed = time.monotonic()
            while not _job_done(record, held):
                wait_s = 1.0
                if deadline is not None:
                    wait_s = min(wait_s, deadline - time.monotonic())
                    if wait_s <= 0:
                        raise JobTimeout(job, len(held), record, timeout_s)
                for message in consumer.consume(500, timeout=wait_s):
                    if message.error():
                        raise KafkaException(message.error())
                    if message.topic() == jobs_topic:
                        if message.key() == job.encode():
                            record = _parse_record(message.value()) or record
                        continue
                    answer = _answer_of(message, job)
                    if answer is None or answer[0] in held:
                        continue
                    request_id, status = answer
                    held[request_id] = status
                    counts[status] += 1
                    out.write(_answer_line(job, request_id, status, message.value()))
                if time.monotonic() - flushed >= 1.0:
                    # A collector killed now loses at most a second's lines.
                    out.flush()
                    flushed = time.monotonic()
        finally:
            if consumer is not None:
                consumer.close()
            out.flush()
            os.fsync(out.fileno())
            out.close()
        return counts

    def job_status(self, job: str) -> dict:
        """A job at a glance, read off Kafka, the same from any machine:
        `{"record": its latest record, "answered": requests answered (each
        once), "waiting": requests sent and not answered yet, "by_status":
        answered by status}`, from the answers written up to now. Raises
        NoJobRecord."""
        check_request_id(job, "job id")
        record, _ = self._read_record(job)
        if record is None:
            raise NoJobRecord(job, self.jobs_topic())
        seen = {}
        consumer = self._reader()
        try:
            starts, ends = self._answers_from(consumer, record["answers_topic"], _answers_from_ms(record))
            if ends:
                consumer.assign(starts)
            for message in _read_to_ends(consumer, ends, record["answers_topic"]):
                answer = _answer_of(message, job)
                if answer is not None:
                    seen.setdefault(*answer)
        finally:
            consumer.close()
        by_status = {status: 0 for status in STATUSES}
        for status in seen.values():
            by_status[status] += 1
        waiting = max(0, record.get("requests", 0) - len(seen))
        return {"record": record, "answered": len(seen), "waiting": waiting, "by_status": by_status}

    def _reader(self) -> Consumer:
        """A consumer that joins no group: it assigns its partitions itself
        and commits nothing, so reading a job leaves no trace."""
        config = {"bootstrap.servers": self._brokers, "group.id": READER_GROUP}
        config.update(self._kafka_config)
        config.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
        return Consumer(config)

    def _read_record(self, job: str):
        """The latest readable record of `job` (or None), and the end
        (high watermark) of each jobs partition it read to."""
        topic = self.jobs_topic()
        consumer = self._reader()
        try:
            ends, starts = {}, []
            for partition in _partitions(consumer, topic):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=BROKER_TIMEOUT_S)
                ends[partition] = high
                if high > low:
                    starts.append(TopicPartition(topic, partition, low))
            if starts:
                consumer.assign(starts)
            latest = None
            unread = {tp.partition: ends[tp.partition] for tp in starts}
            for message in _read_to_ends(consumer, unread, topic):
                if message.key() == job.encode():
                    latest = _parse_record(message.value()) or latest
            return latest, ends
        finally:
            consumer.close()

    def _answers_from(self, consumer: Consumer, topic: str, from_ms: int):
        """Where to read `topic` from for records written at or after
        `from_ms` (Kafka's offsets for times, on every partition), and the
        end (high watermark) now of each partition that has some."""
        partitions = _partitions(consumer, topic)
        # Ends first: a partition with no record that young yet is read
        # from its end as of before the lookup, so nothing written in
        # between is missed.
        highs = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=BROKER_TIMEOUT_S)[1]
            for p in partitions
        }
        times = [TopicPartition(topic, p, from_ms) for p in partitions]
        starts = []
        for found in consumer.offsets_for_times(times, timeout=BROKER_TIMEOUT_S):
            if found.error is not None:
                raise KafkaException(found.error)
            offset = found.offset if found.offset >= 0 else highs[found.partition]
            starts.append(TopicPartition(topic, found.partition, offset))
        ends = {tp.partition: highs[tp.partition] for tp in starts if tp.offset < highs[tp.partition]}
        return starts, ends

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
