//! The bucket batcher: pure batch forming, no I/O, no clock (the caller
//! passes `now_ms`). The best-tested code of the worker.
//!
//! Padding every row of a batch to its longest row wastes compute on short
//! texts, and attention memory grows with rows × length², so one long text in
//! a batch of short ones costs both time and (GPU) memory. Requests are
//! therefore held in buckets by token length; a batch holds one bucket only
//! and is padded to its longest member (not to the bucket edge), and every
//! batch stays within three budgets: rows (`max_batch_size`), computed
//! tokens (rows × padded length, `max_batch_tokens`) and attention cells
//! (rows × padded length², `max_attention_cells`). A single request always
//! forms a batch on its own, whatever its length.
//!
//! A bucket is due when its next batch is full or its oldest request has
//! waited the bucket's `max_wait_ms`. Of the due buckets, the one holding the
//! earliest deadline goes first. A request whose deadline has passed, or
//! cannot be met given the measured inference time of its bucket, leaves as
//! expired and is never handed to the model. Within a bucket, order is FIFO.

use std::collections::VecDeque;

#[derive(Debug, Clone, PartialEq)]
pub struct BucketLimits {
    /// Upper token bounds of the buckets, ascending. A request goes to the
    /// first bucket whose bound is ≥ its length; longer ones to the last.
    pub boundaries: Vec<usize>,
    pub max_batch_size: usize,
    pub max_batch_tokens: usize,
    pub max_attention_cells: usize,
    /// One value per bucket.
    pub max_wait_ms: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {problem}")]
pub struct InvalidLimits {
    pub key: &'static str,
    pub problem: String,
}

impl BucketLimits {
    pub fn validate(&self, max_seq_len: usize) -> Result<(), InvalidLimits> {
        let invalid = |key, problem: String| Err(InvalidLimits { key, problem });
        if self.boundaries.is_empty() || self.boundaries.windows(2).any(|w| w[0] >= w[1]) || self.boundaries[0] == 0 {
            return invalid("batching.buckets", "must be non-empty, above 0 and strictly ascending".into());
        }
        if self.boundaries.last().is_some_and(|&last| last < max_seq_len) {
            return invalid("batching.buckets", format!("last bound must be at least max_seq_len ({max_seq_len})"));
        }
        if self.max_wait_ms.len() != self.boundaries.len() {
            return invalid(
                "batching.max_wait_ms",
                format!("needs one value or {} (one per bucket)", self.boundaries.len()),
            );
        }
        if self.max_batch_size == 0 {
            return invalid("batching.max_batch_size", "must be above 0".into());
        }
        if self.max_batch_tokens < max_seq_len {
            return invalid("batching.max_batch_tokens", format!("must hold one row of max_seq_len ({max_seq_len})"));
        }
        if self.max_attention_cells < max_seq_len * max_seq_len {
            return invalid(
                "batching.max_attention_cells",
                format!("must hold one row of max_seq_len² ({})", max_seq_len * max_seq_len),
            );
        }
        Ok(())
    }

    /// The bucket a request of `len` tokens belongs to.
    pub fn bucket_of(&self, len: usize) -> usize {
        self.boundaries.iter().position(|&bound| len <= bound).unwrap_or(self.boundaries.len() - 1)
    }

