//! An owned copy of a consumed Kafka message: what the rest of the worker sees
//! of the broker. Owning it lets the message outlive the consumer's borrow.

use rdkafka::message::{BorrowedMessage, Headers, Message};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    pub partition: i32,
    pub offset: i64,
}

#[derive(Debug, Clone)]
pub struct Inbound {
    pub position: Position,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub payload: Option<Vec<u8>>,
}

impl Inbound {
    pub fn from_kafka(message: &BorrowedMessage<'_>) -> Self {
        let headers = message
            .headers()
            .map(|hs| hs.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        Self {
            position: Position { partition: message.partition(), offset: message.offset() },
            key: message.key().map(<[u8]>::to_vec),
            headers,
            payload: message.payload().map(<[u8]>::to_vec),
        }
    }

    pub fn header_pairs(&self) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        self.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()))
    }

    /// Size counted against in-flight byte limits.
    pub fn size_bytes(&self) -> usize {
        self.payload.as_ref().map_or(0, Vec::len)
            + self.key.as_ref().map_or(0, Vec::len)
            + self.headers.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum::<usize>()
    }
}
