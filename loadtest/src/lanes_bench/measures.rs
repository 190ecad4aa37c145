//! What the lanes bench reads off a step: the interactive latency, the
//! worker's answer and row counters, how its capacity was split, what a
//! cancel stopped, and the `RESULT` lines. Pure, so each rule is tested
//! without a fleet.

use super::{LanesReport, SETTLE};
use crate::ledger::Outcome;
use crate::timeline::{latency_histogram, quantile_ms, record_ms, Record};
use fleet_proto::{Lane, Status};
use fleet_testkit::metric_value;
use std::time::Duration;

/// The interactive lane's default deadline (a model's `request_ttl_ms`):
/// what the one-topic latencies are held against.
pub const DEFAULT_TTL_MS: f64 = 30_000.0;
const REQUESTS_TOTAL: &str = "fleet_requests_total";
const MODEL_ROWS_TOTAL: &str = "fleet_model_rows_total";

/// End-to-end latency (the answers' `timings_ms.total`) of the `ok` answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub ok: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// `ok` answers slower than the interactive lane's default deadline:
    /// with it they would have come back `expired`.
    pub over_default_ttl: usize,
}

pub fn latency(records: &[Record]) -> Latency {
    let mut e2e = latency_histogram();
    let (mut ok, mut over_default_ttl) = (0, 0);
    for ms in records.iter().filter(|r| r.outcome == Outcome::Ok).filter_map(|r| r.e2e_ms) {
        record_ms(&mut e2e, ms);
        ok += 1;
        over_default_ttl += usize::from(ms > DEFAULT_TTL_MS);
    }
    Latency {
        ok,
        p50_ms: quantile_ms(&e2e, 0.50).unwrap_or(f64::NAN),
        p99_ms: quantile_ms(&e2e, 0.99).unwrap_or(f64::NAN),
        over_default_ttl,
    }
}

/// The worker's answer and row counters in one scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub interactive_ok: f64,
    pub bulk_ok: f64,
    pub bulk_cancelled: f64,
    /// Bulk answers of any status.
    pub bulk_answered: f64,
    /// Rows handed to the model.
    pub rows: f64,
}

impl Counters {
    pub fn from_scrape(scrape: &str) -> Self {
        let answers = |lane: Lane, status: Option<Status>| match status {
            Some(status) => {
                metric_value(scrape, REQUESTS_TOTAL, &[("lane", lane.as_str()), ("status", status.as_str())])
            }
            None => metric_value(scrape, REQUESTS_TOTAL, &[("lane", lane.as_str())]),
        };
        Self {
            interactive_ok: answers(Lane::Interactive, Some(Status::Ok)),
            bulk_ok: answers(Lane::Bulk, Some(Status::Ok)),
            bulk_cancelled: answers(Lane::Bulk, Some(Status::Cancelled)),
            bulk_answered: answers(Lane::Bulk, None),
            rows: metric_value(scrape, MODEL_ROWS_TOTAL, &[]),
        }
    }

    /// What the counters grew by since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            interactive_ok: self.interactive_ok - earlier.interactive_ok,
            bulk_ok: self.bulk_ok - earlier.bulk_ok,
            bulk_cancelled: self.bulk_cancelled - earlier.bulk_cancelled,
            bulk_answered: self.bulk_answered - earlier.bulk_answered,
            rows: self.rows - earlier.rows,
        }
    }
}

/// How the worker's capacity was split during an interactive window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub interactive_per_s: f64,
    pub bulk_rows_per_s: f64,
    /// Bulk rows answered ÷ all rows answered.
    pub bulk_share: f64,
    /// Bulk rows per second ÷ the capacity the interactive load left.
    pub leftover_fraction: f64,
}

/// `window`: the counters' growth over `seconds`; `capacity`: texts/s.
pub fn shares(window: &Counters, seconds: f64, capacity: f64) -> Shares {
    let seconds = seconds.max(1e-9);
    let (interactive_per_s, bulk_rows_per_s) = (window.interactive_ok / seconds, window.bulk_ok / seconds);
    let all = window.interactive_ok + window.bulk_ok;
    let left = capacity - interactive_per_s;
    Shares {
        interactive_per_s,
        bulk_rows_per_s,
        bulk_share: if all > 0.0 { window.bulk_ok / all } else { 0.0 },
        leftover_fraction: if left > 0.0 { bulk_rows_per_s / left } else { f64::NAN },
    }
}

