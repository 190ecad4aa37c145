//! The source: the Kafka consumers of `infer.<model>` (the interactive lane)
//! and `infer.<model>.bulk` (the bulk lane), both members of group
//! `fleet.<model>` (one per lane: see [`readers::LaneConsumers`]), and the
//! offsets they may commit.
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
//!
//! Each lane's readers fill a small queue of their own, and the consumer
//! loop ([`Inbox::recv`]) chooses which to take from ([`lanes::LaneShare`]):
//! interactive first, bulk with what is left and its minimum share. A bulk
//! partition whose queue is full simply stops being read (librdkafka's
//! prefetch behind it stays capped), so a backfill waiting in Kafka never
//! stands between an interactive request and the worker.

pub mod commit;
pub mod lanes;
pub mod ledger;
pub mod message;
mod readers;
pub mod statistics;

use lanes::{LaneShare, LaneTopics};
pub use ledger::Ledger;
use message::{Inbound, LanePartition, Position};
use readers::{keep_readers, serve_events, FleetConsumer, LaneConsumers, LaneQueues, SourceContext};

use crate::guard::lock;
use fleet_proto::clock::now_ms;
use fleet_proto::Lane;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Messages copied from the partition queues and not yet taken by the
/// consumer loop, per lane: a few per partition, so a paused worker holds
/// little beyond librdkafka's own (capped) prefetch.
const HANDOVER_QUEUE: usize = 16;

/// Where a replay begins, by lane: Unix ms, the time of the first message
/// to read again.
pub type ReplayFrom = std::collections::BTreeMap<Lane, i64>;

/// What [`Source::backlog`] measured, and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BacklogSnapshot {
    pub messages: u64,
    pub as_of_ms: u64,
}

pub struct Source {
    consumers: LaneConsumers,
    group: String,
    topics: LaneTopics,
    ledger: Arc<Ledger>,
    /// The main-queue server and the partition readers' keeper.
    tasks: Vec<JoinHandle<()>>,
    /// Where a replay whose seek failed must begin at the latest, by
    /// partition, with the generation of the ownership it was owed in,
    /// until a replay succeeds.
    replay_floors: Mutex<HashMap<LanePartition, (u64, i64)>>,
}

/// The messages read, one at a time, already tracked as in flight, taken
/// from the two lanes as [`LaneShare`] says.
pub struct Inbox {
    interactive: mpsc::Receiver<Inbound>,
    bulk: mpsc::Receiver<Inbound>,
    /// A message taken off its lane's queue to see that the lane has work,
    /// not handed on yet.
    waiting: [Option<Inbound>; 2],
    share: LaneShare,
    ledger: Arc<Ledger>,
}

/// Hands finished positions to the tracker and stores what became committable.
#[derive(Clone)]
pub struct Committer {
    consumers: LaneConsumers,
    topics: LaneTopics,
    ledger: Arc<Ledger>,
}

