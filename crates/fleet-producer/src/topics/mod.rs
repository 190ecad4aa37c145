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
//!
//! The settings are `settings`'s, the topics a model has `plan`'s, the
//! decisions about an existing topic `changes`'s; this is the admin calls.

mod changes;
mod plan;
mod settings;

pub use changes::{config_differences, plan_partitions, TopicChange};
pub use settings::{TopicSettings, ANSWERS_RETENTION_MS, DEFAULT_PARTITIONS, DLQ_RETENTION_MS};

use crate::KafkaConfig;
use fleet_proto::{ModelName, Namespace};
use plan::{planned_topics, PlannedTopic};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::collections::HashMap;
use std::time::Duration;

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

type Admin = AdminClient<DefaultClientContext>;

/// Creates the topics of `model` that do not exist (see `planned_topics`),
/// grows both lanes' topics to `settings.partitions`, and reports what it
/// did and what differs (one line each, in order).
pub async fn ensure_topics(
    kafka: &KafkaConfig,
    names: &Namespace,
    model: &ModelName,
    settings: TopicSettings,
) -> Result<Vec<TopicChange>, TopicError> {
    let admin: Admin = kafka.client_config().create()?;
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let planned = planned_topics(names, model, &settings);
    let (mut changes, existing) = create_missing(&admin, &planned, &settings, &options).await?;
    for name in existing {
        // The broker answers for the topics asked, and only for those.
        let Some(plan) = planned.iter().find(|t| t.name == name) else { continue };
        changes.extend(bring_up_to_plan(kafka, &admin, plan, &options).await?);
    }
    Ok(changes)
}

/// Asks for every planned topic: those made are reported `Created`, the
/// names of those that already exist are returned to be checked.
async fn create_missing(
    admin: &Admin,
    planned: &[PlannedTopic],
    settings: &TopicSettings,
    options: &AdminOptions,
) -> Result<(Vec<TopicChange>, Vec<String>), TopicError> {
    let wanted: Vec<NewTopic<'_>> = planned.iter().map(|t| t.new_topic(settings)).collect();
    let mut created = Vec::new();
    let mut existing = Vec::new();
    for outcome in admin.create_topics(&wanted, options).await? {
        match outcome {
            Ok(name) => {
                let partitions = planned.iter().find(|t| t.name == name).map_or(settings.partitions, |t| t.partitions);
                created.push(TopicChange::Created { topic: name, partitions });
            }
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => existing.push(name),
            Err((name, code)) => {
                tracing::error!(topic = %name, error = %code, "topic creation failed");
                return Err(KafkaError::AdminOp(code).into());
            }
        }
    }
    Ok((created, existing))
}

/// An existing topic against its plan: its partitions grown where the plan
/// grows them, each setting that differs reported; `Unchanged` when nothing is.
async fn bring_up_to_plan(
    kafka: &KafkaConfig,
    admin: &Admin,
    plan: &PlannedTopic,
    options: &AdminOptions,
) -> Result<Vec<TopicChange>, TopicError> {
    let name = &plan.name;
    let mut changes = Vec::new();
    if plan.grows {
        let have = partition_count(kafka, name).await?;
        if let Some(change) = plan_partitions(name, have, plan.partitions) {
            if let TopicChange::Grown { from, to, .. } = change {
                grow(admin, name, to as usize, options).await.map_err(|error| TopicError::CannotGrow {
                    topic: name.clone(),
                    from,
                    to,
                    error,
                })?;
            }
            changes.push(change);
        }
    }
    match topic_configs(admin, name, options).await {
        Ok(have) => changes.extend(config_differences(name, &plan.configs, &have)),
        // Reading configs needs DescribeConfigs rights a producer's
        // credentials may lack: say so, do not fail the job.
        Err(e) => tracing::warn!(topic = %name, error = %e, "could not read the topic's settings to compare"),
    }
    if changes.is_empty() {
        changes.push(TopicChange::Unchanged { topic: name.clone() });
    }
    Ok(changes)
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

async fn grow(admin: &Admin, topic: &str, to: usize, options: &AdminOptions) -> Result<(), KafkaError> {
    for outcome in admin.create_partitions(&[NewPartitions::new(topic, to)], options).await? {
        if let Err((name, code)) = outcome {
            tracing::error!(topic = %name, error = %code, "adding partitions failed");
            return Err(KafkaError::AdminOp(code));
        }
    }
    Ok(())
}

async fn topic_configs(
    admin: &Admin,
    topic: &str,
    options: &AdminOptions,
) -> Result<HashMap<String, Option<String>>, KafkaError> {
    let results = admin.describe_configs(&[ResourceSpecifier::Topic(topic)], options).await?;
    let resource = results.into_iter().next().ok_or(KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopicOrPartition))?;
    let resource = resource.map_err(KafkaError::AdminOp)?;
    Ok(resource.entries.into_iter().map(|e| (e.name, e.value)).collect())
}
