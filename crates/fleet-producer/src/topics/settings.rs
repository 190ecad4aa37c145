//! How a model's topics are to be made: partitions, replication, retention
//! and the largest message, from flags or the environment, and the topic
//! configs each kind of topic gets from them. Apart from the admin calls so
//! the settings are read (and tested) without a broker.

use rdkafka::admin::TopicReplication;

/// Default partitions of `infer.<model>`: the most useful replicas of its workers.
pub const DEFAULT_PARTITIONS: i32 = 8;
/// Dead letters are kept a week: long enough for someone to look.
pub const DLQ_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;
/// Answers on Kafka are kept a week: a job's owner collects them within it
/// (the bulk lane's requests wait at most a day by default).
pub const ANSWERS_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// How a model's topics are made. `None` leaves a setting to the broker's
/// default (`default.replication.factor`, `min.insync.replicas`,
/// `log.retention.*`): a managed Kafka (Confluent Cloud, MSK) sets those
/// for its durability, and a fixed 1 would be refused there or lose
/// requests with one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct TopicSettings {
    /// Partitions of infer.<model> and infer.<model>.bulk: the most workers that can share them.
    #[arg(long, env = "FLEET_TOPIC_PARTITIONS", default_value_t = DEFAULT_PARTITIONS)]
    pub partitions: i32,
    /// Replicas of each partition; default: the broker's default.replication.factor.
    #[arg(long, env = "FLEET_TOPIC_REPLICATION_FACTOR")]
    pub replication_factor: Option<i32>,
    /// min.insync.replicas of every topic of the model; default: the broker's.
    #[arg(long, env = "FLEET_TOPIC_MIN_INSYNC_REPLICAS")]
    pub min_insync_replicas: Option<u32>,
    /// retention.ms of infer.<model>; default: the broker's. Requests older
    /// than their deadline are dropped anyway; keep enough for a long outage.
    #[arg(long, env = "FLEET_TOPIC_RETENTION_MS")]
    pub retention_ms: Option<u64>,
    /// retention.ms of infer.<model>.bulk; default: the broker's. Bulk work
    /// waits behind interactive work: keep enough for the longest backfill
    /// to be read (a message deleted unread is never answered).
    #[arg(long, env = "FLEET_BULK_RETENTION_MS")]
    pub bulk_retention_ms: Option<u64>,
    /// retention.ms of infer.<model>.dlq.
    #[arg(long, env = "FLEET_DLQ_RETENTION_MS", default_value_t = DLQ_RETENTION_MS)]
    pub dlq_retention_ms: u64,
    /// retention.ms of the answers topics (infer.<model>.answers,
    /// infer.<model>.bulk.answers) and of the job records: how long a
    /// job's owner has to collect its answers.
    #[arg(long, env = "FLEET_ANSWERS_RETENTION_MS", default_value_t = ANSWERS_RETENTION_MS)]
    pub answers_retention_ms: u64,
    /// Largest message value the model accepts (text or encoded image), bytes.
    #[arg(long, env = "FLEET_MAX_VALUE_BYTES", default_value_t = fleet_proto::limits::MAX_VALUE_BYTES)]
    pub max_value_bytes: u64,
}

impl Default for TopicSettings {
    fn default() -> Self {
        Self {
            partitions: DEFAULT_PARTITIONS,
            replication_factor: None,
            min_insync_replicas: None,
            retention_ms: None,
            bulk_retention_ms: None,
            dlq_retention_ms: DLQ_RETENTION_MS,
            answers_retention_ms: ANSWERS_RETENTION_MS,
            max_value_bytes: fleet_proto::limits::MAX_VALUE_BYTES,
        }
    }
}

impl TopicSettings {
    /// `max.message.bytes` for the topic: the value limit plus headers.
    pub fn max_message_bytes(&self) -> u64 {
        self.max_value_bytes + fleet_proto::limits::HEADER_ALLOWANCE_BYTES
    }

    /// The topic configs the fleet sets on `infer.<model>`.
    pub fn request_configs(&self) -> Vec<(&'static str, String)> {
        self.lane_configs(self.retention_ms)
    }

