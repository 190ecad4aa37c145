//! The backlog report: how far behind a model's workers are, published by
//! each worker to Redis every second and read by producers for fail-fast
//! admission. Cheap for the producer (one HGETALL, cached briefly) and fresh
//! (a worker's entry older than a few seconds no longer counts).
//!
//! `fleet:backlog:<model>` is a hash: field = worker id, value =
//! `"<backlog> <unix ms>"`, where backlog = messages its assigned partitions
//! still hold beyond its read position plus those it is working on.

use crate::keys::{ModelName, REDIS_PREFIX};

/// How long a worker's report counts. Workers report every second.
pub const MAX_REPORT_AGE_MS: u64 = 5_000;

pub fn backlog_key(model: &ModelName) -> String {
    format!("{REDIS_PREFIX}backlog:{model}")
}

pub fn encode(backlog: u64, now_ms: u64) -> String {
    format!("{backlog} {now_ms}")
}

pub fn decode(value: &str) -> Option<(u64, u64)> {
    let (backlog, at) = value.split_once(' ')?;
    Some((backlog.parse().ok()?, at.parse().ok()?))
}

/// The model's backlog: the sum over workers whose report is fresh. `None`
/// when no worker reported recently (nobody is consuming: nothing to say).
pub fn fresh_total<'a>(reports: impl IntoIterator<Item = &'a str>, now_ms: u64) -> Option<u64> {
    reports
        .into_iter()
        .filter_map(decode)
        .filter(|&(_, at)| at + MAX_REPORT_AGE_MS >= now_ms)
        .map(|(backlog, _)| backlog)
        .reduce(|a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_fresh_reports_and_ignores_stale_or_garbled_ones() {
        let now = 100_000;
        let reports = [encode(7, now - 100), encode(5, now - 4_000), encode(1_000, now - 6_000), "junk".into()];
        assert_eq!(fresh_total(reports.iter().map(String::as_str), now), Some(12));
        assert_eq!(fresh_total([encode(3, 1).as_str()], now), None);
        assert_eq!(fresh_total([], now), None);
        assert_eq!(backlog_key(&ModelName::parse("minilm").unwrap()), "fleet:backlog:minilm");
    }
}
