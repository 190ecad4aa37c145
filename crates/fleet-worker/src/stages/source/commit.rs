//! The commit watermark: which offset of each partition may be committed.
//!
//! Requests finish out of order (batches regroup them by length, some are
//! answered at once), but a Kafka commit says "everything before this offset
//! is done". So a partition's commit position is its lowest offset still in
//! flight, or one past the highest seen when nothing is. Pure state machine,
//! keyed by whatever names a partition (the worker: lane and number).

use std::collections::BTreeMap;

#[derive(Debug, Default)]
struct PartitionState {
    /// Which assignment of the partition this state belongs to.
    generation: u64,
    /// Offset → message size in bytes.
    in_flight: BTreeMap<i64, usize>,
    highest_seen: Option<i64>,
    /// Last position handed out for committing.
    committed: Option<i64>,
    /// After a rewind: where reading stood. Messages at or past it were
    /// fetched before the seek back and are not tracked until the first
    /// replayed one (below it) is (see [`CommitTracker::rewind`]).
    refused_from: Option<i64>,
    /// After a rewind: messages below this offset are read again (a replay).
    replayed_below: Option<i64>,
}

impl PartitionState {
    fn position(&self) -> Option<i64> {
        self.in_flight.keys().next().copied().or_else(|| self.highest_seen.map(|h| h + 1))
    }
}

#[derive(Debug)]
pub struct CommitTracker<P = i32> {
    partitions: BTreeMap<P, PartitionState>,
    bytes: usize,
    last_generation: u64,
    revocations: u64,
}

impl<P> Default for CommitTracker<P> {
    fn default() -> Self {
        Self { partitions: BTreeMap::new(), bytes: 0, last_generation: 0, revocations: 0 }
    }
}

impl<P: Ord + Copy> CommitTracker<P> {
    /// The partition is assigned to this worker: returns the generation its
    /// messages are read under until it is revoked.
    pub fn assign(&mut self, partition: P) -> u64 {
        self.revoke(partition);
        self.last_generation += 1;
        let generation = self.last_generation;
        self.partitions.insert(partition, PartitionState { generation, ..PartitionState::default() });
        generation
    }

    /// The generation `partition` is owned under now, if it is.
    pub fn generation(&self, partition: P) -> Option<u64> {
        self.partitions.get(&partition).map(|s| s.generation)
    }

    /// Whether a message read under `generation` still belongs to this worker.
    pub fn is_current(&self, partition: P, generation: u64) -> bool {
        self.generation(partition) == Some(generation)
    }

    /// A message was read and is now in flight. False (and not tracked) when
    /// its partition was revoked since it was read.
    pub fn track(&mut self, partition: P, generation: u64, offset: i64, bytes: usize) -> bool {
        let Some(state) = self.partitions.get_mut(&partition).filter(|s| s.generation == generation) else {
            return false;
        };
        if let Some(stood_at) = state.refused_from {
            if offset >= stood_at {
                // Fetched before the seek: tracked, it would let the commit
                // jump past the replay. It is read again after the replay.
                return false;
            }
            state.refused_from = None;
        }
        // The first offset read is where the group already stands.
        state.committed.get_or_insert(offset);
        if state.in_flight.insert(offset, bytes).is_none() {
            self.bytes += bytes;
        }
        state.highest_seen = Some(state.highest_seen.map_or(offset, |h| h.max(offset)));
        true
    }

    /// The message at `offset` is answered. Returns the new commit position
    /// (next offset to consume) when it moved forward.
    pub fn complete(&mut self, partition: P, generation: u64, offset: i64) -> Option<i64> {
        let state = self.partitions.get_mut(&partition).filter(|s| s.generation == generation)?;
        let Some(bytes) = state.in_flight.remove(&offset) else {
            return None; // done twice
        };
        self.bytes -= bytes;
        let position = state.position()?;
        if state.committed.is_some_and(|c| c >= position) {
            return None;
        }
        state.committed = Some(position);
        Some(position)
    }

