//! Reads a consumer group's offsets from the broker and publishes its lag
//! as `kafka_consumergroup_lag{consumergroup,topic,partition,lane}` and
//! `kafka_consumergroup_lag_sum{consumergroup,topic,lane}`: the names and
//! labels kafka_exporter uses, so dashboards and adapters written for it
//! work unchanged, plus `lane` (`interactive` or `bulk`). The two lanes of
//! a model are two topics, so kafka_exporter's `topic` label already tells
//! them apart; `lane` saves a query from knowing the topic naming.
//!
//! Any consumer whose `group.id` is the group works: the committed offsets
//! are asked for by group, not by membership, so a consumer that never
//! subscribes (the `fleet-lag` exporter) sees partitions nobody owns yet.
//! Everything here blocks on the broker: call it off the async runtime.

use crate::lag::{Lane, PartitionOffsets, TopicLag};
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

pub const LAG: &str = "kafka_consumergroup_lag";
pub const LAG_SUM: &str = "kafka_consumergroup_lag_sum";

/// [`measure_lane`] of the interactive lane's topic (`infer.<model>`).
pub fn measure<C, K>(consumer: &K, group: &str, topic: &str, timeout: Duration) -> Result<TopicLag, KafkaError>
where
    C: ConsumerContext + 'static,
    K: Consumer<C>,
{
    measure_lane::<C, K>(consumer, group, topic, Lane::Interactive, timeout)
}

/// Every partition of `topic`, the topic of `lane`: watermarks, and the
/// committed offset of the consumer's group. `group` names the group in the
/// result (it must be the consumer's `group.id`). A topic that does not
/// exist is an error for which [`is_unknown_topic`] holds.
pub fn measure_lane<C, K>(
    consumer: &K,
    group: &str,
    topic: &str,
    lane: Lane,
    timeout: Duration,
) -> Result<TopicLag, KafkaError>
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
    Ok(TopicLag { group: group.to_owned(), topic: topic.to_owned(), lane, partitions })
}

/// Whether a [`measure_lane`] error says that the topic does not exist (a
/// bulk topic not created yet), rather than that the broker could not be
/// asked.
pub fn is_unknown_topic(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    )
}

/// Sets the lag gauges from one measurement.
pub fn publish(lag: &TopicLag) {
    for p in &lag.partitions {
        metrics::gauge!(
            LAG,
            "consumergroup" => lag.group.clone(),
            "topic" => lag.topic.clone(),
            "partition" => p.partition.to_string(),
            "lane" => lag.lane.as_str()
        )
        .set(p.lag() as f64);
    }
    metrics::gauge!(
        LAG_SUM,
        "consumergroup" => lag.group.clone(),
        "topic" => lag.topic.clone(),
        "lane" => lag.lane.as_str()
    )
    .set(lag.total() as f64);
}

/// Sets the gauges of a topic that does not exist: nothing waits on it.
/// The sum reads 0 (so a scaler on it reads "no lag", not "no data", which
/// would stop an HPA from ever scaling down); `partitions`, those published
/// before the topic went away, read 0 too instead of their last value.
pub fn publish_absent(group: &str, topic: &str, lane: Lane, partitions: &[i32]) {
    for partition in partitions {
        metrics::gauge!(
            LAG,
            "consumergroup" => group.to_owned(),
            "topic" => topic.to_owned(),
            "partition" => partition.to_string(),
            "lane" => lane.as_str()
        )
        .set(0.0);
    }
    metrics::gauge!(
        LAG_SUM,
        "consumergroup" => group.to_owned(),
        "topic" => topic.to_owned(),
        "lane" => lane.as_str()
    )
    .set(0.0);
}

/// HELP lines for the lag gauges.
pub fn describe() {
    metrics::describe_gauge!(
        LAG,
        "Messages not yet committed by the group: high watermark - committed offset (low watermark when none)"
    );
    metrics::describe_gauge!(
        LAG_SUM,
        "kafka_consumergroup_lag summed over the topic's partitions (0 for a lane topic that does not exist)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_topic_counts_as_unknown() {
        assert!(is_unknown_topic(&KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)));
        assert!(is_unknown_topic(&KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopic)));
        assert!(!is_unknown_topic(&KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure)));
        assert!(!is_unknown_topic(&KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut)));
    }
}
