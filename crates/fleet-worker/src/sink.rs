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
//!
//! Each answer's write succeeds or fails on its own (`failure` sorts the
//! failures): one request whose keys cannot be written ends as a dead
//! letter without holding back the rest of its batch.

use crate::message::{Inbound, Position, RawHeader};
use fleet_proto::{headers, keys, Answer, RequestId};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;
use redis::aio::ConnectionManager;
use std::sync::Mutex;
use std::time::Duration;

mod stage;
pub use stage::{SinkItem, SinkStage, ANSWER_UNWRITABLE};

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
    pub position: Position,
    pub id: RequestId,
    pub answer: Answer,
    /// A freshly computed output to store in the feature cache: (key, value).
    pub feature: Option<(String, String)>,
}

/// KEYS: result hash, ready list. ARGV: model, answer JSON, TTL seconds.
/// Keys of another type are refused before anything is written, so a
/// refused answer leaves no half (a hash field nobody is woken for).
const WRITE_ANSWER: &str = r"
for i, want in ipairs({'hash', 'list'}) do
  local have = redis.call('TYPE', KEYS[i]).ok
  if have ~= want and have ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. have .. ', not a ' .. want)
  end
end
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
    /// was computed, in one round trip. `Err` when the round trip itself
    /// failed (nothing is known to be written); else one result per answer.
    /// A feature-cache entry that cannot be stored costs a later hit, never
    /// the answer: its failure is logged and counted, not returned.
    pub async fn write(&mut self, finished: &[Finished]) -> Result<Vec<Result<(), redis::RedisError>>, SinkError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for f in finished {
            pipe.cmd("EVAL")
                .arg(WRITE_ANSWER)
                .arg(2)
                .arg(keys::result_key(&f.id))
                .arg(keys::ready_key(&f.id))
                .arg(&f.answer.model)
                .arg(f.answer.to_json())
                .arg(self.result_ttl_s);
            if let Some((key, value)) = &f.feature {
                pipe.cmd("SET").arg(key).arg(value).arg("EX").arg(self.feature_ttl_s);
            }
        }
        let mut replies = pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut self.conn).await?.into_iter();
        let mut outcomes = Vec::with_capacity(finished.len());
        for f in finished {
            let answer = replies.next().unwrap_or(Ok(redis::Value::Nil)).map(drop);
            if f.feature.is_some() {
                if let Some(Err(e)) = replies.next() {
                    tracing::warn!(error = %e, id = %f.id, "feature-cache entry not stored");
                }
            }
            outcomes.push(answer);
        }
        Ok(outcomes)
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

/// The longest `fleet_dlq_detail` written: a reason, not a payload.
const MAX_DETAIL_CHARS: usize = 1024;

/// What goes to the dead-letter topic for one message, and why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub position: Position,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<RawHeader>,
    pub payload: Option<Vec<u8>>,
    /// A stable snake_case word (`fleet_dlq_total{reason}`).
    pub reason: &'static str,
    pub detail: String,
    /// The payload and the original headers were left out (the full copy
    /// was refused as too large).
    pub truncated: bool,
}

impl DeadLetter {
    /// The message as it was read, with why it could not become a request.
    pub fn of_message(inbound: Inbound, reason: &'static str, detail: String) -> Self {
        let Inbound { position, key, headers, payload } = inbound;
        Self { position, key, headers, payload, reason, detail, truncated: false }
    }

    /// An answer that could not be written where its client looks: the
    /// answer JSON itself, keyed by the request id (the input stays in the
    /// source topic at the position `fleet_dlq_source` names).
    pub fn of_answer(finished: &Finished, reason: &'static str, detail: String) -> Self {
        Self {
            position: finished.position.clone(),
            key: Some(finished.id.as_str().as_bytes().to_vec()),
            headers: vec![RawHeader::new(headers::CONTENT_TYPE, Some(b"application/json".to_vec()))],
            payload: Some(finished.answer.to_json().into_bytes()),
            reason,
            detail,
            truncated: false,
        }
    }

    /// The same letter without the payload and the original headers: what
    /// still fits when the full copy is refused for its size.
    pub fn stripped(&self) -> Self {
        Self { headers: Vec::new(), payload: None, truncated: true, ..self.clone() }
    }

    /// The letter's request id, when its key reads as one (for the log).
    pub fn request_id(&self) -> Option<String> {
        self.key.as_deref().and_then(|k| RequestId::from_bytes(k).ok()).map(|id| id.to_string())
    }
}

/// The dead-letter topic's producer. Idempotent (a retried send does not
/// duplicate a letter), so a broker failure can make it fail fatally; it is
/// then replaced by a new one, as `fleet_producer::FleetProducer` does.
pub struct DeadLetters {
    producer: Mutex<FutureProducer>,
    config: ClientConfig,
    topic: String,
    source_topic: String,
}

impl DeadLetters {
    pub fn new(base: &ClientConfig, topic: String, source_topic: String) -> Result<Self, SinkError> {
        let mut config = base.clone();
        config
            .set("enable.idempotence", "true")
            // A dead letter is the original message: it may be an image.
            .set("message.max.bytes", fleet_proto::limits::MAX_MESSAGE_BYTES.to_string());
        // A letter that cannot be delivered is reported within this, so the
        // sink can say why instead of waiting librdkafka's default 5 min.
        if config.get("message.timeout.ms").is_none() {
            config.set("message.timeout.ms", "30000");
        }
        // A missing DLQ topic is an operator's to restore (with its
        // retention and size limit), not the broker's to create with its
        // defaults: the sink then says the topic is missing.
        config.set("allow.auto.create.topics", "false");
        if config.get("topic.metadata.propagation.max.ms").is_none() {
            // A missing DLQ topic is reported after this (default 30 s).
            config.set("topic.metadata.propagation.max.ms", "5000");
        }
        let producer = config.create()?;
        Ok(Self { producer: Mutex::new(producer), config, topic, source_topic })
    }

