//! The sink: where finished requests leave the worker. Answers go to Redis
//! (`fleet:result:<id>` hash field + `fleet:ready:<id>` push, both with the
//! version's result TTL); messages without a readable id go to the DLQ topic.
//!
//! A batch of answers is one pipeline (one round trip) of a small Lua script
//! per answer. Each script is atomic, so a waiter woken by the ready-list
//! push always finds the hash field, and it writes only if the field is not
//! there yet: the first answer wins. A message redelivered after a crash or
//! a rebalance can then never replace an `ok` answer with a later `expired`
//! one, nor push the ready list twice.

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
    /// A freshly computed output to store in the feature cache: (key, value).
    pub feature: Option<(String, String)>,
}

/// KEYS: result hash, ready list. ARGV: model, answer JSON, TTL seconds.
const WRITE_ANSWER: &str = r"
local fresh = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
if fresh == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return fresh
";

pub struct ResultSink {
    conn: ConnectionManager,
    result_ttl_s: u64,
    feature_ttl_s: u64,
}

impl ResultSink {
    /// `client` carries the URL, credentials and TLS settings
    /// (fleet_connect::redis::RedisConfig::client).
    pub async fn connect(client: redis::Client, result_ttl_s: u64, feature_ttl_s: u64) -> Result<Self, SinkError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { conn, result_ttl_s, feature_ttl_s })
    }

    /// Writes every answer of a batch, and the feature-cache entries of what
    /// was computed, in one round trip.
    pub async fn write(&mut self, finished: &[Finished]) -> Result<(), SinkError> {
        let mut pipe = redis::pipe();
        for f in finished {
            pipe.cmd("EVAL")
                .arg(WRITE_ANSWER)
                .arg(2)
                .arg(keys::result_key(&f.id))
                .arg(keys::ready_key(&f.id))
                .arg(&f.answer.model)
                .arg(f.answer.to_json())
                .arg(self.result_ttl_s)
                .ignore();
            if let Some((key, value)) = &f.feature {
                pipe.cmd("SET").arg(key).arg(value).arg("EX").arg(self.feature_ttl_s).ignore();
            }
        }
        pipe.query_async::<()>(&mut self.conn).await?;
        Ok(())
    }
}

/// Publishes this worker's backlog for producers' fail-fast admission
/// (`fleet_proto::backlog`).
pub struct BacklogPublisher {
    conn: ConnectionManager,
    key: String,
    worker_id: String,
}

impl BacklogPublisher {
    pub async fn connect(
        client: redis::Client,
        model: &fleet_proto::ModelName,
        worker_id: String,
    ) -> Result<Self, SinkError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { conn, key: fleet_proto::backlog::backlog_key(model), worker_id })
    }

    pub async fn publish(&mut self, backlog: u64, now_ms: u64, drain_per_s: f64) -> Result<(), SinkError> {
        let value = fleet_proto::backlog::encode(backlog, now_ms, drain_per_s);
        redis::pipe()
            .hset(&self.key, &self.worker_id, value)
            .ignore()
            .expire(&self.key, 60)
            .ignore()
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }

    /// Removes this worker's entry (at shutdown: it no longer owes anything).
    pub async fn withdraw(&mut self) -> Result<(), SinkError> {
        redis::cmd("HDEL").arg(&self.key).arg(&self.worker_id).query_async::<()>(&mut self.conn).await?;
        Ok(())
    }
}

pub struct DeadLetters {
    producer: FutureProducer,
    topic: String,
}

impl DeadLetters {
    pub fn new(base: &ClientConfig, topic: String) -> Result<Self, SinkError> {
        let producer = base
            .clone()
            .set("enable.idempotence", "true")
            // A dead letter is the original message: it may be an image.
            .set("message.max.bytes", fleet_proto::limits::MAX_MESSAGE_BYTES.to_string())
            .create()?;
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
