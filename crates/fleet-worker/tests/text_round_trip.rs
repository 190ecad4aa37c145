//! The walking skeleton end to end, with real parts: producer library →
//! nisshi → fleet-worker (libtorch, the exported MiniLM) → Redis.

mod common;

use common::{assert_committed_to_the_end, metric_value, serial, Broker, Redis, Worker};
use fleet_producer::summary::cosine;
use fleet_producer::{FleetProducer, Request, ResultClient};
use fleet_proto::{Lane, ModelName, Namespace, RequestId, Status};
use futures::future::join_all;
use redis::AsyncCommands;
use std::time::{Duration, Instant};

struct ReferenceItem {
    text: String,
    tokens: u64,
    embedding: Vec<f32>,
}

fn load_reference() -> Vec<ReferenceItem> {
    let path = common::model_repo().join("minilm/1/reference.json");
    let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run make setup)", path.display()));
    let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
    json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| ReferenceItem {
            text: item["text"].as_str().unwrap().to_owned(),
            tokens: item["tokens"].as_u64().unwrap(),
            embedding: item["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_exactly_one_ok_answer_that_matches_python() {
    let _serial = serial().await;
    let reference = load_reference();
    assert!(reference.len() >= 200, "the reference set has only {} sentences", reference.len());
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics(&model, 8).await;
    // fp32, whatever this CPU offers: the answers must match Python's fp32
    // outputs to 1e-4 (bf16 is held to its own bound in tests/precision.rs).
    let mut worker = Worker::start("minilm", &broker, &redis, &["--cpu-features", "none"]);
    worker.wait_until_serving(8).await;

    let producer = FleetProducer::new(&broker.kafka(), "text-round-trip-test").unwrap();
    let ids: Vec<RequestId> = (0..reference.len()).map(|i| RequestId::parse(&format!("rt-{i}")).unwrap()).collect();
    let mut deliveries = Vec::new();
    for (id, item) in ids.iter().zip(&reference) {
        deliveries.push(producer.send(&model, &Request::text(id.clone(), item.text.clone())).await.unwrap());
    }
    for delivered in join_all(deliveries).await {
        delivered.expect("delivery");
    }

    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let mut conn = redis.connection().await;
    let mut worst = 1.0f32;
    for (id, item) in ids.iter().zip(&reference) {
        let answers = results.wait(id, std::slice::from_ref(&model), Duration::from_secs(180)).await.unwrap();
        let answer = &answers["minilm"];
        assert_eq!(answer.status, Status::Ok, "{id}: {answer:?}");
        assert_eq!(answer.version, 1);
        let output = answer.output.as_ref().unwrap();
        assert_eq!(output["tokens"].as_u64(), Some(item.tokens), "{id}: token count differs from Python's");
        let embedding: Vec<f32> =
            output["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        assert_eq!(embedding.len(), 384);
        let cos = cosine(&embedding, &item.embedding);
        worst = worst.min(cos);
        assert!(cos >= 0.9999, "{id}: cosine {cos} against the Python reference for {:?}", item.text);
        let fields: usize = conn.hlen(Namespace::default().result_key(id)).await.unwrap();
        assert_eq!(fields, 1, "{id} has {fields} answers");
        let ttl: i64 = conn.ttl(Namespace::default().result_key(id)).await.unwrap();
        assert!((1..=30).contains(&ttl), "{id}: result TTL {ttl}");
    }
    eprintln!("worst cosine against the Python reference: {worst}");

    // Exactly one answer each: the worker counted as many ok answers as we sent.
    let expected = reference.len() as f64;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut ok = 0.0;
    while Instant::now() < deadline {
        ok = metric_value(&worker.scrape().await, "fleet_requests_total", &[("model", "minilm"), ("status", "ok")]);
        if ok >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ok, expected, "fleet_requests_total{{status=ok}}");

    let offsets = assert_committed_to_the_end(&broker, &model, Lane::Interactive, 8).await;
    assert_eq!(offsets.iter().map(|(_, high)| high).sum::<i64>(), reference.len() as i64);
    assert!(worker.stop().success(), "worker did not exit cleanly on SIGTERM");
}
