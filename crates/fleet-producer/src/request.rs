//! A request as a producer builds it, before it becomes a Kafka message.

use fleet_proto::{ContentType, RequestId};

#[derive(Debug, Clone)]
pub struct Request {
    pub id: RequestId,
    pub content_type: ContentType,
    /// The raw input: UTF-8 text, or encoded image bytes. Never base64.
    pub payload: Vec<u8>,
    /// Absolute deadline, Unix epoch ms; the model's TTL applies when `None`.
    pub deadline_ms: Option<u64>,
    /// How many models this request is fanned out to (ce_parts).
    pub parts: u32,
}

impl Request {
    pub fn text(id: RequestId, text: impl Into<String>) -> Self {
        Self { id, content_type: ContentType::Text, payload: text.into().into_bytes(), deadline_ms: None, parts: 1 }
    }

    pub fn with_deadline_ms(mut self, deadline_ms: u64) -> Self {
        self.deadline_ms = Some(deadline_ms);
        self
    }
}
