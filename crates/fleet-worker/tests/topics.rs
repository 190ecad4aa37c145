//! The fleet's topics against a real broker: both lanes' topics and the DLQ
//! created with the broker's default replication factor unless one is asked,
//! the lanes grown to more partitions when asked (never shrunk), and a
//! setting that differs is reported, not changed, each lane's retention its
//! own. What `fleet-produce topics` and the chart's topic job run.

use fleet_producer::topics::{ensure_topics, TopicChange, TopicError, TopicSettings};
use fleet_proto::{Lane, ModelName, Namespace};
use fleet_testkit::Broker;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::Duration;

/// The retention.ms `changes` report asked of `topic` and not found there.
fn retention_asked(changes: &[TopicChange], topic: &str) -> Option<String> {
    changes.iter().find_map(|change| match change {
        TopicChange::ConfigDiffers { topic: t, name, asked, .. } if t == topic && name == "retention.ms" => {
            Some(asked.clone())
        }
        _ => None,
    })
}

fn partitions(broker: &Broker, topic: &str) -> usize {
    let client: BaseConsumer = broker.kafka().client_config().create().unwrap();
    let metadata = client.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    metadata.topics()[0].partitions().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_grown_never_shrunk_and_differences_reported() {
    let broker = Broker::start();
    let (names, model) = (Namespace::default(), ModelName::parse("minilm").unwrap());
    let (topic, bulk, dlq) = (names.topic(&model), names.lane_topic(&model, Lane::Bulk), names.dlq_topic(&model));
    let ensure = |settings| {
        let kafka = broker.kafka();
        let (names, model) = (names.clone(), model.clone());
        async move { ensure_topics(&kafka, &names, &model, settings).await }
    };
    let asked = |partitions| TopicSettings { partitions, ..TopicSettings::default() };

    // No replication factor asked: the broker's default (-1) is accepted.
    let first = ensure(asked(4)).await.unwrap();
    assert_eq!(first.len(), 6, "{first:?}");
    for answers in [names.answers_topic(&model, Lane::Interactive), names.answers_topic(&model, Lane::Bulk)] {
        assert!(first.contains(&TopicChange::Created { topic: answers.clone(), partitions: 4 }), "{first:?}");
    }
    assert!(first.contains(&TopicChange::Created { topic: names.jobs_topic(), partitions: 1 }), "{first:?}");
    assert!(first.contains(&TopicChange::Created { topic: topic.clone(), partitions: 4 }), "{first:?}");
    assert!(first.contains(&TopicChange::Created { topic: bulk.clone(), partitions: 4 }), "{first:?}");
    assert!(first.contains(&TopicChange::Created { topic: dlq.clone(), partitions: 1 }), "{first:?}");
    assert_eq!((partitions(&broker, &topic), partitions(&broker, &bulk)), (4, 4));

    let same = ensure(asked(4)).await.unwrap();
    for name in [&topic, &bulk] {
        assert!(same.contains(&TopicChange::Unchanged { topic: name.clone() }), "{name}: {same:?}");
    }

    let fewer = ensure(asked(2)).await.unwrap();
    for name in [&topic, &bulk] {
        assert!(
            fewer.contains(&TopicChange::KeptMorePartitions { topic: name.clone(), have: 4, asked: 2 }),
            "{name}: {fewer:?}"
        );
        assert_eq!(partitions(&broker, name), 4, "partitions of {name} were removed");
    }

    // A setting of an existing topic that differs is reported, not changed;
    // each lane's retention is its own.
    let longer = TopicSettings { retention_ms: Some(3_600_000), ..asked(4) };
    let differs = ensure(longer).await.unwrap();
    assert_eq!(retention_asked(&differs, &topic).as_deref(), Some("3600000"), "{differs:?}");
    assert_eq!(retention_asked(&differs, &bulk), None, "the bulk lane took the interactive retention: {differs:?}");
    let longer_bulk = TopicSettings { bulk_retention_ms: Some(86_400_000), ..asked(4) };
    let differs = ensure(longer_bulk).await.unwrap();
    assert_eq!(retention_asked(&differs, &bulk).as_deref(), Some("86400000"), "{differs:?}");
    assert_eq!(retention_asked(&differs, &topic), None, "{differs:?}");

    // More partitions: added where the broker supports CreatePartitions;
    // where it does not (nisshi 0.8), an error that says what to do.
    match ensure(asked(8)).await {
        Ok(grown) => {
            for name in [&topic, &bulk] {
                assert!(grown.contains(&TopicChange::Grown { topic: name.clone(), from: 4, to: 8 }), "{grown:?}");
                assert_eq!(partitions(&broker, name), 8);
            }
        }
        Err(error @ TopicError::CannotGrow { .. }) => {
            let message = error.to_string();
            assert!(message.contains(&topic) && message.contains("4 -> 8"), "{message}");
            assert_eq!(partitions(&broker, &topic), 4);
        }
        Err(other) => panic!("growing failed for another reason: {other}"),
    }
}
