//! The precision a worker serves in, through the real worker, broker and
//! Redis: bf16 embeddings stay within cosine 0.999 of Python's fp32
//! reference, and `auto` on a CPU without bf16 features (said by
//! `--cpu-features none`, as on an older host) serves fp32.

mod common;

use common::{minilm, present_metric_value, serial, Broker, Redis, Worker};
use fleet_producer::summary::cosine;
use fleet_producer::{FleetProducer, Request, ResultClient};
use fleet_proto::{RequestId, Status};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A repository of its own: the exported version 1 under the shipped
/// config with `precision` set.
fn repo_with_precision(precision: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("fleet-precision-{precision}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("minilm")).unwrap();
    let exported = common::model_repo().join("minilm/1").canonicalize().expect("run make setup");
    std::os::unix::fs::symlink(exported, root.join("minilm/1")).unwrap();
    let shipped = std::fs::read_to_string(common::model_repo().join("minilm/config.toml")).unwrap();
    let config = shipped.replace("precision = \"auto\"", &format!("precision = \"{precision}\""));
    assert!(config.contains(&format!("precision = \"{precision}\"")), "the shipped config changed shape");
    std::fs::write(root.join("minilm/config.toml"), config).unwrap();
    root
}

/// (text, Python fp32 embedding) of the first `n` reference sentences.
fn reference(n: usize) -> Vec<(String, Vec<f32>)> {
    let raw = std::fs::read_to_string(common::model_repo().join("minilm/1/reference.json")).expect("run make setup");
    let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
    json["items"]
        .as_array()
        .unwrap()
        .iter()
        .take(n)
        .map(|item| {
            let embedding = item["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            (item["text"].as_str().unwrap().to_owned(), embedding)
        })
        .collect()
}

/// Sends the reference texts through a worker started with `args` on
/// `repo`; returns the smallest cosine to Python's fp32 embeddings and the
/// worker (still running, for its metrics).
async fn serve_reference(repo: &Path, args: &[&str], redis: &Redis, broker: &Broker) -> (f32, Worker) {
    broker.create_topics(&minilm(), 2).await;
    let mut all = vec!["--model-repo", repo.to_str().unwrap()];
    all.extend_from_slice(args);
    let worker = Worker::start("minilm", broker, redis, &all);
    worker.wait_until_serving(2).await;
    let producer = FleetProducer::new(&broker.kafka(), "precision-test").unwrap();
    let reference = reference(64);
    let mut ids = Vec::new();
    for (i, (text, _)) in reference.iter().enumerate() {
        let id = RequestId::parse(&format!("p-{i}")).unwrap();
        producer.send(&minilm(), &Request::text(id.clone(), text.clone())).await.unwrap().await.unwrap();
        ids.push(id);
    }
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let models = [minilm()];
    let waits = ids.iter().map(|id| results.wait(id, &models, Duration::from_secs(60)));
    let mut worst = 1.0f32;
    for ((answers, (text, expected)), id) in
        futures::future::join_all(waits).await.into_iter().zip(&reference).zip(&ids)
    {
        let answer = &answers.unwrap_or_else(|e| panic!("{id}: {e}"))["minilm"];
        assert_eq!(answer.status, Status::Ok, "{id}: {answer:?}");
        let output = answer.output.as_ref().unwrap();
        let got: Vec<f32> =
            output["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let cos = cosine(&got, expected);
        assert!(cos.is_finite(), "{text:?}");
        worst = worst.min(cos);
    }
    (worst, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bf16_worker_answers_within_cosine_0_999_of_the_fp32_reference() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let repo = repo_with_precision("bf16");
    let (worst, worker) = serve_reference(&repo, &[], &redis, &broker).await;
    eprintln!("bf16: worst cosine against Python's fp32 reference {worst}");
    assert!(worst >= 0.999, "bf16 embeddings: worst cosine {worst}");
    let scrape = worker.scrape().await;
    assert_eq!(
        present_metric_value(&scrape, "fleet_model_precision", &[("model", "minilm"), ("precision", "bf16")]),
        1.0
    );
    assert_eq!(present_metric_value(&scrape, "fleet_model_precision", &[("precision", "fp32")]), 0.0);
    let _ = std::fs::remove_dir_all(repo);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_on_a_cpu_without_bf16_serves_fp32() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let repo = repo_with_precision("auto");
    let (worst, worker) = serve_reference(&repo, &["--cpu-features", "none"], &redis, &broker).await;
    assert!(worst >= 0.9999, "fp32 embeddings: worst cosine {worst}");
    let scrape = worker.scrape().await;
    assert_eq!(
        present_metric_value(&scrape, "fleet_model_precision", &[("model", "minilm"), ("precision", "fp32")]),
        1.0
    );
    assert_eq!(present_metric_value(&scrape, "fleet_model_precision", &[("precision", "bf16")]), 0.0);
    let _ = std::fs::remove_dir_all(repo);
}
