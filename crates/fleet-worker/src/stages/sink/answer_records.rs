//! Answers on Kafka: each answer that goes there becomes a record on its
//! lane's answers topic (`infer.<model>.answers`, `infer.<model>.bulk.answers`),
//! keyed by request id, the answer JSON as value, described by its headers
//! (`fleet_proto::answer_record`). The durable way a bulk job's answers
//! reach their owner: kept for the topic's retention, read by a collector
//! at any time, untouched by a Redis that loses its data.
//!
//! The producer is idempotent with acks=all: an answer counts as written
//! (and its offset may move on) only once every in-sync replica has it.
//! Records are compressed in batches (lz4, cheap to decode): a backfill's
//! answers are mostly an embedding's digits.

use super::kafka_producer::ReplaceableProducer;
use crate::core::job::Finished;
use fleet_proto::clock::now_ms;
use fleet_proto::{answer_record, Lane, ModelName, Namespace};
use futures::future::join_all;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::ClientConfig;
use std::time::Duration;

/// How long a send may wait for room in librdkafka's queue.
const QUEUE_WAIT: Duration = Duration::from_secs(10);

pub struct AnswerRecords {
    producer: ReplaceableProducer,
    /// Each lane's answers topic.
    interactive_topic: String,
    bulk_topic: String,
    /// `ce_source` of every record: which worker answered.
    source: String,
}

impl AnswerRecords {
    pub fn new(base: &ClientConfig, names: &Namespace, model: &ModelName, source: String) -> Result<Self, KafkaError> {
        let producer = ReplaceableProducer::new(
            base,
            &[
                // A batch's answers leave together; waiting longer would
                // hold the sink (it waits for the acknowledgements).
                ("linger.ms", "2"),
                ("compression.type", "lz4"),
            ],
        )?;
        Ok(Self {
            producer,
            interactive_topic: names.answers_topic(model, Lane::Interactive),
            bulk_topic: names.answers_topic(model, Lane::Bulk),
            source,
        })
    }

    /// The answers topic of `lane`.
    pub fn topic(&self, lane: Lane) -> &str {
        match lane {
            Lane::Interactive => &self.interactive_topic,
            Lane::Bulk => &self.bulk_topic,
        }
    }

    /// Sends every answer at once and waits for the broker: one outcome per
    /// answer, `Ok` once every in-sync replica holds it.
    pub async fn send(&self, answers: &[&Finished]) -> Vec<Result<(), KafkaError>> {
        let now = now_ms();
        let records: Vec<(String, OwnedHeaders)> = answers
            .iter()
            .map(|finished| {
                let headers = answer_record::headers(
                    &finished.id,
                    finished.reply.job.as_ref(),
                    finished.answer.status,
                    &self.source,
                    now,
                );
                let headers =
                    headers.iter().fold(OwnedHeaders::new_with_capacity(headers.len()), |hs, (key, value)| {
                        hs.insert(Header { key, value: Some(value.as_bytes()) })
                    });
                (finished.answer.to_json(), headers)
            })
            .collect();
        let producer = self.producer.current();
        let sends = answers.iter().zip(records).map(|(finished, (value, headers))| {
            let producer = &producer;
            let topic = self.topic(finished.position.lane);
            async move {
                let record = FutureRecord::to(topic).key(finished.id.as_str()).payload(value.as_str()).headers(headers);
                producer.send(record, QUEUE_WAIT).await.map(|_| ()).map_err(|(e, _)| e)
            }
        });
        join_all(sends).await
    }

    /// Swaps in a new producer after a fatal error.
    pub fn replace_producer(&self) -> Result<(), KafkaError> {
        self.producer.replace()
    }
}