impl Source {
    /// `base` carries brokers and pass-through properties.
    /// `prefetch_kbytes` caps librdkafka's queue of fetched messages of each
    /// assigned partition, the other half of the worker's memory bound
    /// beside the in-flight limits. `bulk_share`: the bulk lane's least
    /// share of the messages taken while both lanes have work.
    pub fn subscribe(
        mut base: ClientConfig,
        ledger: Arc<Ledger>,
        group: &str,
        topics: LaneTopics,
        prefetch_kbytes: usize,
        bulk_share: f64,
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
            // How long a reconnect may back off at most (librdkafka: 10 s,
            // as long as the session). After a broker restart each lane's
            // consumer must reach the coordinator again within the
            // session, or it loses its partitions and the work in flight
            // (seen in the restart-broker drill once there were two
            // consumers per worker); 1 s keeps that margin.
            ("reconnect.backoff.max.ms", "1000"),
            // librdkafka's own statistics, published as metrics
            // (statistics.rs): prefetch per partition, reply queue,
            // rebalances. 0 turns them off.
            ("statistics.interval.ms", "10000"),
        ] {
            if base.get(key).is_none() {
                base.set(key, value);
            }
        }
        let (changes_tx, changes_rx) = mpsc::unbounded_channel();
        // ... and what at-least-once and the memory bound depend on.
        base.set("group.id", group)
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("queued.max.messages.kbytes", prefetch_kbytes.to_string());
        let client_id = base.get("client.id").unwrap_or("rdkafka").to_owned();
        let member = |lane: Lane| -> Result<Arc<FleetConsumer>, KafkaError> {
            let context =
                SourceContext { lane, ledger: ledger.clone(), topics: topics.clone(), changes: changes_tx.clone() };
            let consumer: FleetConsumer =
                base.clone().set("client.id", format!("{client_id}-{lane}")).create_with_context(context)?;
            // A bulk topic that does not exist (yet) costs a warning from
            // librdkafka, not the interactive lane.
            consumer.subscribe(&[topics.topic(lane)])?;
            Ok(Arc::new(consumer))
        };
        let consumers = LaneConsumers { interactive: member(Lane::Interactive)?, bulk: member(Lane::Bulk)? };
        let (interactive_tx, interactive) = mpsc::channel(HANDOVER_QUEUE);
        let (bulk_tx, bulk) = mpsc::channel(HANDOVER_QUEUE);
        let queues = LaneQueues { interactive: interactive_tx, bulk: bulk_tx };
        let mut tasks: Vec<JoinHandle<()>> = consumers
            .each()
            .into_iter()
            .map(|(_, consumer)| {
                tokio::spawn(serve_events(consumer.clone(), ledger.clone(), topics.clone(), queues.clone()))
            })
            .collect();
        tasks.push(tokio::spawn(keep_readers(consumers.clone(), ledger.clone(), topics.clone(), changes_rx, queues)));
        let source = Self {
            consumers,
            group: group.to_owned(),
            topics,
            ledger: ledger.clone(),
            tasks,
            replay_floors: Mutex::default(),
        };
        let share = LaneShare::new(bulk_share);
        Ok((source, Inbox { interactive, bulk, waiting: [None, None], share, ledger }))
    }

    pub fn committer(&self) -> Committer {
        Committer { consumers: self.consumers.clone(), topics: self.topics.clone(), ledger: self.ledger.clone() }
    }

    /// Messages read but not yet answered.
    pub fn in_flight(&self) -> usize {
        self.ledger.held().0
    }

    /// Leaves the consumer group (the model is broken): the partitions go
    /// to the other members, which read what this worker left unanswered.
    pub fn leave_group(&self) {
        tracing::warn!(topics = ?self.topics.all(), "leaving the consumer group");
        for (_, consumer) in self.consumers.each() {
            consumer.unsubscribe();
        }
    }

    /// Joins the consumer group again (the model works again).
    pub fn rejoin_group(&self) -> Result<(), KafkaError> {
        tracing::info!(topics = ?self.topics.all(), "joining the consumer group again");
        // Both tried, whatever the first says: one lane left out would
        // stay out until the next episode.
        let joined: Vec<_> =
            self.consumers.each().map(|(lane, consumer)| consumer.subscribe(&[self.topics.topic(lane)])).into();
        joined.into_iter().collect()
    }

    /// Stops the readers and the event server (after the final commit).
    pub fn close(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }

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

    /// Reads again every owned partition of each lane of `from` from its
    /// first message at or after that lane's time (Unix ms; Kafka's
    /// offsets-for-times), or from its oldest message in
    /// flight if that is older (held through an outage longer than the
    /// window), where that is before where reading stands: Redis lost the
    /// answers written for those messages (`status::redis_memory`). Each
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

    /// The group's lag on every partition of `lane`'s topic, not only this
    /// worker's: committed offsets are asked for by group. Blocks on the
    /// broker: run it off the async runtime.
    pub fn lag(&self, lane: Lane, timeout: Duration) -> Result<fleet_ops::lag::TopicLag, KafkaError> {
        let (consumer, topic) = (self.consumers.of(lane).as_ref(), self.topics.topic(lane));
        fleet_ops::probe::measure_lane(consumer, &self.group, topic, lane, timeout)
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

    /// Messages of `lane` read but not yet answered.
    pub fn held_in(&self, lane: Lane) -> usize {
        self.ledger.held_in(lane)
    }

    /// The next message still owned by this worker, tracked as in flight;
    /// `None` once the source is closed. Messages of partitions revoked
    /// since they were read are dropped here: their next owner reads them.
    ///
    /// Interactive messages go first; bulk ones when no interactive one
    /// waits, or when bulk is owed its share; none while `bulk_allowed` is
    /// false (the bulk lane holds its most).
    pub async fn recv(&mut self, bulk_allowed: bool) -> Option<Inbound> {
        loop {
            let inbound = self.next_by_lane(bulk_allowed).await?;
            let partition = inbound.position.lane_partition();
            let Position { generation, offset, .. } = inbound.position;
            let size = inbound.size_bytes();
            let tracked = self.ledger.change(|tracker| {
                tracker.track(partition, generation, offset, size).then(|| tracker.is_replayed(partition, offset))
            });
            if let Some(replayed) = tracked {
                return Some(Inbound { replayed, ..inbound });
            }
            tracing::debug!(%partition, offset, "read before its partition was revoked; left to its next owner");
        }
    }

    /// The next message of the lane [`LaneShare`] picks among those with
    /// one waiting; waits for either when neither has. `None` once both
    /// lanes' queues are closed and empty.
    async fn next_by_lane(&mut self, bulk_allowed: bool) -> Option<Inbound> {
        let [interactive, bulk] = &mut self.waiting;
        if interactive.is_none() {
            *interactive = self.interactive.try_recv().ok();
        }
        if bulk.is_none() && bulk_allowed {
            *bulk = self.bulk.try_recv().ok();
        }
        let bulk_ready = bulk.is_some() && bulk_allowed;
        if interactive.is_none() && !bulk_ready {
            let received = tokio::select! {
                biased;
                Some(inbound) = self.interactive.recv() => inbound,
                Some(inbound) = self.bulk.recv(), if bulk_allowed => inbound,
                else => return None,
            };
            return Some(received);
        }
        match self.share.pick(interactive.is_some(), bulk_ready) {
            Some(Lane::Bulk) => bulk.take(),
            _ => interactive.take(),
        }
    }
}

