//! Model lifecycle against a real worker, broker and Redis: a new version is
//! swapped in under load, a broken one is refused while the old one keeps
//! serving, a pin rolls back without a restart, a version takes over with
//! its config's limits and TTLs (one that changes the task type is
//! refused); and a batch over the device memory limit is split with every
//! row answered.

mod common;

use common::{metric_value, minilm, serial, wait_for_answers_once, Broker, Redis, Worker};
use fleet_producer::{FleetProducer, Request};
use fleet_proto::{Answer, Namespace, RequestId, Status};
use redis::AsyncCommands;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A repository of its own (the test adds versions and edits the pin):
/// minilm's shipped config and version 1 linked to the exported model.
fn own_repo(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("fleet-lifecycle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("minilm")).unwrap();
    std::fs::copy(common::model_repo().join("minilm/config.toml"), root.join("minilm/config.toml")).unwrap();
    link_version(&root, 1);
    root
}

fn link_version(root: &Path, version: u64) {
    let exported = common::model_repo().join("minilm/1").canonicalize().expect("run make setup");
    std::os::unix::fs::symlink(exported, root.join("minilm").join(version.to_string())).unwrap();
}

/// Texts of one token length (one bucket, so the worker answers them in the
/// order they were sent) and all different (no feature-cache hits).
fn same_length_texts(n: usize, salt: &str) -> Vec<String> {
    const WORDS: [&str; 20] = [
        "dog", "cat", "car", "sun", "sea", "tree", "house", "bird", "fish", "book", "door", "road", "city", "king",
        "girl", "boy", "water", "fire", "stone", "river",
    ];
    (0..n)
        .map(|i| {
            format!("the {salt} fox jumps over the {} {} {}", WORDS[i % 20], WORDS[(i / 20) % 20], WORDS[i / 400 % 20])
        })
        .collect()
}

/// Sends `texts` one every `gap`; returns the ids in send order.
async fn send_paced(producer: &FleetProducer, prefix: &str, texts: &[String], gap: Duration) -> Vec<RequestId> {
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let id = RequestId::parse(&format!("{prefix}-{i}")).unwrap();
        pending.push(producer.send(&minilm(), &Request::text(id.clone(), text.clone())).await.unwrap());
        ids.push(id);
        tokio::time::sleep(gap).await;
    }
    for delivered in futures::future::join_all(pending).await {
        delivered.expect("delivery");
    }
    ids
}

/// Every id's answer, in id order; asserts each was written exactly once.
async fn answers(redis: &Redis, ids: &[RequestId]) -> Vec<Answer> {
    wait_for_answers_once(redis, &minilm(), ids, Duration::from_secs(90)).await
}

