//! The collector: a job's answers from its answers topic into a file, each
//! request once, until every request the job's record counts has its final
//! answer (ok, error, expired or cancelled).
//!
//! Resumable and exactly once in the file: the file is the collector's only
//! memory. Opened again it names the requests it holds ([`super::output`]);
//! the topic is read again from the job's start and only the others are
//! written; within a run, a request answered twice (a worker restarted
//! between its answer and its commit) is written once ([`JobLedger`]).

use super::answers::{AnswerStream, Event};
use super::ledger::{line_of, JobLedger, Offer};
use super::output::{self, OutputError, OutputFormat, Row};
use super::records::{JobRecords, JobsError};
use crate::KafkaConfig;
use fleet_proto::job_record::JobRecord;
use fleet_proto::{Destination, Destinations, JobId, Namespace};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the file is made durable and the watcher told.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct CollectOptions {
    pub job: JobId,
    pub out: PathBuf,
    pub format: OutputFormat,
}

/// What a finished collection holds.
#[derive(Debug)]
pub struct Collected {
    pub ledger: JobLedger,
    pub record: JobRecord,
}

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(
        "no record of job {job} on {topic}: was it sent with `fleet-produce bulk`, to this broker, under this \
         --topic-prefix?"
    )]
    NoRecord { job: JobId, topic: String },
    #[error("job {job}'s requests asked for their answers in {reply_to}: only answers on Kafka can be collected")]
    NotOnKafka { job: JobId, reply_to: String },
    #[error(transparent)]
    Jobs(#[from] JobsError),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
}

/// Collects `options.job` into `options.out`; `watch` is told how far it
/// got about every second and at the end.
pub async fn collect(
    kafka: &KafkaConfig,
    names: &Namespace,
    options: &CollectOptions,
    watch: &(dyn Fn(&JobLedger, &JobRecord) + Sync),
) -> Result<Collected, CollectError> {
    let records = JobRecords::new(kafka, names)?;
    let job = &options.job;
    let mut record = records
        .find(job)
        .await?
        .ok_or_else(|| CollectError::NoRecord { job: job.clone(), topic: records.topic().to_owned() })?;
    if let Some(reply_to) = &record.reply_to {
        let on_kafka = Destinations::parse(reply_to).is_ok_and(|d| d.includes(Destination::Kafka));
        if !on_kafka {
            return Err(CollectError::NotOnKafka { job: job.clone(), reply_to: reply_to.clone() });
        }
    }
    let (held, mut file) = output::open(&options.out, options.format)?;
    let mut ledger = JobLedger::new(job.clone());
    for (id, status) in held {
        ledger.already(id, status);
    }
    ledger.follow(&record);
    let mut stream =
        AnswerStream::open(kafka, &record.answers_topic, records.topic(), job, record.answers_from_ms()).await?;
    let mut last_checkpoint = Instant::now();
    watch(&ledger, &record);
    while !ledger.is_done() {
        match stream.next(CHECKPOINT_EVERY).await? {
            Some(Event::Answer(arrival)) if ledger.offer(&arrival.meta) == Offer::New => {
                let meta = &arrival.meta;
                let line = line_of(job, &meta.id);
                file.append(Row { request_id: &meta.id, line, status: meta.status, answer: &arrival.value })?;
            }
            Some(Event::Record(latest)) => {
                ledger.follow(&latest);
                record = latest;
            }
            Some(Event::Answer(_)) | None => {}
        }
        if last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            file.checkpoint()?;
            watch(&ledger, &record);
            last_checkpoint = Instant::now();
        }
    }
    file.finish()?;
    watch(&ledger, &record);
    Ok(Collected { ledger, record })
}
