//! Batch forming: pure, no I/O, no clock (the caller passes `now_ms`).
//!
//! Requests wait until `max_batch_size` of them are held or the oldest has
//! waited `max_wait_ms`; then the oldest `max_batch_size` leave together.
//! A request whose deadline passed while it waited leaves as expired and is
//! never handed to the model.

use std::collections::VecDeque;

#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub max_batch_size: usize,
    pub max_wait_ms: u64,
}

#[derive(Debug)]
struct Held<T> {
    item: T,
    arrived_ms: u64,
    deadline_ms: u64,
}

#[derive(Debug)]
pub struct Batcher<T> {
    limits: BatchLimits,
    held: VecDeque<Held<T>>,
}

/// What a call to [`Batcher::poll`] decided.
#[derive(Debug)]
pub struct Polled<T> {
    /// Requests past their deadline: answer `expired`, do not compute.
    pub expired: Vec<T>,
    /// A batch to run now, if one is ready.
    pub batch: Option<Vec<T>>,
    /// When to poll again if nothing new arrives.
    pub wake_at_ms: Option<u64>,
}

impl<T> Batcher<T> {
    pub fn new(limits: BatchLimits) -> Self {
        Self {
            limits,
            held: VecDeque::new(),
        }
    }

    pub fn push(&mut self, item: T, deadline_ms: u64, now_ms: u64) {
        self.held.push_back(Held {
            item,
            arrived_ms: now_ms,
            deadline_ms,
        });
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Expires what is past its deadline and releases a batch when one is due.
    pub fn poll(&mut self, now_ms: u64) -> Polled<T> {
        self.poll_inner(now_ms, false)
    }

    /// Like [`poll`](Self::poll), but releases a batch even if none is due
    /// yet: for draining at shutdown.
    pub fn flush(&mut self, now_ms: u64) -> Polled<T> {
        self.poll_inner(now_ms, true)
    }

    fn poll_inner(&mut self, now_ms: u64, force: bool) -> Polled<T> {
        let (live, dead): (VecDeque<_>, VecDeque<_>) =
            self.held.drain(..).partition(|h| h.deadline_ms > now_ms);
        self.held = live;
        let expired = dead.into_iter().map(|h| h.item).collect();
        let ready = (force && !self.held.is_empty())
            || self.held.len() >= self.limits.max_batch_size
            || self
                .held
                .front()
                .is_some_and(|h| h.arrived_ms + self.limits.max_wait_ms <= now_ms);
        let batch = ready.then(|| {
            let n = self.held.len().min(self.limits.max_batch_size);
            self.held.drain(..n).map(|h| h.item).collect()
        });
        let wake_at_ms = self
            .held
            .iter()
            .map(|h| (h.arrived_ms + self.limits.max_wait_ms).min(h.deadline_ms))
            .min();
        Polled {
            expired,
            batch,
            wake_at_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batcher() -> Batcher<u32> {
        Batcher::new(BatchLimits {
            max_batch_size: 3,
            max_wait_ms: 10,
        })
    }

    #[test]
    fn a_full_batch_leaves_at_once_in_arrival_order() {
        let mut b = batcher();
        for i in 0..4 {
            b.push(i, 1_000, 100);
        }
        let p = b.poll(100);
        assert_eq!(p.batch, Some(vec![0, 1, 2]));
        assert_eq!(p.wake_at_ms, Some(110));
        assert_eq!(b.poll(105).batch, None);
        assert_eq!(b.poll(110).batch, Some(vec![3]));
        assert!(b.is_empty());
    }

    #[test]
    fn flush_releases_what_is_not_due_yet() {
        let mut b = batcher();
        b.push(1, 1_000, 100);
        assert_eq!(b.poll(101).batch, None);
        assert_eq!(b.flush(101).batch, Some(vec![1]));
        assert!(b.flush(101).batch.is_none());
    }

    #[test]
    fn expired_requests_never_reach_a_batch() {
        let mut b = batcher();
        b.push(1, 105, 100);
        b.push(2, 1_000, 100);
        assert_eq!(b.poll(100).wake_at_ms, Some(105));
        let p = b.poll(110);
        assert_eq!(p.expired, vec![1]);
        assert_eq!(p.batch, Some(vec![2]));
    }
}
