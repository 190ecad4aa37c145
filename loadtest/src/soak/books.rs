//! The soak's books, from the load's records: every request sent, per
//! model and partition, ended as exactly one of ok / error / expired, or is
//! missing; and end-to-end latency per interval, by the time the answer
//! was seen. Pure.

use crate::ledger::Outcome;
use crate::timeline::Record;
use std::collections::BTreeMap;

/// One partition's requests by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionBooks {
    pub sent: u64,
    pub ok: u64,
    pub error: u64,
    pub expired: u64,
    pub missing: u64,
}

impl PartitionBooks {
    fn add(&mut self, outcome: &Outcome) {
        self.sent += 1;
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Error(_) => self.error += 1,
            Outcome::Expired => self.expired += 1,
            Outcome::Missing => self.missing += 1,
        }
    }

    /// Requests with exactly one answer.
    pub fn answered(&self) -> u64 {
        self.ok + self.error + self.expired
    }
}

/// The books of every (model, partition) a request was delivered to.
/// Requests the broker never acknowledged have no partition and are not
/// the fleet's (the runner's ledger counts them as `send_failed`).
pub fn per_partition<'a>(
    runs: impl IntoIterator<Item = (&'a str, &'a [Record])>,
) -> BTreeMap<(String, i32), PartitionBooks> {
    let mut books: BTreeMap<(String, i32), PartitionBooks> = BTreeMap::new();
    for (model, records) in runs {
        for record in records {
            if let Some(partition) = record.partition {
                books.entry((model.to_owned(), partition)).or_default().add(&record.outcome);
            }
        }
    }
    books
}

/// The books summed.
pub fn total(books: &BTreeMap<(String, i32), PartitionBooks>) -> PartitionBooks {
    books.values().fold(PartitionBooks::default(), |mut sum, b| {
        sum.sent += b.sent;
        sum.ok += b.ok;
        sum.error += b.error;
        sum.expired += b.expired;
        sum.missing += b.missing;
        sum
    })
}

/// (interval start s, value) for each interval that has one.
pub type IntervalSeries = Vec<(f64, f64)>;

/// p50 and p99 (ms) of the `ok` answers seen in each `interval_s` interval
/// with at least one: (interval start s, ms) each. Exact (nearest rank) from
/// each interval's latencies: a histogram per interval would cost ~190 KB
/// each, hundreds of MB over a day.
pub fn latency_by_interval(records: &[Record], interval_s: f64) -> (IntervalSeries, IntervalSeries) {
    let mut intervals: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (at, ms) in ok_answers(records) {
        intervals.entry((at / interval_s).floor() as u64).or_default().push(ms);
    }
    let (mut p50, mut p99) = (Vec::with_capacity(intervals.len()), Vec::with_capacity(intervals.len()));
    for (index, mut latencies) in intervals {
        latencies.sort_by(f64::total_cmp);
        let start_s = index as f64 * interval_s;
        p50.push((start_s, nearest_rank(&latencies, 0.50)));
        p99.push((start_s, nearest_rank(&latencies, 0.99)));
    }
    (p50, p99)
}

/// (seconds answered, ms end to end) of every `ok` answer: what the
/// verdict pools into windows of its own length.
pub fn ok_answers(records: &[Record]) -> Vec<(f64, f64)> {
    records.iter().filter(|r| r.outcome == Outcome::Ok).filter_map(|r| Some((r.answered_s?, r.e2e_ms?))).collect()
}

/// The `q` quantile of sorted, non-empty `values`: the smallest value with
/// at least a share `q` of them at or below it.
pub(crate) fn nearest_rank(values: &[f64], q: f64) -> f64 {
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(partition: Option<i32>, outcome: Outcome, answered_s: Option<f64>, e2e_ms: Option<f64>) -> Record {
        Record { partition, ..crate::timeline::test_record(0.0, outcome, answered_s, e2e_ms) }
    }

    #[test]
    fn every_delivered_request_lands_in_its_partition_s_books_once() {
        let texts = [
            record(Some(0), Outcome::Ok, Some(1.0), Some(20.0)),
            record(Some(0), Outcome::Expired, Some(2.0), None),
            record(Some(1), Outcome::Missing, None, None),
            record(None, Outcome::Missing, None, None),
        ];
        let images = [record(Some(0), Outcome::Error("decode_failed".into()), Some(3.0), None)];
        let books = per_partition([("minilm", &texts[..]), ("efficientnet_lite0", &images[..])]);
        assert_eq!(books.len(), 3);
        let text0 = books[&("minilm".to_owned(), 0)];
        assert_eq!((text0.sent, text0.ok, text0.expired, text0.answered()), (2, 1, 1, 2));
        assert_eq!(books[&("minilm".to_owned(), 1)].missing, 1);
        assert_eq!(books[&("efficientnet_lite0".to_owned(), 0)].error, 1);
        let sum = total(&books);
        assert_eq!((sum.sent, sum.answered(), sum.missing), (4, 3, 1));
    }

    #[test]
    fn latency_is_per_interval_of_the_answer_and_of_ok_answers_only() {
        let records = [
            record(Some(0), Outcome::Ok, Some(1.0), Some(100.0)),
            record(Some(0), Outcome::Ok, Some(9.0), Some(300.0)),
            record(Some(0), Outcome::Ok, Some(25.0), Some(50.0)),
            record(Some(0), Outcome::Expired, Some(15.0), Some(9000.0)),
        ];
        let (p50, p99) = latency_by_interval(&records, 10.0);
        assert_eq!(ok_answers(&records), [(1.0, 100.0), (9.0, 300.0), (25.0, 50.0)]);
        assert_eq!(p50.iter().map(|&(t, _)| t).collect::<Vec<_>>(), [0.0, 20.0]);
        assert_eq!((p50[0].1, p99[0].1, p99[1].1), (100.0, 300.0, 50.0));
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(
            (nearest_rank(&hundred, 0.5), nearest_rank(&hundred, 0.99), nearest_rank(&[7.0], 0.99)),
            (50.0, 99.0, 7.0)
        );
    }
}
