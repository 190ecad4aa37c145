//! A job at a glance: what its sender sent, its answers by status, what is
//! still waiting, how fast answers come and when the last should. Read off
//! Kafka (the job's record and its answers so far), so it is the same from
//! any machine, and exact: each request counts once.

use super::answers::{AnswerStream, Event};
use super::collect::CollectError;
use super::ledger::JobLedger;
use super::records::JobRecords;
use crate::KafkaConfig;
use fleet_proto::clock::now_ms;
use fleet_proto::job_record::JobRecord;
use fleet_proto::{JobId, Namespace, Status};
use std::fmt;
use std::time::Duration;

/// The answers of the last this-many milliseconds give the rate.
const RATE_WINDOW_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    pub record: JobRecord,
    pub by_status: Vec<(&'static str, u64)>,
    pub answered: u64,
    /// Answers read twice, counted once.
    pub repeats: u64,
    /// Requests sent and not answered yet.
    pub waiting: u64,
    /// Answers per second lately; `None` before the first.
    pub rate_per_s: Option<f64>,
    /// When the last answer should come at that rate.
    pub eta: Option<Duration>,
}

/// The view of a job from its record, its ledger and when each of its
/// answers was written (Unix ms), at `now_ms`.
pub fn view(record: JobRecord, ledger: &JobLedger, written_ms: &[u64], now_ms: u64) -> JobView {
    let answered = ledger.answered();
    let waiting = record.requests.saturating_sub(answered);
    let recent = written_ms.iter().filter(|&&t| t + RATE_WINDOW_MS >= now_ms).count() as f64;
    let first = written_ms.iter().min().copied();
    let rate_per_s = first.map(|first| {
        // A job answering for less than the window: its whole life.
        let span_ms = (now_ms.saturating_sub(first)).clamp(1_000, RATE_WINDOW_MS);
        recent * 1000.0 / span_ms as f64
    });
    let eta = rate_per_s.filter(|&r| r > 0.0).map(|r| Duration::from_secs_f64(waiting as f64 / r));
    let counts = ledger.by_status();
    let by_status = Status::ALL.iter().map(|s| (s.as_str(), counts[s.as_str()])).collect();
    JobView { by_status, answered, repeats: ledger.repeats(), waiting, rate_per_s, eta, record }
}

/// Looks up `job`: its record, and every answer written so far.
pub async fn look(kafka: &KafkaConfig, names: &Namespace, job: &JobId) -> Result<JobView, CollectError> {
    let records = JobRecords::new(kafka, names)?;
    let record = records
        .find(job)
        .await?
        .ok_or_else(|| CollectError::NoRecord { job: job.clone(), topic: records.topic().to_owned() })?;
    let mut stream =
        AnswerStream::open(kafka, &record.answers_topic, records.topic(), job, record.answers_from_ms()).await?;
    let mut ledger = JobLedger::new(job.clone());
    let mut written_ms = Vec::new();
    while !stream.read_to_end() {
        match stream.next(Duration::from_secs(5)).await? {
            Some(Event::Answer(arrival)) => {
                if ledger.offer(&arrival.meta) == super::ledger::Offer::New {
                    written_ms.extend(arrival.written_ms.and_then(|t| u64::try_from(t).ok()));
                }
            }
            Some(Event::Record(_)) => {}
            // The broker holds the rest back: what was read stands.
            None => break,
        }
    }
    Ok(view(record, &ledger, &written_ms, now_ms()))
}

impl fmt::Display for JobView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.record;
        let state = if r.is_complete() { "sent" } else { "sending" };
        writeln!(f, "job {} ({} {} lane, answers on {})", r.job, r.model, r.lane, r.answers_topic)?;
        writeln!(f, "  sent:      {} requests ({state})", r.requests)?;
        let counts: Vec<String> = self.by_status.iter().map(|(s, n)| format!("{s} {n}")).collect();
        writeln!(f, "  answered:  {} ({})", self.answered, counts.join(", "))?;
        writeln!(f, "  waiting:   {}", self.waiting)?;
        match self.rate_per_s {
            Some(rate) => writeln!(f, "  rate:      {rate:.1} answers/s")?,
            None => writeln!(f, "  rate:      no answer yet")?,
        }
        match (self.eta, self.waiting) {
            (_, 0) if r.is_complete() => writeln!(f, "  eta:       done"),
            (Some(eta), _) => {
                writeln!(f, "  eta:       {}", humantime::format_duration(Duration::from_secs(eta.as_secs())))
            }
            (None, _) => writeln!(f, "  eta:       unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::answer_record::AnswerMeta;
    use fleet_proto::job_record::JobState;
    use fleet_proto::{Lane, ModelName, RequestId};

    #[test]
    fn waiting_rate_and_eta_come_from_the_answers_written_lately() {
        let job = JobId::parse("j").unwrap();
        let model = ModelName::parse("minilm").unwrap();
        let starting = JobRecord::starting(&Namespace::default(), &model, Lane::Bulk, &job, 0);
        let record = JobRecord { state: JobState::Sent, requests: 1_000, ..starting };
        let mut ledger = JobLedger::new(job.clone());
        let now = 1_000_000;
        let mut written = Vec::new();
        for i in 0..400u64 {
            let status = if i % 100 == 0 { Status::Expired } else { Status::Ok };
            let meta = AnswerMeta { id: RequestId::parse(&format!("j-{i}")).unwrap(), job: Some(job.clone()), status };
            ledger.offer(&meta);
            // 100 long ago, then 300 in the last minute: 5 a second.
            written.push(if i < 100 { now - 500_000 } else { now - 59_000 + i });
        }
        let view = view(record, &ledger, &written, now);
        assert_eq!((view.answered, view.waiting), (400, 600));
        assert_eq!(view.rate_per_s, Some(5.0));
        assert_eq!(view.eta, Some(Duration::from_secs(120)));
        assert!(view.by_status.contains(&("expired", 4)));
        let shown = view.to_string();
        assert!(shown.contains("waiting:   600") && shown.contains("eta:       2m"), "{shown}");
    }
}
