//! Writes requests to `infer.<model>` with many sends in flight.
//!
//! `send` enqueues into librdkafka at once (`send_result`) and hands back a
//! [`Delivery`] to await later: awaiting each delivery before the next send
//! caps a producer at a few hundred messages per second, so callers should
//! keep thousands of deliveries pending and await them together.
//!
//! Idempotence makes some broker failures fatal to a librdkafka producer:
//! a broker that restarts without its producer state while a request was in
//! flight answers `UNKNOWN_PRODUCER_ID`/`OUT_OF_ORDER_SEQUENCE_NUMBER`, and
//! from then on every send fails. A service must not need a restart for
//! that, so `FleetProducer` replaces a producer that reports a fatal error
//! with a fresh one (new producer id) on the next send. Messages the old one
//! still held fail their [`Delivery`]; nothing is resent behind the caller's
//! back, since only the caller knows whether a resend is wanted.

use crate::admission::{BacklogGuard, Overloaded};
use crate::{KafkaConfig, Request};
use fleet_proto::clock::now_ms;
use fleet_proto::{ContentType, Envelope, ModelName, Namespace, RequestId};
use futures::FutureExt;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
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
    /// Swapped for a fresh producer after a fatal error (see the module docs).
    inner: RwLock<Arc<FutureProducer>>,
    /// What `inner` was made from, to make its replacement.
    client_config: ClientConfig,
    source: String,
    guard: Option<BacklogGuard>,
    /// Names the topic of each model.
    namespace: Namespace,
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
        let mut client_config = kafka.client_config();
        client_config
            // Idempotence keeps retried batches from duplicating requests.
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "200000")
            .set("message.timeout.ms", "30000")
            // Images up to the fleet's value limit (librdkafka's default is 1 MB).
            .set("message.max.bytes", fleet_proto::limits::MAX_MESSAGE_BYTES.to_string());
        // Requests sent while a broker restarts wait in this producer's
        // queue until it reconnects.
        fleet_connect::kafka::default_reconnect_backoff(&mut client_config);
        let inner: FutureProducer = client_config.create()?;
        Ok(Self {
            inner: RwLock::new(Arc::new(inner)),
            client_config,
            source: source.to_owned(),
            guard: None,
            namespace: Namespace::default(),
        })
    }

    /// Sends to the topics of `namespace` (default: `infer.<model>`).
    pub fn with_namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = namespace;
        self
    }

    /// The producer in use now (a lock poisoned by a panicking sender still
    /// holds a valid producer).
    fn current(&self) -> Arc<FutureProducer> {
        self.inner.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The producer to send with: the current one, or a fresh one when the
    /// current one has failed fatally.
    fn live_producer(&self) -> Result<Arc<FutureProducer>, SendError> {
        let current = self.current();
        let Some((code, reason)) = current.client().fatal_error() else { return Ok(current) };
        let mut slot = self.inner.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Another send may have replaced it while this one waited for the lock.
        if !Arc::ptr_eq(&slot, &current) {
            return Ok(slot.clone());
        }
        tracing::error!(?code, %reason, "the Kafka producer failed fatally; replacing it with a new one");
        metrics::counter!("fleet_producer_replaced_total", "code" => format!("{code:?}")).increment(1);
        let fresh: Arc<FutureProducer> = Arc::new(self.client_config.create()?);
        let failed = std::mem::replace(&mut *slot, fresh.clone());
        drop(slot);
        retire(failed);
        Ok(fresh)
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
            job: request.job.clone(),
            reply_to: request.reply_to,
        };
        let header_values = envelope.to_headers();
        let headers =
            header_values.iter().fold(OwnedHeaders::new_with_capacity(header_values.len()), |hs, (key, value)| {
                hs.insert(Header { key, value: Some(value.as_bytes()) })
            });
        let topic = self.namespace.lane_topic(model, request.lane);
        let mut record =
            FutureRecord::to(&topic).key(request.id.as_str()).payload(request.payload.as_slice()).headers(headers);
        // At most one replacement per send: a fresh producer that fails
        // fatally at once points at the broker, not at this producer.
        let mut replaced = false;
        loop {
            let producer = self.live_producer()?;
            match producer.send_result(record) {
                Ok(delivery) => return Ok(Delivery(delivery)),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), returned)) if !replaced => {
                    record = returned;
                    replaced = true;
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
        self.current().flush(timeout).map_err(SendError::Kafka)
    }
}

/// Drops a failed producer off the async threads: dropping purges its queue
/// (failing those deliveries) and flushes for up to half a second.
fn retire(failed: Arc<FutureProducer>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || drop(failed));
        }
        Err(_) => drop(failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaRespErr;
    use std::ffi::CString;

    /// Marks `producer` failed as librdkafka does when a restarted broker
    /// has lost the producer's state (librdkafka's own test hook).
    fn fail_fatally(producer: &FutureProducer) {
        let reason = CString::new("the broker lost the producer state").unwrap();
        // SAFETY: the client pointer is live for the call and librdkafka copies the reason.
        unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.client().native_ptr(),
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID,
                reason.as_ptr(),
            );
        }
    }

    #[tokio::test]
    async fn a_fatally_failed_producer_is_replaced_on_the_next_send() {
        // Nothing listens there: a send only needs librdkafka's local queue.
        let fleet = FleetProducer::new(&KafkaConfig::new("127.0.0.1:9"), "test").unwrap();
        let model = ModelName::parse("minilm").unwrap();
        let request = |id: &str| Request::text(RequestId::parse(id).unwrap(), "a sentence");
        let held = fleet.send(&model, &request("held")).await.unwrap();
        let failed = fleet.current();
        fail_fatally(&failed);
        // The premise: a fatally failed producer refuses every send.
        let topic = Namespace::default().topic(&model);
        let refused = failed.send_result(FutureRecord::<str, [u8]>::to(&topic).payload(&b"x"[..]));
        assert!(matches!(refused, Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), _))));

        fleet.send(&model, &request("after")).await.expect("sent through a fresh producer");
        let fresh = fleet.current();
        assert!(!Arc::ptr_eq(&failed, &fresh), "the failed producer was kept");
        assert_eq!(fresh.client().fatal_error(), None);
        drop(failed);
        // What the failed producer held fails its delivery instead of hanging.
        let outcome = tokio::time::timeout(Duration::from_secs(10), held).await.expect("the held delivery resolves");
        assert!(outcome.is_err(), "a message of the failed producer reported delivered");
    }

    #[tokio::test]
    async fn a_healthy_producer_is_kept() {
        let fleet = FleetProducer::new(&KafkaConfig::new("127.0.0.1:9"), "test").unwrap();
        let model = ModelName::parse("minilm").unwrap();
        let before = fleet.current();
        fleet.send(&model, &Request::text(RequestId::parse("one").unwrap(), "a sentence")).await.unwrap();
        assert!(Arc::ptr_eq(&before, &fleet.current()));
    }

    #[test]
    fn reconnects_back_off_a_second_unless_the_operator_says_otherwise() {
        const KEY: &str = "reconnect.backoff.max.ms";
        let ours = FleetProducer::new(&KafkaConfig::new("127.0.0.1:1"), "test").unwrap();
        assert_eq!(ours.client_config.get(KEY), Some("1000"));
        let mut kafka = KafkaConfig::new("127.0.0.1:1");
        kafka.extra.push((KEY.to_owned(), "5000".to_owned()));
        let theirs = FleetProducer::new(&kafka, "test").unwrap();
        assert_eq!(theirs.client_config.get(KEY), Some("5000"));
    }
}
