//! Kafka header names of a request message (CloudEvents 1.0, Kafka binding,
//! binary content mode: the value is the raw input, metadata rides in headers),
//! and the one rule every reader of them follows ([`find`]).

pub const SPEC_VERSION: &str = "ce_specversion";
pub const TYPE: &str = "ce_type";
pub const ID: &str = "ce_id";
pub const SOURCE: &str = "ce_source";
pub const TIME: &str = "ce_time";
pub const CONTENT_TYPE: &str = "content-type";
/// Absolute deadline, Unix epoch milliseconds. Optional.
pub const DEADLINE: &str = "ce_deadline";
/// The job the request belongs to (a CloudEvents extension attribute):
/// `fleet-produce cancel --job <id>` cancels every request of it. Optional;
/// same alphabet as a request id.
pub const JOB: &str = "ce_fleetjob";
/// How many models the request was fanned out to. Optional, default 1.
pub const PARTS: &str = "ce_parts";
/// Where the answer goes (`crate::reply`): `redis`, `kafka` or
/// `redis,kafka`, within what the model allows. Optional: the lane's
/// default in the model's config applies.
pub const REPLY_TO: &str = "ce_fleetreplyto";
/// On an answer record (`crate::answer_record`): the answer's status, so a
/// reader can count a job's answers without parsing them.
pub const STATUS: &str = "ce_fleetstatus";

/// Header set on a dead-lettered message: why it could not become a request.
pub const DLQ_REASON: &str = "fleet_dlq_reason";
/// Header set on a dead-lettered message: a human-readable detail.
pub const DLQ_DETAIL: &str = "fleet_dlq_detail";
/// Header set on a dead-lettered message: where the original sits,
/// `<topic>:<partition>:<offset>`.
pub const DLQ_SOURCE: &str = "fleet_dlq_source";
/// Header set (to `true`) on a dead letter sent without the original's
/// payload and headers, because the full copy was refused as too large.
pub const DLQ_TRUNCATED: &str = "fleet_dlq_truncated";

pub const SPEC_VERSION_VALUE: &str = "1.0";
pub const TYPE_VALUE: &str = "fleet.infer.v1";
/// `ce_type` of an answer record on an answers topic.
pub const ANSWER_TYPE_VALUE: &str = "fleet.answer.v1";
/// `content-type` of an answer record: the answer JSON.
pub const ANSWER_CONTENT_TYPE: &str = "application/json";

/// Upper bound on `ce_parts`: a request fans out to at most this many models.
pub const MAX_PARTS: u32 = 16;

/// The value of header `name` among a message's headers, as every reader of
/// the fleet's messages takes it: names match whatever their case, of
/// repeated headers the first counts, and one without a value is missing.
pub fn find<'a>(headers: &[(&str, Option<&'a [u8]>)], name: &str) -> Option<&'a [u8]> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).and_then(|(_, v)| *v)
}
