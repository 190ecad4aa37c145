//! Bad input through the real broker: every message ends as exactly one
//! answer with a stable code, or — without a readable id — in the DLQ.
//! The worker keeps serving after each.

mod common;

use common::{assert_committed_to_the_end, dead_letters, metric_value, serial, Broker, Redis, Worker};
use fleet_producer::ResultClient;
use fleet_proto::clock::now_ms;
use fleet_proto::{headers as h, ContentType, Envelope, ErrorCode, Lane, ModelName, Namespace, RequestId, Status};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

fn headers_for(id: &str, content_type: ContentType) -> Vec<(String, String)> {
    let envelope = Envelope {
        id: RequestId::parse(id).unwrap(),
        source: "bad-input-test".into(),
        created_ms: now_ms(),
        content_type,
        deadline_ms: None,
        parts: 1,
        job: None,
        reply_to: None,
    };
    envelope.to_headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

struct Case {
    key: Option<&'static str>,
    headers: Vec<(String, String)>,
    payload: Vec<u8>,
}

fn case(id: &'static str, edit: impl FnOnce(&mut Vec<(String, String)>), payload: &[u8]) -> Case {
    let mut headers = headers_for(id, ContentType::Text);
    edit(&mut headers);
    Case { key: Some(id), headers, payload: payload.to_vec() }
}

fn set(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    headers.retain(|(k, _)| k != name);
    headers.push((name.to_owned(), value.to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_get_stable_codes_and_unreadable_ones_go_to_the_dlq() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics(&model, 2).await;
    let mut worker = Worker::start("minilm", &broker, &redis, &[]);
    worker.wait_until_serving(2).await;

    let expected: Vec<(&str, Status, Option<ErrorCode>)> = vec![
        ("bad-no-time", Status::Error, Some(ErrorCode::BadRequest)),
        ("bad-spec", Status::Error, Some(ErrorCode::BadRequest)),
        ("bad-utf8", Status::Error, Some(ErrorCode::DecodeFailed)),
        ("bad-empty", Status::Error, Some(ErrorCode::EmptyInput)),
        ("bad-content-type", Status::Error, Some(ErrorCode::UnsupportedFormat)),
        ("bad-image-to-text", Status::Error, Some(ErrorCode::UnsupportedFormat)),
        ("bad-huge", Status::Error, Some(ErrorCode::TextTooLong)),
        ("bad-job", Status::Error, Some(ErrorCode::BadRequest)),
        ("bad-reply-topic", Status::Error, Some(ErrorCode::BadRequest)),
        ("bad-expired", Status::Expired, None),
        ("good-after", Status::Ok, None),
    ];
    let mut cases = vec![
        case("bad-no-time", |hs| hs.retain(|(k, _)| k != h::TIME), b"hello"),
        case("bad-spec", |hs| set(hs, h::SPEC_VERSION, "0.3"), b"hello"),
        case("bad-utf8", |_| {}, b"caf\xe9 au lait"),
        case("bad-empty", |_| {}, b""),
        case("bad-content-type", |hs| set(hs, h::CONTENT_TYPE, "application/pdf"), b"%PDF-1.7"),
        case("bad-image-to-text", |hs| set(hs, h::CONTENT_TYPE, "image/png"), b"\x89PNG\r\n"),
        case("bad-huge", |_| {}, &vec![b'a'; 70_000]),
        case("bad-job", |hs| set(hs, h::JOB, "bad job!"), b"a job id with a space"),
        // A destination is named, never a topic.
        case("bad-reply-topic", |hs| set(hs, h::REPLY_TO, "kafka:infer.elsewhere"), b"answer me there"),
        case("bad-expired", |hs| set(hs, h::DEADLINE, "1000"), b"too late"),
    ];
    // No key and no ce_id: nowhere to answer, so it must land in the DLQ.
    let mut anonymous = headers_for("unused", ContentType::Text);
    anonymous.retain(|(k, _)| k != h::ID);
    cases.push(Case { key: None, headers: anonymous, payload: b"who am I".to_vec() });
    cases.push(case("good-after", |_| {}, b"The worker still serves after bad input."));

    let producer: FutureProducer = broker.kafka().client_config().create().unwrap();
    let topic = Namespace::default().topic(&model);
    for c in &cases {
        let headers =
            c.headers.iter().fold(OwnedHeaders::new(), |hs, (k, v)| hs.insert(Header { key: k, value: Some(v) }));
        let mut record: FutureRecord<'_, str, [u8]> =
            FutureRecord::to(&topic).payload(c.payload.as_slice()).headers(headers);
        if let Some(key) = c.key {
            record = record.key(key);
        }
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e).unwrap();
    }

    let results = ResultClient::connect(&redis.url()).await.unwrap();
    for (id, status, code) in &expected {
        let id = RequestId::parse(id).unwrap();
        let answers = results.wait(&id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        let answer = &answers["minilm"];
        assert_eq!(answer.status, *status, "{id}: {answer:?}");
        assert_eq!(answer.error.as_ref().map(|e| e.code), *code, "{id}: {answer:?}");
        if let Some(error) = &answer.error {
            assert!(!error.message.is_empty());
        }
    }

    let letters = dead_letters(&broker, &model, 1, Duration::from_secs(30)).await;
    assert_eq!(letters[0].payload, b"who am I");
    assert_eq!(letters[0].reason, "unreadable_request_id");

    let scrape = worker.scrape().await;
    assert_eq!(
        metric_value(&scrape, "fleet_dlq_total", &[("model", "minilm"), ("reason", "unreadable_request_id")]),
        1.0
    );
    assert_eq!(metric_value(&scrape, "fleet_ttl_dropped_total", &[("model", "minilm")]), 1.0);
    let offsets = assert_committed_to_the_end(&broker, &model, Lane::Interactive, 2).await;
    assert_eq!(offsets.iter().map(|(_, high)| high).sum::<i64>(), cases.len() as i64);
    assert!(worker.stop().success());
}

/// A repository whose config claims more positions than the exported model
/// has (1024 vs 512): the real model then fails on long rows, which is how a
/// model failure is provoked here without a fake model.
fn overlong_positions_repo() -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("fleet-repo-overlong-{}", std::process::id()));
    let model = root.join("minilm");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&model).unwrap();
    let exported = common::model_repo().join("minilm/1").canonicalize().expect("run make setup");
    std::os::unix::fs::symlink(exported, model.join("1")).unwrap();
    let shipped = std::fs::read_to_string(common::model_repo().join("minilm/config.toml")).unwrap();
    let config = shipped
        .replace("max_seq_len = 512", "max_seq_len = 1024")
        .replace("max_attention_cells = 262144", "max_attention_cells = 1048576");
    assert!(config.contains("max_seq_len = 1024"), "shipped config changed shape");
    std::fs::write(model.join("config.toml"), config).unwrap();
    root
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_the_model_cannot_serve_is_refused_at_warm_up_not_per_request() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics(&model, 1).await;
    // The warm-up runs every length bucket up to the claimed 1024 tokens;
    // past 512 the model fails, so the only version is refused and the
    // worker stops with the reason instead of answering model_failed to
    // every long request. (A row that fails at run time is retried alone
    // and answered model_failed: tests/oom_split.rs, on the real model.)
    let repo = overlong_positions_repo();
    let mut worker = Worker::start("minilm", &broker, &redis, &["--model-repo", repo.to_str().unwrap()]);
    let status = worker.wait_exit(Duration::from_secs(120)).await.expect("the worker kept running");
    assert!(!status.success());
    let _ = std::fs::remove_dir_all(repo);
}