async fn wait_for(worker: &Worker, name: &str, labels: &[(&str, &str)], value: f64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = metric_value(&worker.scrape().await, name, labels);
        if seen == value {
            return;
        }
        assert!(Instant::now() < deadline, "{name}{labels:?} is {seen}, waited for {value}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A broker, Redis, `infer.minilm` (one partition: answers in send order
/// within a bucket) and a ready worker with `extra` arguments.
struct Fleet {
    _broker: Broker,
    redis: Redis,
    worker: Worker,
    producer: FleetProducer,
}

async fn start_fleet(extra: &[&str]) -> Fleet {
    let (broker, redis) = (Broker::start(), Redis::start());
    broker.create_topics(&minilm(), 1).await;
    let worker = Worker::start("minilm", &broker, &redis, extra);
    wait_for(&worker, "fleet_worker_ready", &[("model", "minilm")], 1.0, Duration::from_secs(120)).await;
    let producer = FleetProducer::new(&broker.kafka(), "tests").unwrap();
    Fleet { _broker: broker, redis, worker, producer }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_swap_under_load_a_broken_one_is_refused_and_a_pin_rolls_back() {
    let _serial = serial().await;
    let repo = own_repo("swap");
    let extra = ["--model-repo", repo.to_str().unwrap(), "--model-poll-interval", "300ms", "--intra-op-threads", "1"];
    let Fleet { _broker, redis, worker, producer } = start_fleet(&extra).await;

    // Version 1 serves first: its partition is assigned and it has answered
    // before version 2 exists (waited for, not timed).
    let before = send_paced(&producer, "before", &same_length_texts(20, "quick"), Duration::ZERO).await;
    assert!(answers(&redis, &before).await.iter().all(|a| (a.status, a.version) == (Status::Ok, 1)));

    // A steady stream while version 2 loads and warms up beside version 1;
    // it goes on until version 2 serves, and a little after.
    link_version(&repo, 2);
    let texts = same_length_texts(4000, "steady");
    let mut stream = Vec::new();
    let mut swapped_at = None;
    for chunk in texts.chunks(10) {
        let offset = stream.len();
        let named: Vec<String> = chunk.to_vec();
        let ids = send_paced(&producer, &format!("swap{offset}"), &named, Duration::from_millis(50)).await;
        stream.extend(ids);
        let serving = metric_value(&worker.scrape().await, "fleet_model_version", &[("model", "minilm")]);
        if serving == 2.0 && swapped_at.is_none() {
            swapped_at = Some(stream.len());
        }
        if swapped_at.is_some_and(|at| stream.len() >= at + 20) {
            break;
        }
    }
    assert!(swapped_at.is_some(), "version 2 was not swapped in while {} requests were served", stream.len());
    let swapped = answers(&redis, &stream).await;
    assert!(swapped.iter().all(|a| a.status == Status::Ok), "every request answered ok during the swap");
    let versions: Vec<u64> = swapped.iter().map(|a| a.version).collect();
    let switch = versions.iter().position(|&v| v == 2).expect("version 2 never answered");
    assert!(
        versions[..switch].iter().all(|&v| v == 1) && versions[switch..].iter().all(|&v| v == 2),
        "answers switch version at one point: {versions:?}"
    );
    let scrape = worker.scrape().await;
    assert_eq!(metric_value(&scrape, "fleet_model_swaps_total", &[("model", "minilm")]), 1.0);
    assert_eq!(metric_value(&scrape, "fleet_model_version", &[("model", "minilm")]), 2.0);

    // Version 3 is complete but its model.pt is corrupt: refused, counted,
    // and version 2 keeps serving.
    std::fs::create_dir_all(repo.join("minilm/3")).unwrap();
    std::fs::copy(repo.join("minilm/1/tokenizer.json"), repo.join("minilm/3/tokenizer.json")).unwrap();
    std::fs::write(repo.join("minilm/3/model.pt"), b"not a TorchScript archive").unwrap();
    wait_for(
        &worker,
        "fleet_model_load_failures_total",
        &[("model", "minilm"), ("reason", "load")],
        1.0,
        Duration::from_secs(30),
    )
    .await;
    let ids = send_paced(&producer, "broken", &same_length_texts(10, "brown"), Duration::ZERO).await;
    assert!(answers(&redis, &ids).await.iter().all(|a| (a.status, a.version) == (Status::Ok, 2)));
    assert_eq!(worker.get("/ready").await.map(|(code, _)| code), Some(200), "a refused version does not unready");

    // Rollback: pin version 1 in config.toml, no restart.
    let config = std::fs::read_to_string(repo.join("minilm/config.toml")).unwrap();
    std::fs::write(repo.join("minilm/config.toml"), format!("version = 1\n{config}")).unwrap();
    wait_for(&worker, "fleet_model_version", &[("model", "minilm")], 1.0, Duration::from_secs(120)).await;
    let ids = send_paced(&producer, "rollback", &same_length_texts(10, "lazy"), Duration::ZERO).await;
    assert!(answers(&redis, &ids).await.iter().all(|a| (a.status, a.version) == (Status::Ok, 1)));
    // The broken version was tried once, not on every poll.
    assert_eq!(load_failures(&worker).await, 1.0);
}

/// Each bucket's row cap as the worker reports it (`fleet_batch_row_cap`).
fn row_caps(scrape: &str) -> Vec<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("fleet_batch_row_cap{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// Seconds the answer of `id` has left in Redis.
async fn answer_ttl_s(redis: &Redis, id: &RequestId) -> i64 {
    redis.connection().await.ttl(Namespace::default().result_key(id)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_takes_over_with_its_limits_and_ttls_and_a_task_type_change_is_refused() {
    let _serial = serial().await;
    let repo = own_repo("config");
    let extra = ["--model-repo", repo.to_str().unwrap(), "--model-poll-interval", "300ms", "--intra-op-threads", "1"];
    let Fleet { _broker, redis, worker, producer } = start_fleet(&extra).await;
    // A text of 310 bytes: within version 1's max_text_bytes (65536), over
    // the 200 of version 2's.
    let wordy = vec!["the quick brown fox jumps over the lazy dog and runs far away ".repeat(5)];
    assert_eq!(wordy[0].len(), 310);

    let before = send_paced(&producer, "v1", &wordy, Duration::ZERO).await;
    assert_eq!(answers(&redis, &before).await[0].status, Status::Ok);
    let v1_ttl = answer_ttl_s(&redis, &before[0]).await;
    assert!((1..=30).contains(&v1_ttl), "version 1 keeps answers 30 s, this one has {v1_ttl} s");
    let caps = row_caps(&worker.scrape().await);
    assert!(caps.iter().any(|&cap| cap > 4.0), "version 1 batches up to 32 rows: caps {caps:?}");

    // Version 2 comes with other limits and TTLs in config.toml: texts over
    // 200 bytes refused, 4 rows per batch at most, answers kept 600 s.
    let config = std::fs::read_to_string(repo.join("minilm/config.toml")).unwrap();
    let changed = config
        .replace("max_text_bytes = 65536", "max_text_bytes = 200")
        .replace("max_batch_size = 32", "max_batch_size = 4")
        .replace("result_ttl_s = 30", "result_ttl_s = 600");
    for line in ["max_text_bytes = 200", "max_batch_size = 4", "result_ttl_s = 600"] {
        assert!(changed.contains(line), "minilm's config.toml no longer has the line this test edits: {line}");
    }
    std::fs::write(repo.join("minilm/config.toml"), &changed).unwrap();
    link_version(&repo, 2);
    wait_for(&worker, "fleet_model_version", &[("model", "minilm")], 2.0, Duration::from_secs(120)).await;

    let after = send_paced(&producer, "v2", &wordy, Duration::ZERO).await;
    let refused = &answers(&redis, &after).await[0];
    assert_eq!((refused.status, refused.version), (Status::Error, 2));
    assert_eq!(refused.error.as_ref().unwrap().code.as_str(), "text_too_long", "version 2's max_text_bytes");
    let short = send_paced(&producer, "v2short", &same_length_texts(3, "green"), Duration::ZERO).await;
    assert!(answers(&redis, &short).await.iter().all(|a| (a.status, a.version) == (Status::Ok, 2)));
    let v2_ttl = answer_ttl_s(&redis, &short[0]).await;
    assert!((31..=600).contains(&v2_ttl), "version 2 keeps answers 600 s, this one has {v2_ttl} s");
    let caps = row_caps(&worker.scrape().await);
    assert!(!caps.is_empty() && caps.iter().all(|&cap| cap <= 4.0), "version 2 batches 4 rows at most: {caps:?}");

    // Version 3 turns the embedder into a classifier: not something a
    // running worker can become. Refused with the reason; version 2 serves on.
    let classifier = changed.replace("type = \"embedding\"", "type = \"classification\"");
    let classifier: String = classifier
        .lines()
        .filter(|l| !l.starts_with("pooling") && !l.starts_with("normalize"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(repo.join("minilm/config.toml"), classifier).unwrap();
    link_version(&repo, 3);
    let reason = [("model", "minilm"), ("reason", "config_changed")];
    wait_for(&worker, "fleet_model_load_failures_total", &reason, 1.0, Duration::from_secs(30)).await;
    let still = send_paced(&producer, "v3", &same_length_texts(3, "blue"), Duration::ZERO).await;
    assert!(answers(&redis, &still).await.iter().all(|a| (a.status, a.version) == (Status::Ok, 2)));
    assert_eq!(metric_value(&worker.scrape().await, "fleet_model_version", &[("model", "minilm")]), 2.0);
}

/// Versions the worker refused because they would not load.
async fn load_failures(worker: &Worker) -> f64 {
    let scrape = worker.scrape().await;
    metric_value(&scrape, "fleet_model_load_failures_total", &[("model", "minilm"), ("reason", "load")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_newest_version_at_start_falls_back_to_the_one_before() {
    let _serial = serial().await;
    let repo = own_repo("start");
    std::fs::create_dir_all(repo.join("minilm/2")).unwrap();
    std::fs::copy(repo.join("minilm/1/tokenizer.json"), repo.join("minilm/2/tokenizer.json")).unwrap();
    std::fs::write(repo.join("minilm/2/model.pt"), b"truncated").unwrap();
    let Fleet { _broker, redis, worker, producer } = start_fleet(&["--model-repo", repo.to_str().unwrap()]).await;
    let ids = send_paced(&producer, "start", &same_length_texts(3, "red"), Duration::ZERO).await;
    assert!(answers(&redis, &ids).await.iter().all(|a| (a.status, a.version) == (Status::Ok, 1)));
    assert_eq!(load_failures(&worker).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_the_memory_limit_are_split_and_every_row_is_answered() {
    let _serial = serial().await;
    // minilm's [device] estimate in fp32 (the CPU said to have no bf16, so
    // `auto` serves fp32; bf16 halves it): 16384 B per token + 96 B per
    // attention cell. 4 MB holds about 20 rows of 11 tokens or 1 row of 200
    // tokens, but no 512-token row.
    let extra = ["--engine-memory-limit-bytes", "4000000", "--cpu-features", "none"];
    let Fleet { _broker, redis, worker, producer } = start_fleet(&extra).await;
    let mut texts = same_length_texts(64, "slow");
    let long: String = common::sentences().join(" ");
    texts.push(long);
    let ids = send_paced(&producer, "oom", &texts, Duration::ZERO).await;
    let answered = answers(&redis, &ids).await;
    let (long_answer, short) = answered.split_last().unwrap();
    assert!(short.iter().all(|a| a.status == Status::Ok), "every row that fits is answered ok");
    assert_eq!(long_answer.status, Status::Error);
    let error = long_answer.error.as_ref().expect("an error answer carries its error");
    assert_eq!(error.code.as_str(), "model_failed");
    assert!(error.message.contains("device memory"), "{}", error.message);
    // The limit moved the batcher: some bucket's row cap fell below
    // max_batch_size (32). Under a memory limit the warm-up runs each
    // bucket's largest batch (32 rows of 16 tokens need ~8 MB), and a live
    // split lowers the cap too.
    let caps = row_caps(&worker.scrape().await);
    assert!(!caps.is_empty(), "no fleet_batch_row_cap series in the scrape");
    assert!(caps.iter().any(|&cap| cap < 32.0), "the memory limit capped no bucket: caps {caps:?}");
    assert_eq!(worker.get("/healthz").await.map(|(code, _)| code), Some(200), "the worker lives on");
}
