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
//!
//! Beside reading: [`backlog`] measures the interactive backlog and the
//! group's lag; [`replay`] reads again what Redis lost.

mod backlog;
pub mod commit;
pub mod lanes;
pub mod ledger;
mod readers;
mod replay;
pub mod statistics;

use crate::core::message::{Inbound, LanePartition, Position};
pub use backlog::BacklogSnapshot;
use lanes::{LaneShare, LaneTopics};
pub use ledger::Ledger;
use readers::{keep_readers, serve_events, FleetConsumer, LaneConsumers, LaneQueues, SourceContext};
pub use replay::ReplayFrom;

use fleet_proto::Lane;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Messages copied from the partition queues and not yet taken by the
/// consumer loop, per lane: a few per partition, so a paused worker holds
/// little beyond librdkafka's own (capped) prefetch.
const HANDOVER_QUEUE: usize = 16;

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
            // passes instead of answering when data arrives (nisshi does;
            // docs/capacity.md has the figures). Against Apache Kafka, which
            // answers as soon as there is data, it only adds empty fetches
            // while idle (20 a second).
            ("fetch.wait.max.ms", "50"),
            // librdkafka's own statistics, published as metrics
            // (statistics.rs): prefetch per partition, reply queue,
            // rebalances. 0 turns them off.
            ("statistics.interval.ms", "10000"),
        ] {
            if base.get(key).is_none() {
                base.set(key, value);
            }
        }
        // Each lane's consumer must reach the coordinator again within the
        // session after a broker restart, or it loses its partitions.
        fleet_connect::kafka::default_reconnect_backoff(&mut base);
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
