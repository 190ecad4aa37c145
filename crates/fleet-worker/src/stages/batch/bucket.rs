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
//!
//! Lanes: within a bucket, interactive requests stand before bulk ones (FIFO
//! within each lane), so a batch takes bulk rows only where interactive rows
//! do not fill it. Of the due buckets, those with interactive requests go
//! first, except that bulk-only ones keep their minimum share of batches
//! while both kinds are due ([`LaneShare`]).

use crate::config::batching::BucketLimits;
use crate::core::batch::Batch;
use crate::stages::source::lanes::LaneShare;
use fleet_proto::Lane;
use std::collections::VecDeque;

#[derive(Debug)]
struct Held<T> {
    item: T,
    len: usize,
    /// Rows it puts in a batch: 1, or a rerank request's pairs.
    rows: usize,
    arrived_ms: u64,
    deadline_ms: u64,
    lane: Lane,
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
    /// Which lane's due bucket goes when both have one.
    lanes: LaneShare,
    /// While set, bulk-only buckets are not due on their own (the engine
    /// has work ahead): they go only for their share of the turns while
    /// interactive batches are due, and only their deadlines wake a poll.
    bulk_held_back: bool,
    /// Whether bulk rows fill an interactive batch where interactive rows
    /// leave room (see [`with_bulk_fill`](Self::with_bulk_fill)).
    bulk_fill: bool,
    /// The share of each bucket's row and token budgets a batch uses, in
    /// percent (the engine's tuning: a smaller batch can be faster per row
    /// where its working set fits the CPU's caches).
    batch_percent: u32,
}

/// Bulk's share of batches while both lanes have one due, unless set.
pub const DEFAULT_BULK_SHARE: f64 = 0.1;

impl<T> BucketBatcher<T> {
    pub fn new(limits: BucketLimits) -> Self {
        let n = limits.boundaries.len();
        Self {
            buckets: (0..n).map(|_| VecDeque::new()).collect(),
            infer_ms: vec![None; n],
            row_caps: vec![limits.max_batch_size; n],
            limits,
            held: 0,
            lanes: LaneShare::new(DEFAULT_BULK_SHARE),
            bulk_held_back: false,
            bulk_fill: true,
            batch_percent: 100,
        }
    }

    /// Uses `percent` (1 to 100) of each bucket's row and token budgets.
    pub fn with_batch_percent(mut self, percent: u32) -> Self {
        self.set_batch_percent(percent);
        self
    }

    pub fn set_batch_percent(&mut self, percent: u32) {
        self.batch_percent = percent.clamp(1, 100);
    }

    /// Whether an interactive batch takes bulk rows where its own leave room.
    /// Free where a batch's time hardly grows with its rows (a GPU); on a
    /// CPU, whose batch time grows with every row, each filled batch delays
    /// the interactive rows in it and the ones behind it.
    pub fn with_bulk_fill(mut self, fill: bool) -> Self {
        self.bulk_fill = fill;
        self
    }

    /// Holds bulk-only batches back (`true`) or lets them go (`false`);
    /// [`flush`](Self::flush) forms them anyway.
    pub fn hold_back_bulk(&mut self, held_back: bool) {
        self.bulk_held_back = held_back;
    }

    /// Where `lane`'s requests begin in the bucket's queue (interactive
    /// ones stand first); `None` when it holds none of them.
    fn lane_start(&self, bucket: usize, lane: Lane) -> Option<usize> {
        let queue = &self.buckets[bucket];
        match lane {
            Lane::Interactive => queue.front().filter(|h| h.lane == Lane::Interactive).map(|_| 0),
            Lane::Bulk => queue.iter().position(|h| h.lane == Lane::Bulk),
        }
    }

    /// Whether a batch of `lane`'s requests of the bucket is due: full (an
    /// interactive one counting the bulk rows that fill it), or its oldest
    /// has waited the bucket's `max_wait_ms`.
    fn lane_due(&self, bucket: usize, lane: Lane, now_ms: u64) -> bool {
        let Some(from) = self.lane_start(bucket, lane) else { return false };
        let waited_out = self.buckets[bucket][from].arrived_ms + self.limits.max_wait_ms[bucket] <= now_ms;
        waited_out || self.next_batch_rows(bucket, from).1
    }

