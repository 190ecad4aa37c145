//! What the source measures of its topics: the interactive backlog the
//! producers' admission predicts waits from, and the group's lag per lane
//! that the autoscaler scales on.

use super::{offset_in, Source};
use fleet_proto::clock::now_ms;
use fleet_proto::Lane;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::Offset;
use std::time::Duration;

/// What [`Source::backlog`] measured, and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogSnapshot {
    pub messages: u64,
    pub as_of_ms: u64,
}

impl Source {
    /// Interactive requests this worker still owes an answer for: for each
    /// assigned partition of the interactive lane, high watermark − read
    /// position, plus those in flight, as of when the watermarks were asked
    /// for. The bulk lane is left out: producers' admission predicts an
    /// interactive request's wait from it, and a backfill queued in the bulk
    /// lane does not stand in that request's way. Blocks on the broker (one
    /// offsets request per partition): run it off the async runtime.
    ///
    /// The order matters. Watermarks first, then the read positions and the
    /// in-flight count together: a message read while the watermark
    /// requests ran has moved from unread to in flight by then and counts
    /// once. A message sent meanwhile is not in the watermarks (nor, in
    /// sum, in the rest); producers add their sends after `as_of_ms` to the
    /// report, so they count it, where a report dated after the requests
    /// would lose it.
    pub fn backlog(&self, timeout: Duration) -> Result<BacklogSnapshot, KafkaError> {
        let as_of_ms = now_ms();
        let topic = self.topics.topic(Lane::Interactive);
        let consumer = self.consumers.of(Lane::Interactive);
        let assigned = consumer.assignment()?;
        if assigned.elements_for_topic(topic).is_empty() {
            // Nothing below asks the broker then: ask it something, so a
            // broker that is away is not reported as answering.
            consumer.fetch_metadata(Some(topic), timeout)?;
        }
        let mut high_watermarks = Vec::new();
        for element in assigned.elements_for_topic(topic) {
            let partition = element.partition();
            let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
            high_watermarks.push((partition, low, high));
        }
        let (positions, in_flight) = {
            let tracker = self.ledger.lock();
            (consumer.position()?, tracker.in_flight_of(|p| p.lane == Lane::Interactive))
        };
        // Partitions not read from yet have no position: their committed
        // offset is where reading will start.
        let committed = if positions.elements().iter().any(|e| !matches!(e.offset(), Offset::Offset(_))) {
            Some(consumer.committed_offsets(positions.clone(), timeout)?)
        } else {
            None
        };
        // A partition read past the high watermark asked for (messages sent
        // after it) counts below zero: those messages are in `in_flight`.
        let mut unread = 0i64;
        for (partition, low, high) in high_watermarks {
            let start = offset_in(&positions, topic, partition)
                .or_else(|| committed.as_ref().and_then(|c| offset_in(c, topic, partition)))
                .unwrap_or(low);
            unread += high - start;
        }
        Ok(BacklogSnapshot { messages: (unread + in_flight as i64).max(0) as u64, as_of_ms })
    }

    /// The group's lag on every partition of `lane`'s topic, not only this
    /// worker's: committed offsets are asked for by group. Blocks on the
    /// broker: run it off the async runtime.
    pub fn lag(&self, lane: Lane, timeout: Duration) -> Result<fleet_ops::lag::TopicLag, KafkaError> {
        let (consumer, topic) = (self.consumers.of(lane).as_ref(), self.topics.topic(lane));
        fleet_ops::probe::measure_lane(consumer, &self.group, topic, lane, timeout)
    }
}