    /// Whether `rows` rows padded to `padded_len` stay within every budget.
    pub fn fits(&self, rows: usize, padded_len: usize) -> bool {
        rows <= self.max_batch_size
            && rows * padded_len <= self.max_batch_tokens
            && rows * padded_len * padded_len <= self.max_attention_cells
    }
}

/// Length-bucket bounds whose neighbours differ by at most ~12 %: every
/// length up to 16, then steps of 2, 4, 8, 16 and 32 tokens. Padding a batch
/// to its longest member then wastes at most about one step.
pub fn default_boundaries(max_seq_len: usize) -> Vec<usize> {
    let mut bounds: Vec<usize> = (1..=16).collect();
    let mut step = 2;
    let mut next = 16;
    while next < max_seq_len {
        for _ in 0..8 {
            next += step;
            bounds.push(next.min(max_seq_len));
            if next >= max_seq_len {
                break;
            }
        }
        step *= 2;
    }
    bounds.retain(|&b| b <= max_seq_len);
    bounds.dedup();
    if bounds.last() != Some(&max_seq_len) {
        bounds.push(max_seq_len);
    }
    bounds
}

#[derive(Debug)]
struct Held<T> {
    item: T,
    len: usize,
    arrived_ms: u64,
    deadline_ms: u64,
}

/// A batch leaving the batcher: one bucket, FIFO order.
#[derive(Debug)]
pub struct Batch<T> {
    pub bucket: usize,
    pub items: Vec<T>,
    /// Token length of each item, in item order.
    pub lens: Vec<usize>,
}

impl<T> Batch<T> {
    /// Keeps only the rows `keep` accepts; returns how many were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        let before = self.items.len();
        let (items, lens) = std::mem::take(&mut self.items)
            .into_iter()
            .zip(std::mem::take(&mut self.lens))
            .filter(|(item, _)| keep(item))
            .unzip();
        (self.items, self.lens) = (items, lens);
        before - self.items.len()
    }

    pub fn padded_len(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }
    /// Rows × padded length: what the model computes.
    pub fn computed_tokens(&self) -> usize {
        self.items.len() * self.padded_len()
    }
    pub fn real_tokens(&self) -> usize {
        self.lens.iter().sum()
    }
    /// Real tokens / computed tokens.
    pub fn padding_efficiency(&self) -> f64 {
        self.real_tokens() as f64 / self.computed_tokens().max(1) as f64
    }
}

/// What one call to [`BucketBatcher::poll`] decided.
#[derive(Debug)]
pub struct Polled<T> {
    /// Requests that can no longer be served in time: answer `expired`.
    pub expired: Vec<T>,
    /// The batch to run now, if one is due.
    pub batch: Option<Batch<T>>,
    /// When to poll again if nothing arrives (a wait or a deadline ends).
    pub wake_at_ms: Option<u64>,
}

#[derive(Debug)]
pub struct BucketBatcher<T> {
    limits: BucketLimits,
    buckets: Vec<VecDeque<Held<T>>>,
    /// Measured model-call time per bucket (moving average), in ms.
    infer_ms: Vec<Option<f64>>,
    /// Rows a batch of the bucket may hold since one ran out of device
    /// memory (`cap_rows`); `max_batch_size` until then.
    row_caps: Vec<usize>,
    held: usize,
}

impl<T> BucketBatcher<T> {
    pub fn new(limits: BucketLimits) -> Self {
        let n = limits.boundaries.len();
        Self {
            buckets: (0..n).map(|_| VecDeque::new()).collect(),
            infer_ms: vec![None; n],
            row_caps: vec![limits.max_batch_size; n],
            limits,
            held: 0,
        }
    }

    pub fn limits(&self) -> &BucketLimits {
        &self.limits
    }

    pub fn len(&self) -> usize {
        self.held
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    pub fn push(&mut self, item: T, len: usize, deadline_ms: u64, now_ms: u64) {
        let bucket = self.limits.bucket_of(len);
        self.buckets[bucket].push_back(Held { item, len, arrived_ms: now_ms, deadline_ms });
        self.held += 1;
    }

    /// Keeps only the held requests `keep` accepts (work of partitions
    /// revoked since it was read goes); returns how many were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        let before = self.held;
        for queue in &mut self.buckets {
            queue.retain(|held| keep(&held.item));
        }
        self.held = self.buckets.iter().map(VecDeque::len).sum();
        before - self.held
    }

    /// Feeds back how long a batch of `bucket` took, so deadlines that
    /// cannot be met are expired before compute rather than after.
    pub fn observe_inference(&mut self, bucket: usize, elapsed_ms: f64) {
        if let Some(slot) = self.infer_ms.get_mut(bucket) {
            *slot = Some(match *slot {
                None => elapsed_ms,
                Some(avg) => 0.8 * avg + 0.2 * elapsed_ms,
            });
        }
    }

