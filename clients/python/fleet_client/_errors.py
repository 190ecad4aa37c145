"""What the client raises besides the libraries' own errors: a request
refused by admission, a wait that timed out, a job with no record and a
collect that timed out. Apart so that each caller's module can raise them
and users can catch them by one name.
"""

from __future__ import annotations

from ._protocol import SENT


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