    /// The buckets with a batch of `lane` due (with any of its requests,
    /// when `force`).
    fn due_in(&self, lane: Lane, now_ms: u64, force: bool) -> Vec<usize> {
        (0..self.buckets.len())
            .filter(|&b| if force { self.lane_start(b, lane).is_some() } else { self.lane_due(b, lane, now_ms) })
            .collect()
    }

    /// Bulk-only batches get `share` of the batches while interactive ones
    /// are due too.
    pub fn with_bulk_share(mut self, share: f64) -> Self {
        self.lanes = LaneShare::new(share);
        self
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
        self.push_rows(item, len, 1, deadline_ms, now_ms);
    }

    /// Holds an item of `rows` rows of at most `len` tokens (a rerank
    /// request's pairs): it counts that many rows against the batch limits,
    /// and its rows are never split across batches.
    pub fn push_rows(&mut self, item: T, len: usize, rows: usize, deadline_ms: u64, now_ms: u64) {
        self.push_in_lane(item, len, rows, deadline_ms, now_ms, Lane::Interactive);
    }

    /// [`push_rows`](Self::push_rows) for a request of `lane`: an
    /// interactive one stands before every bulk one of its bucket.
    pub fn push_in_lane(&mut self, item: T, len: usize, rows: usize, deadline_ms: u64, now_ms: u64, lane: Lane) {
        let bucket = self.limits.bucket_of(len);
        let held = Held { item, len, rows: rows.max(1), arrived_ms: now_ms, deadline_ms, lane };
        let queue = &mut self.buckets[bucket];
        match lane {
            Lane::Bulk => queue.push_back(held),
            Lane::Interactive => {
                let first_bulk = queue.iter().position(|h| h.lane == Lane::Bulk).unwrap_or(queue.len());
                queue.insert(first_bulk, held);
            }
        }
        self.held += 1;
    }

