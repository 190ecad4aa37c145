//! One bad thing at a time, against the real worker, broker and Redis: a
//! malformed message, a Redis key of the wrong type, a dead letter too large
//! for its topic, a missing DLQ topic, an ACL that refuses the answer
//! script, SIGTERM during a Redis outage, a group member that comes and goes
//! every two seconds. Each case checks that (a) the bad one ends as an
//! answer or a dead letter with a stable reason, (b) good requests before
//! and after it are all answered, (c) the worker process stays up, and
//! (d) its probes tell the truth meanwhile.
//!
//! Header names that are not UTF-8 cannot be built with rdkafka's Rust API;
//! they are produced through librdkafka's C call (`fleet_testkit::raw`).

#[path = "chaos/broker_faults.rs"]
mod broker_faults;
mod common;
#[path = "chaos/messages.rs"]
mod messages;

use broker_faults::{come_and_go, shrink_dlq};
use common::{
    assert_committed_to_the_end, dead_letters, metric_value, minilm, serial, wait_for_answers, Broker, Redis, Worker,
};
use fleet_producer::{FleetProducer, Request, ResultClient};
use fleet_proto::{headers as h, Answer, Lane, Namespace, RequestId, Status};
use fleet_testkit::raw;
use messages::{anonymous, good, malformed_cases, Ending};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use std::time::{Duration, Instant};

fn id(text: &str) -> RequestId {
    RequestId::parse(text).unwrap()
}

/// A broker, Redis, `infer.minilm` and a worker that is ready and owns
/// every partition.
struct Fleet {
    broker: Broker,
    redis: Redis,
    worker: Worker,
}

async fn start_fleet(partitions: i32, redis: Redis, worker_args: &[&str]) -> Fleet {
    let (broker, worker) = common::serving_minilm(partitions, &redis, worker_args).await;
    Fleet { broker, redis, worker }
}

