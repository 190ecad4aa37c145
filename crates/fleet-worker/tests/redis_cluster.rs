//! One release under its own prefixes (topics, consumer group, Redis keys)
//! served through a real Redis Cluster of three masters: the worker writes
//! each answer with one script over the request's two hash-tagged keys (one
//! slot), the feature cache's lookups span slots, the backlog report is
//! read by admission, and clients (Rust, and Python's redis-py
//! RedisCluster) wait with BLPOP through the cluster.

mod common;

use common::{send_requests, sentences, serial, Worker};
use fleet_connect::redis::RedisConfig;
use fleet_producer::{admission, ResultClient};
use fleet_proto::{ModelName, Namespace, Status};
use fleet_testkit::{Broker, RedisCluster};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_its_own_prefixes_is_served_through_a_redis_cluster() {
    let _serial = serial().await;
    let broker = Broker::start();
    let cluster = RedisCluster::start(3);
    let names = Namespace::new("blue.infer.", "blue.fleet.", "blue:").unwrap();
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics_in(&names, &model, 2).await;
    let seeds = cluster.urls().join(",");
    let worker = Worker::start_with_redis_args(
        "minilm",
        &broker,
        &[
            "--redis",
            &seeds,
            "--redis-cluster",
            "--topic-prefix",
            "blue.infer.",
            "--group-prefix",
            "blue.fleet.",
            "--redis-prefix",
            "blue:",
        ],
    );
    worker.wait_until_serving(2).await;

    let texts = sentences()[..24].to_vec();
    let ids = send_requests(&broker, &names, &model, "cluster", &texts, |request| request).await;
    let target = RedisConfig::cluster(&cluster.urls()).target().unwrap();
    let results = ResultClient::connect_to(&target, names.clone()).await.unwrap();
    let models = [model.clone()];
    // BLPOP through the cluster, then all at once.
    let first = results.wait(&ids[0], &models, Duration::from_secs(60)).await.unwrap();
    assert_eq!(first["minilm"].status, Status::Ok);
    for (id, outcome) in ids.iter().zip(results.wait_all(&ids, &models, Duration::from_secs(60)).await) {
        assert_eq!(outcome.unwrap()["minilm"].status, Status::Ok, "{id}");
    }

    // The requests' keys landed on more than one node, and only under the
    // release's prefix.
    let mut nodes_with_results = 0;
    for node in &cluster.nodes {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut node.connection().await).await.unwrap();
        assert!(keys.iter().all(|k| k.starts_with("blue:")), "a key outside the prefix: {keys:?}");
        nodes_with_results += usize::from(keys.iter().any(|k| k.starts_with("blue:result:{")));
    }
    assert!(nodes_with_results >= 2, "all 24 requests hashed to one node");

    // The same texts again: every one a feature-cache hit across slots.
    let again = send_requests(&broker, &names, &model, "cluster-again", &texts, |request| request).await;
    for outcome in results.wait_all(&again, &models, Duration::from_secs(60)).await {
        assert_eq!(outcome.unwrap()["minilm"].status, Status::Ok);
    }
    let hits = worker
        .wait_for_metric("fleet_feature_cache_hits_total", &[("model", "minilm")], 24.0, Duration::from_secs(30))
        .await;
    assert_eq!(hits, 24.0);

    // The Python client through the cluster (redis-py's RedisCluster), with
    // the release's prefixes.
    let script = "import sys; from fleet_client import FleetClient\n\
        c = FleetClient(sys.argv[1], sys.argv[2], cluster=True, topic_prefix='blue.infer.', redis_prefix='blue:')\n\
        c.send_text('minilm', 'cluster-py', 'A client in another language.'); c.flush()\n\
        a = c.wait('cluster-py', ['minilm'], timeout_s=60)['minilm']\n\
        reports = c._redis.hgetall(c.backlog_key('minilm'))\n\
        print(a['status'], len(a['output']['embedding']), c.admit('minilm') is None, len(reports) > 0)";
    let (brokers, seed) = (broker.addr.clone(), cluster.urls()[0].clone());
    let output = tokio::task::spawn_blocking(move || {
        // The installed package (make setup), not the checkout's file.
        std::process::Command::new("python3")
            .args(["-P", "-c", script, &brokers, &seed])
            .current_dir(std::env::temp_dir())
            .output()
            .expect("running python3")
    })
    .await
    .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    // admit() also admits when Redis cannot be read: the backlog report is
    // read directly too (an error there raises), so the admission really
    // went through the cluster.
    assert_eq!(printed.trim(), "ok 384 True True");

    // Admission reads the worker's backlog report through the cluster.
    let mut conn = target.connection(Duration::from_secs(2), Some(Duration::from_secs(2))).await.unwrap();
    let started = Instant::now();
    while admission::read_load(&mut conn, &names.backlog_key(&model)).await.unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(30), "no backlog report under {}", names.backlog_key(&model));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Lag is labelled with the release's group (measured every few seconds).
    let started = Instant::now();
    let labelled = |scrape: &str| {
        scrape
            .lines()
            .any(|l| l.starts_with("kafka_consumergroup_lag") && l.contains("consumergroup=\"blue.fleet.minilm\""))
    };
    while !labelled(&worker.scrape().await) {
        assert!(started.elapsed() < Duration::from_secs(30), "no lag series for group blue.fleet.minilm");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
