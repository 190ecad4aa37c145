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

# The package's layout, one concept a module (all private: this file is the
# public face, the same names the single module fleet_client.py had):
#   _protocol.py      the wire contract: headers, statuses, lanes, id rules
#   _errors.py        the exceptions the client raises
#   _client.py        FleetClient: connections, names, sending, waiting
#   _admission.py     predicted-wait admission from the backlog reports
#   _jobs.py          send_job, job_record, job_status
#   _collect.py       collect: a job's answers into a JSON lines file
#   _answers_file.py  that file's format, read back on a resume
#   _reading.py       reading the jobs and answers topics

from ._admission import load_from_reports, predicted_wait_ms
from ._answers_file import open_answers_file
from ._client import FleetClient
from ._errors import JobTimeout, NoJobRecord, Overloaded, Timeout
from ._protocol import (
    BROKER_TIMEOUT_S,
    BULK,
    CANCELLED,
    CLOCK_SKEW_ALLOWANCE_MS,
    DEFAULT_CANCEL_KEEP_S,
    DEFAULT_REQUEST_TTL_MS,
    DESTINATIONS,
    ERROR,
    EVENT_TYPE,
    EXPIRED,
    INTERACTIVE,
    JOB_HEADER,
    JOBS_READ_TIMEOUT_S,
    KAFKA,
    LANES,
    MAX_MESSAGE_BYTES,
    MAX_PARTS,
    MAX_REPORT_AGE_MS,
    MIN_DRAIN_PER_S,
    OK,
    READER_GROUP,
    REDIS,
    REPLY_TO_HEADER,
    SENDING,
    SENT,
    SPEC_VERSION,
    STATUS_HEADER,
    STATUSES,
    TEXT,
    check_lane,
    check_reply_to,
    check_request_id,
    line_of,
    now_ms,
    rfc3339,
)

# The classes still read as fleet_client.<name> in tracebacks and reprs, as
# when the client was one module.
for _public in (FleetClient, JobTimeout, NoJobRecord, Overloaded, Timeout):
    _public.__module__ = __name__
del _public