/// What a cancel stopped, and how fast.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stop {
    /// From the cancel to the last bulk `ok` answer seen after it (0: none).
    pub seconds_to_stop: f64,
    /// Rows the model computed after the cancel, less the interactive rows
    /// answered after it: the cancelled job's rows.
    pub rows_computed_after_cancel: f64,
    pub bulk_ok_after_cancel: f64,
    /// Backfill requests answered `ok` (before the cancel, or computing when it came).
    pub ok: f64,
    /// Backfill requests answered `cancelled`.
    pub cancelled: f64,
    /// Backfill requests answered at all (of any status), from its send on.
    pub answered: f64,
    /// Every backfill request was answered before the wait ended.
    pub complete: bool,
}

/// Seconds from the cancel to the last bulk `ok` seen after it, or 0.
pub fn seconds_to_stop(cancel_s: f64, last_bulk_ok_s: Option<f64>) -> f64 {
    last_bulk_ok_s.map_or(0.0, |t| (t - cancel_s).max(0.0))
}

/// What is wrong with a cancelled backfill of `backfill` requests: not
/// all answered, answered other than `ok` or `cancelled`, none cancelled.
pub fn cancel_problems(stop: &Stop, backfill: usize) -> Vec<String> {
    let mut problems = Vec::new();
    if !stop.complete || stop.answered < backfill as f64 {
        problems.push(format!(
            "cancel: {:.0} of {backfill} backfill requests answered {} s after the window",
            stop.answered,
            SETTLE.as_secs()
        ));
    }
    let other = stop.answered - stop.ok - stop.cancelled;
    if other > 0.0 {
        problems.push(format!("cancel: {other:.0} backfill requests answered neither ok nor cancelled"));
    }
    if stop.cancelled <= 0.0 {
        problems.push("cancel: no backfill request was answered cancelled".to_owned());
    }
    problems
}

/// The rows computed after the cancel that were not interactive.
pub fn rows_after_cancel(after_cancel: &Counters) -> f64 {
    (after_cancel.rows - after_cancel.interactive_ok).max(0.0)
}

/// How long step 2 keeps collecting after its window: the backfill ahead of
/// the interactive requests at the measured capacity, twice over, plus two
/// minutes.
pub fn one_topic_drain(backfill: usize, capacity_per_s: f64) -> Duration {
    Duration::from_secs_f64(backfill as f64 / capacity_per_s.max(1.0) * 2.0 + 120.0)
}

pub fn lanes_line(report: &LanesReport) -> String {
    format!(
        "RESULT lanes p99_alone_ms={:.0} p99_one_topic_ms={:.0} p99_lanes_ms={:.0} bulk_share={:.2} bulk_rows_per_s={:.1} leftover_fraction={:.2}",
        report.alone.p99_ms,
        report.one_topic.p99_ms,
        report.lanes.p99_ms,
        report.shares.bulk_share,
        report.shares.bulk_rows_per_s,
        report.shares.leftover_fraction
    )
}

