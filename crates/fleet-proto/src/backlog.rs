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

/// How long a worker's report counts. Workers report every second.
pub const MAX_REPORT_AGE_MS: u64 = 5_000;

/// A report this old is a worker's that stopped without withdrawing it (a
/// crash, a killed pod): any worker of the model deletes it. Far above
/// the 1 s reporting period and any sane clock skew between hosts.
pub const STALE_REPORT_AGE_MS: u64 = 120_000;

/// A drain rate below this (answers per second) says nothing about the
/// fleet's speed: it is idle, starting, or stalled. No wait is predicted
/// from it.
pub const MIN_DRAIN_PER_S: f64 = 0.5;

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

/// The fields of `fleet:backlog:<model>` to delete at `now_ms`: reports
/// older than [`STALE_REPORT_AGE_MS`] and values that are no report at all.
pub fn stale_fields<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>, now_ms: u64) -> Vec<&'a str> {
    fields
        .into_iter()
        .filter(|(_, value)| decode(value).is_none_or(|r| now_ms.saturating_sub(r.at_ms) > STALE_REPORT_AGE_MS))
        .map(|(field, _)| field)
        .collect()
}

/// The model's load: the fresh reports summed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    pub backlog: u64,
    /// Summed over the fresh reports that carry one; `None` if none does.
    pub drain_per_s: Option<f64>,
    /// When the oldest of the summed reports was made (Unix ms): sends after
    /// it may be missing from `backlog`.
    pub at_ms: u64,
}

/// `None` when no worker reported recently (nobody is consuming: nothing
/// to say).
pub fn fresh_load<'a>(reports: impl IntoIterator<Item = &'a str>, now_ms: u64) -> Option<Load> {
    reports.into_iter().filter_map(decode).filter(|r| r.at_ms + MAX_REPORT_AGE_MS >= now_ms).fold(None, |load, r| {
        let Load { backlog, drain_per_s, at_ms } =
            load.unwrap_or(Load { backlog: 0, drain_per_s: None, at_ms: r.at_ms });
        let drain = match (drain_per_s, r.drain_per_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        Some(Load { backlog: backlog + r.backlog, drain_per_s: drain, at_ms: at_ms.min(r.at_ms) })
    })
}

/// The model's backlog: the sum over workers whose report is fresh.
pub fn fresh_total<'a>(reports: impl IntoIterator<Item = &'a str>, now_ms: u64) -> Option<u64> {
    fresh_load(reports, now_ms).map(|load| load.backlog)
}