    /// The topic configs the fleet sets on `infer.<model>.bulk`: those of the
    /// request topic (the same messages travel there), its own retention.
    pub fn bulk_configs(&self) -> Vec<(&'static str, String)> {
        self.lane_configs(self.bulk_retention_ms)
    }

    fn lane_configs(&self, retention_ms: Option<u64>) -> Vec<(&'static str, String)> {
        let mut configs = vec![("max.message.bytes", self.max_message_bytes().to_string())];
        configs.extend(self.min_insync_replicas.map(|n| ("min.insync.replicas", n.to_string())));
        configs.extend(retention_ms.map(|ms| ("retention.ms", ms.to_string())));
        configs
    }

    /// The topic configs the fleet sets on `infer.<model>.dlq`.
    pub fn dlq_configs(&self) -> Vec<(&'static str, String)> {
        let mut configs = vec![
            ("max.message.bytes", self.max_message_bytes().to_string()),
            ("retention.ms", self.dlq_retention_ms.to_string()),
        ];
        configs.extend(self.min_insync_replicas.map(|n| ("min.insync.replicas", n.to_string())));
        configs
    }

    /// The topic configs the fleet sets on each answers topic: its own
    /// retention; an answer is small (the worker's producer's default
    /// message size holds it).
    pub fn answers_configs(&self) -> Vec<(&'static str, String)> {
        let mut configs = vec![("retention.ms", self.answers_retention_ms.to_string())];
        configs.extend(self.min_insync_replicas.map(|n| ("min.insync.replicas", n.to_string())));
        configs
    }

    /// The topic configs of the job records: compacted (the latest record
    /// of each job is the one read), and deleted past the answers'
    /// retention like the answers they describe.
    pub fn jobs_configs(&self) -> Vec<(&'static str, String)> {
        let mut configs = vec![
            ("cleanup.policy", "compact,delete".to_owned()),
            ("retention.ms", self.answers_retention_ms.to_string()),
        ];
        configs.extend(self.min_insync_replicas.map(|n| ("min.insync.replicas", n.to_string())));
        configs
    }

    pub(super) fn replication(&self) -> TopicReplication<'static> {
        // -1: the broker's default.replication.factor (KIP-464, Kafka 2.4+).
        TopicReplication::Fixed(self.replication_factor.unwrap_or(-1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_decides_what_is_not_asked() {
        let settings = TopicSettings::default();
        assert_eq!(settings.replication_factor, None);
        let names: Vec<_> = settings.request_configs().into_iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["max.message.bytes"]);
        let asked = TopicSettings { min_insync_replicas: Some(2), retention_ms: Some(3_600_000), ..settings };
        assert_eq!(
            asked.request_configs(),
            [
                ("max.message.bytes", asked.max_message_bytes().to_string()),
                ("min.insync.replicas", "2".into()),
                ("retention.ms", "3600000".into())
            ]
        );
        assert!(asked.dlq_configs().contains(&("retention.ms", DLQ_RETENTION_MS.to_string())));
    }

    #[test]
    fn the_bulk_lane_has_the_request_settings_and_a_retention_of_its_own() {
        let settings =
            TopicSettings { min_insync_replicas: Some(2), retention_ms: Some(3_600_000), ..TopicSettings::default() };
        let without_retention = |configs: Vec<(&'static str, String)>| -> Vec<_> {
            configs.into_iter().filter(|(name, _)| *name != "retention.ms").collect()
        };
        // Not asked: the broker's retention, not the interactive topic's.
        assert_eq!(settings.bulk_configs(), without_retention(settings.request_configs()));
        let asked = TopicSettings { bulk_retention_ms: Some(604_800_000), ..settings };
        assert!(asked.bulk_configs().contains(&("retention.ms", "604800000".into())));
        assert!(asked.request_configs().contains(&("retention.ms", "3600000".into())));
        assert_eq!(without_retention(asked.bulk_configs()), without_retention(asked.request_configs()));
    }
}
