//! Capped exponential backoff: the one retry pace of the worker, used by
//! the sink for a write that failed and by start-up while Redis is away.
//! Whatever waits is held meanwhile; the bounded channels behind it stop
//! the consumer, so nothing piles up.

use std::time::Duration;

#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    /// Waits `first`, then twice as long each time, never more than `cap`.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self { next: first.min(cap), cap }
    }

    /// The next wait is at least `floor` (still at most the cap).
    pub fn at_least(&mut self, floor: Duration) {
        self.next = self.next.max(floor).min(self.cap);
    }

    /// The wait that comes next, without waiting.
    pub fn next_wait(&self) -> Duration {
        self.next
    }

    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[tokio::test]
    async fn doubles_up_to_the_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(6));
        let mut waits = Vec::new();
        for _ in 0..5 {
            waits.push(backoff.next_wait().as_millis());
            backoff.wait().await;
        }
        assert_eq!(waits, [1, 2, 4, 6, 6]);
    }

    #[test]
    fn a_floor_raises_the_next_wait_but_not_past_the_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        backoff.at_least(Duration::from_secs(1));
        assert_eq!(backoff.next_wait(), Duration::from_secs(1));
        backoff.at_least(Duration::from_secs(60));
        assert_eq!(backoff.next_wait(), Duration::from_secs(5));
    }
}
