//! What operators and autoscalers read from a real worker: /healthz,
//! /ready (and what makes it fail), every metric the contract names, the
//! group's lag, and that the dashboard and alert rules query only metrics
//! a worker really exports.

mod common;

use common::{ledger, metric_value, send_texts, sentences, serial, Broker, Redis, Worker};
use fleet_proto::ModelName;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Every metric docs/metrics.md names that a CPU worker exports.
const CONTRACT: &[&str] = &[
    "fleet_requests_total",
    "fleet_ttl_dropped_total",
    "fleet_queue_depth",
    "fleet_batch_size",
    "fleet_batch_tokens",
    "fleet_padding_efficiency",
    "fleet_queue_wait_seconds",
    "fleet_inference_seconds",
    "fleet_e2e_seconds",
    "fleet_image_decode_bytes_in_use",
    "fleet_dlq_total",
    "fleet_errors_total",
    "fleet_model_version",
    "fleet_model_swaps_total",
    "fleet_model_load_failures_total",
    "fleet_in_flight_limit",
    "fleet_drain_rate",
    "fleet_oom_splits_total",
    "kafka_consumergroup_lag",
];

/// What the dashboard asks of others: producers' admission (where they
/// serve metrics) and kube-state-metrics' HPA status.
const NOT_A_WORKERS: &[&str] = &[
    "fleet_admission_refused_total",
    "fleet_admission_predicted_wait_seconds",
    "kube_horizontalpodautoscaler_status_desired_replicas",
    "kube_horizontalpodautoscaler_status_current_replicas",
];

/// Producer-side series docs/metrics.md names (the producer library
/// exports them where its application serves metrics).
const PRODUCERS: &[&str] =
    &["fleet_admission_refused_total", "fleet_admission_predicted_wait_seconds", "fleet_producer_replaced_total"];

/// Words of docs/metrics.md shaped like metric names that are not series:
/// the crate fleet_ops, the exporter kafka_exporter, the HPA's external
/// metric kafka_lag (prometheus-adapter's name for the lag), a name prefix.
const NOT_SERIES: &[&str] = &["fleet_ops", "kafka_exporter", "kafka_lag", "nv_gpu_memory_"];

/// Every metric name docs/metrics.md mentions.
fn names_in_metrics_doc() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md")).unwrap();
    let mut names = BTreeSet::new();
    for word in doc.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if ["fleet_", "kafka_", "nv_", "process_"].iter().any(|p| word.starts_with(p)) && !NOT_SERIES.contains(&word) {
            names.insert(word.to_owned());
        }
    }
    names
}

/// Only on CUDA: absent on CPU, not zero.
const GPU_ONLY: &[&str] = &["nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"];

/// Metric names in a Prometheus text scrape (histogram series folded into
/// their base name).
fn exported_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|name| {
            ["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix)).unwrap_or(name).to_owned()
        })
        .collect()
}

