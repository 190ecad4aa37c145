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
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::sync::{Arc, Mutex, MutexGuard};

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
}

impl ClientContext for SourceContext {}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, _: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                let mut tracker = lock(&self.tracker);
                for p in partitions.elements() {
                    tracker.forget(p.partition());
                }
                tracing::info!(partitions = partitions.count(), "partitions revoked");
            }
            Rebalance::Assign(partitions) => {
                tracing::info!(partitions = partitions.count(), "partitions assigned")
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}

pub struct Source {
    consumer: Arc<StreamConsumer<SourceContext>>,
    topic: String,
    tracker: SharedTracker,
}

/// Hands finished positions to the tracker and stores what became committable.
#[derive(Clone)]
pub struct Committer {
    consumer: Arc<StreamConsumer<SourceContext>>,
    topic: String,
    tracker: SharedTracker,
}

impl Source {
    /// `base` carries brokers and pass-through properties.
    pub fn subscribe(mut base: ClientConfig, group: &str, topic: &str) -> Result<Self, KafkaError> {
        let tracker = SharedTracker::default();
        let consumer: StreamConsumer<SourceContext> = base
            .set("group.id", group)
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create_with_context(SourceContext { tracker: tracker.clone() })?;
        consumer.subscribe(&[topic])?;
        Ok(Self { consumer: Arc::new(consumer), topic: topic.to_owned(), tracker })
    }

    /// The next message, already tracked as in flight.
    pub async fn recv(&self) -> Result<Inbound, KafkaError> {
        let message = self.consumer.recv().await?;
        let inbound = Inbound::from_kafka(&message);
        lock(&self.tracker).track(inbound.position.partition, inbound.position.offset);
        Ok(inbound)
    }

    pub fn committer(&self) -> Committer {
        Committer { consumer: self.consumer.clone(), topic: self.topic.clone(), tracker: self.tracker.clone() }
    }

    /// Messages read but not yet answered.
    pub fn in_flight(&self) -> usize {
        lock(&self.tracker).in_flight()
    }
}

impl Committer {
    /// The message at `position` has its answer (or its dead letter) written.
    pub fn done(&self, position: &Position) {
        let Some(next) = lock(&self.tracker).complete(position.partition, position.offset) else {
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
