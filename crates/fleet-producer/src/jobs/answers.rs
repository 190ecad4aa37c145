//! A job's answers as they arrive on its answers topic, and its record as
//! its sender updates it: one reader assigned to both topics (no consumer
//! group, nothing committed), the answers read from the job's start time
//! on (Kafka's offsets-for-times: records before it cannot be the job's),
//! the records from the jobs topic's start.

use super::records::{partitions, reader_config, JobsError, BROKER_TIMEOUT};
use crate::KafkaConfig;
use fleet_proto::answer_record::{self, AnswerMeta};
use fleet_proto::job_record::JobRecord;
use fleet_proto::JobId;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::Duration;

/// One answer record read.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub meta: AnswerMeta,
    /// The answer JSON.
    pub value: Vec<u8>,
    /// When the worker wrote it (the record's timestamp), Unix ms.
    pub written_ms: Option<i64>,
}

#[derive(Debug)]
pub enum Event {
    Answer(Arrival),
    /// The job's record, written again by its sender.
    Record(JobRecord),
}

pub struct AnswerStream {
    consumer: StreamConsumer,
    answers_topic: String,
    jobs_topic: String,
    job: JobId,
    /// Each answers partition's end when the stream opened, until read.
    ends: HashMap<i32, i64>,
}

impl AnswerStream {
    /// Reads `answers_topic` from the first record written at or after
    /// `from_ms` (Unix ms) on every partition, and `jobs_topic` whole for
    /// `job`'s records.
    pub async fn open(
        kafka: &KafkaConfig,
        answers_topic: &str,
        jobs_topic: &str,
        job: &JobId,
        from_ms: u64,
    ) -> Result<Self, JobsError> {
        let (kafka, answers, jobs) = (kafka.clone(), answers_topic.to_owned(), jobs_topic.to_owned());
        let (consumer, ends) = tokio::task::spawn_blocking(move || assign(&kafka, &answers, &jobs, from_ms))
            .await
            .map_err(|_| JobsError::Kafka(KafkaError::Canceled))??;
        Ok(Self {
            consumer,
            answers_topic: answers_topic.to_owned(),
            jobs_topic: jobs_topic.to_owned(),
            job: job.clone(),
            ends,
        })
    }

    /// The next answer or record of the job, waiting at most `wait`
    /// (`None`: nothing came). Records of other jobs, and records that are
    /// not fleet answers, are passed over.
    pub async fn next(&mut self, wait: Duration) -> Result<Option<Event>, KafkaError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let message = match tokio::time::timeout_at(deadline, self.consumer.recv()).await {
                Err(_) => return Ok(None),
                Ok(message) => message?,
            };
            let topics = Topics { answers: &self.answers_topic, jobs: &self.jobs_topic, job: &self.job };
            if let Some(event) = topics.read(&message, &mut self.ends) {
                return Ok(Some(event));
            }
        }
    }

    /// Every answer written before the stream opened has been read.
    pub fn read_to_end(&self) -> bool {
        self.ends.is_empty()
    }
}

/// What a stream reads, apart from its consumer (a message borrows that).
struct Topics<'a> {
    answers: &'a str,
    jobs: &'a str,
    job: &'a JobId,
}

impl Topics<'_> {
    /// What `message` is to the stream; `ends` loses a partition read to its end.
    fn read(&self, message: &BorrowedMessage<'_>, ends: &mut HashMap<i32, i64>) -> Option<Event> {
        if message.topic() == self.jobs {
            if message.key() != Some(self.job.as_str().as_bytes()) {
                return None;
            }
            return message.payload().and_then(|value| JobRecord::from_json(value).ok()).map(Event::Record);
        }
        if message.topic() != self.answers {
            return None;
        }
        let partition = message.partition();
        if ends.get(&partition).is_some_and(|&end| message.offset() + 1 >= end) {
            ends.remove(&partition);
        }
        let headers = message.headers();
        let pairs: Vec<(&str, Option<&[u8]>)> =
            headers.map(|hs| hs.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default();
        let meta = answer_record::read_meta(message.key(), pairs)?;
        let value = message.payload().unwrap_or_default().to_vec();
        Some(Event::Answer(Arrival { meta, value, written_ms: message.timestamp().to_millis() }))
    }
}

/// A reader assigned to `answers` at `from_ms` and to `jobs` at its start;
/// each answers partition's end as of now.
fn assign(
    kafka: &KafkaConfig,
    answers: &str,
    jobs: &str,
    from_ms: u64,
) -> Result<(StreamConsumer, HashMap<i32, i64>), JobsError> {
    let consumer: StreamConsumer = reader_config(kafka).create()?;
    let mut assignment = TopicPartitionList::new();
    let mut times = TopicPartitionList::new();
    for partition in partitions(&consumer, jobs)? {
        assignment.add_partition_offset(jobs, partition, Offset::Beginning)?;
    }
    let mut ends = HashMap::new();
    for partition in partitions(&consumer, answers)? {
        times.add_partition_offset(answers, partition, Offset::Offset(from_ms as i64))?;
        let (_, high) = consumer.fetch_watermarks(answers, partition, BROKER_TIMEOUT)?;
        ends.insert(partition, high);
    }
    let found = consumer.offsets_for_times(times, BROKER_TIMEOUT)?;
    for element in found.elements() {
        let start = match element.offset() {
            Offset::Offset(offset) => Offset::Offset(offset),
            // No record that young yet: start where new ones will come.
            _ => Offset::End,
        };
        if !matches!(start, Offset::Offset(o) if o < ends[&element.partition()]) {
            ends.remove(&element.partition());
        }
        assignment.add_partition_offset(answers, element.partition(), start)?;
    }
    consumer.assign(&assignment)?;
    Ok((consumer, ends))
}
