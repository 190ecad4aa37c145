"""Reading the jobs and answers topics: a consumer that joins no group and
commits nothing, reading to the ends the topics have now, and what a job
record and an answer record say. Shared by `collect`, `job_status` and
`job_record`.
"""

from __future__ import annotations

import json
import math
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ._protocol import (
    _REQUEST_ID,
    BROKER_TIMEOUT_S,
    CLOCK_SKEW_ALLOWANCE_MS,
    JOB_HEADER,
    JOBS_READ_TIMEOUT_S,
    READER_GROUP,
    STATUS_HEADER,
    STATUSES,
)


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


def _count_by_status(answers: dict) -> dict:
    """Answers (request id -> status) counted by status, every status present."""
    counts = {status: 0 for status in STATUSES}
    for status in answers.values():
        counts[status] += 1
    return counts


class _JobReading:
    """FleetClient's readers of the jobs and answers topics (its `_brokers`,
    `_kafka_config` and `jobs_topic`)."""

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
