//! Caps a length bucket's rows where fewer rows compute more tokens per
//! second on this CPU: the largest batch per bucket, chosen by measurement.
//!
//! A batch's working set grows with its rows; past a CPU's caches a full
//! batch can compute fewer tokens per second than a smaller one
//! (docs/benchmarks.md), and which buckets do so differs from one CPU to
//! the next. Timing every bucket's batch sizes at warm-up would make a
//! small machine's start far longer, so the evidence is the worker's own batches: under a
//! backlog their sizes spread (a bucket fills on some turns and not on
//! others), interleaved in time, so the host's drift hits both sizes alike.
//! Only batches run while the worker held a backlog, with the engine's
//! tuning settled, count: when it is idle the rest of the worker leaves the
//! engine the cores, and small batches would look fast for that alone; and
//! a thread count or batch share under trial is not what will stay.
//!
//! Per bucket, batches of at least three quarters of its most rows
//! ("full") are set against those of a quarter to a half ("smaller"). Once
//! each side has [`MIN_SAMPLES`], the bucket is decided: when the smaller
//! batches' median tokens per second beats the full ones' by [`MARGIN`],
//! the bucket is capped at half its most rows and measured again at the new
//! size (a quarter may be faster still); otherwise it keeps its budgets and
//! is measured again only when they change (a device-memory cap, a new
//! batch share: [`SpeedCaps::start_over`]). Caps only go down, like the
//! device-memory caps they sit beside, until a new version's batcher starts
//! without them. After any change of a bucket's most rows, its next
//! [`SETTLING_BATCHES`] are not counted: they were formed under the old
//! budgets.
//!
//! Pure: the batch stage feeds it each batch's timing and applies the caps
//! it returns.

use fleet_ops::stats::median;

/// Batches each side of a bucket needs before it is decided: a median of
/// fewer moves with one slow call on a shared host.
pub const MIN_SAMPLES: usize = 16;

/// How much faster per token the smaller batches must be for a cap:
/// smaller batches cost latency for every row behind them, and on a shared
/// 2-core host two windows of one setting differ by more than a few percent.
pub const MARGIN: f64 = 0.05;

/// Batches of a bucket not counted after its budgets changed: those formed
/// before it and still on their way (one each at the batch, cache and
/// engine stages, and one running).
pub const SETTLING_BATCHES: usize = 4;

/// One batch as the engine ran it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchTiming {
    pub bucket: usize,
    pub rows: usize,
    /// Real (unpadded) tokens of its rows: what it answers, padding not
    /// counted, so a batch padded further pays for it.
    pub tokens: usize,
    /// The model's time on it.
    pub infer_ms: f64,
    /// Whether it ran under a backlog with the engine's tuning settled:
    /// only then does its speed say what the batch size is worth.
    pub settled_backlog: bool,
}

/// A bucket decided, for the batcher, the log and the gauge.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub bucket: usize,
    /// The most rows its batches held while measured.
    pub most_rows: usize,
    /// The new most rows, or `None`: full batches stay.
    pub cap: Option<usize>,
    /// Median tokens per second of each side.
    pub full_tokens_per_s: f64,
    pub smaller_tokens_per_s: f64,
}

#[derive(Debug, Clone, Default)]
struct Bucket {
    full: Vec<f64>,
    smaller: Vec<f64>,
    /// The most rows the samples were taken under: a change starts over.
    most_rows: usize,
    /// Batches still to pass uncounted (formed before a change).
    settling: usize,
    decided: bool,
}

impl Bucket {
    /// A fresh measurement under `most_rows`, after the batches formed
    /// before have passed.
    fn start(most_rows: usize) -> Self {
        Self { most_rows, settling: SETTLING_BATCHES, ..Self::default() }
    }
}

/// Each bucket's measurement.
#[derive(Debug, Clone, Default)]
pub struct SpeedCaps {
    buckets: Vec<Bucket>,
}

impl SpeedCaps {
    pub fn new(buckets: usize) -> Self {
        Self { buckets: vec![Bucket::default(); buckets] }
    }

    /// The budgets changed for every bucket (a new batch share): what was a
    /// full batch no longer is. Decided buckets are measured again too.
    pub fn start_over(&mut self) {
        for bucket in &mut self.buckets {
            *bucket = Bucket::start(bucket.most_rows);
        }
    }

