//! Redis results against a real redis-server of the test's own: TTLs tagged
//! by version, the feature cache, waiting clients, and a Redis outage.

mod common;

use common::{
    assert_committed_to_the_end, ledger, metric_value, minilm, present_metric_value, send_texts, sentences, serial,
    Broker, Redis, Worker,
};
use fleet_producer::{ResultClient, ResultError};
use fleet_proto::{Lane, ModelName, Namespace, RequestId, Status};
use redis::AsyncCommands;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A model repository holding `versions` of minilm (links to the exported
/// version 1) and a config with short TTLs, so expiry is observable.
fn short_ttl_repo(name: &str, versions: &[u64]) -> PathBuf {
    let root = std::env::temp_dir().join(format!("fleet-repo-{name}-{}", std::process::id()));
    let model = root.join("minilm");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&model).unwrap();
    let exported = common::model_repo().join("minilm/1").canonicalize().expect("run make setup");
    for v in versions {
        std::os::unix::fs::symlink(&exported, model.join(v.to_string())).unwrap();
    }
    let shipped = std::fs::read_to_string(common::model_repo().join("minilm/config.toml")).unwrap();
    let config = shipped
        .replace("[ttl]", "[ttl]\nresult_ttl_s = 20\nfeature_ttl_s = 3\n")
        .replace("\nresult_ttl_s = 30", "\n")
        .replace("\nfeature_ttl_s = 300", "\n");
    std::fs::write(model.join("config.toml"), config).unwrap();
    root
}

