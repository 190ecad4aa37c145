//! The memory budget shared by every image decode in the worker: a
//! byte-counting semaphore. A decode first reserves what its header says it
//! will allocate (`Header::decode_cost`) and waits while the budget is spent,
//! so a burst of 8K uploads queues instead of multiplying its peak memory.
//! `fleet_image_decode_bytes_in_use` shows what is reserved.

use crate::metrics::IMAGE_DECODE_BYTES_IN_USE;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Reservations are counted in KiB: the semaphore counts in u32.
const UNIT: u64 = 1024;

#[derive(Debug, Clone)]
pub struct DecodeBudget {
    permits: Arc<Semaphore>,
    total_units: u32,
}

/// A reservation; returned to the budget when dropped.
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        metrics::gauge!(IMAGE_DECODE_BYTES_IN_USE).decrement(self.bytes as f64);
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("decoding needs {needed} bytes, more than the worker's whole decode budget of {budget}")]
pub struct OverBudget {
    pub needed: u64,
    pub budget: u64,
}

impl DecodeBudget {
    pub fn new(bytes: u64) -> Self {
        let total_units = (bytes / UNIT).clamp(1, u64::from(u32::MAX >> 4)) as u32;
        metrics::gauge!(IMAGE_DECODE_BYTES_IN_USE).set(0.0);
        Self { permits: Arc::new(Semaphore::new(total_units as usize)), total_units }
    }

    pub fn total_bytes(&self) -> u64 {
        u64::from(self.total_units) * UNIT
    }

    /// Waits until `bytes` fit. A request larger than the whole budget can
    /// never fit and is refused at once instead of waiting forever.
    pub async fn reserve(&self, bytes: u64) -> Result<Reservation, OverBudget> {
        let units = bytes.div_ceil(UNIT).max(1);
        if units > u64::from(self.total_units) {
            return Err(OverBudget { needed: bytes, budget: self.total_bytes() });
        }
        let permit = self.permits.clone().acquire_many_owned(units as u32).await.expect("the budget is never closed");
        let bytes = units * UNIT;
        metrics::gauge!(IMAGE_DECODE_BYTES_IN_USE).increment(bytes as f64);
        Ok(Reservation { _permit: permit, bytes })
    }

    /// Bytes reserved right now.
    pub fn in_use(&self) -> u64 {
        (u64::from(self.total_units) - self.permits.available_permits() as u64) * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_decode_waits_for_room_and_gets_it_when_another_finishes() {
        let budget = DecodeBudget::new(10 * 1024 * 1024);
        let first = budget.reserve(6 * 1024 * 1024).await.unwrap();
        assert_eq!(budget.in_use(), 6 * 1024 * 1024);
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(6 * 1024 * 1024).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the second reservation must wait");
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap().unwrap();
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_is_refused_not_queued() {
        let budget = DecodeBudget::new(1024 * 1024);
        let refused = budget.reserve(2 * 1024 * 1024).await.map(|_| ()).unwrap_err();
        assert_eq!(refused, OverBudget { needed: 2 * 1024 * 1024, budget: 1024 * 1024 });
        assert!(budget.reserve(1024 * 1024).await.is_ok());
    }
}
