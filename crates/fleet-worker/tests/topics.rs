//! The fleet's topics against a real broker: created with the broker's
//! default replication factor unless one is asked, grown to more partitions
//! when asked (never shrunk), and a setting that differs is reported, not
//! changed. What `fleet-produce topics` and the chart's topic job run.

use fleet_producer::topics::{ensure_topics, TopicChange, TopicError, TopicSettings};
use fleet_proto::{ModelName, Namespace};
use fleet_testkit::Broker;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::Duration;

fn partitions(broker: &Broker, topic: &str) -> usize {
    let client: BaseConsumer = broker.kafka().client_config().create().unwrap();
    let metadata = client.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    metadata.topics()[0].partitions().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_grown_never_shrunk_and_differences_reported() {
    let broker = Broker::start();
    let (names, model) = (Namespace::default(), ModelName::parse("minilm").unwrap());
    let (topic, dlq) = (names.topic(&model), names.dlq_topic(&model));
    let ensure = |settings| {
        let kafka = broker.kafka();
        let (names, model) = (names.clone(), model.clone());
        async move { ensure_topics(&kafka, &names, &model, settings).await }
    };
    let asked = |partitions| TopicSettings { partitions, ..TopicSettings::default() };

    // No replication factor asked: the broker's default (-1) is accepted.
    let first = ensure(asked(4)).await.unwrap();
    assert!(first.contains(&TopicChange::Created { topic: topic.clone(), partitions: 4 }), "{first:?}");
    assert!(first.contains(&TopicChange::Created { topic: dlq.clone(), partitions: 1 }), "{first:?}");
    assert_eq!(partitions(&broker, &topic), 4);

    let same = ensure(asked(4)).await.unwrap();
    assert!(same.contains(&TopicChange::Unchanged { topic: topic.clone() }), "{same:?}");

    let fewer = ensure(asked(2)).await.unwrap();
    assert!(fewer.contains(&TopicChange::KeptMorePartitions { topic: topic.clone(), have: 4, asked: 2 }), "{fewer:?}");
    assert_eq!(partitions(&broker, &topic), 4, "partitions were removed");

    // A setting of an existing topic that differs is reported, not changed.
    let longer = TopicSettings { retention_ms: Some(3_600_000), ..asked(4) };
    let differs = ensure(longer).await.unwrap();
    assert!(
        differs.iter().any(|c| matches!(c, TopicChange::ConfigDiffers { topic: t, name, asked, .. }
            if *t == topic && name == "retention.ms" && asked == "3600000")),
        "{differs:?}"
    );

    // More partitions: added where the broker supports CreatePartitions;
    // where it does not (nisshi 0.8), an error that says what to do.
    match ensure(asked(8)).await {
        Ok(grown) => {
            assert!(grown.contains(&TopicChange::Grown { topic: topic.clone(), from: 4, to: 8 }), "{grown:?}");
            assert_eq!(partitions(&broker, &topic), 8);
        }
        Err(error @ TopicError::CannotGrow { .. }) => {
            let message = error.to_string();
            assert!(message.contains(&topic) && message.contains("4 -> 8"), "{message}");
            assert_eq!(partitions(&broker, &topic), 4);
        }
        Err(other) => panic!("growing failed for another reason: {other}"),
    }
}
