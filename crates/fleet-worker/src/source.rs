//! The source: the Kafka consumer of `infer.<model>` in group `fleet.<model>`,
//! and the offsets it may commit.
//!
//! At-least-once: librdkafka's automatic offset store is off; an offset is
//! stored (and then auto-committed within a second) only when the
//! [`CommitTracker`] says every message before it has its answer in Redis.
//! A worker killed mid-batch therefore leaves its unanswered messages to be
//! read again by whoever gets the partition next.

use crate::commit::CommitTracker;
use crate::message::{Inbound, Position};
use fleet_proto::clock::now_ms;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Shared between the consumer loop (track) and the sink (complete): a plain
/// mutex held for microseconds, never across an await.
type SharedTracker = Arc<Mutex<CommitTracker>>;

fn lock(tracker: &SharedTracker) -> MutexGuard<'_, CommitTracker> {
    // A panic while holding this lock cannot leave the tracker half-updated
    // in a way worse than losing it, so keep going with its state.
    tracker.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct SourceContext {
    tracker: SharedTracker,
    model: String,
}

fn publish_depth(model: &str, tracker: &CommitTracker) {
    metrics::gauge!(crate::metrics::QUEUE_DEPTH, "model" => model.to_owned()).set(tracker.in_flight() as f64);
}

impl ClientContext for SourceContext {}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, _: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                // librdkafka commits the stored offsets of revoked partitions
                // itself (auto-commit on revoke); what is still in flight
                // there will be re-read by the next owner.
                let mut tracker = lock(&self.tracker);
                for p in partitions.elements() {
                    tracker.forget(p.partition());
                }
                publish_depth(&self.model, &tracker);
                tracing::info!(partitions = partitions.count(), "partitions revoked");
            }
            Rebalance::Assign(partitions) => {
                tracing::info!(partitions = partitions.count(), "partitions assigned")
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}

/// What [`Source::backlog`] measured, and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogSnapshot {
    pub messages: u64,
    pub as_of_ms: u64,
}

pub struct Source {
    consumer: Arc<StreamConsumer<SourceContext>>,
    group: String,
    topic: String,
    model: String,
    tracker: SharedTracker,
}

/// Hands finished positions to the tracker and stores what became committable.
#[derive(Clone)]
pub struct Committer {
    consumer: Arc<StreamConsumer<SourceContext>>,
    topic: String,
    model: String,
    tracker: SharedTracker,
}

