//! Replay: reading again what Redis lost. When `status::lost_data` finds
//! that Redis forgot answers whose offsets are committed, the worker
//! rewinds each partition it owns to the first message a client may still
//! wait for, per lane, and reads from there again.

use super::{offset_in, Source};
use crate::core::message::LanePartition;
use crate::guard::lock;
use fleet_proto::Lane;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

/// Where a replay begins, by lane: Unix ms, the time of the first message
/// to read again.
pub type ReplayFrom = std::collections::BTreeMap<Lane, i64>;

impl Source {
    /// Reads again every owned partition of each lane of `from` from its
    /// first message at or after that lane's time (Unix ms; Kafka's
    /// offsets-for-times), or from its oldest message in
    /// flight if that is older (held through an outage longer than the
    /// window), where that is before where reading stands: Redis lost the
    /// answers written for those messages (`status::lost_data`). Each
    /// rewound partition begins a new generation first, so work read before
    /// is dropped and what is read after the seek is tracked afresh;
    /// answers are written with HSETNX, so one that Redis still has is not
    /// written (nor announced) twice. Returns how many messages will be read
    /// again. Blocks on the broker: run it off the async runtime.
    pub fn replay_since(&self, from: &ReplayFrom, timeout: Duration) -> Result<u64, KafkaError> {
        let mut replayed = 0;
        for (&lane, &from_ms) in from {
            replayed += self.replay_lane_since(lane, from_ms, timeout)?;
        }
        // Every owned partition is replayed: no floor is owed any more.
        lock(&self.replay_floors).clear();
        Ok(replayed)
    }

    /// [`replay_since`](Self::replay_since) of one lane's topic.
    fn replay_lane_since(&self, lane: Lane, from_ms: i64, timeout: Duration) -> Result<u64, KafkaError> {
        let (topic, consumer) = (self.topics.topic(lane), self.consumers.of(lane));
        let assigned = consumer.assignment()?;
        let mut times = TopicPartitionList::new();
        for element in assigned.elements_for_topic(topic) {
            times.add_partition_offset(topic, element.partition(), Offset::Offset(from_ms))?;
        }
        if times.count() == 0 {
            return Ok(0);
        }
        let found = consumer.offsets_for_times(times, timeout)?;
        let positions = consumer.position()?;
        // Partitions not read from since they were assigned: reading will
        // start at their committed offset.
        let committed = consumer.committed_offsets(positions.clone(), timeout)?;
        let mut replayed = 0;
        for element in found.elements_for_topic(topic) {
            let partition = LanePartition { lane, partition: element.partition() };
            // No offset: no message that young in the partition.
            let window_start = match element.offset() {
                Offset::Offset(offset) => Some(offset),
                _ => None,
            };
            let Some(stood_at) = offset_in(&positions, topic, partition.partition)
                .or_else(|| offset_in(&committed, topic, partition.partition))
            else {
                continue;
            };
            let (held_from, generation) = {
                let tracker = self.ledger.lock();
                (tracker.position(partition), tracker.generation(partition))
            };
            // A floor left by a failed seek of this ownership of the
            // partition (one of an earlier ownership is not this one's).
            let floor = lock(&self.replay_floors)
                .get(&partition)
                .filter(|(recorded_in, _)| Some(*recorded_in) == generation)
                .map(|&(_, from)| from);
            let Some(from) = [window_start, held_from, floor].into_iter().flatten().min() else { continue };
            // Never forward: what is not read yet is read anyway.
            if from >= stood_at || !self.ledger.change(|tracker| tracker.rewind(partition, stood_at)) {
                continue;
            }
            if let Err(e) = self.rewind_to(partition, from, timeout) {
                // The partition stays rewound: what it reads is refused (not
                // answered, not committed) until a retry's seek succeeds,
                // from no later than here (the work dropped by the rewind
                // included), while /ready says the replay is pending.
                if let Some(rewound_in) = self.ledger.lock().generation(partition) {
                    lock(&self.replay_floors).insert(partition, (rewound_in, from));
                }
                return Err(e);
            }
            tracing::warn!(%partition, from, to = stood_at, "reading again what Redis lost");
            replayed += (stood_at - from) as u64;
        }
        Ok(replayed)
    }

    /// Moves a partition's stored offset, committed offset and reading back
    /// to `from`.
    fn rewind_to(&self, partition: LanePartition, from: i64, timeout: Duration) -> Result<(), KafkaError> {
        let (topic, consumer) = (self.topics.topic(partition.lane), self.consumers.of(partition.lane));
        let mut at = TopicPartitionList::new();
        at.add_partition_offset(topic, partition.partition, Offset::Offset(from))?;
        // The stored offset first: auto-commit would put the old one back.
        consumer.store_offsets(&at)?;
        // librdkafka commits stored offsets only forward: the replay point is
        // committed by hand, and before the seek, so a worker that dies (or
        // loses the partition) mid-replay, or whose seek fails, leaves the
        // rest of the replay to the next owner (what the rewound partition
        // reads meanwhile is refused: nothing stores a later offset).
        consumer.commit(&at, CommitMode::Sync)?;
        consumer.seek(topic, partition.partition, Offset::Offset(from), timeout)
    }
}
