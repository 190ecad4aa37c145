"""Jobs on Kafka: `send_job` sends a job's texts to the bulk lane between
two records of it on the jobs topic, and `job_record` and `job_status`
read them back, the same from any machine. Collecting a job's answers is
`_collect.py`.
"""

from __future__ import annotations

import json

from confluent_kafka import KafkaException

from ._errors import NoJobRecord
from ._protocol import BULK, SENDING, SENT, check_reply_to, check_request_id, now_ms
from ._reading import _answer_of, _answers_from_ms, _count_by_status, _read_to_ends


class _Jobs:
    """FleetClient's jobs (its producer, `send_text` and the readers of
    `_JobReading`)."""

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
        waiting = max(0, record.get("requests", 0) - len(seen))
        return {"record": record, "answered": len(seen), "waiting": waiting, "by_status": _count_by_status(seen)}
