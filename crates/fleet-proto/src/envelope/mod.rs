//! The request envelope: CloudEvents binary-mode headers read off (or written
//! onto) a Kafka message. Parsing is total: any key and header set yields
//! either an [`Envelope`] or a [`Rejection`] saying whether the request id was
//! readable (then the client gets an `error` answer) or not (then the message
//! can only go to the dead-letter topic).
//!
//! Which request id a message answers at is `id`'s; reading the other
//! headers, one rule per header, is `read`'s; `ce_time`'s text form is
//! `rfc3339`'s.

mod id;
mod read;
mod rfc3339;

pub use id::readable_id;
pub use rfc3339::{format_rfc3339_ms, parse_rfc3339_ms};

use crate::{headers as h, ContentType, ErrorCode, RequestId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub id: RequestId,
    /// `ce_source`: who produced the request.
    pub source: String,
    /// `ce_time`, as Unix epoch milliseconds.
    pub created_ms: u64,
    pub content_type: ContentType,
    /// `ce_deadline`, Unix epoch milliseconds, when the producer set one.
    pub deadline_ms: Option<u64>,
    /// `ce_parts`: how many model answers make the request complete.
    pub parts: u32,
    /// `ce_fleetjob`: the job it belongs to, which a cancel names.
    pub job: Option<crate::JobId>,
    /// `ce_fleetreplyto`: where the producer wants the answer, when it said
    /// (the model decides whether it may have it there).
    pub reply_to: Option<crate::reply::Destinations>,
}

/// Why a message could not become a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The request id, when one could be read: the answer goes there.
    pub id: Option<RequestId>,
    pub code: ErrorCode,
    /// Human-readable detail for the answer's `error.message` or the DLQ header.
    pub message: String,
    /// The job named by a valid `ce_fleetjob`, even when another header is
    /// bad: the refusal is one of the job's answers, which its collector
    /// counts.
    pub job: Option<crate::JobId>,
}

impl Rejection {
    fn new(id: Option<&RequestId>, code: ErrorCode, message: impl Into<String>) -> Self {
        Self { id: id.cloned(), code, message: message.into(), job: None }
    }

    /// Stable reason word for the DLQ header and `fleet_dlq_total{reason}`
    /// when no answer can be written.
    pub fn dlq_reason(&self) -> &'static str {
        "unreadable_request_id"
    }
}

impl Envelope {
    /// The deadline that applies: `ce_deadline`, else creation + the model's TTL.
    pub fn effective_deadline_ms(&self, default_ttl_ms: u64) -> u64 {
        self.deadline_ms.unwrap_or(self.created_ms.saturating_add(default_ttl_ms))
    }

    /// Reads an envelope from a message's key and headers. Headers whose value
    /// is absent count as missing; of repeated headers the first one counts.
    pub fn parse<'a, I>(key: Option<&[u8]>, headers: I) -> Result<Self, Rejection>
    where
        I: IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    {
        let headers: Vec<(&str, Option<&[u8]>)> = headers.into_iter().collect();
        let find = |name: &str| h::find(&headers, name);
        read::envelope(key, &find).map_err(|mut rejection| {
            rejection.job = find(h::JOB).and_then(|raw| crate::JobId::from_bytes(raw.trim_ascii()).ok());
            rejection
        })
    }