/// Asserts the worker runs and both probes pass.
async fn assert_alive_and_healthy(worker: &mut Worker) {
    assert!(worker.wait_exit(Duration::ZERO).await.is_none(), "the worker exited");
    for path in ["/healthz", "/ready"] {
        let (code, body) = worker.wait_for_status(path, 200, Duration::from_secs(30)).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_malformed_message_ends_as_its_own_answer_or_dead_letter() {
    let _serial = serial().await;
    let Fleet { broker, redis, mut worker } = start_fleet(2, Redis::start(), &[]).await;
    let topic = Namespace::default().topic(&minilm());
    let cases = malformed_cases();
    let mut good_ids = Vec::new();
    for (n, (bad, _)) in cases.iter().enumerate() {
        let before = format!("good-before-{n}");
        let after = format!("good-after-{n}");
        raw::produce(&broker.kafka().client_config(), &topic, &[good(&before), bad.clone(), good(&after)]).unwrap();
        good_ids.extend([id(&before), id(&after)]);
    }
    let answered = wait_for_answers(&redis, &minilm(), &good_ids, Duration::from_secs(90)).await;
    assert!(answered.iter().all(|a| a.status == Status::Ok), "good requests: {answered:?}");

    let expected_answers: Vec<(&str, Status, Option<&str>)> = cases
        .iter()
        .filter_map(|(_, ending)| match ending {
            Ending::Answer { id, status, code } => Some((*id, *status, *code)),
            Ending::DeadLetter { .. } => None,
        })
        .collect();
    let ids: Vec<RequestId> = expected_answers.iter().map(|(name, _, _)| id(name)).collect();
    let got = wait_for_answers(&redis, &minilm(), &ids, Duration::from_secs(60)).await;
    for ((id, status, code), answer) in expected_answers.into_iter().zip(&got) {
        assert_eq!(answer.status, status, "{id}: {answer:?}");
        assert_eq!(answer.error.as_ref().map(|e| e.code.as_str()), code, "{id}: {answer:?}");
    }
    let expected_letters: Vec<(&str, &str)> = cases
        .iter()
        .filter_map(|(_, ending)| match ending {
            Ending::DeadLetter { reason, payload } => Some((*reason, *payload)),
            Ending::Answer { .. } => None,
        })
        .collect();
    let letters = dead_letters(&broker, &minilm(), expected_letters.len(), Duration::from_secs(60)).await;
    for (reason, payload) in expected_letters {
        let letter = letters.iter().find(|l| l.payload == payload.as_bytes()).expect(payload);
        assert_eq!(letter.reason, reason, "{payload}");
        let source = String::from_utf8_lossy(&letter.headers[h::DLQ_SOURCE]).into_owned();
        assert!(source.starts_with("infer.minilm:"), "{source}");
    }
    // Every message ended one way: the group's offsets reach the end.
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 2).await;
    assert_alive_and_healthy(&mut worker).await;
    let scrape = worker.scrape().await;
    assert_eq!(metric_value(&scrape, "fleet_panics_total", &[("model", "minilm")]), 0.0);
    assert_eq!(metric_value(&scrape, "fleet_dlq_total", &[("reason", "malformed_header")]), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_answer_key_is_dead_lettered_without_holding_back_its_batch() {
    let _serial = serial().await;
    let Fleet { broker, redis, mut worker } = start_fleet(1, Redis::start(), &[]).await;
    let mut conn = redis.connection().await;
    // Any client with the fleet's ACL could write these.
    let (result_taken, ready_taken) = (id("taken-result"), id("taken-ready"));
    let names = Namespace::default();
    for key in [names.result_key(&result_taken), names.ready_key(&ready_taken)] {
        let _: () = redis::cmd("SET").arg(key).arg("x").query_async(&mut conn).await.unwrap();
    }
    // One batch: good rows around the two bad ones.
    let producer = FleetProducer::new(&broker.kafka(), "chaos").unwrap();
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    for n in 0..24 {
        let id = match n {
            8 => result_taken.clone(),
            16 => ready_taken.clone(),
            _ => id(&format!("around-{n}")),
        };
        pending
            .push(producer.send(&minilm(), &Request::text(id.clone(), format!("sentence number {n}"))).await.unwrap());
        ids.push(id);
    }
    for delivered in futures::future::join_all(pending).await {
        delivered.unwrap();
    }
    let good: Vec<RequestId> = ids.iter().filter(|id| **id != result_taken && **id != ready_taken).cloned().collect();
    let answered = wait_for_answers(&redis, &minilm(), &good, Duration::from_secs(60)).await;
    assert!(answered.iter().all(|a| a.status == Status::Ok));
    let letters = dead_letters(&broker, &minilm(), 2, Duration::from_secs(60)).await;
    for taken in [&result_taken, &ready_taken] {
        let letter = letters.iter().find(|l| l.key.as_deref() == Some(taken.as_str().as_bytes())).expect("a letter");
        assert_eq!(letter.reason, "answer_unwritable");
        let answer: Answer = serde_json::from_slice(&letter.payload).expect("the letter holds the answer");
        assert_eq!(answer.status, Status::Ok);
        assert!(String::from_utf8_lossy(&letter.headers[h::DLQ_DETAIL]).contains("WRONGTYPE"));
    }
    // Nothing half-written under the taken keys.
    let kind: String = redis::cmd("TYPE").arg(names.result_key(&ready_taken)).query_async(&mut conn).await.unwrap();
    assert_eq!(kind, "none", "no hash field nobody is woken for");
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 1).await;
    assert_alive_and_healthy(&mut worker).await;
    let scrape = worker.scrape().await;
    assert_eq!(metric_value(&scrape, "fleet_sink_failures_total", &[("target", "redis"), ("class", "message")]), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_too_large_for_its_topic_is_sent_stripped_or_kept_locally() {
    let _serial = serial().await;
    let Fleet { broker, redis, mut worker } = start_fleet(1, Redis::start(), &[]).await;
    let topic = Namespace::default().topic(&minilm());
    // 4 KiB: the reason fits, a 64 KiB original does not.
    shrink_dlq(&broker, 4096).await;
    let records = [good("size-before"), anonymous("too big for the DLQ", 64 * 1024), good("size-after")];
    raw::produce(&broker.kafka().client_config(), &topic, &records).unwrap();
    let letters = dead_letters(&broker, &minilm(), 1, Duration::from_secs(60)).await;
    assert_eq!(letters[0].reason, "unreadable_request_id");
    assert_eq!(letters[0].headers.get(h::DLQ_TRUNCATED).map(Vec::as_slice), Some(&b"true"[..]));
    assert!(letters[0].payload.is_empty(), "stripped of its payload");

    // 64 bytes: not even the stripped letter fits; the local record keeps it.
    shrink_dlq(&broker, 64).await;
    let records = [good("local-before"), anonymous("kept locally", 10), good("local-after")];
    raw::produce(&broker.kafka().client_config(), &topic, &records).unwrap();
    let ids = ["size-before", "size-after", "local-before", "local-after"].map(id);
    let answered = wait_for_answers(&redis, &minilm(), &ids, Duration::from_secs(60)).await;
    assert!(answered.iter().all(|a| a.status == Status::Ok));
    worker.wait_for_metric("fleet_dlq_local_total", &[("model", "minilm")], 1.0, Duration::from_secs(60)).await;
    let (_, record) = worker.get("/dead-letters").await.expect("the local record");
    let entries: Vec<serde_json::Value> = serde_json::from_str(&record).unwrap();
    assert_eq!(entries.len(), 1, "{record}");
    assert_eq!(entries[0]["reason"], "unreadable_request_id");
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 1).await;
    assert_alive_and_healthy(&mut worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dlq_topic_stops_reading_and_says_so_until_it_is_back() {
    let _serial = serial().await;
    let Fleet { broker, redis, mut worker } = start_fleet(1, Redis::start(), &[]).await;
    let topic = Namespace::default().topic(&minilm());
    let admin: AdminClient<DefaultClientContext> = broker.kafka().client_config().create().unwrap();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    admin.delete_topics(&[&Namespace::default().dlq_topic(&minilm())], &options).await.unwrap();
    let records = [good("dlq-gone-before"), anonymous("the DLQ is gone", 10), good("dlq-gone-after")];
    raw::produce(&broker.kafka().client_config(), &topic, &records).unwrap();
    let answered = wait_for_answers(&redis, &minilm(), &[id("dlq-gone-before")], Duration::from_secs(60)).await;
    assert_eq!(answered[0].status, Status::Ok);
    // The worker cannot end the message: it says so, and stops reading.
    let (code, body) = worker.wait_for_status("/ready", 503, Duration::from_secs(60)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("dlq") && body.contains("fleet failure"), "{body}");
    let paused =
        worker.wait_for_metric("fleet_consumer_paused", &[("model", "minilm")], 1.0, Duration::from_secs(10)).await;
    assert_eq!(paused, 1.0, "the worker still reads");
    assert!(worker.wait_exit(Duration::ZERO).await.is_none(), "the worker exited");
    // The operator restores the topic: the letter lands, reading resumes.
    broker.create_topics(&minilm(), 1).await;
    let letters = dead_letters(&broker, &minilm(), 1, Duration::from_secs(60)).await;
    assert_eq!(letters[0].payload, b"the DLQ is gone");
    let answered = wait_for_answers(&redis, &minilm(), &[id("dlq-gone-after")], Duration::from_secs(60)).await;
    assert_eq!(answered[0].status, Status::Ok);
    assert_alive_and_healthy(&mut worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_the_answer_script_is_reported_and_a_new_member_takes_partitions_at_once() {
    let _serial = serial().await;
    // The worker's user may do everything but run scripts.
    let redis = Redis::start_with_config("user worker on >worker-pw ~* &* +@all -eval\n");
    let worker_url = format!("redis://worker:worker-pw@127.0.0.1:{}", redis.port);
    let args = ["--redis", worker_url.as_str(), "--stall-timeout", "5s"];
    let Fleet { broker, redis, mut worker } = start_fleet(4, redis, &args).await;
    let producer = FleetProducer::new(&broker.kafka(), "chaos").unwrap();
    let mut ids = Vec::new();
    for n in 0..40 {
        let id = id(&format!("noperm-{n}"));
        producer.send(&minilm(), &Request::text(id.clone(), format!("text {n}"))).await.unwrap().await.unwrap();
        ids.push(id);
    }
    // Not ready at once, with the reason. Still live past the stall bound:
    // a refusing dependency is not cured by a restart.
    let (_, body) = worker.wait_for_status("/ready", 503, Duration::from_secs(60)).await;
    assert!(body.to_lowercase().contains("noperm") && body.contains("fleet failure"), "{body}");
    let held = worker.wait_for_metric("fleet_queue_depth", &[("model", "minilm")], 1.0, Duration::from_secs(60)).await;
    assert!(held >= 1.0, "the worker held nothing while Redis refused");
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(8) {
        let (code, body) = worker.get("/healthz").await.expect("the worker stopped answering probes");
        assert_eq!(code, 200, "liveness failed on a refusing dependency: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(worker.wait_exit(Duration::ZERO).await.is_none(), "the worker exited");

    // A second member joins while the first is wedged: it gets partitions
    // within seconds (the first still serves the group protocol), not after
    // max.poll.interval.ms.
    let joined = Instant::now();
    let second = Worker::start("minilm", &broker, &redis, &[]);
    let assigned = second
        .wait_for_metric("fleet_assigned_partitions", &[("lane", "interactive")], 1.0, Duration::from_secs(60))
        .await;
    assert!(assigned >= 1.0, "the new member got no partition");
    assert!(joined.elapsed() < Duration::from_secs(60));

    // The operator fixes the ACL: everything is answered, nothing lost.
    let mut admin = redis.connection().await;
    let _: () = redis::cmd("ACL").arg("SETUSER").arg("worker").arg("+eval").query_async(&mut admin).await.unwrap();
    let answered = wait_for_answers(&redis, &minilm(), &ids, Duration::from_secs(90)).await;
    assert!(answered.iter().all(|a| a.status == Status::Ok));
    assert_alive_and_healthy(&mut worker).await;
    let scrape = worker.scrape().await;
    assert!(metric_value(&scrape, "fleet_sink_failures_total", &[("target", "redis"), ("class", "fleet")]) >= 1.0);
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_redis_outage_exits_within_the_drain_timeout() {
    let _serial = serial().await;
    let Fleet { broker, redis, mut worker } = start_fleet(2, Redis::start(), &["--drain-timeout", "3s"]).await;
    let producer = FleetProducer::new(&broker.kafka(), "chaos").unwrap();
    let send = |prefix: &'static str| {
        let producer = &producer;
        async move {
            let mut ids = Vec::new();
            for n in 0..20 {
                let id = id(&format!("{prefix}-{n}"));
                producer
                    .send(&minilm(), &Request::text(id.clone(), format!("{prefix} {n}")))
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                ids.push(id);
            }
            ids
        }
    };
    let before = send("before-outage").await;
    assert_eq!(wait_for_answers(&redis, &minilm(), &before, Duration::from_secs(60)).await.len(), 20);
    redis.freeze();
    let during = send("during-outage").await;
    let held = worker.wait_for_metric("fleet_queue_depth", &[("model", "minilm")], 1.0, Duration::from_secs(60)).await;
    assert!(held >= 1.0, "the worker held no work when SIGTERM came: the drain was not tested");
    let stopping = Instant::now();
    common::signal(worker.pid(), "-TERM");
    let status = worker.wait_exit(Duration::from_secs(30)).await.expect("the worker did not exit on SIGTERM");
    let took = stopping.elapsed();
    // --drain-timeout 3 s, plus the bounded final commit and exit grace.
    assert!(took < Duration::from_secs(3 + 12), "exit took {took:?}");
    assert!(status.success(), "{status}");
    // What was answered is committed; the rest is read again by the next
    // worker once Redis is back: nothing lost.
    redis.thaw();
    let _next = Worker::start("minilm", &broker, &redis, &[]);
    let all: Vec<RequestId> = before.iter().chain(&during).cloned().collect();
    let answered = wait_for_answers(&redis, &minilm(), &all, Duration::from_secs(90)).await;
    assert!(answered.iter().all(|a| a.status == Status::Ok));
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joining_and_leaving_every_two_seconds_loses_no_answer() {
    let _serial = serial().await;
    let Fleet { broker, redis, worker } = start_fleet(4, Redis::start(), &["--intra-op-threads", "1"]).await;
    let producer = FleetProducer::new(&broker.kafka(), "chaos").unwrap();
    let sentences = common::sentences();
    let churn = async {
        for _ in 0..6 {
            come_and_go(&broker, Duration::from_secs(2)).await;
        }
    };
    // Each answer is waited for from the moment its request is sent: an
    // answer lives 30 s, and the stream takes longer than that to check.
    let results = std::sync::Arc::new(ResultClient::connect(&redis.url()).await.unwrap());
    let load = async {
        let mut waits = Vec::new();
        for n in 0..400 {
            let id = id(&format!("churn-{n}"));
            let text = format!("{} ({n})", sentences[n % sentences.len()]);
            producer.send(&minilm(), &Request::text(id.clone(), text)).await.unwrap();
            let results = results.clone();
            waits.push(tokio::spawn(async move {
                let answers = results.wait(&id, &[minilm()], Duration::from_secs(150)).await;
                (id, answers.map(|mut a| a.remove("minilm").unwrap()))
            }));
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        waits
    };
    let ((), waits) = tokio::join!(churn, load);
    producer.flush(Duration::from_secs(30)).unwrap();
    let mut answered = 0;
    for wait in waits {
        let (id, answer) = wait.await.unwrap();
        let answer = answer.unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(answer.status, Status::Ok, "{id}");
        answered += 1;
    }
    let ids: Vec<()> = vec![(); answered];
    assert_committed_to_the_end(&broker, &minilm(), Lane::Interactive, 4).await;
    let scrape = worker.scrape().await;
    let computed = metric_value(&scrape, "fleet_model_rows_total", &[("model", "minilm")]);
    let revoked = metric_value(&scrape, "fleet_revoked_dropped_total", &[("model", "minilm")]);
    // The churn really moved partitions away from the worker and back.
    let rebalances = metric_value(&scrape, "fleet_partitions_revoked_total", &[("model", "minilm")]);
    assert!(rebalances >= 1.0, "no partition was ever revoked: the churn did not happen");
    eprintln!(
        "rows computed {computed} for {} requests; dropped before compute after a revocation: {revoked}",
        ids.len()
    );
    // Recomputation only where a revocation caught a batch mid-call: at
    // most one batch (32 rows) per rebalance (two per come-and-go).
    assert!(computed <= (ids.len() + 6 * 2 * 32) as f64, "rows computed {computed}");
    let peak = worker.memory_kib("VmHWM");
    assert!(peak < 1024 * 1024, "peak RSS {peak} KiB");
}
