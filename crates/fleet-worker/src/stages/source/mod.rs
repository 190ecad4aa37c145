//! The source: the Kafka consumer of `infer.<model>` in group `fleet.<model>`,
//! and the offsets it may commit.
//!
//! At-least-once: librdkafka's automatic offset store is off; an offset is
//! stored (and then auto-committed within a second) only when the
//! [`commit::CommitTracker`] says every message before it has its answer in Redis.
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

pub mod commit;
pub mod ledger;
pub mod message;
mod readers;

pub use ledger::Ledger;
use message::{Inbound, Position};
use readers::{keep_readers, serve_events, FleetConsumer, SourceContext};

use crate::guard::lock;
use fleet_proto::clock::now_ms;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Messages copied from the partition queues and not yet taken by the
/// consumer loop: a few per partition, so a paused worker holds little
/// beyond librdkafka's own (capped) prefetch.
const HANDOVER_QUEUE: usize = 16;

/// What [`Source::backlog`] measured, and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogSnapshot {
    pub messages: u64,
    pub as_of_ms: u64,
}

pub struct Source {
    consumer: Arc<FleetConsumer>,
    group: String,
    topic: String,
    ledger: Arc<Ledger>,
    /// The main-queue server and the partition readers' keeper.
    tasks: Vec<JoinHandle<()>>,
    /// Where a replay whose seek failed must begin at the latest, by
    /// partition, with the generation of the ownership it was owed in,
    /// until a replay succeeds.
    replay_floors: Mutex<HashMap<i32, (u64, i64)>>,
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
            tokio::spawn(keep_readers(consumer.clone(), ledger.clone(), topic.to_owned(), changes_rx, messages_tx)),
        ];
        let source = Self {
            consumer,
            group: group.to_owned(),
            topic: topic.to_owned(),
            ledger: ledger.clone(),
            tasks,
            replay_floors: Mutex::default(),
        };
        Ok((source, Inbox { messages: messages_rx, ledger }))
    }

    pub fn committer(&self) -> Committer {
        Committer { consumer: self.consumer.clone(), topic: self.topic.clone(), ledger: self.ledger.clone() }
    }

    /// Messages read but not yet answered.
    pub fn in_flight(&self) -> usize {
        self.ledger.held().0
    }

    /// Leaves the consumer group (the model is broken): the partitions go
    /// to the other members, which read what this worker left unanswered.
    pub fn leave_group(&self) {
        tracing::warn!(topic = %self.topic, "leaving the consumer group");
        self.consumer.unsubscribe();
    }

    /// Joins the consumer group again (the model works again).
    pub fn rejoin_group(&self) -> Result<(), KafkaError> {
        tracing::info!(topic = %self.topic, "joining the consumer group again");
        self.consumer.subscribe(&[&self.topic])
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
        if assigned.count() == 0 {
            // Nothing below asks the broker then: ask it something, so a
            // broker that is away is not reported as answering.
            self.consumer.fetch_metadata(Some(&self.topic), timeout)?;
        }
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
        // A partition read past the high watermark asked for (messages sent
        // after it) counts below zero: those messages are in `in_flight`.
        let mut unread = 0i64;
        for (partition, low, high) in high_watermarks {
            let start = offset_in(&positions, &self.topic, partition)
                .or_else(|| committed.as_ref().and_then(|c| offset_in(c, &self.topic, partition)))
                .unwrap_or(low);
            unread += high - start;
        }
        Ok(BacklogSnapshot { messages: (unread + in_flight as i64).max(0) as u64, as_of_ms })
    }

    /// Reads again every owned partition from its first message at or after
    /// `from_ms` (Kafka's offsets-for-times), or from its oldest message in
    /// flight if that is older (held through an outage longer than the
    /// window), where that is before where reading stands: Redis lost the
    /// answers written for those messages (`status::redis_memory`). Each
    /// rewound partition begins a new generation first, so work read before
    /// is dropped and what is read after the seek is tracked afresh;
    /// answers are written with HSETNX, so one that Redis still has is not
    /// written (nor announced) twice. Returns how many messages will be read
    /// again. Blocks on the broker: run it off the async runtime.
    pub fn replay_since(&self, from_ms: i64, timeout: Duration) -> Result<u64, KafkaError> {
        let assigned = self.consumer.assignment()?;
        let mut times = TopicPartitionList::new();
        for element in assigned.elements_for_topic(&self.topic) {
            times.add_partition_offset(&self.topic, element.partition(), Offset::Offset(from_ms))?;
        }
        if times.count() == 0 {
            return Ok(0);
        }
        let found = self.consumer.offsets_for_times(times, timeout)?;
        let positions = self.consumer.position()?;
        // Partitions not read from since they were assigned: reading will
        // start at their committed offset.
        let committed = self.consumer.committed_offsets(positions.clone(), timeout)?;
        let mut replayed = 0;
        for element in found.elements_for_topic(&self.topic) {
            let partition = element.partition();
            // No offset: no message that young in the partition.
            let window_start = match element.offset() {
                Offset::Offset(offset) => Some(offset),
                _ => None,
            };
            let Some(stood_at) =
                offset_in(&positions, &self.topic, partition).or_else(|| offset_in(&committed, &self.topic, partition))
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
            tracing::warn!(partition, from, to = stood_at, "reading again what Redis lost");
            replayed += (stood_at - from) as u64;
        }
        // Every owned partition is replayed: no floor is owed any more.
        lock(&self.replay_floors).clear();
        Ok(replayed)
    }

    /// Moves a partition's stored offset, committed offset and reading back
    /// to `from`.
    fn rewind_to(&self, partition: i32, from: i64, timeout: Duration) -> Result<(), KafkaError> {
        let mut at = TopicPartitionList::new();
        at.add_partition_offset(&self.topic, partition, Offset::Offset(from))?;
        // The stored offset first: auto-commit would put the old one back.
        self.consumer.store_offsets(&at)?;
        // librdkafka commits stored offsets only forward: the replay point is
        // committed by hand, and before the seek, so a worker that dies (or
        // loses the partition) mid-replay, or whose seek fails, leaves the
        // rest of the replay to the next owner (what the rewound partition
        // reads meanwhile is refused: nothing stores a later offset).
        self.consumer.commit(&at, CommitMode::Sync)?;
        self.consumer.seek(&self.topic, partition, Offset::Offset(from), timeout)
    }

    /// The group's lag on every partition of the topic, not only this
    /// worker's: committed offsets are asked for by group. Blocks on the
    /// broker: run it off the async runtime.
    pub fn lag(&self, timeout: Duration) -> Result<fleet_ops::lag::TopicLag, KafkaError> {
        fleet_ops::probe::measure(self.consumer.as_ref(), &self.group, &self.topic, timeout)
    }
}

/// The offset `list` holds for `topic`'s `partition`, when it holds one.
fn offset_in(list: &TopicPartitionList, topic: &str, partition: i32) -> Option<i64> {
    match list.find_partition(topic, partition).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => Some(o),
        _ => None,
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