impl Source {
    /// `base` carries brokers and pass-through properties.
    /// `prefetch_kbytes` caps librdkafka's own queue of fetched messages, the
    /// other half of the worker's memory bound beside the in-flight limits.
    pub fn subscribe(
        mut base: ClientConfig,
        model: &str,
        group: &str,
        topic: &str,
        prefetch_kbytes: usize,
    ) -> Result<Self, KafkaError> {
        let tracker = SharedTracker::default();
        // Defaults an operator may override with --kafka-property ...
        for (key, value) in [
            ("auto.commit.interval.ms", "1000"),
            ("auto.offset.reset", "earliest"),
            // A worker that dies without leaving the group holds its
            // partitions until this passes: keep it short (librdkafka: 45 s).
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "2000"),
            ("queued.min.messages", "1000"),
            // How long a fetch may wait for data. librdkafka's 500 ms is the
            // latency floor against a broker that holds a fetch until this
            // passes instead of answering when data arrives (nisshi does):
            // measured at 20 req/s, p50 216 -> 23 ms and p99 863 -> 41 ms
            // end to end (docs/capacity.md). Against Apache Kafka, which
            // answers as soon as there is data, it only adds empty fetches
            // while idle (20 a second).
            ("fetch.wait.max.ms", "50"),
        ] {
            if base.get(key).is_none() {
                base.set(key, value);
            }
        }
        // ... and what at-least-once and the memory bound depend on.
        let consumer: StreamConsumer<SourceContext> = base
            .set("group.id", group)
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("queued.max.messages.kbytes", prefetch_kbytes.to_string())
            .create_with_context(SourceContext { tracker: tracker.clone(), model: model.to_owned() })?;
        consumer.subscribe(&[topic])?;
        Ok(Self {
            consumer: Arc::new(consumer),
            group: group.to_owned(),
            topic: topic.to_owned(),
            model: model.to_owned(),
            tracker,
        })
    }

    /// The next message, already tracked as in flight.
    pub async fn recv(&self) -> Result<Inbound, KafkaError> {
        let message = self.consumer.recv().await?;
        let inbound = Inbound::from_kafka(&message);
        let mut tracker = lock(&self.tracker);
        tracker.track(inbound.position.partition, inbound.position.offset, inbound.size_bytes());
        publish_depth(&self.model, &tracker);
        Ok(inbound)
    }

    pub fn committer(&self) -> Committer {
        Committer {
            consumer: self.consumer.clone(),
            topic: self.topic.clone(),
            model: self.model.clone(),
            tracker: self.tracker.clone(),
        }
    }

    /// Messages read but not yet answered.
    pub fn in_flight(&self) -> usize {
        lock(&self.tracker).in_flight()
    }

    /// Messages and bytes read but not yet answered.
    pub fn held(&self) -> (usize, usize) {
        let tracker = lock(&self.tracker);
        (tracker.in_flight(), tracker.in_flight_bytes())
    }

    /// Requests this worker still owes an answer for: for each assigned
    /// partition, high watermark − read position, plus those in flight, as
    /// of when the watermarks were asked for. Blocks on the broker (one
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
        let assigned = self.consumer.assignment()?;
        let mut high_watermarks = Vec::new();
        for element in assigned.elements_for_topic(&self.topic) {
            let partition = element.partition();
            let (low, high) = self.consumer.fetch_watermarks(&self.topic, partition, timeout)?;
            high_watermarks.push((partition, low, high));
        }
        let (positions, in_flight) = {
            let tracker = lock(&self.tracker);
            (self.consumer.position()?, tracker.in_flight())
        };
        // Partitions not read from yet have no position: their committed
        // offset is where reading will start.
        let committed = if positions.elements().iter().any(|e| !matches!(e.offset(), Offset::Offset(_))) {
            Some(self.consumer.committed_offsets(positions.clone(), timeout)?)
        } else {
            None
        };
        let offset_of = |list: &TopicPartitionList, partition: i32| match list
            .find_partition(&self.topic, partition)
            .map(|e| e.offset())
        {
            Some(Offset::Offset(o)) => Some(o),
            _ => None,
        };
        // A partition read past the high watermark asked for (messages sent
        // after it) counts below zero: those messages are in `in_flight`.
        let mut unread = 0i64;
        for (partition, low, high) in high_watermarks {
            let start = offset_of(&positions, partition)
                .or_else(|| committed.as_ref().and_then(|c| offset_of(c, partition)))
                .unwrap_or(low);
            unread += high - start;
        }
        Ok(BacklogSnapshot { messages: (unread + in_flight as i64).max(0) as u64, as_of_ms })
    }

    /// The group's lag on every partition of the topic, not only this
    /// worker's: committed offsets are asked for by group. Blocks on the
    /// broker: run it off the async runtime.
    pub fn lag(&self, timeout: Duration) -> Result<fleet_ops::lag::TopicLag, KafkaError> {
        fleet_ops::probe::measure(self.consumer.as_ref(), &self.group, &self.topic, timeout)
    }
}

impl Committer {
    /// The message at `position` has its answer (or its dead letter) written.
    pub fn done(&self, position: &Position) {
        let next = {
            let mut tracker = lock(&self.tracker);
            let next = tracker.complete(position.partition, position.offset);
            publish_depth(&self.model, &tracker);
            next
        };
        let Some(next) = next else {
            return;
        };
        let mut tpl = TopicPartitionList::new();
        if let Err(e) = tpl.add_partition_offset(&self.topic, position.partition, Offset::Offset(next)) {
            tracing::warn!(error = %e, "building offset list");
            return;
        }
        // Fails only when the partition was revoked meanwhile: the next owner
        // re-reads from the last commit, and answers are idempotent.
        if let Err(e) = self.consumer.store_offsets(&tpl) {
            tracing::debug!(error = %e, partition = position.partition, next, "offset not stored");
        }
    }

    /// Commits stored offsets now (at shutdown, instead of the next tick).
    pub fn commit_now(&self) -> Result<(), KafkaError> {
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => Ok(()),
            other => other,
        }
    }
}
