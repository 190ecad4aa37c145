//! `loadtest run` measures the release it is pointed at: a worker serving
//! under its own topic, group and key prefixes through a three-master Redis
//! Cluster, and a run given the same prefixes and `--redis-cluster` settings
//! reads every answer back (from keys in several slots), samples that
//! release's group lag and reads its workers' backlog report for admission.
//! Real broker, real Redis Cluster, the built `fleet-worker` (FLEET_BIN_DIR).

use fleet_connect::redis::RedisConfig;
use fleet_proto::{ModelName, Namespace};
use fleet_testkit::{Broker, RedisCluster};
use loadtest::fleet::{Binaries, LocalWorker};
use loadtest::profile::Profile;
use loadtest::runner::{self, AdmissionRule, RunConfig};
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_run_measures_a_prefixed_release_on_a_redis_cluster() {
    let broker = Broker::start();
    let cluster = RedisCluster::start(3);
    let names = Namespace::new("green.infer.", "green.fleet.", "green:").unwrap();
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics_in(&names, &model, 2).await;
    let seeds = cluster.urls().join(",");
    let prefixes = ["--topic-prefix", "green.infer.", "--group-prefix", "green.fleet.", "--redis-prefix", "green:"];
    let mut worker_args = vec!["--redis-cluster"];
    worker_args.extend(prefixes);
    let binaries = Binaries::from_env().expect("fleet-worker (run make setup)");
    let _worker = LocalWorker::start(&binaries, "minilm", &broker.addr, &seeds, &worker_args).expect("a worker");

    let corpus_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo-sentences.txt");
    let corpus: Vec<String> = std::fs::read_to_string(corpus_path).unwrap().lines().map(str::to_owned).collect();
    let redis = RedisConfig::cluster(&cluster.urls()).target().unwrap();
    let kafka = broker.kafka();
    let profile = Profile::Steady { rate: 10.0 };
    let config = RunConfig {
        names: names.clone(),
        admission: Some(AdmissionRule::PredictedWait),
        ..RunConfig::new(kafka, redis, model, profile, Duration::from_secs(8), corpus, "green-run".into())
    };
    let outcome = runner::run(config).await.expect("the run");
    let ledger = &outcome.ledger;
    println!("{}", ledger.result_line());
    assert!(ledger.sent >= 40, "only {} sent", ledger.sent);
    assert_eq!(ledger.lost(), 0, "{}", ledger.result_line());
    assert_eq!(ledger.ok, ledger.sent, "every answer read back from the cluster: {}", ledger.result_line());
    assert!(!outcome.lag.is_empty(), "the release's group lag was never sampled");
    assert!(!outcome.load.is_empty(), "the release's backlog report was never read");
}
