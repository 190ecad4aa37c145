//! Redis over TLS with mutual authentication, against a real redis-server
//! that speaks only TLS: the worker writes answers and the client waits for
//! them through rediss:// with a private CA and client certificates. The
//! wrong CA, a missing client certificate, or a plaintext client each fail
//! fast with an error, never a hang.

mod common;

use common::{send_texts, sentences, serial, Broker, Worker};
use fleet_connect::redis::RedisConfig;
use fleet_producer::ResultClient;
use fleet_proto::{ModelName, Namespace, Status};
use fleet_testkit::{Redis, TestCertificates};
use std::time::{Duration, Instant};

fn mutual_tls(url: &str, certs: &TestCertificates) -> RedisConfig {
    RedisConfig {
        url: url.to_owned(),
        redis_ca_file: Some(certs.ca.clone()),
        redis_client_cert: Some(certs.client_cert.clone()),
        redis_client_key: Some(certs.client_key.clone()),
        redis_cluster: false,
    }
}

/// Connecting must fail, and within a few seconds.
async fn refused(config: &RedisConfig) -> String {
    let started = Instant::now();
    let outcome = match config.target() {
        Ok(target) => {
            ResultClient::connect_to(&target, Namespace::default()).await.map(drop).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    let error = outcome.expect_err("connected although it should not");
    assert!(started.elapsed() < Duration::from_secs(6), "took {:?} to fail: {error}", started.elapsed());
    eprintln!("refused in {:?}: {error}", started.elapsed());
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_travel_over_mutual_tls_and_bad_credentials_fail_fast() {
    let _serial = serial().await;
    let certs = TestCertificates::generate("redis");
    let broker = Broker::start();
    let redis = Redis::start_tls(&certs);
    let model = ModelName::parse("minilm").unwrap();
    broker.create_topics(&model, 2).await;
    let (ca, cert, key) =
        (certs.ca.to_str().unwrap(), certs.client_cert.to_str().unwrap(), certs.client_key.to_str().unwrap());
    let url = redis.url();
    let worker = Worker::start_with_redis_args(
        "minilm",
        &broker,
        &["--redis", &url, "--redis-ca-file", ca, "--redis-client-cert", cert, "--redis-client-key", key],
    );
    worker.wait_until_serving(2).await;

    let ids = send_texts(&broker, &model, "tls", &sentences()[..20], None).await;
    let results =
        ResultClient::connect_to(&mutual_tls(&url, &certs).target().unwrap(), Namespace::default()).await.unwrap();
    for id in &ids {
        let answers = results.wait(id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        assert_eq!(answers["minilm"].status, Status::Ok, "{id}");
    }

    // A CA that did not sign the server's certificate.
    let strangers = TestCertificates::generate("stranger");
    let error = refused(&mutual_tls(&url, &strangers)).await;
    assert!(error.to_lowercase().contains("certificate"), "untrusted server: {error}");
    // The right CA, but no client certificate: the server refuses.
    refused(&RedisConfig { redis_client_cert: None, redis_client_key: None, ..mutual_tls(&url, &certs) }).await;
    // Plaintext against the TLS port.
    refused(&RedisConfig::url(format!("redis://127.0.0.1:{}", redis.port))).await;
}
