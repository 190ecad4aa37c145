//! Reading answers off an answers topic as a test sees them: every record
//! there now, in each partition's order (a repeat after a crash included),
//! by what its key and headers say (`fleet_proto::answer_record`). Apart
//! from [`crate::redis_answers`], which reads the answers a client waits
//! for in Redis.

use crate::Broker;
use fleet_proto::answer_record::{read_meta, AnswerMeta};
use fleet_proto::RequestId;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Every answer record on `topic` now. Panics on a record that is not an
/// answer, or a topic not read to its end within a minute.
pub fn answers_on(broker: &Broker, topic: &str) -> Vec<AnswerMeta> {
    let consumer: BaseConsumer = broker.kafka().client_config().set("group.id", "answers-reader").create().unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::new();
    for partition in metadata.topics()[0].partitions().iter().map(|p| p.id()) {
        let (low, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)).unwrap();
        if high > low {
            assignment.add_partition_offset(topic, partition, Offset::Offset(low)).unwrap();
            ends.push((partition, high));
        }
    }
    let mut answers = Vec::new();
    if ends.is_empty() {
        return answers;
    }
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ends.is_empty() && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
        let message = message.unwrap();
        let pairs: Vec<(&str, Option<&[u8]>)> =
            message.headers().map(|hs| hs.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default();
        answers.push(read_meta(message.key(), pairs).expect("an answer record"));
        let (partition, next) = (message.partition(), message.offset() + 1);
        ends.retain(|&(p, high)| p != partition || next < high);
    }
    assert!(ends.is_empty(), "{topic} was not read to its end in time");
    answers
}

/// Polls until `topic` holds an answer for each of `ids`; every record on
/// it then. Panics when one is still missing after five minutes.
pub async fn wait_for_answers_on(broker: &Broker, topic: &str, ids: &[RequestId]) -> Vec<AnswerMeta> {
    let wanted: BTreeSet<&RequestId> = ids.iter().collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let answers = answers_on(broker, topic);
        let have: BTreeSet<&RequestId> = answers.iter().map(|a| &a.id).collect();
        if wanted.is_subset(&have) || Instant::now() > deadline {
            assert!(wanted.is_subset(&have), "{topic}: {} of {} answers", have.len(), wanted.len());
            return answers;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
