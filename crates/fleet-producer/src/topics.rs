//! The one place that decides how the fleet's topics are made, so setup,
//! tests, the demo and the chart's topics job make them the same way:
//! partitions, replication factor, `min.insync.replicas`, retention and the
//! largest message, from flags or the environment (the chart sets both).
//!
//! A model has five topics: `infer.<model>` (the interactive lane),
//! `infer.<model>.bulk` (the bulk lane: the same partitions and settings, so
//! any worker of the group can read both, with a retention of its own: a
//! backfill may wait there for hours behind interactive work),
//! `infer.<model>.dlq`, and each lane's answers topic
//! (`infer.<model>.answers`, `infer.<model>.bulk.answers`: answers that go
//! to Kafka, kept until their owner has collected them). The release has
//! one more, `infer.fleet.jobs`: the job records, compacted (one per job).
//!
//! Existing topics are brought up to the partition count asked for, never
//! down (Kafka cannot remove partitions; fewer asked is reported and left).
//! Other settings of an existing topic are compared and each difference is
//! reported, not changed: Kafka's AlterConfigs replaces a topic's whole
//! configuration, which would drop what an operator set by hand.

use crate::KafkaConfig;
use fleet_proto::{Lane, ModelName, Namespace};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

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

    fn replication(&self) -> TopicReplication<'static> {
        // -1: the broker's default.replication.factor (KIP-464, Kafka 2.4+).
        TopicReplication::Fixed(self.replication_factor.unwrap_or(-1))
    }
}

/// What `ensure_topics` did, or found and left, on one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicChange {
    Created {
        topic: String,
        partitions: i32,
    },
    Grown {
        topic: String,
        from: i32,
        to: i32,
    },
    /// Fewer partitions asked than the topic has: Kafka cannot remove them.
    KeptMorePartitions {
        topic: String,
        have: i32,
        asked: i32,
    },
    /// A setting differs from what was asked; not changed (see the module docs).
    ConfigDiffers {
        topic: String,
        name: String,
        have: Option<String>,
        asked: String,
    },
    Unchanged {
        topic: String,
    },
}

impl fmt::Display for TopicChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Created { topic, partitions } => write!(f, "{topic}: created ({partitions} partitions)"),
            Self::Grown { topic, from, to } => write!(f, "{topic}: partitions increased {from} -> {to}"),
            Self::KeptMorePartitions { topic, have, asked } => {
                write!(f, "{topic}: has {have} partitions, {asked} asked; left as is (partitions are never removed)")
            }
            Self::ConfigDiffers { topic, name, have, asked } => write!(
                f,
                "{topic}: {name} is {}, {asked} asked; not changed (kafka-configs --alter --add-config {name}={asked})",
                have.as_deref().unwrap_or("unset")
            ),
            Self::Unchanged { topic } => write!(f, "{topic}: as asked"),
        }
    }
}

/// What to do about an existing topic's partition count.
pub fn plan_partitions(topic: &str, have: i32, asked: i32) -> Option<TopicChange> {
    match have.cmp(&asked) {
        std::cmp::Ordering::Less => Some(TopicChange::Grown { topic: topic.to_owned(), from: have, to: asked }),
        std::cmp::Ordering::Greater => Some(TopicChange::KeptMorePartitions { topic: topic.to_owned(), have, asked }),
        std::cmp::Ordering::Equal => None,
    }
}

/// The asked settings an existing topic does not have.
pub fn config_differences(
    topic: &str,
    asked: &[(&'static str, String)],
    have: &HashMap<String, Option<String>>,
) -> Vec<TopicChange> {
    asked
        .iter()
        .filter(|(name, value)| have.get(*name).and_then(Option::as_deref) != Some(value.as_str()))
        .map(|(name, value)| TopicChange::ConfigDiffers {
            topic: topic.to_owned(),
            name: (*name).to_owned(),
            have: have.get(*name).cloned().flatten(),
            asked: value.clone(),
        })
        .collect()
}

const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(
        "{topic}: adding partitions ({from} -> {to}) failed: {error}; the broker may not support \
         CreatePartitions: add them with its own tooling, or ask for {from}"
    )]
    CannotGrow { topic: String, from: i32, to: i32, error: KafkaError },
}

