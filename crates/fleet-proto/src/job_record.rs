//! A job's record: what its sender knows about it, written to the release's
//! jobs topic (`Namespace::jobs_topic`, keyed by job id, compacted) so that
//! whoever collects the job's answers or asks about its progress (another
//! machine, hours later, after a crash) knows how many answers to wait for
//! and where they arrive.
//!
//! The sender writes one record when it starts (`sending`, the requests
//! acknowledged so far) and one when every line is sent (`sent`, the final
//! count); the latest record of a job is the one that counts. A job sent
//! again under the same id keeps its first start, so its first answers are
//! still collected.

use crate::{JobId, Lane, ModelName, Namespace};
use serde::{Deserialize, Serialize};

/// How far before a job's start its answers are looked for on the answers
/// topic: record timestamps are the workers' clocks, the start is the
/// sender's; this allows for clocks that disagree.
pub const CLOCK_SKEW_ALLOWANCE_MS: u64 = 10 * 60 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// The sender is still sending: `requests` grows.
    Sending,
    /// Every request was sent: `requests` is the job's size.
    Sent,
}

/// The JSON value of a job record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: String,
    pub model: String,
    /// `interactive` or `bulk`: whose topics the requests went to.
    pub lane: String,
    /// Where its answers that go to Kafka are produced.
    pub answers_topic: String,
    /// What the requests asked for in `ce_fleetreplyto`; `None`: the
    /// lane's default in the model's config.
    #[serde(default)]
    pub reply_to: Option<String>,
    pub state: JobState,
    /// Requests the broker acknowledged: the answers to wait for once
    /// the state is `sent`.
    pub requests: u64,
    /// When sending began, Unix ms (of its first run).
    pub started_ms: u64,
    /// When this record was written, Unix ms.
    pub updated_ms: u64,
    /// What it was sent from (a file name), for people.
    #[serde(default)]
    pub input: Option<String>,
}

impl JobRecord {
    /// The record a job of `model` on `lane` starts with at `now_ms`:
    /// sending, no request acknowledged yet, its answers on the lane's
    /// answers topic, the lane's default destinations.
    pub fn starting(names: &Namespace, model: &ModelName, lane: Lane, job: &JobId, now_ms: u64) -> Self {
        Self {
            job: job.to_string(),
            model: model.to_string(),
            lane: lane.as_str().to_owned(),
            answers_topic: names.answers_topic(model, lane),
            reply_to: None,
            state: JobState::Sending,
            requests: 0,
            started_ms: now_ms,
            updated_ms: now_ms,
            input: None,
        }
    }

    /// Every request is sent, so `requests` is final.
    pub fn is_complete(&self) -> bool {
        self.state == JobState::Sent
    }

    /// From when (Unix ms, record timestamps) its answers can be on the
    /// answers topic.
    pub fn answers_from_ms(&self) -> u64 {
        self.started_ms.saturating_sub(CLOCK_SKEW_ALLOWANCE_MS)
    }

    pub fn to_json(&self) -> String {
        // Strings and numbers only: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(raw: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> JobRecord {
        let (model, job) = (ModelName::parse("minilm").unwrap(), JobId::parse("reembed-7").unwrap());
        JobRecord {
            requests: 1200,
            updated_ms: 1_765_000_005_000,
            input: Some("docs.jsonl".into()),
            ..JobRecord::starting(&Namespace::default(), &model, Lane::Bulk, &job, 1_765_000_000_000)
        }
    }

    #[test]
    fn a_job_starts_sending_with_its_answers_on_its_lanes_answers_topic() {
        let (model, job) = (ModelName::parse("minilm").unwrap(), JobId::parse("reembed-7").unwrap());
        let names = Namespace::new("blue.infer.", "fleet.", "fleet:").unwrap();
        let record = JobRecord::starting(&names, &model, Lane::Bulk, &job, 5);
        assert_eq!((record.job.as_str(), record.model.as_str(), record.lane.as_str()), ("reembed-7", "minilm", "bulk"));
        assert_eq!(record.answers_topic, "blue.infer.minilm.bulk.answers");
        assert_eq!((record.state, record.requests, record.started_ms, record.updated_ms), (JobState::Sending, 0, 5, 5));
        assert_eq!((record.reply_to, record.input), (None, None));
    }

    #[test]
    fn a_record_round_trips_and_says_when_its_count_is_final() {
        let sending = record();
        assert_eq!(JobRecord::from_json(sending.to_json().as_bytes()).unwrap(), sending);
        assert!(!sending.is_complete());
        let sent = JobRecord { state: JobState::Sent, ..record() };
        assert!(sent.is_complete());
        assert!(sent.to_json().contains(r#""state":"sent""#));
    }

    #[test]
    fn answers_are_looked_for_from_before_the_start() {
        assert_eq!(record().answers_from_ms(), 1_765_000_000_000 - CLOCK_SKEW_ALLOWANCE_MS);
        assert_eq!(JobRecord { started_ms: 5, ..record() }.answers_from_ms(), 0);
    }
}