async fn keys_matching(redis: &Redis, pattern: &str) -> Vec<String> {
    let mut conn = redis.connection().await;
    let mut found: Vec<String> = conn.keys(pattern).await.unwrap();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_input_is_computed_once_and_a_version_bump_uses_new_keys() {
    let _serial = serial().await;
    let (broker, redis, model) = (Broker::start(), Redis::start(), minilm());
    broker.create_topics(&model, 2).await;
    let text = vec!["The cache should answer this sentence the second time.".to_owned()];

    let v1 = short_ttl_repo("v1", &[1]);
    let mut worker = Worker::start("minilm", &broker, &redis, &["--model-repo", v1.to_str().unwrap()]);
    worker.wait_until_serving(2).await;
    let first = send_texts(&broker, &model, "first", &text, None).await;
    ledger(&redis, &model, &first, Duration::from_secs(60)).await;
    let again = send_texts(&broker, &model, "again", &text, None).await;
    ledger(&redis, &model, &again, Duration::from_secs(60)).await;
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let (a, b) = (&results.poll(&first[0]).await.unwrap()["minilm"], &results.poll(&again[0]).await.unwrap()["minilm"]);
    assert_eq!((a.status, b.status), (Status::Ok, Status::Ok));
    assert_eq!(a.output, b.output, "the cached answer is the computed one");
    assert_eq!(b.timings_ms.infer, 0.0, "a hit spends no model time");
    let scrape = worker.scrape().await;
    assert_eq!(present_metric_value(&scrape, "fleet_model_rows_total", &[("model", "minilm")]), 1.0, "computed once");
    assert_eq!(present_metric_value(&scrape, "fleet_feature_cache_hits_total", &[("model", "minilm")]), 1.0);
    assert_eq!(present_metric_value(&scrape, "fleet_feature_cache_misses_total", &[("model", "minilm")]), 1.0);
    assert!(present_metric_value(&scrape, "fleet_feature_cache_saved_seconds_sum", &[("model", "minilm")]) > 0.0);

    // The answers carry the version's result TTL, the feature its feature TTL.
    let mut conn = redis.connection().await;
    let result_ttl: i64 = conn.ttl(Namespace::default().result_key(&again[0])).await.unwrap();
    assert!((1..=20).contains(&result_ttl), "result TTL {result_ttl}");
    let v1_keys = keys_matching(&redis, "fleet:feat:minilm:1:*").await;
    assert_eq!(v1_keys.len(), 1, "{v1_keys:?}");
    let feature_ttl: i64 = conn.ttl(&v1_keys[0]).await.unwrap();
    assert!((1..=3).contains(&feature_ttl), "feature TTL {feature_ttl}");
    assert!(worker.stop().success());

    // Version 2: the same input misses (new keys), is computed, and the old
    // key ages out by itself.
    let v2 = short_ttl_repo("v2", &[1, 2]);
    let worker = Worker::start("minilm", &broker, &redis, &["--model-repo", v2.to_str().unwrap()]);
    worker.wait_until_serving(2).await;
    let bumped = send_texts(&broker, &model, "bumped", &text, None).await;
    ledger(&redis, &model, &bumped, Duration::from_secs(60)).await;
    assert_eq!(results.poll(&bumped[0]).await.unwrap()["minilm"].version, 2);
    let scrape = worker.scrape().await;
    assert_eq!(present_metric_value(&scrape, "fleet_model_rows_total", &[("model", "minilm")]), 1.0, "v2 computed it");
    assert_eq!(keys_matching(&redis, "fleet:feat:minilm:2:*").await.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !keys_matching(&redis, "fleet:feat:minilm:1:*").await.is_empty() {
        assert!(Instant::now() < deadline, "the version-1 feature never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_when_the_last_part_lands_and_times_out_cleanly() {
    let _serial = serial().await;
    let redis = Redis::start();
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let models = [ModelName::parse("effnet").unwrap(), minilm()];
    let id = RequestId::parse("two-parts").unwrap();
    let mut conn = redis.connection().await;
    let answer = |model: &str| {
        format!(
            r#"{{"status":"ok","model":"{model}","version":1,"output":{{}},"timings_ms":{{"queue":0,"infer":0,"total":0}}}}"#
        )
    };
    let _: () = conn.hset(Namespace::default().result_key(&id), "effnet", answer("effnet")).await.unwrap();
    let _: () = conn.rpush(Namespace::default().ready_key(&id), "effnet").await.unwrap();

    // Only one part is in: the error names the missing one.
    let started = Instant::now();
    match results.wait(&id, &models, Duration::from_millis(800)).await {
        Err(ResultError::Timeout { missing, present, .. }) => {
            assert_eq!((missing, present), (vec!["minilm".to_owned()], vec!["effnet".to_owned()]));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(800) && waited < Duration::from_secs(3), "{waited:?}");

    // The last part lands while we wait: wait returns then, not at its timeout.
    let url = redis.url();
    let (id2, late) = (id.clone(), answer("minilm"));
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut conn = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
        let _: () = conn.hset(Namespace::default().result_key(&id2), "minilm", late).await.unwrap();
        let _: () = conn.rpush(Namespace::default().ready_key(&id2), "minilm").await.unwrap();
    });
    let started = Instant::now();
    let answers = results.wait(&id, &models, Duration::from_secs(20)).await.unwrap();
    assert_eq!(answers.len(), 2);
    assert!(started.elapsed() < Duration::from_secs(5), "returned after {:?}", started.elapsed());
    writer.await.unwrap();

    // Many at once over one connection: each id gets its own outcome, the
    // complete ones their answers, the incomplete one its timeout.
    let other = RequestId::parse("one-part").unwrap();
    let _: () = conn.hset(Namespace::default().result_key(&other), "minilm", answer("minilm")).await.unwrap();
    let never = RequestId::parse("never-answered").unwrap();
    let outcomes =
        results.wait_all(&[id.clone(), never.clone(), other.clone()], &models, Duration::from_millis(500)).await;
    assert_eq!(outcomes[0].as_ref().map(|a| a.len()).ok(), Some(2));
    assert!(
        matches!(&outcomes[1], Err(ResultError::Timeout { missing, .. }) if missing.len() == 2),
        "{:?}",
        outcomes[1]
    );
    assert!(matches!(&outcomes[2], Err(ResultError::Timeout { missing, .. }) if missing == &["effnet".to_owned()]));
    let only_text = results.wait_all(std::slice::from_ref(&other), &[minilm()], Duration::from_secs(5)).await;
    assert_eq!(only_text[0].as_ref().map(|a| a.len()).ok(), Some(1));

    // Redis that stops answering: a clear error, not a hang past the timeout.
    redis.freeze();
    let started = Instant::now();
    let outcome = results.wait(&RequestId::parse("nobody").unwrap(), &models, Duration::from_secs(1)).await;
    redis.thaw();
    assert!(outcome.is_err(), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "hung for {:?}", started.elapsed());
}

/// Sends a stream, freezes Redis for 10 s in the middle, optionally kills the
/// worker during the outage, and checks that every request still ends with
/// exactly one answer.
async fn outage(kill_during_outage: bool) {
    let (broker, redis, model) = (Broker::start(), Redis::start(), minilm());
    broker.create_topics(&model, 4).await;
    let texts: Vec<String> = sentences().into_iter().take(300).collect();
    let one_thread = ["--intra-op-threads", "1", "--max-in-flight", "64"];
    let mut worker = Worker::start("minilm", &broker, &redis, &one_thread);
    let ids = send_texts(&broker, &model, "outage", &texts, Some(u64::MAX / 2)).await;
    let answered =
        worker.wait_for_metric("fleet_requests_total", &[("model", "minilm")], 40.0, Duration::from_secs(60)).await;
    assert!(answered >= 40.0 && answered < ids.len() as f64, "outage began at {answered} answers");

    redis.freeze();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = worker.scrape().await;
    let held = metric_value(&during, "fleet_queue_depth", &[("model", "minilm")]);
    assert!(held <= 64.0, "held {held} during the outage");
    if kill_during_outage {
        worker.kill();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    redis.thaw();
    if kill_during_outage {
        // Had any offset been committed past an unwritten answer, that
        // request would now never be answered.
        worker = Worker::start("minilm", &broker, &redis, &[]);
    }
    let counts = ledger(&redis, &model, &ids, Duration::from_secs(180)).await;
    assert_eq!(counts.get("ok"), Some(&ids.len()), "{counts:?}");
    assert_committed_to_the_end(&broker, &model, Lane::Interactive, 4).await;
    assert!(worker.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_second_redis_outage_loses_nothing() {
    let _serial = serial().await;
    outage(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_during_a_redis_outage_left_no_commit_past_an_unwritten_answer() {
    let _serial = serial().await;
    outage(true).await;
}