    /// The partition was revoked: forget it; late completions and messages
    /// read before now are ignored.
    pub fn revoke(&mut self, partition: P) {
        if let Some(state) = self.partitions.remove(&partition) {
            self.bytes -= state.in_flight.values().sum::<usize>();
            self.revocations += 1;
        }
    }

    /// Where reading of `partition` stands for committing: its lowest
    /// offset in flight, else one past the highest read (`None`: nothing
    /// read yet, or not owned).
    pub fn position(&self, partition: P) -> Option<i64> {
        self.partitions.get(&partition).and_then(PartitionState::position)
    }

    /// The partition is read again from an earlier offset (Redis lost the
    /// answers of its messages); reading stood at `stood_at`: a new
    /// generation begins, work read under the old one is dropped as a
    /// revoked partition's is, and messages at or past `stood_at` are
    /// refused until a replayed one (below it) arrives. False when the
    /// partition is not owned.
    pub fn rewind(&mut self, partition: P, stood_at: i64) -> bool {
        if !self.partitions.contains_key(&partition) {
            return false;
        }
        self.assign(partition);
        if let Some(state) = self.partitions.get_mut(&partition) {
            state.refused_from = Some(stood_at);
            state.replayed_below = Some(stood_at);
        }
        true
    }

    /// Whether the message at `offset` is read again by a rewind of this
    /// ownership of `partition` (it was read, and answered, before).
    pub fn is_replayed(&self, partition: P, offset: i64) -> bool {
        self.partitions.get(&partition).and_then(|s| s.replayed_below).is_some_and(|below| offset < below)
    }

    /// Partitions owned now.
    pub fn assigned(&self) -> usize {
        self.partitions.len()
    }

    /// Partitions owned now that `select` picks.
    pub fn assigned_of(&self, mut select: impl FnMut(&P) -> bool) -> usize {
        self.partitions.keys().filter(|p| select(p)).count()
    }

    /// How many partitions were revoked so far: holders of work read earlier
    /// check it again only when this moved.
    pub fn revocations(&self) -> u64 {
        self.revocations
    }

    /// Messages read but not answered yet, over all partitions.
    pub fn in_flight(&self) -> usize {
        self.partitions.values().map(|s| s.in_flight.len()).sum()
    }

    /// Messages read but not answered yet, of the partitions `select` picks.
    pub fn in_flight_of(&self, mut select: impl FnMut(&P) -> bool) -> usize {
        self.partitions.iter().filter(|(p, _)| select(p)).map(|(_, s)| s.in_flight.len()).sum()
    }

    /// Bytes of the messages in flight.
    pub fn in_flight_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_rewound_partition_starts_a_new_generation_and_may_store_lower_offsets() {
        let mut t = CommitTracker::default();
        let old = t.assign(0);
        for o in 100..103 {
            assert!(t.track(0, old, o, 1));
        }
        assert_eq!(t.complete(0, old, 100), Some(101));
        assert_eq!(t.position(0), Some(101));
        assert!(t.rewind(0, 103));
        assert!(!t.rewind(1, 5), "a partition not owned is not rewound");
        let new = t.generation(0).unwrap();
        assert_ne!(new, old);
        assert_eq!(t.in_flight(), 0, "the old generation's work is dropped");
        assert_eq!(t.complete(0, old, 101), None, "late completions of the old generation are ignored");
        assert!(!t.track(0, old, 103, 1), "messages read before the rewind are not tracked");
        // Fetched before the seek, read after the rewind: refused, or the
        // commit would jump past the replay.
        assert!(!t.track(0, new, 103, 1));
        assert_eq!(t.in_flight(), 0);
        // Replayed from offset 90: the commit position follows the replay
        // from there, below where it stood (the source commits the replay
        // point itself, so a worker dying mid-replay leaves the rest of it
        // to the next owner).
        for o in 90..92 {
            assert!(t.track(0, new, o, 1));
        }
        assert_eq!(t.complete(0, new, 90), Some(91));
        assert_eq!(t.complete(0, new, 91), Some(92));
    }

