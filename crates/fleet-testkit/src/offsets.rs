//! What a consumer group has committed, read from the broker: how a test
//! checks that no offset moved past an unanswered request, and that every
//! partition is committed to its end once every request has ended.

use crate::Broker;
use fleet_proto::{Lane, ModelName, Namespace};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// The committed offset of each of the first `partitions` partitions of
/// `topic` in `group`, now; -1 for a partition with none.
pub fn committed_offsets(broker: &Broker, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    committed(&group_reader(broker, group), topic, partitions)
}

/// Polls until the group's committed offset of every partition of `topic`
/// equals the partition's high watermark (an empty partition has nothing
/// to commit: its "none", -1, counts as at the end, and is returned as 0);
/// returns the last (committed, high) pairs seen either way, for the
/// assertion message.
pub async fn wait_for_commits_at_end(broker: &Broker, group: &str, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
    let consumer = group_reader(broker, group);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pairs: Vec<(i64, i64)> = committed(&consumer, topic, partitions)
            .into_iter()
            .zip(0..partitions)
            .map(|(c, p)| {
                let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5)).expect("watermarks");
                (if high == 0 && c < 0 { 0 } else { c }, high)
            })
            .collect();
        if pairs.iter().all(|(c, h)| c == h) || Instant::now() > deadline {
            return pairs;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// [`wait_for_commits_at_end`] for `model`'s group and its `lane` topic
/// (default names), asserting every partition got there; the (committed,
/// high) pairs, for checks of their own.
pub async fn assert_committed_to_the_end(
    broker: &Broker,
    model: &ModelName,
    lane: Lane,
    partitions: i32,
) -> Vec<(i64, i64)> {
    let names = Namespace::default();
    let topic = names.lane_topic(model, lane);
    let offsets = wait_for_commits_at_end(broker, &names.consumer_group(model), &topic, partitions).await;
    assert!(offsets.iter().all(|(c, high)| c == high), "{topic}: committed vs high watermark: {offsets:?}");
    offsets
}

/// A consumer of `group` that only reads offsets (it never subscribes).
fn group_reader(broker: &Broker, group: &str) -> BaseConsumer {
    broker.kafka().client_config().set("group.id", group).create().expect("consumer")
}

fn committed(consumer: &BaseConsumer, topic: &str, partitions: i32) -> Vec<i64> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).expect("committed offsets");
    (0..partitions)
        .map(|p| match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => -1,
        })
        .collect()
}
