//! The backlog report: how far behind a model's workers are and how fast
//! they drain, published by each worker to Redis every second and read by
//! producers for admission. Cheap for the producer (one HGETALL, cached
//! briefly) and fresh (a worker's entry older than a few seconds no longer
//! counts).
//!
//! `fleet:backlog:<model>` is a hash: field = worker id, value =
//! `"<backlog> <unix ms> <drain per s>"`, where backlog = messages its
//! assigned partitions still hold beyond its read position plus those it is
//! working on, and drain = answers it wrote per second lately. A value
//! without the third field (an older worker) has no drain rate.

use crate::keys::{ModelName, REDIS_PREFIX};

/// How long a worker's report counts. Workers report every second.
pub const MAX_REPORT_AGE_MS: u64 = 5_000;

/// A drain rate below this (answers per second) says nothing about the
/// fleet's speed: it is idle, starting, or stalled. No wait is predicted
/// from it.
pub const MIN_DRAIN_PER_S: f64 = 0.5;

pub fn backlog_key(model: &ModelName) -> String {
    format!("{REDIS_PREFIX}backlog:{model}")
}

pub fn encode(backlog: u64, now_ms: u64, drain_per_s: f64) -> String {
    format!("{backlog} {now_ms} {drain_per_s:.2}")
}

/// One worker's report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    pub backlog: u64,
    pub at_ms: u64,
    pub drain_per_s: Option<f64>,
}

pub fn decode(value: &str) -> Option<Report> {
    let mut fields = value.split(' ');
    let backlog = fields.next()?.parse().ok()?;
    let at_ms = fields.next()?.parse().ok()?;
    let drain_per_s = match fields.next() {
        Some(raw) => Some(raw.parse::<f64>().ok().filter(|d| d.is_finite() && *d >= 0.0)?),
        None => None,
    };
    Some(Report { backlog, at_ms, drain_per_s })
}

/// The model's load: the fresh reports summed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    pub backlog: u64,
    /// Summed over the fresh reports that carry one; `None` if none does.
    pub drain_per_s: Option<f64>,
}

/// `None` when no worker reported recently (nobody is consuming: nothing
/// to say).
pub fn fresh_load<'a>(reports: impl IntoIterator<Item = &'a str>, now_ms: u64) -> Option<Load> {
    reports.into_iter().filter_map(decode).filter(|r| r.at_ms + MAX_REPORT_AGE_MS >= now_ms).fold(None, |load, r| {
        let Load { backlog, drain_per_s } = load.unwrap_or(Load { backlog: 0, drain_per_s: None });
        let drain = match (drain_per_s, r.drain_per_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        Some(Load { backlog: backlog + r.backlog, drain_per_s: drain })
    })
}

/// The model's backlog: the sum over workers whose report is fresh.
pub fn fresh_total<'a>(reports: impl IntoIterator<Item = &'a str>, now_ms: u64) -> Option<u64> {
    fresh_load(reports, now_ms).map(|load| load.backlog)
}

/// How long a request sent now would wait before the fleet reaches it: the
/// backlog ahead of it at the rate the fleet drains. `None` when the drain
/// rate is unknown or too low to say.
pub fn predicted_wait_ms(load: &Load) -> Option<u64> {
    let drain = load.drain_per_s.filter(|d| *d >= MIN_DRAIN_PER_S)?;
    Some((load.backlog as f64 / drain * 1000.0).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sums_fresh_reports_and_ignores_stale_or_garbled_ones() {
        let now = 100_000;
        let reports =
            [encode(7, now - 100, 2.0), encode(5, now - 4_000, 3.5), encode(1_000, now - 6_000, 9.0), "junk".into()];
        let load = fresh_load(reports.iter().map(String::as_str), now).unwrap();
        assert_eq!(load, Load { backlog: 12, drain_per_s: Some(5.5) });
        assert_eq!(fresh_total(reports.iter().map(String::as_str), now), Some(12));
        assert_eq!(fresh_total([encode(3, 1, 1.0).as_str()], now), None);
        assert_eq!(fresh_total([], now), None);
        assert_eq!(backlog_key(&ModelName::parse("minilm").unwrap()), "fleet:backlog:minilm");
    }

    #[test]
    fn an_old_two_field_report_has_no_drain_rate() {
        assert_eq!(decode("40 1000"), Some(Report { backlog: 40, at_ms: 1000, drain_per_s: None }));
        assert_eq!(decode("40 1000 nan"), None);
        let load = fresh_load(["40 1000"], 1000).unwrap();
        assert_eq!(predicted_wait_ms(&load), None, "no rate, no prediction: admit");
    }

    #[test]
    fn the_wait_is_the_backlog_at_the_drain_rate() {
        assert_eq!(predicted_wait_ms(&Load { backlog: 100, drain_per_s: Some(50.0) }), Some(2_000));
        assert_eq!(predicted_wait_ms(&Load { backlog: 0, drain_per_s: Some(50.0) }), Some(0));
        assert_eq!(predicted_wait_ms(&Load { backlog: 100, drain_per_s: Some(0.1) }), None, "idle or stalled");
    }

    proptest! {
        #[test]
        fn more_backlog_never_shortens_and_more_drain_never_lengthens_the_wait(
            backlog in 0u64..1_000_000, extra in 0u64..1_000, drain in 0.5f64..10_000.0, faster in 0.0f64..100.0,
        ) {
            let wait = |b, d| predicted_wait_ms(&Load { backlog: b, drain_per_s: Some(d) }).unwrap();
            prop_assert!(wait(backlog + extra, drain) >= wait(backlog, drain));
            prop_assert!(wait(backlog, drain + faster) <= wait(backlog, drain));
        }

        #[test]
        fn a_report_round_trips(backlog in 0u64..u64::MAX / 2, at in 0u64..u64::MAX / 2, drain in 0.0f64..1e6) {
            let r = decode(&encode(backlog, at, drain)).unwrap();
            prop_assert_eq!((r.backlog, r.at_ms), (backlog, at));
            prop_assert!((r.drain_per_s.unwrap() - drain).abs() <= 0.005 + drain * 1e-12);
        }
    }
}