impl Committer {
    /// The message at `position` has its answer (or its dead letter) written.
    pub fn done(&self, position: &Position) {
        let next = self
            .ledger
            .change(|tracker| tracker.complete(position.lane_partition(), position.generation, position.offset));
        let Some(next) = next else {
            return;
        };
        let mut tpl = TopicPartitionList::new();
        let topic = self.topics.topic(position.lane);
        if let Err(e) = tpl.add_partition_offset(topic, position.partition, Offset::Offset(next)) {
            tracing::warn!(error = %e, "building offset list");
            return;
        }
        // Fails only when the partition was revoked meanwhile: the next owner
        // re-reads from the last commit, and answers are idempotent.
        if let Err(e) = self.consumers.of(position.lane).store_offsets(&tpl) {
            tracing::debug!(error = %e, partition = %position.lane_partition(), next, "offset not stored");
        }
    }

    /// Commits stored offsets now (at shutdown, instead of the next tick).
    /// Both lanes' consumers commit, whatever the first says; the first
    /// error is returned.
    pub fn commit_now(&self) -> Result<(), KafkaError> {
        let committed =
            self.consumers.each().map(|(_, consumer)| match consumer.commit_consumer_state(CommitMode::Sync) {
                Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => Ok(()),
                other => other,
            });
        committed.into_iter().collect()
    }
}
