//! The source: the Kafka consumer of `infer.<model>` in group `fleet.<model>`,
//! and the offsets it may commit.
//!
//! At-least-once: librdkafka's automatic offset store is off; an offset is
//! stored (and then auto-committed within a second) only when the
//! [`CommitTracker`] says every message before it has its answer in Redis.
//! A worker killed mid-batch therefore leaves its unanswered messages to be
//! read again by whoever gets the partition next.
//!
//! Reading and the group protocol are apart. Each assigned partition's
//! messages go to a queue of its own (librdkafka's partition queues, split
//! off before the partition is assigned) read by a task of its own, so the
//! consumer's main queue carries only events: rebalances, errors, commits.
//! A task serves it all the time. So a worker that has stopped reading (at
//! its in-flight limit, or behind a stage that cannot write) still answers
//! the group at once: a new member gets its partitions within seconds, not
//! after `max.poll.interval.ms`. The per-partition readers also take turns
//! handing messages over, so a broker that answers fetches partition by
//! partition cannot make one partition's backlog go first.

use crate::commit::CommitTracker;
use crate::health::Health;
use crate::message::{Inbound, Position};
use fleet_proto::clock::now_ms;
use rdkafka::bindings as rdsys;
use rdkafka::consumer::stream_consumer::StreamPartitionQueue;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Messages copied from the partition queues and not yet taken by the
/// consumer loop: a few per partition, so a paused worker holds little
/// beyond librdkafka's own (capped) prefetch.
const HANDOVER_QUEUE: usize = 16;

/// The commit tracker, shared by the readers (track), the sink (complete)
/// and the rebalance callbacks (assign, revoke). Every change also updates
/// the queue-depth gauge and tells [`Health`] whether messages are held.
pub struct Ledger {
    tracker: Mutex<CommitTracker>,
    model: String,
    health: Arc<Health>,
}

impl Ledger {
    pub fn new(model: &str, health: Arc<Health>) -> Self {
        Self { tracker: Mutex::default(), model: model.to_owned(), health }
    }

    fn lock(&self) -> MutexGuard<'_, CommitTracker> {
        // A panic while holding this lock cannot leave the tracker
        // half-updated in a way worse than losing it: keep its state.
        self.tracker.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `change` on the tracker and publishes what it changed.
    fn change<R>(&self, change: impl FnOnce(&mut CommitTracker) -> R) -> R {
        let mut tracker = self.lock();
        let result = change(&mut tracker);
        let held = tracker.in_flight();
        metrics::gauge!(crate::metrics::QUEUE_DEPTH, "model" => self.model.clone()).set(held as f64);
        metrics::gauge!(crate::metrics::ASSIGNED_PARTITIONS, "model" => self.model.clone())
            .set(tracker.assigned() as f64);
        self.health.set_holding(held > 0, now_ms());
        result
    }