    /// Counts `batch`, run when its bucket could hold at most `most_rows`
    /// rows of its bound's length; a decision once its bucket has enough of
    /// both sizes. A batch of shorter rows may hold more where the token
    /// budget binds: it counts as full.
    pub fn observe(&mut self, batch: BatchTiming, most_rows: usize) -> Option<Decision> {
        let bucket = self.buckets.get_mut(batch.bucket)?;
        if bucket.most_rows != most_rows {
            // Capped (by device memory or by this) since, or first seen.
            *bucket = Bucket::start(most_rows);
        }
        if bucket.settling > 0 {
            bucket.settling -= 1;
            return None;
        }
        // (A bucket of one row has no smaller side: the bands below leave it alone.)
        if bucket.decided || !batch.settled_backlog || batch.infer_ms <= 0.0 {
            return None;
        }
        let tokens_per_s = batch.tokens as f64 / (batch.infer_ms / 1000.0);
        if batch.rows * 4 >= most_rows * 3 {
            bucket.full.push(tokens_per_s);
        } else if batch.rows * 2 <= most_rows && batch.rows * 4 >= most_rows {
            bucket.smaller.push(tokens_per_s);
        } else {
            return None;
        }
        if bucket.full.len() < MIN_SAMPLES || bucket.smaller.len() < MIN_SAMPLES {
            return None;
        }
        let (full, smaller) = (median(&bucket.full), median(&bucket.smaller));
        let cap = (smaller >= full * (1.0 + MARGIN)).then_some(most_rows / 2);
        match cap {
            // Measured again at the new size: the caller's next `most_rows`
            // starts it.
            Some(_) => *bucket = Bucket::start(most_rows),
            None => bucket.decided = true,
        }
        Some(Decision { bucket: batch.bucket, most_rows, cap, full_tokens_per_s: full, smaller_tokens_per_s: smaller })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of `rows` rows of 64 tokens that ran at `per_row_ms` a row.
    fn batch(bucket: usize, rows: usize, per_row_ms: f64) -> BatchTiming {
        BatchTiming { bucket, rows, tokens: rows * 64, infer_ms: rows as f64 * per_row_ms, settled_backlog: true }
    }

    /// Feeds batches of `full` and `smaller` rows alternately, each side at
    /// its time per row, until a decision (`most` rows at most).
    fn decide_at(
        caps: &mut SpeedCaps,
        most: usize,
        (full, full_ms): (usize, f64),
        (smaller, smaller_ms): (usize, f64),
    ) -> Decision {
        for i in 0..1000 {
            let timing = if i % 2 == 0 { batch(3, full, full_ms) } else { batch(3, smaller, smaller_ms) };
            if let Some(decision) = caps.observe(timing, most) {
                return decision;
            }
        }
        panic!("no decision");
    }

    fn decide(caps: &mut SpeedCaps, full_ms: f64, smaller_ms: f64) -> Decision {
        decide_at(caps, 32, (32, full_ms), (16, smaller_ms))
    }

    #[test]
    fn a_bucket_whose_smaller_batches_are_faster_is_capped_at_half() {
        let mut caps = SpeedCaps::new(5);
        let decision = decide(&mut caps, 1.0, 0.9);
        assert_eq!(decision.cap, Some(16));
        assert_eq!((decision.bucket, decision.most_rows), (3, 32));
        assert!((decision.smaller_tokens_per_s / decision.full_tokens_per_s - 1.0 / 0.9).abs() < 1e-9);
    }

    #[test]
    fn the_margin_decides() {
        // 4.7 % faster: kept; 5.3 %: capped.
        assert_eq!(decide(&mut SpeedCaps::new(5), 1.0, 0.955).cap, None);
        assert_eq!(decide(&mut SpeedCaps::new(5), 1.0, 0.95).cap, Some(16));
    }

    #[test]
    fn the_sides_are_three_quarters_and_up_and_a_quarter_to_a_half() {
        // 24 of 32 rows is full, 8 is smaller: they decide.
        assert_eq!(decide_at(&mut SpeedCaps::new(5), 32, (24, 1.0), (8, 0.5)).cap, Some(16));
        // Three rows at most: 3 is full, 1 smaller (2 is neither).
        assert_eq!(decide_at(&mut SpeedCaps::new(5), 3, (3, 1.0), (1, 0.5)).cap, Some(1));
    }

    #[test]
    fn within_the_margin_the_full_batches_stay_and_the_bucket_is_not_measured_again() {
        let mut caps = SpeedCaps::new(5);
        let decision = decide(&mut caps, 1.0, 0.97);
        assert_eq!(decision.cap, None);
        for _ in 0..100 {
            assert_eq!(caps.observe(batch(3, 16, 0.5), 32), None);
            assert_eq!(caps.observe(batch(3, 32, 1.0), 32), None);
        }
    }

    #[test]
    fn a_capped_bucket_is_measured_again_at_its_new_size() {
        let mut caps = SpeedCaps::new(5);
        assert_eq!(decide(&mut caps, 1.0, 0.8).cap, Some(16));
        // Now 16 is full and 8 smaller; a quarter is no faster.
        let decision = decide_at(&mut caps, 16, (16, 0.8), (8, 0.8));
        assert_eq!((decision.most_rows, decision.cap), (16, None));
    }

    #[test]
    fn it_waits_for_enough_batches_of_each_size() {
        let mut caps = SpeedCaps::new(5);
        for _ in 0..100 {
            assert_eq!(caps.observe(batch(3, 32, 1.0), 32), None);
        }
        for _ in 0..MIN_SAMPLES - 1 {
            assert_eq!(caps.observe(batch(3, 16, 0.5), 32), None);
        }
        assert_eq!(caps.observe(batch(3, 16, 0.5), 32).and_then(|d| d.cap), Some(16));
    }

    #[test]
    fn a_median_is_not_moved_by_a_few_slow_calls() {
        let mut caps = SpeedCaps::new(5);
        // Full batches are faster, but a quarter of them were slowed down
        // by something else on the host: the median still says full (a
        // mean would have said smaller, 1.18× faster).
        let mut decision = None;
        for i in 0..1000 {
            let full_ms = if i % 8 == 0 { 3.0 } else { 1.0 };
            let timing = if i % 2 == 0 { batch(3, 32, full_ms) } else { batch(3, 16, 1.02) };
            decision = caps.observe(timing, 32);
            if decision.is_some() {
                break;
            }
        }
        assert_eq!(decision.expect("no decision").cap, None);
    }

    #[test]
    fn only_batches_under_a_settled_backlog_and_of_either_size_count() {
        let mut caps = SpeedCaps::new(5);
        let idle = |rows| BatchTiming { settled_backlog: false, ..batch(3, rows, 0.5) };
        for _ in 0..100 {
            assert_eq!(caps.observe(batch(3, 32, 1.0), 32), None);
            // Idle, or under a setting on trial.
            assert_eq!(caps.observe(idle(16), 32), None);
            // Neither side: between a half and three quarters, or under a quarter.
            assert_eq!(caps.observe(batch(3, 20, 0.5), 32), None);
            assert_eq!(caps.observe(batch(3, 7, 0.5), 32), None);
        }
    }

    #[test]
    fn the_batches_formed_before_a_change_are_not_counted() {
        let mut caps = SpeedCaps::new(5);
        assert_eq!(decide(&mut caps, 1.0, 0.8).cap, Some(16));
        // The first batches seen under the cap were formed before it.
        for _ in 0..SETTLING_BATCHES {
            assert_eq!(caps.observe(batch(3, 8, 0.5), 16), None);
        }
        for _ in 0..MIN_SAMPLES {
            assert_eq!(caps.observe(batch(3, 16, 1.0), 16), None);
        }
        for _ in 0..MIN_SAMPLES - 1 {
            assert_eq!(caps.observe(batch(3, 8, 0.5), 16), None, "a batch formed before the cap was counted");
        }
        assert_eq!(caps.observe(batch(3, 8, 0.5), 16).and_then(|d| d.cap), Some(8));
    }

    #[test]
    fn new_budgets_start_the_measurement_over_decided_buckets_included() {
        let mut caps = SpeedCaps::new(5);
        assert_eq!(decide(&mut caps, 1.0, 1.0).cap, None);
        caps.start_over();
        assert_eq!(decide(&mut caps, 1.0, 0.8).cap, Some(16));
    }

    #[test]
    fn a_one_row_bucket_and_an_unknown_bucket_are_left_alone() {
        let mut caps = SpeedCaps::new(5);
        for _ in 0..100 {
            // One row at most: no batch is smaller than a full one.
            assert_eq!(caps.observe(batch(4, 1, 1.0), 1), None);
            assert_eq!(caps.observe(batch(4, 1, 0.1), 1), None);
            // A bucket the limits do not have, both sizes.
            assert_eq!(caps.observe(batch(9, 32, 1.0), 32), None);
            assert_eq!(caps.observe(batch(9, 16, 0.5), 32), None);
        }
    }
}
