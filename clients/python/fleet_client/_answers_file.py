"""The JSON lines file that `collect` writes, one line per request: read
back on a resume (each request once) and appended to. Apart from the
Kafka reading so the file's format is in one place.
"""

from __future__ import annotations

import json
import os

from ._protocol import STATUSES, line_of


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


def _answer_line(job: str, request_id: str, status: str, value) -> str:
    """One line of a collected job: the answer as the worker wrote it when
    it is JSON, as a string when not."""
    try:
        answer = json.loads(value)
    except (TypeError, ValueError):
        answer = (value or b"").decode("utf-8", "replace")
    row = {"request_id": request_id, "line": line_of(job, request_id), "status": status, "answer": answer}
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n"
