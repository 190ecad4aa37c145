//! Per-request records and what the report draws from them: per-second
//! throughput and latency percentiles (HdrHistogram), outcome counts, and
//! a run's rate of `ok` answers.

use crate::ledger::Outcome;
use fleet_proto::backlog::Load;
use hdrhistogram::Histogram;

/// One request: when it was sent, how it ended, and the latencies its
/// answer carried (ms, from `ce_time`).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub id: String,
    /// Seconds from the run's start.
    pub sent_s: f64,
    pub outcome: Outcome,
    /// When the generator saw the answer, seconds from the start.
    pub answered_s: Option<f64>,
    /// The answer's `timings_ms`: total (end to end), queue, infer.
    pub e2e_ms: Option<f64>,
    pub queue_ms: Option<f64>,
    pub infer_ms: Option<f64>,
    /// The partition the broker put it in (None: never delivered).
    pub partition: Option<i32>,
}

/// One second of the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Second {
    pub second: u64,
    pub sent: u64,
    /// Answers seen in this second, by outcome.
    pub ok: u64,
    pub error: u64,
    pub expired: u64,
    /// End-to-end latency of the `ok` answers seen in this second.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The consumer group's total lag sampled in this second.
    pub lag: Option<u64>,
    /// The workers' backlog report read in this second.
    pub load: Option<Load>,
}

/// A latency histogram: 1 µs .. 1 h, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Records `ms` (clamped into the histogram's range).
pub fn record_ms(histogram: &mut Histogram<u64>, ms: f64) {
    let micros = (ms * 1000.0).round().clamp(1.0, 3_600_000_000.0) as u64;
    histogram.saturating_record(micros);
}

pub fn quantile_ms(histogram: &Histogram<u64>, q: f64) -> Option<f64> {
    (!histogram.is_empty()).then(|| histogram.value_at_quantile(q) as f64 / 1000.0)
}

/// Folds the records, lag samples and backlog reports (each with its
/// seconds from the start) into seconds.
pub fn per_second(records: &[Record], lag: &[(f64, u64)], load: &[(f64, Load)]) -> Vec<Second> {
    let last = records
        .iter()
        .flat_map(|r| [Some(r.sent_s), r.answered_s])
        .flatten()
        .chain(lag.iter().map(|&(t, _)| t))
        .chain(load.iter().map(|&(t, _)| t))
        .fold(0.0f64, f64::max);
    let count = last.floor() as usize + 1;
    let mut seconds: Vec<Second> = (0..count).map(|s| Second { second: s as u64, ..Second::default() }).collect();
    let mut histograms: Vec<Histogram<u64>> = (0..count).map(|_| latency_histogram()).collect();
    for r in records {
        seconds[r.sent_s.floor() as usize].sent += 1;
        let Some(at) = r.answered_s else { continue };
        let s = at.floor() as usize;
        match r.outcome {
            Outcome::Ok => {
                seconds[s].ok += 1;
                if let Some(ms) = r.e2e_ms {
                    record_ms(&mut histograms[s], ms);
                }
            }
            Outcome::Error(_) => seconds[s].error += 1,
            Outcome::Expired => seconds[s].expired += 1,
            Outcome::Missing => {}
        }
    }
    for (second, histogram) in seconds.iter_mut().zip(&histograms) {
        second.p50_ms = quantile_ms(histogram, 0.50);
        second.p99_ms = quantile_ms(histogram, 0.99);
    }
    for &(t, value) in lag {
        seconds[t.floor() as usize].lag = Some(value);
    }
    for &(t, value) in load {
        seconds[t.floor() as usize].load = Some(value);
    }
    seconds
}

/// Texts answered `ok` per second, from the first send to the last answer
/// seen; `None` without an answer.
pub fn throughput(records: &[Record]) -> Option<f64> {
    let first_sent = records.iter().map(|r| r.sent_s).fold(f64::INFINITY, f64::min);
    let ok: Vec<f64> = records.iter().filter(|r| r.outcome == Outcome::Ok).filter_map(|r| r.answered_s).collect();
    let last_answer = ok.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if ok.is_empty() || last_answer <= first_sent {
        return None;
    }
    Some(ok.len() as f64 / (last_answer - first_sent))
}

/// A record for the crate's unit tests: sent at `sent_s`, ended as
/// `outcome`, in no partition and without queue or infer timings.
#[cfg(test)]
pub(crate) fn test_record(sent_s: f64, outcome: Outcome, answered_s: Option<f64>, e2e_ms: Option<f64>) -> Record {
    Record { id: "r".into(), sent_s, outcome, answered_s, e2e_ms, queue_ms: None, infer_ms: None, partition: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_record as record;

    #[test]
    fn seconds_count_sends_by_send_time_and_answers_by_answer_time() {
        let records = vec![
            record(0.2, Outcome::Ok, Some(1.5), Some(100.0)),
            record(0.4, Outcome::Ok, Some(1.7), Some(300.0)),
            record(0.9, Outcome::Expired, Some(2.1), None),
            record(1.1, Outcome::Missing, None, None),
        ];
        let report = Load { backlog: 40, drain_per_s: Some(20.0), at_ms: 0 };
        let seconds = per_second(&records, &[(0.5, 3), (1.5, 1)], &[(2.2, report)]);
        assert_eq!(seconds.len(), 3);
        assert_eq!((seconds[1].load, seconds[2].load), (None, Some(report)));
        assert_eq!((seconds[0].sent, seconds[1].sent, seconds[2].sent), (3, 1, 0));
        assert_eq!((seconds[1].ok, seconds[2].expired), (2, 1));
        assert_eq!((seconds[0].lag, seconds[1].lag, seconds[2].lag), (Some(3), Some(1), None));
        let p50 = seconds[1].p50_ms.unwrap();
        assert!((99.0..=101.0).contains(&p50), "{p50}");
        let p99 = seconds[1].p99_ms.unwrap();
        assert!((299.0..=301.0).contains(&p99), "{p99}");
        assert_eq!(seconds[0].p99_ms, None);
    }

    #[test]
    fn throughput_is_ok_answers_from_the_first_send_to_the_last_answer() {
        let records = vec![
            record(0.5, Outcome::Ok, Some(2.0), Some(1.0)),
            record(0.6, Outcome::Ok, Some(10.5), Some(1.0)),
            record(0.7, Outcome::Error("x".into()), Some(20.0), None),
        ];
        assert_eq!(throughput(&records), Some(0.2));
        assert_eq!(throughput(&[record(0.5, Outcome::Missing, None, None)]), None);
    }
}
