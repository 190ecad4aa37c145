//! Kafka transport security against real nisshi brokers: a TLS listener
//! (throwaway certificates) and SCRAM authentication (users made with
//! `nisshi user create`). Right settings connect; a wrong password, an
//! untrusted certificate and a plaintext client at a TLS listener each fail
//! fast, saying which; no secret shows in any output.

mod common;

use common::{serial, Broker, Redis};
use fleet_connect::kafka_check::{check, Problem};
use fleet_connect::kafka_security::{KafkaSecurity, SaslMechanism, Secret, SecurityProtocol};
use fleet_testkit::{PostgresDatabase, Storage, TestCertificates};
use rdkafka::ClientConfig;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "correct-horse-battery-staple-8d1f";
const WRONG_PASSWORD: &str = "wrong-horse-4c2e-never-printed";
const REDIS_PASSWORD: &str = "redis-secret-77a9-never-printed";

fn config(broker: &Broker, security: &KafkaSecurity) -> ClientConfig {
    fleet_connect::kafka::client_config(&broker.addr, None, security, &[]).expect("valid settings")
}

fn tls(ca: &std::path::Path) -> KafkaSecurity {
    KafkaSecurity {
        kafka_security_protocol: Some(SecurityProtocol::Ssl),
        kafka_ca_file: Some(ca.to_owned()),
        ..KafkaSecurity::default()
    }
}

fn scram(password: &str) -> KafkaSecurity {
    KafkaSecurity {
        kafka_security_protocol: Some(SecurityProtocol::SaslPlaintext),
        kafka_sasl_mechanism: Some(SaslMechanism::ScramSha256),
        kafka_sasl_username: Some("alice".into()),
        kafka_sasl_password: Some(Secret::new(password)),
        ..KafkaSecurity::default()
    }
}

/// Runs `check` and asserts it ends within `within` with `expected`.
fn assert_fails_fast(config: &ClientConfig, expected: Problem, within: Duration) -> String {
    let started = Instant::now();
    let err = check(config, Duration::from_secs(20)).expect_err("must not connect");
    assert_eq!(err.problem, expected, "{err}");
    assert!(started.elapsed() < within, "took {:?}: {err}", started.elapsed());
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_takes_trusting_clients_and_refuses_the_others_fast() {
    let _serial = serial().await;
    let certs = TestCertificates::generate("kafka");
    let cert = certs.server_cert.to_str().unwrap();
    let key = certs.server_key.to_str().unwrap();
    let broker = Broker::start_secured(Storage::Memory, &["--cert", cert, "--key", key]);

    check(&config(&broker, &tls(&certs.ca)), Duration::from_secs(20)).expect("a client trusting the CA connects");

    let stranger = TestCertificates::generate("kafka-other-ca");
    let message =
        assert_fails_fast(&config(&broker, &tls(&stranger.ca)), Problem::UntrustedCertificate, Duration::from_secs(8));
    assert!(message.contains("--kafka-ca-file"), "{message}");

    let message = assert_fails_fast(
        &config(&broker, &KafkaSecurity::default()),
        Problem::ProtocolMismatch,
        Duration::from_secs(15),
    );
    assert!(message.contains("TLS"), "{message}");

    // The producer library end to end over TLS: topics made, a message sent.
    let mut kafka = broker.kafka();
    kafka.extra = tls(&certs.ca).properties().unwrap();
    let model = fleet_proto::ModelName::parse("minilm").unwrap();
    fleet_producer::topics::ensure_topics(
        &kafka,
        &fleet_proto::Namespace::default(),
        &model,
        fleet_producer::topics::TopicSettings::default(),
    )
    .await
    .expect("topics over TLS");
    let producer = fleet_producer::FleetProducer::new(&kafka, "tests").unwrap();
    let id = fleet_proto::RequestId::parse("over-tls").unwrap();
    let delivery = producer.send(&model, &fleet_producer::Request::text(id, "sent over TLS")).await.unwrap();
    delivery.await.expect("delivered over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_takes_the_right_password_and_a_wrong_one_fails_fast_without_being_printed() {
    let _serial = serial().await;
    let database = PostgresDatabase::create("fleet_sasl");
    let mut broker = Broker::start_with(Storage::Postgres { url: database.url() });
    broker.create_user("scram256", "alice", PASSWORD);
    broker.restart_with(&["--authentication"]);

    check(&config(&broker, &scram(PASSWORD)), Duration::from_secs(20)).expect("alice with her password connects");
    let message =
        assert_fails_fast(&config(&broker, &scram(WRONG_PASSWORD)), Problem::Authentication, Duration::from_secs(8));
    assert!(!message.contains(WRONG_PASSWORD), "{message}");

    // The worker with a wrong password stops at start with the reason, and
    // neither its output nor its metrics hold either secret.
    let redis = Redis::start();
    let redis_url = redis.url().replace("redis://", &format!("redis://default:{REDIS_PASSWORD}@"));
    let metrics = format!("127.0.0.1:{}", common::free_port());
    let started = Instant::now();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_fleet-worker"))
        .args(["--model", "minilm", "--brokers", &broker.addr, "--metrics-addr", &metrics])
        .arg("--model-repo")
        .arg(common::model_repo())
        .env("FLEET_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext")
        .env("FLEET_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
        .env("FLEET_KAFKA_SASL_USERNAME", "alice")
        .env("FLEET_KAFKA_SASL_PASSWORD", WRONG_PASSWORD)
        .env("FLEET_REDIS_URL", &redis_url)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let scrape = loop {
        if let Some((_, body)) = common::http_get(metrics.parse().unwrap(), "/metrics") {
            break body;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the worker never served /metrics");
        std::thread::sleep(Duration::from_millis(50));
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = worker.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the worker kept retrying a wrong password");
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = worker.wait_with_output().unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!status.success());
    assert!(printed.contains("SASL authentication failed"), "{printed}");
    for secret in [WRONG_PASSWORD, REDIS_PASSWORD] {
        assert!(!printed.contains(secret), "a secret in the worker's output");
        assert!(!scrape.contains(secret), "a secret in the worker's metrics");
    }
}

#[test]
fn help_never_shows_a_secret_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_fleet-worker"))
        .arg("--help")
        .env("FLEET_KAFKA_SASL_PASSWORD", PASSWORD)
        .env("FLEET_REDIS_URL", format!("redis://default:{REDIS_PASSWORD}@127.0.0.1:6379"))
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("--kafka-sasl-password"), "{help}");
    assert!(!help.contains(PASSWORD) && !help.contains(REDIS_PASSWORD), "{help}");
}
