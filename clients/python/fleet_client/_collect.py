"""Collecting a job: its answers from its answers topic into a JSON lines
file, resumable and each request once. The steps are the job's record, the
file (what it holds already), the reading of both topics and the loop that
follows them until the record's count is met; apart from `_jobs.py`
because it is the one long-running reader.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import KafkaException, TopicPartition

from ._answers_file import _answer_line, open_answers_file
from ._errors import JobTimeout, NoJobRecord
from ._protocol import KAFKA, SENT, check_request_id
from ._reading import _answer_of, _answers_from_ms, _count_by_status, _parse_record


def _job_done(record: dict, held: dict) -> bool:
    """Every request of the job has an answer. A sender whose ack was lost
    may have had one more request delivered than it counted: more answers
    than requests ends the job too."""
    return record.get("state") == SENT and len(held) >= record.get("requests", 0)


class _Collection:
    """One collect under way: the job's latest record, the requests its
    file holds (request id -> status), counted by status, and the file."""

    def __init__(self, job: str, jobs_topic: str, record: dict, held: dict, out):
        self.job, self.jobs_topic, self.record, self.held, self.out = job, jobs_topic, record, held, out
        self.counts = _count_by_status(held)

    def done(self) -> bool:
        return _job_done(self.record, self.held)

    def wait_s(self, deadline, timeout_s) -> float:
        """How long to wait for the next messages; raises JobTimeout once
        `deadline` (None: none) has passed."""
        wait_s = 1.0
        if deadline is not None:
            wait_s = min(wait_s, deadline - time.monotonic())
            if wait_s <= 0:
                raise JobTimeout(self.job, len(self.held), self.record, timeout_s)
        return wait_s

    def take(self, message) -> None:
        """A later record of the job, or an answer of a request the file does
        not hold yet, written to it."""
        if message.error():
            raise KafkaException(message.error())
        if message.topic() == self.jobs_topic:
            if message.key() == self.job.encode():
                self.record = _parse_record(message.value()) or self.record
            return
        answer = _answer_of(message, self.job)
        if answer is None or answer[0] in self.held:
            return
        request_id, status = answer
        self.held[request_id] = status
        self.counts[status] += 1
        self.out.write(_answer_line(self.job, request_id, status, message.value()))

    def close(self) -> None:
        """What was collected stays, whatever stopped the collector."""
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()


class _Collect:
    """FleetClient's `collect` (the readers of `_JobReading`)."""

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
        record, jobs_ends = self._collectable_record(job)
        collection = _Collection(job, self.jobs_topic(), record, *open_answers_file(path))
        consumer = None
        try:
            if not collection.done():
                consumer = self._follow_job(record, jobs_ends)
            flushed = time.monotonic()
            while not collection.done():
                for message in consumer.consume(500, timeout=collection.wait_s(deadline, timeout_s)):
                    collection.take(message)
                if time.monotonic() - flushed >= 1.0:
                    # A collector killed now loses at most a second's lines.
                    collection.out.flush()
                    flushed = time.monotonic()
        finally:
            if consumer is not None:
                consumer.close()
            collection.close()
        return collection.counts

    def _collectable_record(self, job: str):
        """The latest record of `job` and where `_read_record` stopped on the
        jobs topic; raises NoJobRecord when it has none, ValueError when its
        answers do not go to Kafka (nothing there to collect)."""
        record, jobs_ends = self._read_record(job)
        if record is None:
            raise NoJobRecord(job, self.jobs_topic())
        reply_to = record.get("reply_to")
        if reply_to is not None and KAFKA not in (word.strip() for word in reply_to.split(",")):
            raise ValueError(
                f"job {job}'s requests asked for their answers in {reply_to}: only answers on Kafka can be collected"
            )
        return record, jobs_ends

    def _follow_job(self, record: dict, jobs_ends: dict):
        """A reader of the record's answers topic from where its answers can
        start, and of the jobs topic from where `_read_record` stopped
        (`jobs_ends`): each later record of the job (its final count) is
        seen."""
        consumer = self._reader()
        try:
            starts, _ = self._answers_from(consumer, record["answers_topic"], _answers_from_ms(record))
            jobs_topic = self.jobs_topic()
            consumer.assign(starts + [TopicPartition(jobs_topic, p, end) for p, end in jobs_ends.items()])
        except BaseException:
            consumer.close()
            raise
        return consumer