    #[test]
    fn what_a_rewind_reads_again_is_known_as_replayed_until_the_partition_is_assigned_again() {
        let mut t = CommitTracker::default();
        let first = t.assign(0);
        assert!(t.track(0, first, 40, 1));
        assert!(!t.is_replayed(0, 40), "read for the first time");
        assert!(t.rewind(0, 50));
        let (below, at) = (t.is_replayed(0, 49), t.is_replayed(0, 50));
        assert!(below && !at, "below where reading stood: read again; from there on: new");
        assert!(!t.is_replayed(1, 10), "a partition not owned");
        t.assign(0);
        assert!(!t.is_replayed(0, 49), "a new ownership reads the partition afresh");
    }

    #[test]
    fn waits_for_the_lowest_offset() {
        let mut t = CommitTracker::default();
        let g = t.assign(0);
        for o in 10..13 {
            assert!(t.track(0, g, o, 10));
        }
        assert_eq!(t.in_flight_bytes(), 30);
        assert_eq!(t.complete(0, g, 12), None);
        assert_eq!(t.complete(0, g, 11), None);
        assert_eq!(t.complete(0, g, 10), Some(13));
        assert_eq!((t.in_flight(), t.in_flight_bytes()), (0, 0));
    }

    #[test]
    fn partitions_are_independent_and_revocation_forgets() {
        let mut t = CommitTracker::default();
        let (g0, g1) = (t.assign(0), t.assign(1));
        t.track(0, g0, 5, 100);
        t.track(1, g1, 9, 7);
        assert_eq!(t.complete(1, g1, 9), Some(10));
        t.revoke(0);
        assert_eq!(t.in_flight_bytes(), 0);
        assert_eq!(t.complete(0, g0, 5), None);
        assert_eq!(t.complete(1, g1, 9), None, "a second completion is ignored");
    }

    #[test]
    fn work_read_before_a_revocation_is_not_ours_after_it() {
        let mut t = CommitTracker::default();
        assert!(!t.track(0, 1, 5, 10), "a partition never assigned is not tracked");
        let first = t.assign(0);
        assert!(t.track(0, first, 5, 10));
        t.revoke(0);
        assert!(!t.is_current(0, first));
        let second = t.assign(0);
        assert_ne!(first, second);
        assert!(!t.track(0, first, 6, 10), "read under the old assignment: dropped");
        assert_eq!(t.complete(0, first, 5), None, "an old completion commits nothing");
        assert!(t.track(0, second, 5, 10));
        assert_eq!((t.in_flight(), t.in_flight_bytes()), (1, 10));
        assert_eq!(t.complete(0, second, 5), Some(6));
    }

    proptest! {
        /// Whatever order messages finish in, the position handed out never
        /// passes an unfinished offset, never goes back, and ends one past
        /// the last offset.
        #[test]
        fn position_is_safe_and_reaches_the_end(
            gaps in proptest::collection::vec(1i64..3, 1..60),
            order_seed in proptest::collection::vec(any::<u32>(), 60),
        ) {
            let offsets: Vec<i64> = gaps.iter().scan(0i64, |acc, g| { *acc += g; Some(*acc) }).collect();
            let mut t = CommitTracker::default();
            let g = t.assign(3);
            for &o in &offsets { t.track(3, g, o, 1); }
            let mut finish: Vec<(u32, i64)> = offsets.iter().zip(&order_seed).map(|(&o, &k)| (k, o)).collect();
            finish.sort();
            let mut done = std::collections::BTreeSet::new();
            let mut last = i64::MIN;
            for (_, o) in finish {
                done.insert(o);
                if let Some(p) = t.complete(3, g, o) {
                    prop_assert!(p > last);
                    last = p;
                    prop_assert!(offsets.iter().filter(|&&x| x < p).all(|x| done.contains(x)));
                }
            }
            prop_assert_eq!(last, offsets.last().unwrap() + 1);
        }
    }
}