/// One topic of a model as `ensure_topics` makes and keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlannedTopic {
    name: String,
    partitions: i32,
    /// The lanes' topics follow `--partitions` (each partition is a worker's
    /// share of both lanes); the DLQ keeps the one partition it was made with.
    grows: bool,
    configs: Vec<(&'static str, String)>,
}

/// The topics of `model`, in the order they are created and reported: the
/// interactive lane, the bulk lane, the DLQ, each lane's answers; then the
/// release's job records.
fn planned_topics(names: &Namespace, model: &ModelName, settings: &TopicSettings) -> Vec<PlannedTopic> {
    let lane_topic = |lane: Lane, configs| PlannedTopic {
        name: names.lane_topic(model, lane),
        partitions: settings.partitions,
        grows: true,
        configs,
    };
    // Readers of answers assign every partition themselves: the count only
    // spreads the writes, and is left as made.
    let answers_topic = |lane: Lane| PlannedTopic {
        name: names.answers_topic(model, lane),
        partitions: settings.partitions,
        grows: false,
        configs: settings.answers_configs(),
    };
    vec![
        lane_topic(Lane::Interactive, settings.request_configs()),
        lane_topic(Lane::Bulk, settings.bulk_configs()),
        PlannedTopic { name: names.dlq_topic(model), partitions: 1, grows: false, configs: settings.dlq_configs() },
        answers_topic(Lane::Interactive),
        answers_topic(Lane::Bulk),
        PlannedTopic { name: names.jobs_topic(), partitions: 1, grows: false, configs: settings.jobs_configs() },
    ]
}

/// Creates `infer.<model>`, `infer.<model>.bulk` and `infer.<model>.dlq` if
/// they do not exist, grows both lanes' topics to `settings.partitions`, and
/// reports what it did and what differs (one line each, in order).
pub async fn ensure_topics(
    kafka: &KafkaConfig,
    names: &Namespace,
    model: &ModelName,
    settings: TopicSettings,
) -> Result<Vec<TopicChange>, TopicError> {
    let admin: AdminClient<DefaultClientContext> = kafka.client_config().create()?;
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let planned = planned_topics(names, model, &settings);
    let plan_of = |name: &str| planned.iter().find(|t| t.name == name);
    let wanted: Vec<NewTopic<'_>> =
        planned.iter().map(|t| new_topic(&t.name, t.partitions, &settings, &t.configs)).collect();
    let mut changes = Vec::new();
    let mut existing = Vec::new();
    for outcome in admin.create_topics(&wanted, &options).await? {
        match outcome {
            Ok(name) => {
                let partitions = plan_of(name.as_str()).map_or(settings.partitions, |t| t.partitions);
                changes.push(TopicChange::Created { topic: name, partitions });
            }
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => existing.push(name),
            Err((name, code)) => {
                tracing::error!(topic = %name, error = %code, "topic creation failed");
                return Err(KafkaError::AdminOp(code).into());
            }
        }
    }
    for name in existing {
        // The broker answers for the topics asked, and only for those.
        let Some(plan) = plan_of(name.as_str()) else { continue };
        let before = changes.len();
        if plan.grows {
            let have = partition_count(kafka, &name).await?;
            if let Some(change) = plan_partitions(&name, have, plan.partitions) {
                if let TopicChange::Grown { from, to, .. } = change {
                    grow(&admin, &name, to as usize, &options).await.map_err(|error| TopicError::CannotGrow {
                        topic: name.clone(),
                        from,
                        to,
                        error,
                    })?;
                }
                changes.push(change);
            }
        }
        match topic_configs(&admin, &name, &options).await {
            Ok(have) => changes.extend(config_differences(&name, &plan.configs, &have)),
            // Reading configs needs DescribeConfigs rights a producer's
            // credentials may lack: say so, do not fail the job.
            Err(e) => tracing::warn!(topic = %name, error = %e, "could not read the topic's settings to compare"),
        }
        if changes.len() == before {
            changes.push(TopicChange::Unchanged { topic: name });
        }
    }
    Ok(changes)
}

fn new_topic<'a>(
    name: &'a str,
    partitions: i32,
    settings: &TopicSettings,
    configs: &'a [(&'static str, String)],
) -> NewTopic<'a> {
    configs.iter().fold(NewTopic::new(name, partitions, settings.replication()), |t, (k, v)| t.set(k, v))
}

