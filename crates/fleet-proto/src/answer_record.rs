//! An answer as a Kafka record on a model's answers topic
//! (`Namespace::answers_topic`): the durable way an answer reaches its
//! owner, for a job collected hours later or after Redis lost its data.
//!
//! Key: the request id (so one request's repeats share a partition and
//! arrive in the order they were written). Value: the answer JSON, exactly
//! as in `fleet:result:{<id>}` (`docs/answer.schema.json`). Headers, in
//! CloudEvents binary mode like a request's: `ce_specversion`, `ce_type`
//! (`fleet.answer.v1`), `ce_id` (the request id), `ce_source` (the worker),
//! `ce_time`, `content-type` (`application/json`), `ce_fleetstatus` and,
//! for a request of a job, `ce_fleetjob`. A reader counts a job's answers
//! from the headers alone.
//!
//! Delivery is at least once: a worker killed after the broker took an
//! answer and before its offset was committed answers again. Readers keep
//! the first answer of each request id (as Redis keeps the first, HSETNX).

use crate::envelope::format_rfc3339_ms;
use crate::{headers as h, JobId, RequestId, Status};

/// The headers of one answer record, in the documented order.
pub fn headers(
    id: &RequestId,
    job: Option<&JobId>,
    status: Status,
    source: &str,
    now_ms: u64,
) -> Vec<(&'static str, String)> {
    let mut out = vec![
        (h::SPEC_VERSION, h::SPEC_VERSION_VALUE.to_owned()),
        (h::TYPE, h::ANSWER_TYPE_VALUE.to_owned()),
        (h::ID, id.to_string()),
        (h::SOURCE, source.to_owned()),
        (h::TIME, format_rfc3339_ms(now_ms)),
        (h::CONTENT_TYPE, h::ANSWER_CONTENT_TYPE.to_owned()),
        (h::STATUS, status.as_str().to_owned()),
    ];
    if let Some(job) = job {
        out.push((h::JOB, job.to_string()));
    }
    out
}

/// What a reader needs of an answer record before its value: whose answer
/// it is, of which job, and its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerMeta {
    pub id: RequestId,
    pub job: Option<JobId>,
    pub status: Status,
}

/// Reads an answer record's key and headers; `None` for a record that is
/// not a fleet answer (no readable id, no known status).
pub fn read_meta<'a, I>(key: Option<&[u8]>, headers: I) -> Option<AnswerMeta>
where
    I: IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
{
    let headers: Vec<(&str, Option<&[u8]>)> = headers.into_iter().collect();
    let find = |name: &str| h::find(&headers, name);
    let id = RequestId::from_bytes(key.or_else(|| find(h::ID))?).ok()?;
    let status = std::str::from_utf8(find(h::STATUS)?).ok()?;
    let status = Status::ALL.into_iter().find(|s| s.as_str() == status)?;
    let job = find(h::JOB).and_then(|raw| JobId::from_bytes(raw).ok());
    Some(AnswerMeta { id, job, status })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let id = RequestId::parse("reembed-7-12").unwrap();
        let job = JobId::parse("reembed-7").unwrap();
        let hs = headers(&id, Some(&job), Status::Expired, "worker-1", 1_765_000_000_000);
        let pairs = hs.iter().map(|(k, v)| (*k, Some(v.as_bytes())));
        let meta = read_meta(Some(b"reembed-7-12"), pairs).unwrap();
        assert_eq!(meta, AnswerMeta { id, job: Some(job), status: Status::Expired });
        assert!(hs.contains(&(h::TYPE, "fleet.answer.v1".to_owned())));
    }

    #[test]
    fn a_record_without_an_id_or_status_is_not_an_answer() {
        let id = RequestId::parse("r-1").unwrap();
        let hs = headers(&id, None, Status::Ok, "w", 0);
        let pairs = || hs.iter().map(|(k, v)| (*k, Some(v.as_bytes())));
        assert_eq!(read_meta(None, pairs()).unwrap().id, id, "ce_id stands in for the key");
        assert_eq!(read_meta(None, pairs()).unwrap().job, None);
        assert!(read_meta(Some(b"a b"), pairs()).is_none());
        let no_status = pairs().filter(|(k, _)| *k != h::STATUS);
        assert!(read_meta(Some(b"r-1"), no_status).is_none());
        let odd_status = pairs().map(|(k, v)| if k == h::STATUS { (k, Some(&b"fine"[..])) } else { (k, v) });
        assert!(read_meta(Some(b"r-1"), odd_status).is_none());
    }
}
