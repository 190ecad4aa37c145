//! The one place that decides how the fleet's topics are created, so setup,
//! tests, the demo and the chart's init job all make them the same way.

use crate::KafkaConfig;
use fleet_proto::ModelName;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::time::Duration;

/// Default partitions of `infer.<model>`: the most useful replicas of its workers.
pub const DEFAULT_PARTITIONS: i32 = 8;
/// Dead letters are kept a week: long enough for someone to look.
pub const DLQ_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

#[derive(Debug, Clone, Copy)]
pub struct TopicSettings {
    pub partitions: i32,
    pub replication: i32,
    /// Largest message value the model accepts (text or encoded image).
    pub max_value_bytes: u64,
}

impl Default for TopicSettings {
    fn default() -> Self {
        Self { partitions: DEFAULT_PARTITIONS, replication: 1, max_value_bytes: fleet_proto::limits::MAX_VALUE_BYTES }
    }
}

impl TopicSettings {
    /// `max.message.bytes` for the topic: the value limit plus headers.
    pub fn max_message_bytes(&self) -> u64 {
        self.max_value_bytes + fleet_proto::limits::HEADER_ALLOWANCE_BYTES
    }
}

/// Creates `infer.<model>` and `infer.<model>.dlq` if they do not exist yet.
/// Existing topics are left as they are (changing partitions is an operator's
/// decision: it moves keys between partitions).
pub async fn ensure_topics(kafka: &KafkaConfig, model: &ModelName, settings: TopicSettings) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = kafka.client_config().create()?;
    let max_bytes = settings.max_message_bytes().to_string();
    let retention = DLQ_RETENTION_MS.to_string();
    let (topic, dlq) = (model.topic(), model.dlq_topic());
    let topics = [
        NewTopic::new(&topic, settings.partitions, TopicReplication::Fixed(settings.replication))
            .set("max.message.bytes", &max_bytes),
        NewTopic::new(&dlq, 1, TopicReplication::Fixed(settings.replication))
            .set("max.message.bytes", &max_bytes)
            .set("retention.ms", &retention),
    ];
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for outcome in admin.create_topics(&topics, &options).await? {
        match outcome {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                tracing::error!(topic = %name, error = %code, "topic creation failed");
                return Err(KafkaError::AdminOp(code));
            }
        }
    }
    Ok(())
}
