//! The `fleet-lag` exporter against a real broker: lag is what the group
//! has not committed, and a group that never committed reads as all of it.

use fleet_producer::{FleetProducer, Request};
use fleet_proto::{ModelName, Namespace, RequestId};
use fleet_testkit::{free_port, http_get, log_file, metric_value, Broker, Killed};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

async fn produce(broker: &Broker, model: &ModelName, count: usize) {
    let producer = FleetProducer::new(&broker.kafka(), "lag-test").unwrap();
    let mut pending = Vec::new();
    for i in 0..count {
        let request = Request::text(RequestId::parse(&format!("lag-{i}")).unwrap(), format!("text {i}"));
        pending.push(producer.send(model, &request).await.unwrap());
    }
    for delivered in futures::future::join_all(pending).await {
        delivered.expect("delivered");
    }
}

/// Reads exactly `count` messages as group `group` and commits past them.
fn consume_and_commit(broker: &Broker, group: &str, topic: &str, count: usize) {
    let consumer: BaseConsumer = broker
        .kafka()
        .client_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut read = 0;
    while read < count {
        assert!(Instant::now() < deadline, "read only {read} of {count}");
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.unwrap();
            next.insert(message.partition(), message.offset() + 1);
            read += 1;
        }
    }
    let mut offsets = TopicPartitionList::new();
    for (partition, offset) in next {
        offsets.add_partition_offset(topic, partition, Offset::Offset(offset)).unwrap();
    }
    consumer.commit(&offsets, CommitMode::Sync).unwrap();
}

/// Scrapes until the group's summed lag reads `want`; returns the scrape.
async fn wait_for_lag(addr: SocketAddr, group: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let scrape = tokio::task::spawn_blocking(move || http_get(addr, "/metrics")).await.unwrap();
        let body = scrape.map(|(_, body)| body).unwrap_or_default();
        let sum = metric_value(&body, "kafka_consumergroup_lag_sum", &[("consumergroup", group)]);
        if sum == want {
            return body;
        }
        assert!(Instant::now() < deadline, "lag sum stayed {sum}, wanted {want}:\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn exported_lag_is_what_the_group_has_not_committed() {
    let broker = Broker::start();
    let model = ModelName::parse("lagtest").unwrap();
    broker.create_topics(&model, PARTITIONS).await;
    produce(&broker, &model, 40).await;

    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let exporter = Killed(
        Command::new(env!("CARGO_BIN_EXE_fleet-lag"))
            .args(["serve", "--brokers", &broker.addr, "--model", model.as_str()])
            .args(["--metrics-addr", &addr.to_string(), "--interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(log_file("fleet-lag"))
            .spawn()
            .unwrap(),
    );
    let group = Namespace::default().consumer_group(&model);

    // Nobody has consumed: the lag is every message, not zero.
    let scrape = wait_for_lag(addr, &group, 40.0).await;
    let per_partition: Vec<f64> = (0..PARTITIONS)
        .map(|p| {
            metric_value(
                &scrape,
                "kafka_consumergroup_lag",
                &[("consumergroup", &group), ("partition", &p.to_string())],
            )
        })
        .collect();
    assert_eq!(per_partition.iter().sum::<f64>(), 40.0, "{per_partition:?}");
    assert!(per_partition.iter().filter(|&&lag| lag > 0.0).count() > 1, "keys spread over partitions");

    consume_and_commit(&broker, &group, &Namespace::default().topic(&model), 15);
    wait_for_lag(addr, &group, 25.0).await;
    let ready = tokio::task::spawn_blocking(move || http_get(addr, "/ready")).await.unwrap();
    assert_eq!(ready.map(|(status, _)| status), Some(200));
    drop(exporter);
}
