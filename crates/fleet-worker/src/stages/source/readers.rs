//! Reading, apart from the group protocol: the rebalance callbacks split
//! each partition's queue off before librdkafka assigns it; a task per
//! assigned partition copies its messages to the consumer loop; and a task
//! serves the consumer's main queue (rebalances, errors, commit results) for
//! as long as the worker runs, whatever the reading side is doing.

use super::lanes::{LaneTopics, PerLane};
use super::ledger::Ledger;
use super::statistics::ConsumerStatistics;
use crate::core::message::{Inbound, LanePartition};
use fleet_proto::Lane;
use rdkafka::bindings as rdsys;
use rdkafka::consumer::stream_consumer::StreamPartitionQueue;
use rdkafka::consumer::{Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, TopicPartitionList};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub(super) type FleetConsumer = StreamConsumer<SourceContext>;

/// One consumer per lane, members of the same group, each subscribed to its
/// lane's topic only. One consumer of both topics would let the
/// cooperative-sticky assignor balance partitions by their total, not per
/// topic (librdkafka#4044): one member could own every interactive
/// partition and another only bulk ones. A member per lane makes the group
/// balance each lane across the workers on its own.
pub(super) type LaneConsumers = PerLane<Arc<FleetConsumer>>;

/// What the rebalance callbacks tell the partition readers.
#[derive(Debug)]
pub(super) enum AssignmentChange {
    Assigned(LanePartition),
    Revoked(LanePartition),
}

pub struct SourceContext {
    /// The lane this consumer reads (its statistics are labelled with it).
    pub(super) lane: Lane,
    pub(super) ledger: Arc<Ledger>,
    pub(super) topics: LaneTopics,
    pub(super) changes: mpsc::UnboundedSender<AssignmentChange>,
}

/// Where read messages go: one bounded queue per lane, so the consumer
/// loop can choose which lane to take from (`Inbox`).
pub(super) type LaneQueues = PerLane<mpsc::Sender<Inbound>>;

