//! Writes requests to `infer.<model>` with many sends in flight.
//!
//! `send` enqueues into librdkafka at once (`send_result`) and hands back a
//! [`Delivery`] to await later: awaiting each delivery before the next send
//! caps a producer at a few hundred messages per second, so callers should
//! keep thousands of deliveries pending and await them together.

use crate::admission::{BacklogGuard, Overloaded};
use crate::{KafkaConfig, Request};
use fleet_proto::clock::now_ms;
use fleet_proto::{ContentType, Envelope, ModelName, RequestId};
use futures::FutureExt;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("the producer was dropped before the message was delivered")]
    Canceled,
    /// The model's backlog is above the configured limit: nothing was sent.
    #[error(transparent)]
    Overloaded(#[from] Overloaded),
}

pub struct FleetProducer {
    inner: FutureProducer,
    source: String,
    guard: Option<BacklogGuard>,
}

/// Where a delivered message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub partition: i32,
    pub offset: i64,
}

/// A pending delivery report: resolves once the broker has the message.
pub struct Delivery(DeliveryFuture);

impl Future for Delivery {
    type Output = Result<Delivered, SendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll_unpin(cx).map(|outcome| match outcome {
            Ok(Ok(d)) => Ok(Delivered { partition: d.partition, offset: d.offset }),
            Ok(Err((e, _))) => Err(SendError::Kafka(e)),
            Err(_) => Err(SendError::Canceled),
        })
    }
}

impl FleetProducer {
    /// `source` becomes `ce_source` on every message (who sent it).
    pub fn new(kafka: &KafkaConfig, source: &str) -> Result<Self, SendError> {
        let inner: FutureProducer = kafka
            .client_config()
            // Idempotence keeps retried batches from duplicating requests.
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "200000")
            .set("message.timeout.ms", "30000")
            // Images up to the fleet's value limit (librdkafka's default is 1 MB).
            .set("message.max.bytes", fleet_proto::limits::MAX_MESSAGE_BYTES.to_string())
            .create()?;
        Ok(Self { inner, source: source.to_owned(), guard: None })
    }

    /// Refuse sends with [`SendError::Overloaded`] by the guard's rules
    /// (backlog limit, predicted wait against the request's deadline).
    pub fn with_admission(mut self, guard: BacklogGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Enqueues one request for `model`; waits only while librdkafka's local
    /// queue is full. Await the returned [`Delivery`] for the broker's ack.
    pub async fn send(&self, model: &ModelName, request: &Request) -> Result<Delivery, SendError> {
        if let Some(guard) = &self.guard {
            guard.check_request(model, request.deadline_ms).await?;
        }
        let delivery = self.enqueue(model, request).await?;
        self.count_sent(model);
        Ok(delivery)
    }

    /// Admission projects the backlog with this producer's own sends until a
    /// worker's report includes them.
    fn count_sent(&self, model: &ModelName) {
        if let Some(guard) = &self.guard {
            guard.record_sent(model);
        }
    }

    async fn enqueue(&self, model: &ModelName, request: &Request) -> Result<Delivery, SendError> {
        let envelope = Envelope {
            id: request.id.clone(),
            source: self.source.clone(),
            created_ms: now_ms(),
            content_type: request.content_type,
            deadline_ms: request.deadline_ms,
            parts: request.parts,
        };
        let header_values = envelope.to_headers();
        let headers =
            header_values.iter().fold(OwnedHeaders::new_with_capacity(header_values.len()), |hs, (key, value)| {
                hs.insert(Header { key, value: Some(value.as_bytes()) })
            });
        let topic = model.topic();
        let mut record =
            FutureRecord::to(&topic).key(request.id.as_str()).payload(request.payload.as_slice()).headers(headers);
        loop {
            match self.inner.send_result(record) {
                Ok(delivery) => return Ok(Delivery(delivery)),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err((e, _)) => return Err(SendError::Kafka(e)),
            }
        }
    }

    /// One request fanned out to several models at once, e.g. a photo to a
    /// vision model and its caption to a text model: every part carries the
    /// same id and `ce_parts = parts.len()`, so `ResultClient::wait(id,
    /// models)` returns once each model has answered. The models work in
    /// parallel; none waits for another. Admission is checked for every model
    /// before anything is sent, so a request is never sent in part.
    pub async fn send_fanout(&self, parts: &[(&ModelName, Request)]) -> Result<Vec<Delivery>, SendError> {
        if let Some(guard) = &self.guard {
            for (model, request) in parts {
                guard.check_request(model, request.deadline_ms).await?;
            }
        }
        let mut deliveries = Vec::with_capacity(parts.len());
        for (model, request) in parts {
            let part = Request { parts: parts.len() as u32, ..request.clone() };
            deliveries.push(self.enqueue(model, &part).await?);
            self.count_sent(model);
        }
        Ok(deliveries)
    }

    /// `send_fanout` of an image and a text under one id.
    pub async fn send_multimodal(
        &self,
        id: &RequestId,
        image: (&ModelName, ContentType, Vec<u8>),
        text: (&ModelName, &str),
    ) -> Result<Vec<Delivery>, SendError> {
        let (image_model, content_type, bytes) = image;
        let parts = [
            (image_model, Request::image(id.clone(), content_type, bytes)),
            (text.0, Request::text(id.clone(), text.1)),
        ];
        self.send_fanout(&parts).await
    }

    /// Waits until every enqueued message is delivered or `timeout` passes.
    pub fn flush(&self, timeout: Duration) -> Result<(), SendError> {
        self.inner.flush(timeout).map_err(SendError::Kafka)
    }
}