    /// Keeps only the held requests `keep` accepts (work of partitions
    /// revoked since it was read goes); returns how many were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        self.remove_where(|item| !keep(item)).len()
    }

    /// Takes out the held requests `remove` picks (a cancelled job's).
    pub fn remove_where(&mut self, mut remove: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        for queue in &mut self.buckets {
            let (gone, kept): (VecDeque<_>, VecDeque<_>) = queue.drain(..).partition(|held| remove(&held.item));
            *queue = kept;
            removed.extend(gone.into_iter().map(|held| held.item));
        }
        self.held -= removed.len();
        removed
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

    /// The most rows a batch of `bucket` may hold now: its cap, within
    /// the share of the budgets in use (at least 1).
    pub fn row_cap(&self, bucket: usize) -> usize {
        let cap = self.row_caps.get(bucket).copied().unwrap_or(self.limits.max_batch_size);
        cap.min(self.limits.rows_at(self.batch_percent))
    }

    /// The most rows a batch of `bucket` may hold now when its rows are as
    /// long as the bucket's bound: its row cap within every budget (at
    /// least 1).
    pub fn most_rows(&self, bucket: usize) -> usize {
        let bound = self.limits.boundaries.get(bucket).copied().unwrap_or(1);
        (1..=self.row_cap(bucket))
            .rev()
            .find(|&rows| self.limits.fits(rows, bound) && self.within_token_share(rows, bound))
            .unwrap_or(1)
    }

    /// Whether `rows` rows padded to `padded_len` stay within the share of
    /// the token budget in use.
    fn within_token_share(&self, rows: usize, padded_len: usize) -> bool {
        rows * padded_len <= self.limits.tokens_at(self.batch_percent)
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
        let (interactive, bulk) =
            (self.due_in(Lane::Interactive, now_ms, force), self.due_in(Lane::Bulk, now_ms, force));
        // Held back, bulk still takes the turns its share is owed while
        // interactive work is due too: held back alone, it would starve.
        let bulk_due = !bulk.is_empty() && (force || !self.bulk_held_back || !interactive.is_empty());
        let chosen = self.lanes.pick(!interactive.is_empty(), bulk_due).and_then(|lane| {
            let due = if lane == Lane::Interactive { &interactive } else { &bulk };
            let bucket = due.iter().copied().min_by_key(|&b| (self.earliest_deadline(b, lane), b))?;
            Some((bucket, self.lane_start(bucket, lane)?))
        });
        let batch = chosen.map(|(bucket, from)| self.take_batch(bucket, from));
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

    /// How many of the bucket's oldest requests from position `from` on the
    /// next batch takes (their rows within the limits; the first always
    /// goes, alone if it must), and whether that batch is full (a budget,
    /// not the queue, stopped it).
    fn next_batch_rows(&self, bucket: usize, from: usize) -> (usize, bool) {
        let queue = &self.buckets[bucket];
        let cap = self.row_cap(bucket);
        let (mut longest, mut rows) = (0, 0);
        let first_lane = queue.get(from).map(|h| h.lane);
        for (taken, held) in queue.iter().skip(from).enumerate() {
            if !self.bulk_fill && Some(held.lane) != first_lane {
                // Not filled with the other lane's rows: the batch ends here.
                return (taken, rows >= cap);
            }
            let padded = longest.max(held.len);
            let with = rows + held.rows;
            if taken > 0 && (with > cap || !self.limits.fits(with, padded) || !self.within_token_share(with, padded)) {
                return (taken, true);
            }
            (longest, rows) = (padded, with);
        }
        (queue.len().saturating_sub(from), rows >= cap)
    }

    /// Whether [`poll`](Self::poll) at `now_ms` would release a batch
    /// (given nothing expires first).
    pub fn has_due_batch(&self, now_ms: u64) -> bool {
        let due = |lane| (0..self.buckets.len()).any(|b| self.lane_due(b, lane, now_ms));
        due(Lane::Interactive) || (!self.bulk_held_back && due(Lane::Bulk))
    }

    /// Whether any request of `lane` is held.
    pub fn holds(&self, lane: Lane) -> bool {
        (0..self.buckets.len()).any(|b| self.lane_start(b, lane).is_some())
    }

    /// The earliest deadline among the bucket's requests of `lane`.
    fn earliest_deadline(&self, bucket: usize, lane: Lane) -> u64 {
        self.buckets[bucket].iter().filter(|h| h.lane == lane).map(|h| h.deadline_ms).min().unwrap_or(u64::MAX)
    }

    fn take_batch(&mut self, bucket: usize, from: usize) -> Batch<T> {
        let (rows, _) = self.next_batch_rows(bucket, from);
        let taken: Vec<Held<T>> = self.buckets[bucket].drain(from..from + rows).collect();
        self.held -= taken.len();
        let lens = taken.iter().map(|h| h.len).collect();
        Batch { bucket, items: taken.into_iter().map(|h| h.item).collect(), lens }
    }

    /// When to poll again if nothing arrives: a bucket's wait ends or a held
    /// request stops being servable (`wake_at_ms` of a poll at `now_ms`).
    pub fn next_wake_ms(&self, now_ms: u64) -> Option<u64> {
        (0..self.buckets.len())
            .filter_map(|b| {
                let wait_ends = |lane| {
                    let from = self.lane_start(b, lane)?;
                    Some(self.buckets[b][from].arrived_ms + self.limits.max_wait_ms[b])
                };
                // Held-back bulk's wait has no say: letting it go is what
                // the engine's draining decides.
                let bulk_wait = if self.bulk_held_back { None } else { wait_ends(Lane::Bulk) };
                let waits = [wait_ends(Lane::Interactive), bulk_wait].into_iter().flatten().min().unwrap_or(u64::MAX);
                Some(waits.min(self.first_infeasible_ms(b)?).max(now_ms))
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
mod properties;
#[cfg(test)]
mod tests;
