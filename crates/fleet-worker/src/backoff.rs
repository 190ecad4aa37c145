//! The sink's retry pace.

use super::failure::FailureClass;
use std::time::Duration;

/// Capped exponential backoff for retrying a write. The item is held
/// meanwhile; the bounded channels behind it stop the consumer, so nothing
/// piles up while Redis or the broker is away.
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const CAP: Duration = Duration::from_secs(5);

    pub(super) fn new() -> Self {
        Self { next: Self::FIRST }
    }

    pub(super) async fn wait(&mut self, class: FailureClass) {
        // What only an operator can fix is retried at the cap at once.
        if class == FailureClass::Fleet {
            self.next = self.next.max(Duration::from_secs(1));
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Self::CAP);
    }
}