    /// Whether work read at `position` still belongs to this worker.
    pub fn is_current(&self, position: &Position) -> bool {
        self.lock().is_current(position.partition, position.generation)
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
}

/// What the rebalance callbacks tell the partition readers.
#[derive(Debug)]
enum AssignmentChange {
    Assigned { partition: i32, generation: u64 },
    Revoked { partition: i32 },
}

pub struct SourceContext {
    ledger: Arc<Ledger>,
    topic: String,
    changes: mpsc::UnboundedSender<AssignmentChange>,
}

impl ClientContext for SourceContext {}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                // librdkafka commits the stored offsets of revoked partitions
                // itself (auto-commit on revoke); what is still in flight
                // there is read again by the next owner, and work this worker
                // took from them is dropped before compute.
                let revoked: Vec<i32> = ours(partitions, &self.topic);
                self.ledger.change(|tracker| revoked.iter().for_each(|&p| tracker.revoke(p)));
                for &partition in &revoked {
                    let _ = self.changes.send(AssignmentChange::Revoked { partition });
                }
                tracing::info!(partitions = ?revoked, "partitions revoked");
            }
            Rebalance::Assign(partitions) => {
                let assigned: Vec<i32> = ours(partitions, &self.topic);
                for &partition in &assigned {
                    // Before librdkafka starts fetching it (right after this
                    // callback): its messages must never reach the main queue.
                    split_off(consumer, &self.topic, partition);
                    let generation = self.ledger.change(|tracker| tracker.assign(partition));
                    let _ = self.changes.send(AssignmentChange::Assigned { partition, generation });
                }
                tracing::info!(partitions = ?assigned, "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }
}

fn ours(partitions: &TopicPartitionList, topic: &str) -> Vec<i32> {
    partitions.elements_for_topic(topic).iter().map(|e| e.partition()).collect()
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

/// What [`Source::backlog`] measured, and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogSnapshot {
    pub messages: u64,
    pub as_of_ms: u64,
}

type FleetConsumer = StreamConsumer<SourceContext>;

pub struct Source {
    consumer: Arc<FleetConsumer>,
    group: String,
    topic: String,
    ledger: Arc<Ledger>,
    /// The main-queue server and the partition readers' keeper.
    tasks: Vec<JoinHandle<()>>,
}

/// The messages read, one at a time, already tracked as in flight.
pub struct Inbox {
    messages: mpsc::Receiver<Inbound>,
    ledger: Arc<Ledger>,
}

/// Hands finished positions to the tracker and stores what became committable.
#[derive(Clone)]
pub struct Committer {
    consumer: Arc<FleetConsumer>,
    topic: String,
    ledger: Arc<Ledger>,
}

impl Source {
    /// `base` carries brokers and pass-through properties.
    /// `prefetch_kbytes` caps librdkafka's queue of fetched messages of each
    /// assigned partition, the other half of the worker's memory bound
    /// beside the in-flight limits.
    pub fn subscribe(
        mut base: ClientConfig,
        ledger: Arc<Ledger>,
        group: &str,
        topic: &str,
        prefetch_kbytes: usize,
    ) -> Result<(Self, Inbox), KafkaError> {
        // Defaults an operator may override with --kafka-property ...
        for (key, value) in [
            ("auto.commit.interval.ms", "1000"),
            ("auto.offset.reset", "earliest"),
            // A worker that dies without leaving the group holds its
            // partitions until this passes: keep it short (librdkafka: 45 s).
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "2000"),
            ("queued.min.messages", "1000"),
            // A member joining or leaving moves only the partitions that
            // must move; the others keep being read (and their work kept)
            // through the rebalance.
            ("partition.assignment.strategy", "cooperative-sticky"),
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
        let (changes_tx, changes_rx) = mpsc::unbounded_channel();
        let context = SourceContext { ledger: ledger.clone(), topic: topic.to_owned(), changes: changes_tx };
        // ... and what at-least-once and the memory bound depend on.
        let consumer: FleetConsumer = base
            .set("group.id", group)
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("queued.max.messages.kbytes", prefetch_kbytes.to_string())
            .create_with_context(context)?;
        consumer.subscribe(&[topic])?;
        let consumer = Arc::new(consumer);
        let (messages_tx, messages_rx) = mpsc::channel(HANDOVER_QUEUE);
        let tasks = vec![
            tokio::spawn(serve_events(consumer.clone(), ledger.clone(), messages_tx.clone())),
            tokio::spawn(keep_readers(consumer.clone(), topic.to_owned(), changes_rx, messages_tx)),
        ];
        let source = Self { consumer, group: group.to_owned(), topic: topic.to_owned(), ledger: ledger.clone(), tasks };
        Ok((source, Inbox { messages: messages_rx, ledger }))
    }

    pub fn committer(&self) -> Committer {
        Committer { consumer: self.consumer.clone(), topic: self.topic.clone(), ledger: self.ledger.clone() }
    }

    /// Messages read but not yet answered.
    pub fn in_flight(&self) -> usize {
        self.ledger.held().0
    }

    /// Stops the readers and the event server (after the final commit).
    pub fn close(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
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
            let tracker = self.ledger.lock();
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

impl Drop for Source {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inbox {
    /// Messages and bytes read but not yet answered.
    pub fn held(&self) -> (usize, usize) {
        self.ledger.held()
    }

    /// The next message still owned by this worker, tracked as in flight;
    /// `None` once the source is closed. Messages of partitions revoked
    /// since they were read are dropped here: their next owner reads them.
    pub async fn recv(&mut self) -> Option<Inbound> {
        loop {
            let inbound = self.messages.recv().await?;
            let Position { partition, generation, offset } = inbound.position;
            let size = inbound.size_bytes();
            if self.ledger.change(|tracker| tracker.track(partition, generation, offset, size)) {
                return Some(inbound);
            }
            tracing::debug!(partition, offset, "read before its partition was revoked; left to its next owner");
        }
    }
}

/// Serves the consumer's main queue (rebalances, errors, commit results)
/// for as long as the worker runs, whatever the reading side is doing.
async fn serve_events(consumer: Arc<FleetConsumer>, ledger: Arc<Ledger>, stray: mpsc::Sender<Inbound>) {
    loop {
        match consumer.recv().await {
            // A partition whose queue was not split off (librdkafka assigned
            // it some other way): its messages still count, in order.
            Ok(message) => {
                let partition = message.partition();
                let generation = ledger.lock().generation(partition).unwrap_or_default();
                let inbound = Inbound::from_kafka(&message, generation);
                drop(message);
                tracing::warn!(partition, "a message arrived on the main queue; reading it there");
                let stray = stray.clone();
                tokio::spawn(async move {
                    let _ = stray.send(inbound).await;
                });
            }
            Err(e) => tracing::warn!(error = %e, "kafka consumer error"),
        }
    }
}

/// Starts a reader for each partition as it is assigned, stops it when the
/// partition is revoked.
async fn keep_readers(
    consumer: Arc<FleetConsumer>,
    topic: String,
    mut changes: mpsc::UnboundedReceiver<AssignmentChange>,
    out: mpsc::Sender<Inbound>,
) {
    let mut readers: HashMap<i32, JoinHandle<()>> = HashMap::new();
    while let Some(change) = changes.recv().await {
        match change {
            AssignmentChange::Assigned { partition, generation } => {
                if let Some(old) = readers.remove(&partition) {
                    old.abort();
                }
                match consumer.split_partition_queue(&topic, partition) {
                    Some(queue) => {
                        readers.insert(partition, tokio::spawn(read_partition(queue, generation, out.clone())));
                    }
                    None => tracing::error!(partition, "cannot open the partition's queue"),
                }
            }
            AssignmentChange::Revoked { partition } => {
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
async fn read_partition(queue: StreamPartitionQueue<SourceContext>, generation: u64, out: mpsc::Sender<Inbound>) {
    loop {
        // The borrowed message is copied and released before any await.
        let inbound = match queue.recv().await {
            Ok(message) => Inbound::from_kafka(&message, generation),
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

impl Committer {
    /// The message at `position` has its answer (or its dead letter) written.
    pub fn done(&self, position: &Position) {
        let next =
            self.ledger.change(|tracker| tracker.complete(position.partition, position.generation, position.offset));
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
