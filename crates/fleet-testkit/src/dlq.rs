//! A model's dead-letter topic as a test reads it: each letter's reason,
//! key, payload and headers, from the topic's start. Apart from
//! [`crate::answers`]: a dead letter is what could not become an answer.

use crate::process::free_port;
use crate::Broker;
use fleet_proto::{headers as h, ModelName, Namespace};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A dead letter as read back: reason, payload and the fleet's headers.
#[derive(Debug, Clone)]
pub struct Letter {
    pub reason: String,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub headers: BTreeMap<String, Vec<u8>>,
}

/// Reads `model`'s DLQ topic (default names) from its start until `count`
/// letters are in; panics when fewer arrive within `timeout`.
pub async fn dead_letters(broker: &Broker, model: &ModelName, count: usize, timeout: Duration) -> Vec<Letter> {
    let reader: StreamConsumer = broker
        .kafka()
        .client_config()
        .set("group.id", format!("dlq-reader-{}", free_port()))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    reader.subscribe(&[&Namespace::default().dlq_topic(model)]).unwrap();
    let deadline = Instant::now() + timeout;
    let mut letters = Vec::new();
    while letters.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Ok(message)) = tokio::time::timeout(left, reader.recv()).await else {
            panic!("{} of {count} dead letters arrived: {letters:?}", letters.len());
        };
        let headers: BTreeMap<String, Vec<u8>> = message
            .headers()
            .map(|hs| {
                (0..hs.count())
                    .filter_map(|i| hs.try_get(i))
                    .map(|hd| (hd.key.to_owned(), hd.value.unwrap_or_default().to_vec()))
                    .collect()
            })
            .unwrap_or_default();
        letters.push(Letter {
            reason: String::from_utf8_lossy(headers.get(h::DLQ_REASON).map_or(&[][..], |v| v)).into_owned(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().unwrap_or_default().to_vec(),
            headers,
        });
    }
    letters
}
