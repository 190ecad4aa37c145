//! Which answers of a job count: the first one of each request id (at
//! least once delivery may repeat one after a worker restart; Redis keeps
//! the first too), and how many are still to come. Pure: the collector and
//! the job view feed it what they read.

use fleet_proto::answer_record::AnswerMeta;
use fleet_proto::job_record::JobRecord;
use fleet_proto::{JobId, RequestId, Status};
use std::collections::{BTreeMap, HashSet};

/// What an answer record is to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// The first answer of one of the job's requests: it counts.
    New,
    /// A request already answered: written twice, counted once.
    Repeat,
    /// An answer of another job (or of none).
    OtherJob,
}

#[derive(Debug)]
pub struct JobLedger {
    job: JobId,
    seen: HashSet<RequestId>,
    by_status: BTreeMap<&'static str, u64>,
    repeats: u64,
    /// The job's size, once its sender has sent every request.
    expected: Option<u64>,
}

impl JobLedger {
    pub fn new(job: JobId) -> Self {
        Self { job, seen: HashSet::new(), by_status: BTreeMap::new(), repeats: 0, expected: None }
    }

    pub fn job(&self) -> &JobId {
        &self.job
    }

    /// An answer already collected (read back from the output file).
    pub fn already(&mut self, id: RequestId, status: Status) -> Offer {
        if !self.seen.insert(id) {
            return Offer::Repeat;
        }
        *self.by_status.entry(status.as_str()).or_default() += 1;
        Offer::New
    }

    /// An answer read off the answers topic.
    pub fn offer(&mut self, meta: &AnswerMeta) -> Offer {
        if meta.job.as_ref() != Some(&self.job) {
            return Offer::OtherJob;
        }
        let offer = self.already(meta.id.clone(), meta.status);
        if offer == Offer::Repeat {
            self.repeats += 1;
        }
        offer
    }

    /// What the job's latest record says: its size once every request is sent.
    pub fn follow(&mut self, record: &JobRecord) {
        self.expected = record.is_complete().then_some(record.requests);
    }

    /// Requests answered (each once).
    pub fn answered(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Answers read twice (and counted once).
    pub fn repeats(&self) -> u64 {
        self.repeats
    }

    pub fn expected(&self) -> Option<u64> {
        self.expected
    }

    /// Every request of the job has its final answer. A sender whose
    /// acknowledgement was lost may have had one more request delivered
    /// than it counted: more answers than requests also ends the job.
    pub fn is_done(&self) -> bool {
        self.expected.is_some_and(|expected| self.answered() >= expected)
    }

    /// Answers by status, each status present.
    pub fn by_status(&self) -> BTreeMap<&'static str, u64> {
        let mut counts: BTreeMap<&'static str, u64> = Status::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        counts.extend(self.by_status.iter().map(|(k, v)| (*k, *v)));
        counts
    }

    /// Answers other than `ok`.
    pub fn not_ok(&self) -> u64 {
        self.by_status.iter().filter(|(status, _)| **status != Status::Ok.as_str()).map(|(_, n)| n).sum()
    }

    /// `ok 10, error 1, expired 0, cancelled 0`.
    pub fn counts_line(&self) -> String {
        let counts = self.by_status();
        Status::ALL.iter().map(|s| format!("{} {}", s.as_str(), counts[s.as_str()])).collect::<Vec<_>>().join(", ")
    }
}

/// The line a request id names, for ids the sender made from line numbers
/// (`<job>-<line>`); `None` for an input's own id.
pub fn line_of(job: &JobId, id: &RequestId) -> Option<u64> {
    let rest = id.as_str().strip_prefix(job.as_str())?.strip_prefix('-')?;
    rest.bytes().all(|b| b.is_ascii_digit()).then(|| rest.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::job_record::JobState;
    use fleet_proto::{Lane, ModelName, Namespace};

    fn job() -> JobId {
        JobId::parse("reembed-7").unwrap()
    }

    fn answer(id: &str, job: Option<&str>, status: Status) -> AnswerMeta {
        AnswerMeta { id: RequestId::parse(id).unwrap(), job: job.map(|j| JobId::parse(j).unwrap()), status }
    }

    fn record(state: JobState, requests: u64) -> JobRecord {
        let model = ModelName::parse("minilm").unwrap();
        JobRecord { state, requests, ..JobRecord::starting(&Namespace::default(), &model, Lane::Bulk, &job(), 0) }
    }

    #[test]
    fn the_first_answer_of_each_request_counts_once() {
        let mut ledger = JobLedger::new(job());
        assert_eq!(ledger.offer(&answer("reembed-7-1", Some("reembed-7"), Status::Ok)), Offer::New);
        assert_eq!(ledger.offer(&answer("reembed-7-1", Some("reembed-7"), Status::Expired)), Offer::Repeat);
        assert_eq!(ledger.offer(&answer("other-1", Some("other"), Status::Ok)), Offer::OtherJob);
        assert_eq!(ledger.offer(&answer("loose-1", None, Status::Ok)), Offer::OtherJob);
        assert_eq!((ledger.answered(), ledger.repeats(), ledger.not_ok()), (1, 1, 0));
        assert_eq!(ledger.counts_line(), "ok 1, error 0, expired 0, cancelled 0");
    }

    #[test]
    fn a_job_is_done_once_its_sender_is_and_every_request_has_an_answer() {
        let mut ledger = JobLedger::new(job());
        ledger.already(RequestId::parse("reembed-7-1").unwrap(), Status::Error);
        ledger.follow(&record(JobState::Sending, 1));
        assert!(!ledger.is_done(), "more may be sent");
        ledger.follow(&record(JobState::Sent, 2));
        assert!(!ledger.is_done());
        ledger.offer(&answer("reembed-7-2", Some("reembed-7"), Status::Ok));
        assert!(ledger.is_done());
        assert_eq!(ledger.not_ok(), 1);
    }

    #[test]
    fn a_line_number_is_read_only_from_an_id_made_of_one() {
        let id = |raw| RequestId::parse(raw).unwrap();
        assert_eq!(line_of(&job(), &id("reembed-7-12")), Some(12));
        assert_eq!(line_of(&job(), &id("doc:12")), None);
        assert_eq!(line_of(&job(), &id("reembed-7-12a")), None);
        assert_eq!(line_of(&job(), &id("reembed-71")), None);
        assert_eq!(line_of(&job(), &id("reembed-7-")), None);
    }
}
