//! Job records on the release's jobs topic (`Namespace::jobs_topic`): the
//! sender writes them, collectors and the job view read the latest one of a
//! job. Keyed by job id on a compacted topic, so it holds one record per
//! job however many times each was written.

use crate::KafkaConfig;
use fleet_proto::job_record::JobRecord;
use fleet_proto::{JobId, Namespace};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// How long one broker call (metadata, watermarks, a write) may take.
pub(crate) const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("the topic {0} does not exist: create the release's topics (fleet-produce topics)")]
    NoTopic(String),
    #[error("reading {topic} took longer than {timeout:?}")]
    Slow { topic: String, timeout: Duration },
}

pub struct JobRecords {
    kafka: KafkaConfig,
    topic: String,
    producer: FutureProducer,
}

impl JobRecords {
    pub fn new(kafka: &KafkaConfig, names: &Namespace) -> Result<Self, KafkaError> {
        let producer = kafka
            .client_config()
            // A record is written once every in-sync replica has it.
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "30000")
            .create()?;
        Ok(Self { kafka: kafka.clone(), topic: names.jobs_topic(), producer })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Writes `record` and waits for the broker to hold it.
    pub async fn write(&self, record: &JobRecord) -> Result<(), KafkaError> {
        let value = record.to_json();
        let message = FutureRecord::to(&self.topic).key(record.job.as_str()).payload(value.as_str());
        self.producer.send(message, BROKER_TIMEOUT).await.map(|_| ()).map_err(|(e, _)| e)
    }

    /// The latest record of `job`, reading the topic to its end; `None`
    /// when the job has none.
    pub async fn find(&self, job: &JobId) -> Result<Option<JobRecord>, JobsError> {
        let (kafka, topic, job) = (self.kafka.clone(), self.topic.clone(), job.clone());
        tokio::task::spawn_blocking(move || find_blocking(&kafka, &topic, &job))
            .await
            .map_err(|_| JobsError::Kafka(KafkaError::Canceled))?
    }
}

/// Reads every partition of `topic` from its start to the end it had when
/// asked, keeping the last readable record of `job`.
fn find_blocking(kafka: &KafkaConfig, topic: &str, job: &JobId) -> Result<Option<JobRecord>, JobsError> {
    let consumer: BaseConsumer = reader_config(kafka).create()?;
    let mut ends = Vec::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions(&consumer, topic)? {
        let (low, high) = consumer.fetch_watermarks(topic, partition, BROKER_TIMEOUT)?;
        if high > low {
            assignment.add_partition_offset(topic, partition, Offset::Offset(low))?;
            ends.push((partition, high));
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut latest = None;
    while !ends.is_empty() {
        if Instant::now() > deadline {
            return Err(JobsError::Slow { topic: topic.to_owned(), timeout: Duration::from_secs(60) });
        }
        let Some(message) = consumer.poll(Duration::from_millis(500)) else { continue };
        let message = message?;
        if message.key() == Some(job.as_str().as_bytes()) {
            if let Some(record) = message.payload().and_then(|value| JobRecord::from_json(value).ok()) {
                latest = Some(record);
            }
        }
        let (partition, next) = (message.partition(), message.offset() + 1);
        ends.retain(|&(p, high)| p != partition || next < high);
    }
    Ok(latest)
}

/// The partitions of `topic`; an error naming it when it does not exist.
pub(crate) fn partitions(consumer: &impl Consumer, topic: &str) -> Result<Vec<i32>, JobsError> {
    let metadata = consumer.fetch_metadata(Some(topic), BROKER_TIMEOUT)?;
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().iter().map(|p| p.id()).collect())
        }
        _ => Err(JobsError::NoTopic(topic.to_owned())),
    }
}

/// A reader that belongs to no group: it assigns partitions itself and
/// commits nothing (collectors and the job view leave no trace).
pub(crate) fn reader_config(kafka: &KafkaConfig) -> rdkafka::ClientConfig {
    let mut config = kafka.client_config();
    config.set("enable.auto.commit", "false").set("enable.auto.offset.store", "false");
    if config.get("group.id").is_none() {
        // librdkafka wants one for a consumer; nothing joins it (assign only).
        config.set("group.id", "fleet-job-reader");
    }
    config
}