    /// Remembers that a batch of `bucket` fitted in device memory only with
    /// at most `rows` rows: later batches of the bucket hold no more. Caps
    /// only go down (at least 1: a single request always forms a batch).
    pub fn cap_rows(&mut self, bucket: usize, rows: usize) {
        if let Some(cap) = self.row_caps.get_mut(bucket) {
            *cap = (*cap).min(rows.max(1));
        }
    }

    /// The most rows a batch of `bucket` may hold now.
    pub fn row_cap(&self, bucket: usize) -> usize {
        self.row_caps.get(bucket).copied().unwrap_or(self.limits.max_batch_size)
    }

    /// The estimated model-call time of `bucket`, 0 before any measurement.
    pub fn estimated_inference_ms(&self, bucket: usize) -> u64 {
        self.infer_ms.get(bucket).copied().flatten().map_or(0, |ms| ms.ceil() as u64)
    }

    /// Expires what cannot be served in time and releases the most urgent
    /// due batch, if any.
    pub fn poll(&mut self, now_ms: u64) -> Polled<T> {
        self.poll_inner(now_ms, false)
    }

    /// Like [`poll`](Self::poll), but every non-empty bucket counts as due:
    /// for draining at shutdown, and for offline runs over a whole workload.
    pub fn flush(&mut self, now_ms: u64) -> Polled<T> {
        self.poll_inner(now_ms, true)
    }

    fn poll_inner(&mut self, now_ms: u64, force: bool) -> Polled<T> {
        let expired = self.expire(now_ms);
        let chosen = (0..self.buckets.len())
            .filter(|&b| !self.buckets[b].is_empty() && (force || self.is_due(b, now_ms)))
            .min_by_key(|&b| (self.earliest_deadline(b), b));
        let batch = chosen.map(|b| self.take_batch(b));
        let wake_at_ms = self.next_wake_ms(now_ms);
        Polled { expired, batch, wake_at_ms }
    }

    /// Removes and returns what can no longer be served in time (as
    /// [`poll`](Self::poll) does first), without releasing a batch: for
    /// answering `expired` while the engine is still busy.
    pub fn expire(&mut self, now_ms: u64) -> Vec<T> {
        let mut expired = Vec::new();
        for b in 0..self.buckets.len() {
            let needed = self.estimated_inference_ms(b);
            let queue = &mut self.buckets[b];
            if queue.iter().all(|h| h.deadline_ms > now_ms + needed) {
                continue;
            }
            let (live, dead): (VecDeque<_>, VecDeque<_>) =
                queue.drain(..).partition(|h| h.deadline_ms > now_ms + needed);
            *queue = live;
            expired.extend(dead.into_iter().map(|h| h.item));
        }
        self.held -= expired.len();
        expired
    }

    /// How many of the bucket's oldest requests the next batch takes, and
    /// whether that batch is full (a budget, not the queue, stopped it).
    fn next_batch_rows(&self, bucket: usize) -> (usize, bool) {
        let queue = &self.buckets[bucket];
        let cap = self.row_cap(bucket);
        let mut longest = 0;
        for (rows, held) in queue.iter().enumerate() {
            let padded = longest.max(held.len);
            if rows > 0 && (rows + 1 > cap || !self.limits.fits(rows + 1, padded)) {
                return (rows, true);
            }
            longest = padded;
        }
        let rows = queue.len();
        (rows, rows >= cap)
    }

    /// Whether [`poll`](Self::poll) at `now_ms` would release a batch
    /// (given nothing expires first).
    pub fn has_due_batch(&self, now_ms: u64) -> bool {
        (0..self.buckets.len()).any(|b| !self.buckets[b].is_empty() && self.is_due(b, now_ms))
    }

    fn is_due(&self, bucket: usize, now_ms: u64) -> bool {
        let waited_out =
            self.buckets[bucket].front().is_some_and(|h| h.arrived_ms + self.limits.max_wait_ms[bucket] <= now_ms);
        waited_out || self.next_batch_rows(bucket).1
    }

