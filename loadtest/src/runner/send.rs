//! The run's sender: each request at its arrival time, without ever
//! waiting for an answer; what happened to each comes back as [`Event`]s.

use super::ImageInput;
use fleet_producer::{FleetProducer, Request, SendError};
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, RequestId};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What became of a request, as the sender and its delivery reports learn it.
pub(super) enum Event {
    Sent {
        index: usize,
        at_s: f64,
    },
    NotSent {
        index: usize,
    },
    /// The broker has it (in `partition`), or refused it (`None`).
    Delivered {
        index: usize,
        partition: Option<i32>,
    },
    SenderDone,
}

/// What a run sends: a text per request, or real images in turn.
pub(super) enum Payloads {
    Texts(Vec<String>),
    Images(Vec<ImageInput>),
}

impl Payloads {
    fn request(&self, index: usize, id: RequestId) -> Request {
        match self {
            Self::Texts(texts) => Request::text(id, texts[index].clone()),
            Self::Images(images) => {
                let image = &images[index % images.len()];
                Request::image(id, image.content_type, image.bytes.as_ref().clone())
            }
        }
    }
}

pub(super) struct SendPlan {
    pub(super) producer: Arc<FleetProducer>,
    pub(super) model: ModelName,
    pub(super) arrivals: Vec<f64>,
    pub(super) payloads: Payloads,
    pub(super) ids: Vec<RequestId>,
    pub(super) ttl: Option<Duration>,
    pub(super) start: Instant,
    pub(super) events: mpsc::UnboundedSender<Event>,
}

/// Sends each request at its arrival time; delivery reports come back as
/// events from their own tasks, so a slow broker never delays the clock.
pub(super) async fn send_all(plan: SendPlan) {
    let SendPlan { producer, model, arrivals, payloads, ids, ttl, start, events } = plan;
    for (index, (at, id)) in arrivals.iter().zip(ids).enumerate() {
        tokio::time::sleep_until(start + Duration::from_secs_f64(*at)).await;
        let mut request = payloads.request(index, id);
        if let Some(ttl) = ttl {
            request.deadline_ms = Some(now_ms() + ttl.as_millis() as u64);
        }
        match producer.send(&model, &request).await {
            Ok(delivery) => {
                let _ = events.send(Event::Sent { index, at_s: start.elapsed().as_secs_f64() });
                let events = events.clone();
                // The producer lives until every delivery is known: dropped
                // earlier (a burst is sent within milliseconds), it would
                // purge what it still holds.
                let producer = producer.clone();
                tokio::spawn(async move {
                    let delivered = delivery.await;
                    drop(producer);
                    if let Err(e) = &delivered {
                        tracing::warn!(error = %e, "delivery failed");
                    }
                    let partition = delivered.ok().map(|d| d.partition);
                    let _ = events.send(Event::Delivered { index, partition });
                });
            }
            Err(e) => {
                match e {
                    // Admission's refusals are the point of some runs: counted, not logged one by one.
                    SendError::Overloaded(refused) => tracing::debug!(%refused, "refused by admission"),
                    other => tracing::warn!(error = %other, "send failed"),
                }
                let _ = events.send(Event::Sent { index, at_s: start.elapsed().as_secs_f64() });
                let _ = events.send(Event::NotSent { index });
            }
        }
    }
    let _ = events.send(Event::SenderDone);
}
