//! Faults the chaos tests make on the broker's side of the worker: its
//! DLQ topic replaced by one too small for a letter, and a group member
//! that takes partitions and gives them back. Apart from the tests, which
//! read as what happens and what must hold.

use crate::common::minilm;
use fleet_proto::Namespace;
use fleet_testkit::Broker;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use std::time::Duration;

/// Replaces the DLQ topic by one whose messages may be at most `max_bytes`.
pub async fn shrink_dlq(broker: &Broker, max_bytes: u64) {
    let admin: AdminClient<DefaultClientContext> = broker.kafka().client_config().create().unwrap();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let dlq = Namespace::default().dlq_topic(&minilm());
    admin.delete_topics(&[&dlq], &options).await.unwrap();
    let limit = max_bytes.to_string();
    let topic = NewTopic::new(&dlq, 1, TopicReplication::Fixed(1)).set("max.message.bytes", &limit);
    let created = admin.create_topics(&[topic], &options).await.unwrap();
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

/// A group member that only takes partitions and gives them back: it joins
/// with the workers' assignor, holds its share for `hold`, and leaves
/// without reading or committing anything.
pub async fn come_and_go(broker: &Broker, hold: Duration) {
    let member: StreamConsumer = broker
        .kafka()
        .client_config()
        .set("group.id", Namespace::default().consumer_group(&minilm()))
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    member.subscribe(&[&Namespace::default().topic(&minilm())]).unwrap();
    // Polling serves the group protocol; messages it fetches are dropped
    // uncommitted (the workers read them again).
    let _ = tokio::time::timeout(hold, async {
        loop {
            let _ = member.recv().await;
        }
    })
    .await;
    member.unsubscribe();
    tokio::task::spawn_blocking(move || drop(member)).await.unwrap();
}
