//! The `fleet-lag` exporter against a real broker: lag is what the group
//! has not committed, and a group that never committed reads as all of it.
//! Both lanes of a model are exported, each on its own topic (`topic`, as
//! kafka_exporter labels it, plus `lane`), and one lane's backlog never
//! shows in the other's series; a bulk topic that does not exist reads 0 and
//! leaves the interactive series and readiness alone.

use fleet_producer::{FleetProducer, Request};
use fleet_proto::{Lane, ModelName, Namespace, RequestId};
use fleet_testkit::{free_port, http_get, log_file, metric_value, present_metric_value, Broker, Killed};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

async fn produce(broker: &Broker, model: &ModelName, lane: Lane, count: usize) {
    let producer = FleetProducer::new(&broker.kafka(), "lag-test").unwrap();
    let mut pending = Vec::new();
    for i in 0..count {
        let id = RequestId::parse(&format!("lag-{lane}-{i}")).unwrap();
        let request = Request::text(id, format!("text {i}")).in_lane(lane);
        pending.push(producer.send(model, &request).await.unwrap());
    }
    for delivered in futures::future::join_all(pending).await {
        delivered.expect("delivered");
    }
}

/// Reads exactly `count` messages of `topic` as group `group` and commits
/// past them (on that topic only).
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

fn start_exporter(broker: &Broker, model: &ModelName) -> (Killed, SocketAddr) {
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
    (exporter, addr)
}

async fn scrape(addr: SocketAddr) -> String {
    let scraped = tokio::task::spawn_blocking(move || http_get(addr, "/metrics")).await.unwrap();
    scraped.map(|(_, body)| body).unwrap_or_default()
}

/// The summed lag of one lane's topic as the scrape has it (0 if absent).
fn lane_sum(scrape: &str, group: &str, topic: &str, lane: Lane) -> f64 {
    metric_value(
        scrape,
        "kafka_consumergroup_lag_sum",
        &[("consumergroup", group), ("topic", topic), ("lane", lane.as_str())],
    )
}

