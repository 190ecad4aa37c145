//! Reads a consumer group's offsets from the broker and publishes its lag
//! as `kafka_consumergroup_lag{consumergroup,topic,partition}` and
//! `kafka_consumergroup_lag_sum{consumergroup,topic}`, the names kafka_exporter
//! uses, so dashboards and adapters written for it work unchanged.
//!
//! Any consumer whose `group.id` is the group works: the committed offsets
//! are asked for by group, not by membership, so a consumer that never
//! subscribes (the `fleet-lag` exporter) sees partitions nobody owns yet.
//! Everything here blocks on the broker: call it off the async runtime.

use crate::lag::{PartitionOffsets, TopicLag};
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

pub const LAG: &str = "kafka_consumergroup_lag";
pub const LAG_SUM: &str = "kafka_consumergroup_lag_sum";

/// Every partition of `topic`: watermarks, and the committed offset of the
/// consumer's group. `group` names the group in the result (it must be the
/// consumer's `group.id`).
pub fn measure<C, K>(consumer: &K, group: &str, topic: &str, timeout: Duration) -> Result<TopicLag, KafkaError>
where
    C: ConsumerContext + 'static,
    K: Consumer<C>,
{
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let Some(described) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition));
    };
    if let Some(error) = described.error() {
        return Err(KafkaError::MetadataFetch(error.into()));
    }
    let mut wanted = TopicPartitionList::new();
    for partition in described.partitions() {
        wanted.add_partition(topic, partition.id());
    }
    let committed = consumer.committed_offsets(wanted, timeout)?;
    let mut partitions = Vec::new();
    for element in committed.elements_for_topic(topic) {
        let partition = element.partition();
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
        let committed = match element.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        };
        partitions.push(PartitionOffsets { partition, low, high, committed });
    }
    partitions.sort_by_key(|p| p.partition);
    Ok(TopicLag { group: group.to_owned(), topic: topic.to_owned(), partitions })
}

/// Sets the lag gauges from one measurement.
pub fn publish(lag: &TopicLag) {
    for p in &lag.partitions {
        metrics::gauge!(
            LAG,
            "consumergroup" => lag.group.clone(),
            "topic" => lag.topic.clone(),
            "partition" => p.partition.to_string()
        )
        .set(p.lag() as f64);
    }
    metrics::gauge!(LAG_SUM, "consumergroup" => lag.group.clone(), "topic" => lag.topic.clone())
        .set(lag.total() as f64);
}

/// HELP lines for the lag gauges.
pub fn describe() {
    metrics::describe_gauge!(
        LAG,
        "Messages not yet committed by the group: high watermark - committed offset (low watermark when none)"
    );
    metrics::describe_gauge!(LAG_SUM, "kafka_consumergroup_lag summed over the topic's partitions");
}