pub fn cancel_line(stop: &Stop) -> String {
    format!(
        "RESULT cancel seconds_to_stop={:.2} rows_computed_after_cancel={:.0}",
        stop.seconds_to_stop, stop.rows_computed_after_cancel
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::test_record as record;

    #[test]
    fn latency_is_of_ok_answers_and_counts_those_past_the_default_deadline() {
        let mut records: Vec<Record> =
            (1..=100).map(|ms| record(0.0, Outcome::Ok, Some(1.0), Some(f64::from(ms)))).collect();
        records.push(record(0.0, Outcome::Missing, None, None));
        records.push(record(0.0, Outcome::Expired, Some(1.0), Some(90_000.0)));
        records.push(record(0.0, Outcome::Ok, Some(40.0), Some(40_000.0)));
        let l = latency(&records);
        assert_eq!((l.ok, l.over_default_ttl), (101, 1));
        assert!((50.0..=51.1).contains(&l.p50_ms), "{}", l.p50_ms);
        assert!((99.0..=101.0).contains(&l.p99_ms), "{}", l.p99_ms);
        assert!(latency(&[]).p99_ms.is_nan());
    }

    const SCRAPE: &str = "\
# HELP fleet_requests_total Answers written
# TYPE fleet_requests_total counter
fleet_requests_total{status=\"ok\",lane=\"interactive\"} 600
fleet_requests_total{status=\"expired\",lane=\"interactive\"} 3
fleet_requests_total{status=\"ok\",lane=\"bulk\"} 1400
fleet_requests_total{status=\"cancelled\",lane=\"bulk\"} 250
fleet_requests_total{status=\"error\",lane=\"bulk\"} 1
fleet_requests_total_extra{status=\"ok\",lane=\"bulk\"} 99
fleet_model_rows_total 2010
";

    #[test]
    fn counters_are_read_by_lane_and_status_and_subtract() {
        let c = Counters::from_scrape(SCRAPE);
        let want = Counters {
            interactive_ok: 600.0,
            bulk_ok: 1400.0,
            bulk_cancelled: 250.0,
            bulk_answered: 1651.0,
            rows: 2010.0,
        };
        assert_eq!(c, want);
        let earlier =
            Counters { interactive_ok: 100.0, bulk_ok: 400.0, bulk_cancelled: 0.0, bulk_answered: 400.0, rows: 500.0 };
        assert_eq!(
            c.since(&earlier),
            Counters {
                interactive_ok: 500.0,
                bulk_ok: 1000.0,
                bulk_cancelled: 250.0,
                bulk_answered: 1251.0,
                rows: 1510.0
            }
        );
    }

    #[test]
    fn shares_split_the_window_and_the_capacity_left() {
        let window = Counters { interactive_ok: 600.0, bulk_ok: 1400.0, ..Counters::default() };
        let s = shares(&window, 20.0, 120.0);
        assert_eq!((s.interactive_per_s, s.bulk_rows_per_s), (30.0, 70.0));
        assert!((s.bulk_share - 0.7).abs() < 1e-12);
        assert!((s.leftover_fraction - 70.0 / 90.0).abs() < 1e-12);
        let idle = shares(&Counters::default(), 20.0, 120.0);
        assert_eq!((idle.bulk_share, idle.leftover_fraction), (0.0, 0.0));
        assert!(shares(&window, 20.0, 30.0).leftover_fraction.is_nan());
    }

    #[test]
    fn a_cancel_is_measured_by_the_last_bulk_answer_and_the_rows_after_it() {
        assert_eq!(seconds_to_stop(30.0, None), 0.0);
        assert!((seconds_to_stop(30.0, Some(30.45)) - 0.45).abs() < 1e-9);
        assert_eq!(seconds_to_stop(30.0, Some(29.0)), 0.0);
        let after = Counters { rows: 340.0, interactive_ok: 308.0, ..Counters::default() };
        assert_eq!(rows_after_cancel(&after), 32.0);
        assert_eq!(rows_after_cancel(&Counters { rows: 10.0, interactive_ok: 12.0, ..Counters::default() }), 0.0);
    }

    #[test]
    fn a_cancel_is_complete_when_every_backfill_request_is_ok_or_cancelled() {
        let stop = Stop { ok: 3_000.0, cancelled: 47_000.0, answered: 50_000.0, complete: true, ..Stop::default() };
        assert!(cancel_problems(&stop, 50_000).is_empty());
        let late = Stop { cancelled: 40_000.0, answered: 43_000.0, complete: false, ..stop };
        assert_eq!(cancel_problems(&late, 50_000).len(), 1);
        let expired = Stop { answered: 50_000.0, ok: 2_990.0, ..stop };
        assert_eq!(
            cancel_problems(&expired, 50_000),
            ["cancel: 10 backfill requests answered neither ok nor cancelled"]
        );
        let never = Stop { ok: 50_000.0, cancelled: 0.0, ..stop };
        assert_eq!(cancel_problems(&never, 50_000), ["cancel: no backfill request was answered cancelled"]);
    }

    #[test]
    fn the_one_topic_step_waits_for_the_backfill_twice_over() {
        assert_eq!(one_topic_drain(50_000, 100.0), Duration::from_secs(1120));
        assert_eq!(one_topic_drain(10, 0.0), Duration::from_secs(140));
    }

    #[test]
    fn the_result_lines_carry_every_figure() {
        let latency = |p99_ms| Latency { ok: 10, p50_ms: 1.0, p99_ms, over_default_ttl: 0 };
        let report = LanesReport {
            capacity_per_s: 100.0,
            interactive_rate: 30.0,
            alone: latency(88.6),
            one_topic: latency(512_000.0),
            lanes: latency(104.2),
            shares: Shares {
                interactive_per_s: 30.0,
                bulk_rows_per_s: 61.24,
                bulk_share: 0.671,
                leftover_fraction: 0.876,
            },
            cancel: Stop::default(),
            problems: vec![],
        };
        assert_eq!(
            lanes_line(&report),
            "RESULT lanes p99_alone_ms=89 p99_one_topic_ms=512000 p99_lanes_ms=104 bulk_share=0.67 bulk_rows_per_s=61.2 leftover_fraction=0.88"
        );
        let stop = Stop { seconds_to_stop: 0.4, rows_computed_after_cancel: 32.0, ..Stop::default() };
        assert_eq!(cancel_line(&stop), "RESULT cancel seconds_to_stop=0.40 rows_computed_after_cancel=32");
    }
}