    /// The headers a producer puts on the message, in the documented order.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (h::SPEC_VERSION, h::SPEC_VERSION_VALUE.to_owned()),
            (h::TYPE, h::TYPE_VALUE.to_owned()),
            (h::ID, self.id.to_string()),
            (h::SOURCE, self.source.clone()),
            (h::TIME, format_rfc3339_ms(self.created_ms)),
            (h::CONTENT_TYPE, self.content_type.as_str().to_owned()),
            (h::PARTS, self.parts.to_string()),
        ];
        if let Some(deadline) = self.deadline_ms {
            out.push((h::DEADLINE, deadline.to_string()));
        }
        if let Some(job) = &self.job {
            out.push((h::JOB, job.to_string()));
        }
        if let Some(reply_to) = self.reply_to {
            out.push((h::REPLY_TO, reply_to.to_string()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Envelope {
        Envelope {
            id: RequestId::parse("req-7").unwrap(),
            source: "tests".into(),
            created_ms: 1_764_000_000_123,
            content_type: ContentType::Text,
            deadline_ms: Some(1_764_000_030_000),
            parts: 2,
            job: Some(RequestId::parse("backfill-2026-12").unwrap()),
            reply_to: Some(crate::reply::Destinations::KAFKA),
        }
    }

    fn headers_of(env: &Envelope) -> Vec<(&'static str, Vec<u8>)> {
        env.to_headers().into_iter().map(|(k, v)| (k, v.into_bytes())).collect()
    }

    fn parse(key: Option<&[u8]>, hs: &[(&'static str, Vec<u8>)]) -> Result<Envelope, Rejection> {
        Envelope::parse(key, hs.iter().map(|(k, v)| (*k, Some(v.as_slice()))))
    }

    fn without(hs: &[(&'static str, Vec<u8>)], name: &str) -> Vec<(&'static str, Vec<u8>)> {
        hs.iter().filter(|(k, _)| *k != name).cloned().collect()
    }

    fn with(hs: &[(&'static str, Vec<u8>)], name: &'static str, value: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
        let mut out = without(hs, name);
        out.push((name, value.to_vec()));
        out
    }

    #[test]
    fn round_trips_through_headers() {
        let env = sample();
        assert_eq!(parse(Some(b"req-7"), &headers_of(&env)), Ok(env));
    }

    #[test]
    fn a_job_is_optional() {
        let mut env = sample();
        env.job = None;
        let hs = headers_of(&env);
        assert!(hs.iter().all(|(name, _)| *name != h::JOB));
        assert_eq!(parse(Some(b"req-7"), &hs), Ok(env));
    }

    #[test]
    fn a_reply_destination_is_optional_and_never_a_topic() {
        let mut env = sample();
        env.reply_to = None;
        let hs = headers_of(&env);
        assert!(hs.iter().all(|(name, _)| *name != h::REPLY_TO));
        assert_eq!(parse(Some(b"req-7"), &hs), Ok(env));
        let both = with(&hs, h::REPLY_TO, b"redis,kafka");
        assert_eq!(parse(Some(b"req-7"), &both).unwrap().reply_to, Some(crate::reply::Destinations::BOTH));
        let topic = parse(Some(b"req-7"), &with(&hs, h::REPLY_TO, b"infer.other.answers")).unwrap_err();
        assert_eq!(topic.code, ErrorCode::BadRequest);
        assert!(topic.message.contains(h::REPLY_TO), "{}", topic.message);
    }

    #[test]
    fn a_refused_request_still_names_its_job() {
        let hs = with(&headers_of(&sample()), h::DEADLINE, b"soon");
        let refused = parse(Some(b"req-7"), &hs).unwrap_err();
        assert_eq!(refused.job.as_ref().map(RequestId::as_str), Some("backfill-2026-12"));
        let bad_job = with(&hs, h::JOB, b"a job");
        assert_eq!(parse(Some(b"req-7"), &bad_job).unwrap_err().job, None);
    }

    #[test]
    fn deadline_defaults_to_creation_plus_ttl() {
        let mut env = sample();
        assert_eq!(env.effective_deadline_ms(5_000), 1_764_000_030_000);
        env.deadline_ms = None;
        assert_eq!(env.effective_deadline_ms(5_000), 1_764_000_005_123);
    }

    #[test]
    fn missing_or_bad_headers_are_bad_requests_with_the_id() {
        let hs = headers_of(&sample());
        for name in [h::SPEC_VERSION, h::TYPE, h::SOURCE, h::TIME, h::CONTENT_TYPE] {
            let r = parse(Some(b"req-7"), &without(&hs, name)).unwrap_err();
            let expected = ErrorCode::BadRequest;
            assert_eq!((r.id.as_ref().map(RequestId::as_str), r.code), (Some("req-7"), expected), "{name}");
            assert!(r.message.contains(name), "{}", r.message);
        }
        let bad_values: [(&'static str, &[u8]); 11] = [
            (h::JOB, b""),
            (h::JOB, b"a job"),
            (h::JOB, b"job/1"),
            (h::SPEC_VERSION, b"0.3"),
            (h::TYPE, b"other.type"),
            (h::TIME, b"yesterday"),
            (h::DEADLINE, b"soon"),
            (h::PARTS, b"0"),
            (h::PARTS, b"99"),
            (h::SOURCE, b"\xff\xfe"),
            (h::REPLY_TO, b"s3"),
        ];
        for (name, value) in bad_values {
            let r = parse(Some(b"req-7"), &with(&hs, name, value)).unwrap_err();
            assert_eq!(r.code, ErrorCode::BadRequest, "{name}={value:?}");
            assert!(r.id.is_some());
        }
    }

    #[test]
    fn unknown_content_type_is_unsupported_format() {
        let hs = with(&headers_of(&sample()), h::CONTENT_TYPE, b"application/pdf");
        assert_eq!(parse(Some(b"req-7"), &hs).unwrap_err().code, ErrorCode::UnsupportedFormat);
    }

    #[test]
    fn id_comes_from_key_or_ce_id_and_they_must_agree() {
        let hs = headers_of(&sample());
        assert_eq!(parse(None, &hs).unwrap().id.as_str(), "req-7");
        let r = parse(Some(b"other"), &hs).unwrap_err();
        assert_eq!(r.id.unwrap().as_str(), "other");
        assert_eq!(r.code, ErrorCode::BadRequest);
        // An invalid key but a valid ce_id: the answer can still go to ce_id.
        assert_eq!(parse(Some(b"bad key"), &hs).unwrap().id.as_str(), "req-7");
    }

    #[test]
    fn the_answer_address_is_the_one_parse_would_use() {
        assert_eq!(readable_id(Some(b"req-7"), None).unwrap().as_str(), "req-7");
        assert_eq!(readable_id(Some(b""), Some(b"req-8")).unwrap().as_str(), "req-8");
        assert_eq!(readable_id(Some(b"a"), Some(b"b")).unwrap().as_str(), "a", "disagreeing: the key's");
        assert_eq!(readable_id(Some(b""), None), None);
        assert_eq!(readable_id(None, Some(b"\xff")), None);
    }

    #[test]
    fn unreadable_id_has_no_answer_address() {
        let hs = without(&headers_of(&sample()), h::ID);
        for key in [None, Some(&b"has space"[..]), Some(&b"\xff"[..])] {
            let r = parse(key, &hs).unwrap_err();
            assert_eq!(r.id, None, "{key:?}");
            assert_eq!(r.dlq_reason(), "unreadable_request_id");
        }
    }

    proptest! {
        #[test]
        fn parse_is_total(
            key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            values in proptest::collection::vec(proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)), 9),
        ) {
            let names = [h::SPEC_VERSION, h::TYPE, h::ID, h::SOURCE, h::TIME, h::CONTENT_TYPE, h::DEADLINE, h::PARTS, "x-other"];
            let hs: Vec<(&str, Option<&[u8]>)> = names.iter().zip(&values).map(|(n, v)| (*n, v.as_deref())).collect();
            let _ = Envelope::parse(key.as_deref(), hs);
        }
    }
}
