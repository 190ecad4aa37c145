//! Sending many requests at once, as the tests do: texts as requests
//! `<prefix>-<n>`, all in flight together, done once the broker has every
//! one of them.

use crate::Broker;
use fleet_producer::{FleetProducer, Request};
use fleet_proto::{ModelName, Namespace, RequestId};

/// Sends `texts` to `model` under `names` as requests `<prefix>-<n>`, each
/// made by `shape` from a plain text request first (a lane, a job, a
/// deadline, where to answer), with many in flight; returns the ids once
/// every one is delivered.
pub async fn send_requests(
    broker: &Broker,
    names: &Namespace,
    model: &ModelName,
    prefix: &str,
    texts: &[String],
    shape: impl Fn(Request) -> Request,
) -> Vec<RequestId> {
    let producer = FleetProducer::new(&broker.kafka(), "tests").unwrap().with_namespace(names.clone());
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let id = RequestId::parse(&format!("{prefix}-{i}")).unwrap();
        let request = shape(Request::text(id.clone(), text.clone()));
        pending.push(producer.send(model, &request).await.unwrap());
        ids.push(id);
    }
    for delivered in futures::future::join_all(pending).await {
        delivered.expect("delivery");
    }
    ids
}

/// [`send_requests`] of plain text requests under the default names, with
/// `deadline_ms` when given.
pub async fn send_texts(
    broker: &Broker,
    model: &ModelName,
    prefix: &str,
    texts: &[String],
    deadline_ms: Option<u64>,
) -> Vec<RequestId> {
    send_requests(broker, &Namespace::default(), model, prefix, texts, |request| Request { deadline_ms, ..request })
        .await
}
