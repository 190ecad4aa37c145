//! A dependency that is gone, not only slow, against the real worker,
//! broker and Redis: Redis killed and started again empty, Redis frozen for
//! longer than the stall bound, a worker started while Redis is down, and
//! one started while the broker is down. In each, the worker stays up,
//! says on `/ready` what it waits for and never fails `/healthz` for it,
//! and every request ends with exactly one answer.

mod common;

use common::{
    assert_committed_to_the_end, committed_offsets, minilm, present_metric_value as metric_value, serial, texts,
    wait_for_answers, wait_for_answers_once, Broker, Redis, Worker,
};
use fleet_proto::{Lane, Namespace, RequestId};
use fleet_testkit::{PostgresDatabase, Storage};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_started_again_empty_loses_no_answer() {
    let _serial = serial().await;
    let mut redis = Redis::start();
    let (broker, worker) = common::serving_minilm(2, &redis, &[]).await;

    // Answered and committed: only Redis holds these answers now.
    let before = common::send_texts(&broker, &minilm(), "before-kill", &texts("before", 40), None).await;
    wait_for_answers_once(&redis, &minilm(), &before, Duration::from_secs(90)).await;
    // A crash without persistence; back, empty, 3 s later. Requests sent
    // meanwhile wait in the worker.
    redis.kill();
    let during = common::send_texts(&broker, &minilm(), "during-kill", &texts("during", 20), None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.start_again();

    let all: Vec<RequestId> = before.iter().chain(&during).cloned().collect();
    wait_for_answers_once(&redis, &minilm(), &all, Duration::from_secs(90)).await;
    let scrape = worker.scrape().await;
    assert_eq!(metric_value(&scrape, "fleet_redis_memory_lost_total", &[]), 1.0, "the loss was not noticed once");
    let replayed = metric_value(&scrape, "fleet_replayed_total", &[]);
    assert!(replayed >= before.len() as f64, "replayed {replayed}: the lost answers were not all read again");
    // Only what is inside the TTL window, which is all this test sent.
    assert!(replayed <= all.len() as f64, "replayed {replayed} of {} sent", all.len());
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_past_the_stall_bound_is_waited_for_without_failing_liveness() {
    let _serial = serial().await;
    let redis = Redis::start();
    let (broker, worker) = common::serving_minilm(2, &redis, &["--stall-timeout", "3s"]).await;
    let first = common::send_texts(&broker, &minilm(), "before-freeze", &texts("before", 10), None).await;
    wait_for_answers(&redis, &minilm(), &first, Duration::from_secs(60)).await;

    redis.freeze();
    let held = common::send_texts(&broker, &minilm(), "during-freeze", &texts("during", 10), None).await;
    worker.wait_for_metric("fleet_queue_depth", &[], 1.0, Duration::from_secs(60)).await;
    let (code, body) = worker.wait_for_status("/ready", 503, Duration::from_secs(60)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("redis"), "/ready does not name Redis: {body}");
    // Four stall bounds with messages held: a restart would cure nothing.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(12) {
        let (code, body) = worker.get("/healthz").await.expect("the worker stopped answering probes");
        assert_eq!(code, 200, "liveness failed during a Redis outage: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let held_now = metric_value(&worker.scrape().await, "fleet_queue_depth", &[]);
    assert!(held_now >= 1.0, "nothing was held during the freeze");

    redis.thaw();
    let all: Vec<RequestId> = first.iter().chain(&held).cloned().collect();
    wait_for_answers_once(&redis, &minilm(), &all, Duration::from_secs(90)).await;
    let (code, body) = worker.wait_for_status("/ready", 200, Duration::from_secs(60)).await;
    assert_eq!(code, 200, "{body}");
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_redis_is_down_warms_up_waits_and_then_serves() {
    let _serial = serial().await;
    let mut redis = Redis::not_started();
    let broker = Broker::start();
    broker.create_topics(&minilm(), 2).await;
    let mut worker = Worker::start("minilm", &broker, &redis, &[]);
    // Warm, alive, and not ready for Redis alone.
    let deadline = Instant::now() + Duration::from_secs(180);
    let body = loop {
        let (code, body) = worker.get("/ready").await.unwrap_or((0, String::new()));
        if code == 503 && !body.contains("not warm") && body.contains("cannot write to redis") {
            break body;
        }
        assert!(worker.wait_exit(Duration::ZERO).await.is_none(), "the worker exited while Redis was down");
        assert!(Instant::now() < deadline, "never warm and waiting for Redis: {code} {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(body.contains("transient failure"), "{body}");
    let (code, body) = worker.wait_for_status("/healthz", 200, Duration::from_secs(10)).await;
    assert_eq!(code, 200, "{body}");
    assert!(worker.wait_exit(Duration::ZERO).await.is_none(), "the worker exited while Redis was down");

    redis.start_again();
    worker.wait_until_serving(2).await;
    let ids = common::send_texts(&broker, &minilm(), "late-redis", &texts("late", 10), None).await;
    wait_for_answers_once(&redis, &minilm(), &ids, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_the_broker_is_down_waits_and_then_serves() {
    let _serial = serial().await;
    let database = PostgresDatabase::create("fleet_broker_down");
    let mut broker = Broker::start_with(Storage::Postgres { url: database.url() });
    broker.create_topics(&minilm(), 2).await;
    let ids = common::send_texts(&broker, &minilm(), "sent-before", &texts("before", 10), None).await;
    broker.kill();
    let redis = Redis::start();
    let mut worker = Worker::start("minilm", &broker, &redis, &[]);
    // Warm, Redis reached, and unready for the broker alone, over several
    // of the worker's one-second reports.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut in_a_row = 0;
    while in_a_row < 5 {
        let (code, body) = worker.get("/ready").await.unwrap_or((0, String::new()));
        let waits_for_the_broker_only =
            code == 503 && !body.contains("not warm") && body.contains("broker") && !body.contains("redis");
        in_a_row = if waits_for_the_broker_only { in_a_row + 1 } else { 0 };
        assert!(worker.wait_exit(Duration::ZERO).await.is_none(), "the worker exited while the broker was down");
        assert!(Instant::now() < deadline, "never warm and waiting for the broker alone: {code} {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (code, body) = worker.wait_for_status("/healthz", 200, Duration::from_secs(10)).await;
    assert_eq!(code, 200, "{body}");

    broker.start_again();
    worker.wait_until_serving(2).await;
    wait_for_answers_once(&redis, &minilm(), &ids, Duration::from_secs(90)).await;
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_wait_replicas_an_offset_moves_on_only_once_a_replica_holds_the_answer() {
    let _serial = serial().await;
    let primary = Redis::start();
    let files = std::env::temp_dir().join(format!("fleet-replica-{}", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    let replica = Redis::start_with_config(&format!("replicaof 127.0.0.1 {}\ndir {}", primary.port, files.display()));
    let mut conn = primary.connection().await;
    let linked = Instant::now();
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await.unwrap();
        if info.contains("connected_slaves:1") && info.contains("state=online") {
            break;
        }
        assert!(linked.elapsed() < Duration::from_secs(30), "the replica never came online: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let broker = Broker::start();
    broker.create_topics(&minilm(), 1).await;
    let args = ["--redis-wait-replicas", "1", "--redis-wait-timeout", "200ms"];
    let worker = Worker::start("minilm", &broker, &primary, &args);
    worker.wait_until_serving(1).await;
    let first = common::send_texts(&broker, &minilm(), "replicated", &texts("replicated", 5), None).await;
    wait_for_answers_once(&primary, &minilm(), &first, Duration::from_secs(60)).await;
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 1).await;

    // The replica stops acknowledging: the first batch's answers reach the
    // primary and are retried, the rest wait behind them; no offset moves,
    // the messages are held.
    replica.freeze();
    let held = common::send_texts(&broker, &minilm(), "unreplicated", &texts("unreplicated", 5), None).await;
    // Several tries (each waits 200 ms for the replica, then backs off):
    // past an auto-commit interval (1 s).
    let failures = worker
        .wait_for_metric(
            "fleet_sink_failures_total",
            &[("target", "redis"), ("class", "transient")],
            6.0,
            Duration::from_secs(60),
        )
        .await;
    assert!(failures >= 6.0, "the missing replica acknowledgement was not a failed write ({failures})");
    let depth = metric_value(&worker.scrape().await, "fleet_queue_depth", &[]);
    assert!(depth >= 1.0, "the unreplicated answers' messages were let go");
    let names = Namespace::default();
    let committed = committed_offsets(&broker, &names.consumer_group(&minilm()), &names.topic(&minilm()), 1);
    assert_eq!(committed, [first.len() as i64], "the offset moved past answers no replica holds");

    replica.thaw();
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 1).await;
    let all: Vec<RequestId> = first.iter().chain(&held).cloned().collect();
    wait_for_answers_once(&primary, &minilm(), &all, Duration::from_secs(30)).await;
    drop(replica);
    let _ = std::fs::remove_dir_all(&files);
}