    fn earliest_deadline(&self, bucket: usize) -> u64 {
        self.buckets[bucket].iter().map(|h| h.deadline_ms).min().unwrap_or(u64::MAX)
    }

    fn take_batch(&mut self, bucket: usize) -> Batch<T> {
        let (rows, _) = self.next_batch_rows(bucket);
        let taken: Vec<Held<T>> = self.buckets[bucket].drain(..rows).collect();
        self.held -= taken.len();
        let lens = taken.iter().map(|h| h.len).collect();
        Batch { bucket, items: taken.into_iter().map(|h| h.item).collect(), lens }
    }

    /// When to poll again if nothing arrives: a bucket's wait ends or a held
    /// request stops being servable (`wake_at_ms` of a poll at `now_ms`).
    pub fn next_wake_ms(&self, now_ms: u64) -> Option<u64> {
        (0..self.buckets.len())
            .filter_map(|b| {
                let wait_ends = self.buckets[b].front()?.arrived_ms + self.limits.max_wait_ms[b];
                Some(wait_ends.min(self.first_infeasible_ms(b)?).max(now_ms))
            })
            .min()
    }

    /// The first moment a held request stops being servable: when
    /// [`expire`](Self::expire) next has something to return.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        (0..self.buckets.len()).filter_map(|b| self.first_infeasible_ms(b)).min()
    }

    fn first_infeasible_ms(&self, bucket: usize) -> Option<u64> {
        let needed = self.estimated_inference_ms(bucket);
        self.buckets[bucket].iter().map(|h| h.deadline_ms.saturating_sub(needed)).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn limits() -> BucketLimits {
        BucketLimits {
            boundaries: vec![16, 32, 64, 128],
            max_batch_size: 4,
            max_batch_tokens: 256,
            max_attention_cells: 128 * 128,
            max_wait_ms: vec![5, 5, 10, 20],
        }
    }

    #[test]
    fn buckets_by_length_and_pads_to_the_longest_member() {
        let mut b = BucketBatcher::new(limits());
        b.push("short", 10, 1_000, 0);
        b.push("long", 100, 1_000, 0);
        b.push("short2", 12, 1_000, 0);
        let p = b.poll(5);
        let batch = p.batch.unwrap();
        assert_eq!(batch.items, vec!["short", "short2"]);
        assert_eq!(batch.padded_len(), 12);
        assert_eq!(batch.computed_tokens(), 24);
        assert!((batch.padding_efficiency() - 22.0 / 24.0).abs() < 1e-9);
        assert_eq!(p.wake_at_ms, Some(20), "the long one waits for its own bucket's max_wait");
        assert!(b.poll(19).batch.is_none());
        assert_eq!(b.poll(20).batch.unwrap().items, vec!["long"]);
    }

    #[test]
    fn a_full_batch_leaves_without_waiting() {
        let mut b = BucketBatcher::new(limits());
        for i in 0..5 {
            b.push(i, 8, 1_000, 0);
        }
        let batch = b.poll(0).batch.unwrap();
        assert_eq!(batch.items, vec![0, 1, 2, 3]);
        assert!(b.poll(0).batch.is_none(), "one left, not full, not waited out");
    }

    #[test]
    fn the_token_and_attention_budgets_cap_rows() {
        let mut tokens = limits();
        tokens.max_attention_cells = usize::MAX;
        let mut b = BucketBatcher::new(tokens);
        for i in 0..4 {
            b.push(i, 100, 1_000, 0); // 2 × 100 = 200 tokens fit, 3 × 100 do not
        }
        assert_eq!(b.poll(0).batch.unwrap().items, vec![0, 1]);
        let mut cells = limits();
        cells.max_attention_cells = 3 * 60 * 60;
        let mut b = BucketBatcher::new(cells);
        for i in 0..4 {
            b.push(i, 60, 1_000, 0);
        }
        assert_eq!(b.poll(0).batch.unwrap().items.len(), 3);
    }

    #[test]
    fn a_single_long_request_always_fits_alone() {
        let mut l = limits();
        l.max_batch_tokens = 64;
        let mut b = BucketBatcher::new(l);
        b.push("huge", 128, 1_000, 0);
        assert_eq!(b.poll(20).batch.unwrap().items, vec!["huge"]);
    }

    #[test]
    fn the_earliest_deadline_goes_first() {
        let mut b = BucketBatcher::new(limits());
        b.push("relaxed", 10, 9_000, 0);
        b.push("urgent", 100, 500, 0);
        assert_eq!(b.poll(30).batch.unwrap().items, vec!["urgent"]);
        assert_eq!(b.poll(30).batch.unwrap().items, vec!["relaxed"]);
    }

    #[test]
    fn deadlines_that_cannot_be_met_expire_before_compute() {
        let mut b = BucketBatcher::new(limits());
        b.observe_inference(0, 40.0);
        b.push("tight", 10, 30, 0); // 0 + 40 ms of inference > 30
        b.push("fine", 10, 1_000, 0);
        let p = b.poll(0);
        assert_eq!(p.expired, vec!["tight"]);
        assert!(p.batch.is_none());
        assert_eq!(b.poll(5).batch.unwrap().items, vec!["fine"]);
    }

    #[test]
    fn expiring_alone_releases_no_batch_and_says_when_the_next_expiry_is() {
        let mut b = BucketBatcher::new(limits());
        b.observe_inference(0, 10.0);
        b.push("soon", 10, 50, 0);
        b.push("later", 10, 200, 0);
        assert!(b.has_due_batch(5), "waited out its 5 ms");
        assert!(!b.has_due_batch(4));
        // "soon" stops being servable at 50 - 10 ms of inference.
        assert_eq!(b.next_expiry_ms(), Some(40));
        assert!(b.expire(39).is_empty());
        assert_eq!(b.expire(40), vec!["soon"]);
        assert_eq!((b.len(), b.next_expiry_ms()), (1, Some(190)));
        assert_eq!(b.poll(40).batch.unwrap().items, vec!["later"]);
        assert_eq!((b.has_due_batch(40), b.next_expiry_ms(), b.next_wake_ms(40)), (false, None, None));
    }

    #[test]
    fn a_row_cap_after_out_of_memory_shrinks_later_batches_of_that_bucket_only() {
        let mut b = BucketBatcher::new(limits());
        b.cap_rows(0, 2);
        b.cap_rows(0, 3);
        assert_eq!(b.row_cap(0), 2, "caps only go down");
        b.cap_rows(1, 0);
        assert_eq!(b.row_cap(1), 1, "a single request always fits a batch");
        for i in 0..3 {
            b.push(("short", i), 10, 1_000, 0);
            b.push(("mid", i), 20, 1_000, 0);
        }
        // Two rows fill bucket 0's batch: it leaves without waiting.
        let first = b.poll(0).batch.unwrap();
        assert_eq!((first.bucket, first.items.len()), (0, 2));
        let mut sizes: Vec<(usize, usize)> = Vec::new();
        while let Some(batch) = b.flush(10).batch {
            sizes.push((batch.bucket, batch.items.len()));
        }
        assert_eq!(sizes, vec![(0, 1), (1, 1), (1, 1), (1, 1)]);
    }

    #[test]
    fn default_boundaries_are_fine_grained_and_end_at_max_seq_len() {
        let b = default_boundaries(512);
        assert_eq!(&b[..16], &(1..=16).collect::<Vec<_>>()[..]);
        assert_eq!(b.last(), Some(&512));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b.windows(2).filter(|w| w[0] >= 16).all(|w| (w[1] as f64) / (w[0] as f64) <= 1.126), "{b:?}");
        assert_eq!(default_boundaries(100).last(), Some(&100));
    }

    #[test]
    fn validation_names_the_bad_key() {
        let mut l = limits();
        l.max_batch_tokens = 64;
        assert_eq!(l.validate(128).unwrap_err().key, "batching.max_batch_tokens");
        let mut l = limits();
        l.boundaries = vec![16, 16, 128, 256];
        assert_eq!(l.validate(128).unwrap_err().key, "batching.buckets");
        assert_eq!(limits().validate(256).unwrap_err().key, "batching.buckets");
        assert!(limits().validate(128).is_ok());
    }

    /// One random event: a request arriving, or time passing with a poll.
    #[derive(Debug, Clone)]
    enum Event {
        Push { len: usize, ttl_ms: u64 },
        Advance { ms: u64 },
        Observe { bucket: usize, ms: u64 },
        Cap { bucket: usize, rows: usize },
    }

    fn events() -> impl Strategy<Value = Vec<Event>> {
        let event = prop_oneof![
            4 => (1usize..=140, 1u64..200).prop_map(|(len, ttl_ms)| Event::Push { len, ttl_ms }),
            2 => (0u64..15).prop_map(|ms| Event::Advance { ms }),
            1 => (0usize..4, 0u64..30).prop_map(|(bucket, ms)| Event::Observe { bucket, ms }),
            1 => (0usize..4, 0usize..6).prop_map(|(bucket, rows)| Event::Cap { bucket, rows }),
        ];
        proptest::collection::vec(event, 0..120)
    }

    fn arbitrary_limits() -> impl Strategy<Value = BucketLimits> {
        (1usize..8, 128usize..600, 128usize * 128..128 * 128 * 4, proptest::collection::vec(0u64..25, 4)).prop_map(
            |(max_batch_size, max_batch_tokens, max_attention_cells, max_wait_ms)| BucketLimits {
                boundaries: vec![16, 32, 64, 128],
                max_batch_size,
                max_batch_tokens,
                max_attention_cells,
                max_wait_ms,
            },
        )
    }

    /// Items are (sequence number, len, deadline).
    type Item = (usize, usize, u64);

    struct Run {
        /// Each batch with the row cap of its bucket when it left.
        batches: Vec<(u64, Batch<Item>)>,
        caps_at_batch: Vec<usize>,
        expired: Vec<(u64, Item)>,
        pushed: Vec<(u64, Item)>,
        input_stopped_ms: u64,
    }

    /// Drives a batcher through `events`, polling after each until no batch
    /// is due (as the worker does), then lets time run out with no input.
    fn drive(limits: &BucketLimits, events: &[Event]) -> (Run, BucketBatcher<Item>) {
        let mut b = BucketBatcher::new(limits.clone());
        let mut run =
            Run { batches: vec![], caps_at_batch: vec![], expired: vec![], pushed: vec![], input_stopped_ms: 0 };
        let mut now = 0u64;
        let drain = |b: &mut BucketBatcher<Item>, now: u64, run: &mut Run| loop {
            let p = b.poll(now);
            run.expired.extend(p.expired.into_iter().map(|i| (now, i)));
            match p.batch {
                Some(batch) => {
                    run.caps_at_batch.push(b.row_cap(batch.bucket));
                    run.batches.push((now, batch));
                }
                None => break p.wake_at_ms,
            }
        };
        for (seq, event) in events.iter().enumerate() {
            match *event {
                Event::Push { len, ttl_ms } => {
                    let item = (seq, len, now + ttl_ms);
                    b.push(item, len, now + ttl_ms, now);
                    run.pushed.push((now, item));
                }
                Event::Advance { ms } => now += ms,
                Event::Observe { bucket, ms } => b.observe_inference(bucket, ms as f64),
                Event::Cap { bucket, rows } => b.cap_rows(bucket, rows),
            }
            drain(&mut b, now, &mut run);
        }
        // Input stops: follow the batcher's own wake-ups.
        run.input_stopped_ms = now;
        while let Some(wake) = drain(&mut b, now, &mut run) {
            now = wake.max(now + 1);
        }
        (run, b)
    }

    proptest! {
        #[test]
        fn no_request_is_lost_or_duplicated(limits in arbitrary_limits(), events in events()) {
            let (run, b) = drive(&limits, &events);
            prop_assert!(b.is_empty());
            let mut out: Vec<usize> = run.batches.iter().flat_map(|(_, batch)| batch.items.iter().map(|i| i.0)).collect();
            out.extend(run.expired.iter().map(|(_, i)| i.0));
            out.sort_unstable();
            let mut pushed: Vec<usize> = run.pushed.iter().map(|(_, i)| i.0).collect();
            pushed.sort_unstable();
            prop_assert_eq!(out, pushed);
        }

        #[test]
        fn every_batch_is_one_bucket_within_every_limit(limits in arbitrary_limits(), events in events()) {
            let (run, _) = drive(&limits, &events);
            for ((_, batch), cap) in run.batches.iter().zip(&run.caps_at_batch) {
                prop_assert!(!batch.items.is_empty());
                prop_assert!(batch.items.len() <= *cap, "{} rows over the bucket's cap {}", batch.items.len(), cap);
                prop_assert!(batch.items.iter().all(|i| limits.bucket_of(i.1) == batch.bucket));
                prop_assert_eq!(batch.lens.clone(), batch.items.iter().map(|i| i.1).collect::<Vec<_>>());
                if batch.items.len() > 1 {
                    prop_assert!(limits.fits(batch.items.len(), batch.padded_len()), "{:?}", batch.lens);
                }
            }
        }

        #[test]
        fn order_is_fifo_within_a_bucket(limits in arbitrary_limits(), events in events()) {
            let (run, _) = drive(&limits, &events);
            let mut last_seen: BTreeMap<usize, usize> = BTreeMap::new();
            for (_, batch) in &run.batches {
                for item in &batch.items {
                    if let Some(prev) = last_seen.insert(batch.bucket, item.0) {
                        prop_assert!(prev < item.0, "bucket {} gave {} after {}", batch.bucket, item.0, prev);
                    }
                }
            }
        }

        #[test]
        fn expired_requests_never_reach_the_model(limits in arbitrary_limits(), events in events()) {
            let (run, _) = drive(&limits, &events);
            for (at, batch) in &run.batches {
                prop_assert!(batch.items.iter().all(|i| i.2 > *at), "a batch at {} holds a request past its deadline", at);
            }
            for (at, item) in &run.expired {
                prop_assert!(item.2 <= *at + 30, "{item:?} expired at {at} although 30 ms is the largest estimate");
            }
        }

        #[test]
        fn when_input_stops_everything_leaves_within_its_max_wait(limits in arbitrary_limits(), events in events()) {
            let (run, _) = drive(&limits, &events);
            let left_at: BTreeMap<usize, u64> = run
                .batches
                .iter()
                .flat_map(|(at, batch)| batch.items.iter().map(move |i| (i.0, *at)))
                .chain(run.expired.iter().map(|(at, i)| (i.0, *at)))
                .collect();
            let seen: BTreeSet<usize> = left_at.keys().copied().collect();
            prop_assert_eq!(seen.len(), run.pushed.len());
            let stopped = run.input_stopped_ms;
            for (arrived, item) in &run.pushed {
                let left = left_at[&item.0];
                // Held when input stopped: gone by the end of its bucket's wait.
                if left >= stopped {
                    let bound = stopped.max(arrived + limits.max_wait_ms[limits.bucket_of(item.1)]);
                    prop_assert!(left <= bound, "{:?} arrived {}, left {}, bound {}", item, arrived, left, bound);
                }
            }
        }
    }

    #[test]
    fn retain_drops_held_requests_and_batch_rows_with_their_lengths() {
        let mut b = BucketBatcher::new(limits());
        for (i, len) in [5usize, 20, 6, 70].into_iter().enumerate() {
            b.push(i, len, 10_000, 0);
        }
        assert_eq!(b.retain(|&i| i % 2 == 0), 2);
        assert_eq!(b.len(), 2);
        let batch = b.flush(1).batch.expect("a batch");
        assert_eq!(batch.items, vec![0, 2]);
        let mut batch = Batch { bucket: 0, items: vec![1, 2, 3], lens: vec![10, 20, 30] };
        assert_eq!(batch.retain(|&i| i != 2), 1);
        assert_eq!((batch.items, batch.lens), (vec![1, 3], vec![10, 30]));
    }
}
