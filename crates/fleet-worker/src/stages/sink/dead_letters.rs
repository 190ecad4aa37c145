//! The dead-letter topic's side of the sink: the producer that writes a
//! [`DeadLetter`] with its reason headers, and the local record of letters
//! the topic itself refused.

use super::kafka_producer::ReplaceableProducer;
use crate::core::job::DeadLetter;
use fleet_proto::headers;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::ClientConfig;
use std::sync::Mutex;
use std::time::Duration;

/// The dead-letter topic's producer. A missing DLQ topic is an operator's to
/// restore (with its retention and size limit), not the broker's to create
/// with its defaults: the sink then says the topic is missing.
pub struct DeadLetters {
    producer: ReplaceableProducer,
    topic: String,
    source_topic: String,
}

impl DeadLetters {
    pub fn new(base: &ClientConfig, topic: String, source_topic: String) -> Result<Self, rdkafka::error::KafkaError> {
        // A dead letter is the original message: it may be an image.
        let max_bytes = fleet_proto::limits::MAX_MESSAGE_BYTES.to_string();
        let producer = ReplaceableProducer::new(base, &[("message.max.bytes", &max_bytes)])?;
        Ok(Self { producer, topic, source_topic })
    }

    /// Swaps in a new producer after a fatal error.
    pub fn replace_producer(&self) -> Result<(), rdkafka::error::KafkaError> {
        self.producer.replace()
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
        let detail = letter.short_detail();
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
        self.producer.current().send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e)?;
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
            "detail": letter.short_detail(),
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
    use crate::core::job::finished_for_test;

    #[test]
    fn the_local_record_keeps_the_newest_entries() {
        let record = LocalRecord::default();
        let letter = DeadLetter::of_answer(&finished_for_test(), "answer_unwritable", "detail".into());
        for i in 0..LocalRecord::CAPACITY + 3 {
            record.keep(&letter, "too large", i as u64);
        }
        let entries: Vec<serde_json::Value> = serde_json::from_str(&record.to_json()).unwrap();
        assert_eq!(entries.len(), LocalRecord::CAPACITY);
        assert_eq!(entries[0]["at_ms"], 3);
        assert_eq!(entries[0]["request_id"], "r-1");
    }
}