/// The metric names deploy/ queries (dashboard panels and alert rules), as
/// `deploy/tests/dashboard_metrics.py` extracts them from the PromQL.
fn names_deploy_queries() -> BTreeSet<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = std::process::Command::new("python3")
        .arg(root.join("deploy/tests/dashboard_metrics.py"))
        .current_dir(&root)
        .output()
        .expect("running deploy/tests/dashboard_metrics.py");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_health_readiness_and_every_contract_metric() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics(&model, 8).await;
    // librdkafka's statistics every second, not every 10 s: the scrape
    // below waits for their series.
    let worker = Worker::start("minilm", &broker, &redis, &["--kafka-property", "statistics.interval.ms=1000"]);

    let (status, body) = worker.wait_for_status("/healthz", 200, Duration::from_secs(60)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = worker.wait_for_status("/ready", 200, Duration::from_secs(60)).await;
    assert_eq!(status, 200, "not ready: {body}");

    let ids = send_texts(&broker, &model, "ep", &sentences()[..40], None).await;
    let counts = ledger(&redis, &model, &ids, Duration::from_secs(60)).await;
    assert_eq!(counts.get("ok"), Some(&40), "{counts:?}");

    // Lag: the worker reports every partition of both lanes' topics (each
    // has 8; the bulk lane's may be published a tick after the interactive
    // one's); once it has committed past its answers, the sum falls to zero.
    let deadline = Instant::now() + Duration::from_secs(30);
    let partitions_of = |scrape: &str, topic: &str| {
        let label = format!("topic=\"{topic}\"");
        scrape.lines().filter(|l| l.starts_with("kafka_consumergroup_lag{") && l.contains(&label)).count()
    };
    let scrape = loop {
        let scrape = worker.scrape().await;
        let partitions = (partitions_of(&scrape, "infer.minilm"), partitions_of(&scrape, "infer.minilm.bulk"));
        let sum = metric_value(&scrape, "kafka_consumergroup_lag_sum", &[("consumergroup", "fleet.minilm")]);
        // The counter moves just after the answer is written; wait for both.
        let ok = metric_value(&scrape, "fleet_requests_total", &[("model", "minilm"), ("status", "ok")]);
        let statistics = scrape.contains("fleet_kafka_fetch_queue_messages{");
        if (partitions == (8, 8) && sum == 0.0 && ok == 40.0 && statistics) || Instant::now() > deadline {
            assert_eq!(partitions, (8, 8), "one lag series per partition of each lane:\n{scrape}");
            assert_eq!(sum, 0.0, "lag after every answer is committed");
            assert!(statistics, "no librdkafka statistics in the scrape:\n{scrape}");
            break scrape;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    let exported = exported_names(&scrape);
    for name in CONTRACT {
        assert!(exported.contains(*name), "{name} missing from the scrape:\n{scrape}");
    }
    for name in GPU_ONLY {
        assert!(!exported.contains(*name), "{name} exported by a CPU worker");
    }
    assert_eq!(metric_value(&scrape, "fleet_requests_total", &[("model", "minilm"), ("status", "ok")]), 40.0);
    assert_eq!(metric_value(&scrape, "fleet_worker_ready", &[("model", "minilm")]), 1.0);
    // The exporter labels every series with the model, lag and decode
    // bytes included (set once at start, not at each call site).
    let unlabelled: Vec<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|l| !l.contains("model=\"minilm\""))
        .collect();
    assert!(unlabelled.is_empty(), "series without model=\"minilm\": {unlabelled:?}");

    // The dashboard and the alert rules ask only for what exists (GPU
    // series exist on CUDA workers; `up` is Prometheus' own).
    let unknown: Vec<String> = names_deploy_queries()
        .into_iter()
        .filter(|name| {
            !exported.contains(name)
                && !GPU_ONLY.contains(&name.as_str())
                && !NOT_A_WORKERS.contains(&name.as_str())
                && name != "up"
        })
        .collect();
    assert!(unknown.is_empty(), "deploy/ queries metrics no worker exports: {unknown:?}");

    // docs/metrics.md and the scrape agree both ways: every series a worker
    // exports is documented, every documented worker series is exported.
    let documented = names_in_metrics_doc();
    let undocumented: Vec<&String> = exported.iter().filter(|name| !documented.contains(*name)).collect();
    assert!(undocumented.is_empty(), "exported but not in docs/metrics.md: {undocumented:?}");
    let folded = |name: &str| exported_names(&format!("{name} 0")).into_iter().next().unwrap_or_default();
    let missing: Vec<&String> = documented
        .iter()
        .filter(|name| !exported.contains(&folded(name)))
        .filter(|name| !GPU_ONLY.contains(&name.as_str()) && !PRODUCERS.contains(&name.as_str()))
        .collect();
    assert!(missing.is_empty(), "in docs/metrics.md but not exported by a worker: {missing:?}");

    // Redis stops answering: the worker says it is not ready, and why; it
    // comes back by itself.
    redis.freeze();
    let (status, body) = worker.wait_for_status("/ready", 503, Duration::from_secs(30)).await;
    redis.thaw();
    assert_eq!(status, 503, "still ready with Redis frozen");
    assert!(body.contains("redis"), "{body}");
    let (status, _) = worker.wait_for_status("/healthz", 200, Duration::from_secs(5)).await;
    assert_eq!(status, 200, "a Redis outage is no reason to restart the worker");
    let (status, body) = worker.wait_for_status("/ready", 200, Duration::from_secs(30)).await;
    assert_eq!(status, 200, "not ready again after Redis returned: {body}");
}
