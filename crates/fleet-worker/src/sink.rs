//! The sink: where finished requests leave the worker. Answers go to Redis
//! (`fleet:result:<id>` hash field + `fleet:ready:<id>` push, both with the
//! version's result TTL); messages without a readable id go to the DLQ topic.
//!
//! A batch of answers is one MULTI/EXEC transaction: one round trip, and a
//! waiter woken by the ready-list push always finds the hash field with it.

use crate::message::Inbound;
use fleet_proto::{headers, keys, Answer, RequestId};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use redis::aio::ConnectionManager;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
}

/// One answered request, with where it came from in Kafka.
#[derive(Debug, Clone)]
pub struct Finished {
    pub position: crate::message::Position,
    pub id: RequestId,
    pub answer: Answer,
}

pub struct ResultSink {
    conn: ConnectionManager,
    result_ttl_s: u64,
}

impl ResultSink {
    pub async fn connect(url: &str, result_ttl_s: u64) -> Result<Self, SinkError> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { conn, result_ttl_s })
    }

    /// Writes every answer of a batch in one transaction.
    pub async fn write(&mut self, finished: &[Finished]) -> Result<(), SinkError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        let ttl = self.result_ttl_s as i64;
        for f in finished {
            let (result, ready) = (keys::result_key(&f.id), keys::ready_key(&f.id));
            pipe.hset(&result, &f.answer.model, f.answer.to_json()).ignore();
            pipe.rpush(&ready, &f.answer.model).ignore();
            pipe.expire(&result, ttl).ignore();
            pipe.expire(&ready, ttl).ignore();
        }
        pipe.query_async::<()>(&mut self.conn).await?;
        Ok(())
    }
}

pub struct DeadLetters {
    producer: FutureProducer,
    topic: String,
}

impl DeadLetters {
    pub fn new(base: &ClientConfig, topic: String) -> Result<Self, SinkError> {
        let producer = base.clone().set("enable.idempotence", "true").create()?;
        Ok(Self { producer, topic })
    }

    /// Copies the message (key, value, headers) to the DLQ with the reason.
    pub async fn send(&self, inbound: &Inbound, reason: &str, detail: &str) -> Result<(), SinkError> {
        let mut hs = OwnedHeaders::new_with_capacity(inbound.headers.len() + 2);
        for (key, value) in &inbound.headers {
            hs = hs.insert(Header { key, value: value.as_deref() });
        }
        hs = hs.insert(Header { key: headers::DLQ_REASON, value: Some(reason) });
        hs = hs.insert(Header { key: headers::DLQ_DETAIL, value: Some(detail) });
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic).headers(hs);
        if let Some(key) = &inbound.key {
            record = record.key(key.as_slice());
        }
        if let Some(payload) = &inbound.payload {
            record = record.payload(payload.as_slice());
        }
        self.producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| SinkError::Kafka(e))?;
        Ok(())
    }
}