/// Scrapes until both lanes' summed lags read `want` (interactive, bulk);
/// returns the scrape.
async fn wait_for_lags(addr: SocketAddr, model: &ModelName, want: (f64, f64)) -> String {
    let names = Namespace::default();
    let group = names.consumer_group(model);
    let (interactive, bulk) = (names.lane_topic(model, Lane::Interactive), names.lane_topic(model, Lane::Bulk));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = scrape(addr).await;
        let read =
            (lane_sum(&body, &group, &interactive, Lane::Interactive), lane_sum(&body, &group, &bulk, Lane::Bulk));
        if read == want && body.contains("kafka_consumergroup_lag_sum{") {
            return body;
        }
        assert!(Instant::now() < deadline, "lag sums (interactive, bulk) stayed {read:?}, wanted {want:?}:\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The per-partition lags of one lane's topic.
fn per_partition(scrape: &str, group: &str, topic: &str, lane: Lane) -> Vec<f64> {
    (0..PARTITIONS)
        .map(|p| {
            present_metric_value(
                scrape,
                "kafka_consumergroup_lag",
                &[("consumergroup", group), ("topic", topic), ("partition", &p.to_string()), ("lane", lane.as_str())],
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn exported_lag_is_what_the_group_has_not_committed_on_each_lane() {
    let broker = Broker::start();
    let model = ModelName::parse("lagtest").unwrap();
    // The model's topics: infer.lagtest, infer.lagtest.bulk (and the dlq).
    broker.create_topics(&model, PARTITIONS).await;
    produce(&broker, &model, Lane::Interactive, 40).await;
    produce(&broker, &model, Lane::Bulk, 24).await;

    let (exporter, addr) = start_exporter(&broker, &model);
    let names = Namespace::default();
    let group = names.consumer_group(&model);
    let interactive = names.lane_topic(&model, Lane::Interactive);
    let bulk = names.lane_topic(&model, Lane::Bulk);
    assert_eq!((interactive.as_str(), bulk.as_str()), ("infer.lagtest", "infer.lagtest.bulk"));

    // Nobody has consumed: each lane's lag is every message of its topic,
    // not zero, and neither lane counts the other's messages.
    let scrape = wait_for_lags(addr, &model, (40.0, 24.0)).await;
    let lags = per_partition(&scrape, &group, &interactive, Lane::Interactive);
    assert_eq!(lags.iter().sum::<f64>(), 40.0, "{lags:?}");
    assert!(lags.iter().filter(|&&lag| lag > 0.0).count() > 1, "keys spread over partitions");
    let lags = per_partition(&scrape, &group, &bulk, Lane::Bulk);
    assert_eq!(lags.iter().sum::<f64>(), 24.0, "{lags:?}");
    // The interactive series keep the meaning they had before lanes: the
    // topic infer.<model> alone (what the HPA selects on).
    let by_topic = metric_value(
        &scrape,
        "kafka_consumergroup_lag_sum",
        &[("consumergroup", group.as_str()), ("topic", interactive.as_str())],
    );
    assert_eq!(by_topic, 40.0);
    let topic_label = format!("topic=\"{interactive}\"");
    let mislabelled = scrape
        .lines()
        .filter(|l| l.starts_with("kafka_consumergroup_lag") && l.contains(&topic_label))
        .any(|l| !l.contains("lane=\"interactive\""));
    assert!(!mislabelled, "the interactive topic not labelled lane=interactive:\n{scrape}");

    // The group commits on one lane: only that lane's lag moves.
    consume_and_commit(&broker, &group, &interactive, 15);
    wait_for_lags(addr, &model, (25.0, 24.0)).await;
    consume_and_commit(&broker, &group, &bulk, 10);
    wait_for_lags(addr, &model, (25.0, 14.0)).await;

    let ready = tokio::task::spawn_blocking(move || http_get(addr, "/ready")).await.unwrap();
    assert_eq!(ready.map(|(status, _)| status), Some(200));
    drop(exporter);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bulk_topic_reads_zero_and_leaves_the_interactive_lane_alone() {
    let broker = Broker::start();
    let model = ModelName::parse("nobulk").unwrap();
    let names = Namespace::default();
    let (group, interactive) = (names.consumer_group(&model), names.lane_topic(&model, Lane::Interactive));
    // Only infer.nobulk, as a release made before lanes has it.
    let admin: AdminClient<DefaultClientContext> = broker.kafka().client_config().create().unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(&interactive, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .unwrap();
    assert!(created.iter().all(|outcome| outcome.is_ok()), "{created:?}");
    produce(&broker, &model, Lane::Interactive, 12).await;

    let (exporter, addr) = start_exporter(&broker, &model);
    let scrape = wait_for_lags(addr, &model, (12.0, 0.0)).await;
    let lags = per_partition(&scrape, &group, &interactive, Lane::Interactive);
    assert_eq!(lags.iter().sum::<f64>(), 12.0, "{lags:?}");
    // The bulk lane is there, reading 0 ("nothing waits"), not missing:
    // a scaler on it gets a value, not an error.
    let bulk = names.lane_topic(&model, Lane::Bulk);
    let sum = present_metric_value(
        &scrape,
        "kafka_consumergroup_lag_sum",
        &[("consumergroup", group.as_str()), ("topic", bulk.as_str()), ("lane", "bulk")],
    );
    assert_eq!(sum, 0.0);

    // Ready: a bulk topic nobody created is not a failed measurement.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = tokio::task::spawn_blocking(move || http_get(addr, "/ready")).await.unwrap();
        if ready.as_ref().map(|(status, _)| *status) == Some(200) {
            break;
        }
        assert!(Instant::now() < deadline, "fleet-lag not ready without a bulk topic: {ready:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And the interactive lane keeps being measured.
    consume_and_commit(&broker, &group, &interactive, 5);
    wait_for_lags(addr, &model, (7.0, 0.0)).await;
    drop(exporter);
}