    fn current(&self) -> FutureProducer {
        self.producer.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Swaps in a new producer after a fatal error.
    pub fn replace_producer(&self) -> Result<(), SinkError> {
        let fresh: FutureProducer = self.config.create()?;
        let failed = std::mem::replace(&mut *self.producer.lock().unwrap_or_else(|p| p.into_inner()), fresh);
        // Whatever the failed one still holds is failed too; do not wait.
        let _ = failed.flush(Duration::ZERO);
        Ok(())
    }

    /// Writes `letter` with `fleet_dlq_reason`, `fleet_dlq_detail` and
    /// `fleet_dlq_source` (`<topic>:<partition>:<offset>` of the original).
    pub async fn send(&self, letter: &DeadLetter) -> Result<(), rdkafka::error::KafkaError> {
        let mut hs = OwnedHeaders::new_with_capacity(letter.headers.len() + 4);
        for header in &letter.headers {
            // rdkafka writes names as &str: a name that is not UTF-8 is
            // written with its bad bytes replaced (U+FFFD).
            let name = String::from_utf8_lossy(&header.name);
            hs = hs.insert(Header { key: &name, value: header.value.as_deref() });
        }
        let detail: String = letter.detail.chars().take(MAX_DETAIL_CHARS).collect();
        let source = format!("{}:{}:{}", self.source_topic, letter.position.partition, letter.position.offset);
        hs = hs.insert(Header { key: headers::DLQ_REASON, value: Some(letter.reason) });
        hs = hs.insert(Header { key: headers::DLQ_DETAIL, value: Some(&detail) });
        hs = hs.insert(Header { key: headers::DLQ_SOURCE, value: Some(&source) });
        if letter.truncated {
            hs = hs.insert(Header { key: headers::DLQ_TRUNCATED, value: Some("true") });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic).headers(hs);
        if let Some(key) = &letter.key {
            record = record.key(key.as_slice());
        }
        if let Some(payload) = &letter.payload {
            record = record.payload(payload.as_slice());
        }
        self.current().send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e)?;
        Ok(())
    }
}

/// Dead letters the DLQ topic itself refused, kept in memory for
/// `/dead-letters` (the newest [`LocalRecord::CAPACITY`]), besides an
/// ERROR log line and `fleet_dlq_local_total`.
#[derive(Debug, Default)]
pub struct LocalRecord {
    entries: Mutex<std::collections::VecDeque<serde_json::Value>>,
}

impl LocalRecord {
    pub const CAPACITY: usize = 256;

    pub fn keep(&self, letter: &DeadLetter, refusal: &str, now_ms: u64) {
        let entry = serde_json::json!({
            "at_ms": now_ms,
            "partition": letter.position.partition,
            "offset": letter.position.offset,
            "request_id": letter.request_id(),
            "reason": letter.reason,
            "detail": letter.detail.chars().take(MAX_DETAIL_CHARS).collect::<String>(),
            "refused_by_dlq": refusal,
        });
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() == Self::CAPACITY {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// The record as a JSON array, oldest first.
    pub fn to_json(&self) -> String {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_string_pretty(&*entries).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::{ErrorCode, Timings};

    fn finished() -> Finished {
        let answer = Answer::error("minilm", 1, ErrorCode::BadRequest, "x".to_owned(), Timings::default());
        Finished {
            position: Position { partition: 2, offset: 40, generation: 1 },
            id: RequestId::parse("r-1").unwrap(),
            answer,
            feature: None,
        }
    }

    #[test]
    fn an_unwritable_answer_becomes_a_letter_of_its_json_and_strips_to_its_reason() {
        let letter = DeadLetter::of_answer(&finished(), "answer_unwritable", "WRONGTYPE".into());
        assert_eq!(letter.key.as_deref(), Some(&b"r-1"[..]));
        assert!(String::from_utf8(letter.payload.clone().unwrap()).unwrap().contains("\"bad_request\""));
        assert_eq!(letter.request_id().as_deref(), Some("r-1"));
        let stripped = letter.stripped();
        assert!(stripped.payload.is_none() && stripped.headers.is_empty() && stripped.truncated);
        assert_eq!((stripped.reason, stripped.position.offset), ("answer_unwritable", 40));
    }

    #[test]
    fn the_local_record_keeps_the_newest_entries() {
        let record = LocalRecord::default();
        let letter = DeadLetter::of_answer(&finished(), "answer_unwritable", "detail".into());
        for i in 0..LocalRecord::CAPACITY + 3 {
            record.keep(&letter, "too large", i as u64);
        }
        let entries: Vec<serde_json::Value> = serde_json::from_str(&record.to_json()).unwrap();
        assert_eq!(entries.len(), LocalRecord::CAPACITY);
        assert_eq!(entries[0]["at_ms"], 3);
        assert_eq!(entries[0]["request_id"], "r-1");
    }
}
