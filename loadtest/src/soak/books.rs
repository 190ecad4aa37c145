//! The soak's books, from the load's records: every request sent, per
//! model and partition, ended as exactly one of ok / error / expired, or is
//! missing; and end-to-end latency per interval, by the time the answer
//! was seen. Pure.

use crate::ledger::Outcome;
use crate::timeline::{latency_histogram, quantile_ms, record_ms, Record};
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

/// p50 and p99 (ms) of the `ok` answers seen in each `interval_s` interval
/// with at least one: (interval start s, ms) each.
pub fn latency_by_interval(records: &[Record], interval_s: f64) -> (Vec<(f64, f64)>, Vec<(f64, f64)>) {
    let mut intervals: BTreeMap<u64, hdrhistogram::Histogram<u64>> = BTreeMap::new();
    for record in records.iter().filter(|r| r.outcome == Outcome::Ok) {
        let (Some(at), Some(ms)) = (record.answered_s, record.e2e_ms) else { continue };
        let index = (at / interval_s).floor() as u64;
        record_ms(intervals.entry(index).or_insert_with(latency_histogram), ms);
    }
    let quantile = |q: f64| {
        intervals
            .iter()
            .filter_map(|(&index, histogram)| Some((index as f64 * interval_s, quantile_ms(histogram, q)?)))
            .collect()
    };
    (quantile(0.50), quantile(0.99))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(partition: Option<i32>, outcome: Outcome, answered_s: Option<f64>, e2e_ms: Option<f64>) -> Record {
        Record { id: "r".into(), sent_s: 0.0, outcome, answered_s, e2e_ms, queue_ms: None, infer_ms: None, partition }
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
        assert_eq!(p50.iter().map(|&(t, _)| t).collect::<Vec<_>>(), [0.0, 20.0]);
        assert!((99.0..=101.0).contains(&p50[0].1), "{p50:?}");
        assert!((299.0..=301.0).contains(&p99[0].1), "{p99:?}");
        assert!((49.0..=51.0).contains(&p99[1].1), "{p99:?}");
    }
}