/// The load as it stands at `now_ms`, from a report made earlier: what the
/// workers held then, plus the `sent_since` requests this producer sent
/// after the report, less what the fleet drained meanwhile at its rate.
///
/// Why: reports are up to a second or so old, and a burst sends hundreds of
/// requests in that time. Judged on the raw report, a producer lets in a
/// whole report's worth of requests past the point where they can still be
/// served (they come back `expired`), then refuses while the backlog those
/// made drains, though the workers could by then have served more. Other
/// producers' sends since the report are not seen; the next report has them.
pub fn projected(load: &Load, sent_since: u64, now_ms: u64) -> Load {
    let elapsed_s = now_ms.saturating_sub(load.at_ms) as f64 / 1000.0;
    let drained = load.drain_per_s.map_or(0.0, |drain| drain * elapsed_s);
    let backlog = ((load.backlog + sent_since) as f64 - drained).max(0.0).round() as u64;
    Load { backlog, at_ms: now_ms.max(load.at_ms), ..*load }
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
    #[test]
    fn stale_and_unreadable_reports_are_selected_for_deletion() {
        let now = 1_000_000;
        let fresh = encode(3, now - 1_000, 2.0);
        let old_but_counting = encode(3, now - STALE_REPORT_AGE_MS, 2.0);
        let crashed = encode(9, now - STALE_REPORT_AGE_MS - 1, 2.0);
        let fields =
            [("w1", fresh.as_str()), ("w2", old_but_counting.as_str()), ("w3", crashed.as_str()), ("w4", "garbage")];
        assert_eq!(stale_fields(fields, now), vec!["w3", "w4"]);
        assert!(stale_fields([("w1", fresh.as_str())], 0).is_empty(), "a report from the future is not stale");
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sums_fresh_reports_and_ignores_stale_or_garbled_ones() {
        let now = 100_000;
        let reports =
            [encode(7, now - 100, 2.0), encode(5, now - 4_000, 3.5), encode(1_000, now - 6_000, 9.0), "junk".into()];
        let load = fresh_load(reports.iter().map(String::as_str), now).unwrap();
        assert_eq!(load, Load { backlog: 12, drain_per_s: Some(5.5), at_ms: now - 4_000 });
        assert_eq!(fresh_total(reports.iter().map(String::as_str), now), Some(12));
        assert_eq!(fresh_total([encode(3, 1, 1.0).as_str()], now), None);
        assert_eq!(fresh_total([], now), None);
    }

    #[test]
    fn an_old_two_field_report_has_no_drain_rate() {
        assert_eq!(decode("40 1000"), Some(Report { backlog: 40, at_ms: 1000, drain_per_s: None }));
        assert_eq!(decode("40 1000 nan"), None);
        let load = fresh_load(["40 1000"], 1000).unwrap();
        assert_eq!(predicted_wait_ms(&load), None, "no rate, no prediction: admit");
    }

    fn load(backlog: u64, drain_per_s: f64) -> Load {
        Load { backlog, drain_per_s: Some(drain_per_s), at_ms: 0 }
    }

    #[test]
    fn the_wait_is_the_backlog_at_the_drain_rate() {
        assert_eq!(predicted_wait_ms(&load(100, 50.0)), Some(2_000));
        assert_eq!(predicted_wait_ms(&load(0, 50.0)), Some(0));
        assert_eq!(predicted_wait_ms(&load(100, 0.1)), None, "idle or stalled");
    }

    #[test]
    fn a_projection_adds_the_sends_since_the_report_and_takes_off_what_drained() {
        let report = Load { backlog: 100, drain_per_s: Some(50.0), at_ms: 10_000 };
        // 600 ms later: 30 drained, 80 more sent.
        let now = projected(&report, 80, 10_600);
        assert_eq!(now, Load { backlog: 150, drain_per_s: Some(50.0), at_ms: 10_600 });
        // Long enough for all of it to drain: empty, never negative.
        assert_eq!(projected(&report, 0, 20_000).backlog, 0);
        // No rate known: only the sends are added.
        let no_rate = Load { drain_per_s: None, ..report };
        assert_eq!(projected(&no_rate, 7, 60_000).backlog, 107);
        // A report from a clock slightly ahead: nothing drained yet.
        assert_eq!(projected(&report, 0, 9_900), Load { at_ms: 10_000, ..report });
    }

    proptest! {
        #[test]
        fn more_backlog_never_shortens_and_more_drain_never_lengthens_the_wait(
            backlog in 0u64..1_000_000, extra in 0u64..1_000, drain in 0.5f64..10_000.0, faster in 0.0f64..100.0,
        ) {
            let wait = |b, d| predicted_wait_ms(&load(b, d)).unwrap();
            prop_assert!(wait(backlog + extra, drain) >= wait(backlog, drain));
            prop_assert!(wait(backlog, drain + faster) <= wait(backlog, drain));
        }

        #[test]
        fn more_sends_never_shrink_and_more_time_never_grows_the_projection(
            backlog in 0u64..100_000, drain in 0.0f64..5_000.0, sent in 0u64..10_000, more in 0u64..1_000,
            elapsed in 0u64..10_000, later in 0u64..10_000,
        ) {
            let report = Load { backlog, drain_per_s: Some(drain), at_ms: 1_000 };
            let at = |sent, elapsed| projected(&report, sent, 1_000 + elapsed).backlog;
            prop_assert!(at(sent + more, elapsed) >= at(sent, elapsed));
            prop_assert!(at(sent, elapsed + later) <= at(sent, elapsed));
            prop_assert!(at(sent, elapsed) <= backlog + sent);
        }

        #[test]
        fn a_report_round_trips(backlog in 0u64..u64::MAX / 2, at in 0u64..u64::MAX / 2, drain in 0.0f64..1e6) {
            let r = decode(&encode(backlog, at, drain)).unwrap();
            prop_assert_eq!((r.backlog, r.at_ms), (backlog, at));
            prop_assert!((r.drain_per_s.unwrap() - drain).abs() <= 0.005 + drain * 1e-12);
        }
    }
}
