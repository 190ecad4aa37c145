"""The wire contract (docs/protocol.md): header names, statuses, lanes,
destinations, limits, and the rules a request id, a job id, a lane and a
reply-to must follow. Every other module checks requests against these, so
the rules live once, here.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

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


def now_ms() -> int:
    return int(time.time() * 1000)


def rfc3339(ms: int) -> str:
    """ce_time: UTC with milliseconds, e.g. 2026-12-02T17:00:00.123Z."""
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
