//! How many batches the batch stage has handed on that the engine has not
//! finished: what lets a bulk batch go only when nothing is ahead of it.
//!
//! Batches queue between the batch stage and the engine (one in each of two
//! channels, one held by the cache stage). A request formed into a batch
//! waits for every batch queued before it; were those bulk batches, an
//! interactive request arriving behind them would wait for three or four
//! of them instead of one. So the batch stage forms a bulk-only batch only
//! while this count is zero, or when bulk's share of the turns is owed
//! while interactive batches are due too: an interactive request then
//! waits for the bulk batch the engine is running and, at most once in
//! `1 / bulk share` batches, one more. Interactive batches are not held
//! back (they queue as before, the next forming while one computes).

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct BatchesAhead {
    count: AtomicUsize,
    drained: Notify,
}

impl BatchesAhead {
    /// A batch was handed on.
    pub fn sent(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// A batch handed on is finished (computed, or answered without compute).
    pub fn finished(&self) {
        let before = self.count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)));
        if before == Ok(1) {
            self.drained.notify_waiters();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::SeqCst) == 0
    }

    /// Returns once no batch is ahead.
    pub async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            // Registered before the check: a finish between the two still wakes it.
            notified.as_mut().enable();
            if self.is_empty() {
                return;
            }
            notified.await;
        }
    }
}

/// Calls [`BatchesAhead::finished`] when dropped: a batch the engine takes
/// is finished however its run ends.
pub struct FinishOnDrop<'a>(pub &'a BatchesAhead);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn drained_returns_once_the_last_batch_finishes() {
        let ahead = Arc::new(BatchesAhead::default());
        ahead.drained().await; // none ahead: at once
        ahead.sent();
        ahead.sent();
        let waiter = tokio::spawn({
            let ahead = ahead.clone();
            async move { ahead.drained().await }
        });
        ahead.finished();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one batch is still ahead");
        drop(FinishOnDrop(&ahead));
        waiter.await.unwrap();
        ahead.finished();
        assert!(ahead.is_empty(), "never below zero");
    }
}