impl ClientContext for SourceContext {
    /// librdkafka's report every `statistics.interval.ms`, served from the
    /// main queue like any other event.
    fn stats(&self, statistics: Statistics) {
        ConsumerStatistics::of(&statistics, self.topics.topic(self.lane)).publish(self.lane);
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                // librdkafka commits the stored offsets of revoked partitions
                // itself (auto-commit on revoke); what is still in flight
                // there is read again by the next owner, and work this worker
                // took from them is dropped before compute.
                let revoked = ours(partitions, &self.topics);
                self.ledger.change(|tracker| revoked.iter().for_each(|&p| tracker.revoke(p)));
                for &partition in &revoked {
                    let _ = self.changes.send(AssignmentChange::Revoked(partition));
                }
                metrics::counter!(crate::metrics::PARTITIONS_REVOKED_TOTAL).increment(revoked.len() as u64);
                tracing::info!(partitions = ?revoked, "partitions revoked");
            }
            Rebalance::Assign(partitions) => {
                let assigned = ours(partitions, &self.topics);
                for &partition in &assigned {
                    // Before librdkafka starts fetching it (right after this
                    // callback): its messages must never reach the main queue.
                    split_off(consumer, self.topics.topic(partition.lane), partition.partition);
                    self.ledger.change(|tracker| tracker.assign(partition));
                    let _ = self.changes.send(AssignmentChange::Assigned(partition));
                }
                tracing::info!(partitions = ?assigned, "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}

/// The partitions of `partitions` that are this model's, with their lane.
fn ours(partitions: &TopicPartitionList, topics: &LaneTopics) -> Vec<LanePartition> {
    partitions
        .elements()
        .iter()
        .filter_map(|e| Some(LanePartition { lane: topics.lane_of(e.topic())?, partition: e.partition() }))
        .collect()
}

/// Stops forwarding `partition`'s fetched messages to the consumer's main
/// queue. librdkafka keeps a queue the application forwarded (flagged
/// `FWD_APP`) as it is when the partition is assigned, so doing this first
/// means its messages wait in their own queue for [`read_partition`].
fn split_off(consumer: &rdkafka::consumer::BaseConsumer<SourceContext>, topic: &str, partition: i32) {
    let Ok(topic) = CString::new(topic) else { return };
    // SAFETY: the client pointer is live for the callback; the queue handle
    // librdkafka returns is released right after forwarding is switched off.
    unsafe {
        let queue = rdsys::rd_kafka_queue_get_partition(consumer.client().native_ptr(), topic.as_ptr(), partition);
        if !queue.is_null() {
            rdsys::rd_kafka_queue_forward(queue, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(queue);
        }
    }
}

/// Messages of the main queue waiting for the consumer loop. Beyond this,
/// serving events waits for the loop (see [`serve_events`]).
const STRAY_QUEUE: usize = 1024;

/// Serves the consumer's main queue (rebalances, errors, commit results)
/// for as long as the worker runs, whatever the reading side is doing.
///
/// A message that arrives there (its partition's queue was not split off)
/// is handed on in order through one bounded queue to one forwarding task:
/// never a task per message, which would reorder a partition's messages
/// while the commit tracker assumes their order. While the reading side is
/// stopped, up to [`STRAY_QUEUE`] such messages wait; past that, events
/// wait too (rebalances are then served late: the bound is the price of
/// holding no unbounded memory).
pub(super) async fn serve_events(
    consumer: Arc<FleetConsumer>,
    ledger: Arc<Ledger>,
    topics: LaneTopics,
    out: LaneQueues,
) {
    let (stray, strays) = mpsc::channel(STRAY_QUEUE);
    tokio::spawn(forward_in_order(strays, out));
    loop {
        match consumer.recv().await {
            Ok(message) => {
                let partition = message.partition();
                let Some(lane) = topics.lane_of(message.topic()) else {
                    tracing::warn!(topic = message.topic(), "a message of a topic not subscribed to; ignored");
                    continue;
                };
                let generation = ledger.lock().generation(LanePartition { lane, partition }).unwrap_or_default();
                let inbound = Inbound::from_kafka(&message, lane, generation);
                drop(message);
                tracing::warn!(partition, "a message arrived on the main queue; reading it there");
                match stray.try_send(inbound) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(inbound)) => {
                        tracing::warn!(partition, "main-queue messages wait for the reading side; events wait too");
                        let _ = stray.send(inbound).await;
                    }
                    // The reading side is gone: the worker is stopping and
                    // reads nothing more (the message stays uncommitted);
                    // events are still served until the source closes.
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                }
            }
            Err(e) => tracing::warn!(error = %e, "kafka consumer error"),
        }
    }
}

/// Hands main-queue messages to the consumer loop one at a time, in the
/// order they arrived.
async fn forward_in_order(mut strays: mpsc::Receiver<Inbound>, out: LaneQueues) {
    while let Some(inbound) = strays.recv().await {
        if out.of(inbound.position.lane).send(inbound).await.is_err() {
            return;
        }
    }
}

/// Starts a reader for each partition as it is assigned, stops it when the
/// partition is revoked.
pub(super) async fn keep_readers(
    consumers: LaneConsumers,
    ledger: Arc<Ledger>,
    topics: LaneTopics,
    mut changes: mpsc::UnboundedReceiver<AssignmentChange>,
    out: LaneQueues,
) {
    let mut readers: HashMap<LanePartition, JoinHandle<()>> = HashMap::new();
    while let Some(change) = changes.recv().await {
        match change {
            AssignmentChange::Assigned(partition) => {
                if let Some(old) = readers.remove(&partition) {
                    old.abort();
                }
                let consumer = consumers.of(partition.lane);
                match consumer.split_partition_queue(topics.topic(partition.lane), partition.partition) {
                    Some(queue) => {
                        let lane_out = out.of(partition.lane).clone();
                        let reader = read_partition(queue, partition, ledger.clone(), lane_out);
                        readers.insert(partition, tokio::spawn(reader));
                    }
                    None => tracing::error!(%partition, "cannot open the partition's queue"),
                }
            }
            AssignmentChange::Revoked(partition) => {
                if let Some(reader) = readers.remove(&partition) {
                    reader.abort();
                }
            }
        }
    }
    for reader in readers.into_values() {
        reader.abort();
    }
}

/// Copies one partition's messages to the consumer loop, one at a time.
///
/// Each message is stamped with the partition's generation as the ledger
/// has it when the message is read, not as it was when the reader began: a
/// replay (`Source::replay_since`) begins a new generation and then seeks
/// back, and the messages read from then on belong to it; librdkafka drops
/// what it had fetched before the seek.
async fn read_partition(
    queue: StreamPartitionQueue<SourceContext>,
    partition: LanePartition,
    ledger: Arc<Ledger>,
    out: mpsc::Sender<Inbound>,
) {
    loop {
        // The borrowed message is copied and released before any await.
        let inbound = match queue.recv().await {
            Ok(message) => {
                // Revoked: the keeper aborts this reader; nothing more is ours.
                let Some(generation) = ledger.lock().generation(partition) else { return };
                Inbound::from_kafka(&message, partition.lane, generation)
            }
            Err(e) => {
                tracing::warn!(error = %e, "kafka receive failed");
                continue;
            }
        };
        if out.send(inbound).await.is_err() {
            return;
        }
    }
}
