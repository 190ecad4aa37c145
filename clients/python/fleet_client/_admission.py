"""Admission: the workers' backlog reports read from Redis, and the refusal
(Overloaded) of a request whose predicted wait would outlast its deadline,
the same rule as the Rust producer's BacklogGuard. Apart from sending
because it is a decision about load, not about the message.
"""

from __future__ import annotations

import math
from collections import deque

import redis

from ._errors import Overloaded
from ._protocol import DEFAULT_REQUEST_TTL_MS, MAX_REPORT_AGE_MS, MIN_DRAIN_PER_S, now_ms


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


class _Admission:
    """FleetClient's admission (its `_redis`, `_lock`, `_sent` and
    `backlog_key`)."""

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