async fn partition_count(kafka: &KafkaConfig, topic: &str) -> Result<i32, KafkaError> {
    let (config, topic) = (kafka.client_config(), topic.to_owned());
    // A metadata request blocks in librdkafka: off the async threads.
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = config.create()?;
        let metadata = client.fetch_metadata(Some(&topic), ADMIN_TIMEOUT)?;
        match metadata.topics().iter().find(|t| t.name() == topic) {
            Some(t) if t.error().is_none() => Ok(t.partitions().len() as i32),
            _ => Err(KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopicOrPartition)),
        }
    })
    .await
    .map_err(|_| KafkaError::Canceled)?
}

async fn grow(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    to: usize,
    options: &AdminOptions,
) -> Result<(), KafkaError> {
    for outcome in admin.create_partitions(&[NewPartitions::new(topic, to)], options).await? {
        if let Err((name, code)) = outcome {
            tracing::error!(topic = %name, error = %code, "adding partitions failed");
            return Err(KafkaError::AdminOp(code));
        }
    }
    Ok(())
}

async fn topic_configs(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    options: &AdminOptions,
) -> Result<HashMap<String, Option<String>>, KafkaError> {
    let results = admin.describe_configs(&[ResourceSpecifier::Topic(topic)], options).await?;
    let resource = results.into_iter().next().ok_or(KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopicOrPartition))?;
    let resource = resource.map_err(KafkaError::AdminOp)?;
    Ok(resource.entries.into_iter().map(|e| (e.name, e.value)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_grow_and_are_never_removed() {
        assert_eq!(plan_partitions("t", 4, 8), Some(TopicChange::Grown { topic: "t".into(), from: 4, to: 8 }));
        assert_eq!(
            plan_partitions("t", 8, 4),
            Some(TopicChange::KeptMorePartitions { topic: "t".into(), have: 8, asked: 4 })
        );
        assert_eq!(plan_partitions("t", 8, 8), None);
    }

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

    #[test]
    fn a_model_has_both_lanes_a_dlq_and_answers_and_only_the_lanes_grow() {
        let names = Namespace::new("blue.infer.", "fleet.", "fleet:").unwrap();
        let model = ModelName::parse("minilm").unwrap();
        let settings =
            TopicSettings { partitions: 12, bulk_retention_ms: Some(86_400_000), ..TopicSettings::default() };
        let planned = planned_topics(&names, &model, &settings);
        let summary: Vec<_> = planned.iter().map(|t| (t.name.as_str(), t.partitions, t.grows)).collect();
        assert_eq!(
            summary,
            [
                ("blue.infer.minilm", 12, true),
                ("blue.infer.minilm.bulk", 12, true),
                ("blue.infer.minilm.dlq", 1, false),
                ("blue.infer.minilm.answers", 12, false),
                ("blue.infer.minilm.bulk.answers", 12, false),
                ("blue.infer.fleet.jobs", 1, false),
            ]
        );
        assert_eq!(planned[0].configs, settings.request_configs());
        assert_eq!(planned[1].configs, settings.bulk_configs());
        assert_eq!(planned[2].configs, settings.dlq_configs());
        assert_eq!(planned[3].configs, settings.answers_configs());
        assert!(planned[5].configs.contains(&("cleanup.policy", "compact,delete".to_owned())));
        assert!(settings.answers_configs().contains(&("retention.ms", ANSWERS_RETENTION_MS.to_string())));
    }

    #[test]
    fn only_differing_settings_are_reported() {
        let asked = [("retention.ms", "100".to_owned()), ("min.insync.replicas", "2".to_owned())];
        let have: HashMap<String, Option<String>> =
            [("retention.ms".to_owned(), Some("100".to_owned())), ("min.insync.replicas".to_owned(), Some("1".into()))]
                .into();
        let differs = config_differences("t", &asked, &have);
        assert_eq!(
            differs,
            [TopicChange::ConfigDiffers {
                topic: "t".into(),
                name: "min.insync.replicas".into(),
                have: Some("1".into()),
                asked: "2".into()
            }]
        );
        assert!(differs[0].to_string().contains("not changed"));
    }
}
