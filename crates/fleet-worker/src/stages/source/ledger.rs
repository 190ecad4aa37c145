//! The ledger of what is in flight: the commit tracker behind a lock,
//! shared by the partition readers (track), the sink (complete) and the
//! rebalance callbacks (assign, revoke), publishing what each change means.

use super::commit::CommitTracker;
use crate::core::health::Health;
use crate::core::message::{LanePartition, Position};
use crate::metrics::{ASSIGNED_PARTITIONS, QUEUE_DEPTH, REVOKED_DROPPED_TOTAL};
use fleet_proto::clock::now_ms;
use fleet_proto::Lane;
use std::sync::{Arc, Mutex, MutexGuard};

/// The commit tracker, shared by the readers (track), the sink (complete)
/// and the rebalance callbacks (assign, revoke). Every change also updates
/// the queue-depth gauge and tells [`Health`] whether messages are held.
pub struct Ledger {
    tracker: Mutex<CommitTracker<LanePartition>>,
    health: Arc<Health>,
}

impl Ledger {
    pub fn new(health: Arc<Health>) -> Self {
        Self { tracker: Mutex::default(), health }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, CommitTracker<LanePartition>> {
        // A panic while holding this lock cannot leave the tracker
        // half-updated in a way worse than losing it: keep its state.
        self.tracker.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `change` on the tracker and publishes what it changed.
    pub(super) fn change<R>(&self, change: impl FnOnce(&mut CommitTracker<LanePartition>) -> R) -> R {
        let mut tracker = self.lock();
        let result = change(&mut tracker);
        let held = tracker.in_flight();
        for lane in Lane::ALL {
            let depth = tracker.in_flight_of(|p| p.lane == lane);
            metrics::gauge!(QUEUE_DEPTH, "lane" => lane.as_str()).set(depth as f64);
            let owned = tracker.assigned_of(|p| p.lane == lane);
            metrics::gauge!(ASSIGNED_PARTITIONS, "lane" => lane.as_str()).set(owned as f64);
        }
        self.health.set_holding(held > 0, now_ms());
        result
    }

    /// Assigns `partition` as a rebalance would; its generation.
    #[cfg(test)]
    pub(crate) fn assign_for_test(&self, partition: LanePartition) -> u64 {
        self.change(|tracker| tracker.assign(partition))
    }

    /// Whether work read at `position` still belongs to this worker.
    pub fn is_current(&self, position: &Position) -> bool {
        self.lock().is_current(position.lane_partition(), position.generation)
    }

    /// Messages of `lane` read but not yet answered.
    pub fn held_in(&self, lane: Lane) -> usize {
        self.lock().in_flight_of(|p| p.lane == lane)
    }

    /// Messages and bytes read but not yet answered.
    pub fn held(&self) -> (usize, usize) {
        let tracker = self.lock();
        (tracker.in_flight(), tracker.in_flight_bytes())
    }

    /// The generation of each partition's assignment changes with every
    /// revocation: a count of them tells holders of work when to look.
    pub fn revocations(&self) -> u64 {
        self.lock().revocations()
    }

    /// Counts work dropped before compute because its partition was
    /// revoked after it was read.
    pub fn note_dropped(&self, dropped: usize) {
        if dropped > 0 {
            tracing::debug!(dropped, "dropped work of revoked partitions before compute");
            metrics::counter!(REVOKED_DROPPED_TOTAL).increment(dropped as u64);
        }
    }
}
