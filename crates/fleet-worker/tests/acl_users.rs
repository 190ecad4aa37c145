//! The two Redis ACL users of a release (`fleet_connect::acl`, the rules
//! the chart renders), applied to a real redis-server with the default user
//! off: the worker serves under its user (answers, feature cache, backlog
//! report); a client under its user waits for answers, reads the backlog and
//! cancels a job (SET of its cancel key, which the worker's user reads), and
//! is refused every other write: answers, ready lists, cache entries,
//! reports, and any SET but a cancel's.

mod common;

use common::{send_texts, serial, Broker, Redis, Worker};
use fleet_connect::acl::{self, Role};
use fleet_producer::{admission, ResultClient};
use fleet_proto::clock::now_ms;
use fleet_proto::{JobId, ModelName, Namespace, RequestId, Status};
use std::time::{Duration, Instant};

/// The user lines of redis.conf for both roles; password = `<user>-pw`.
fn acl_config(names: &Namespace) -> String {
    let user = |name: &str, role| format!("user {name} on >{name}-pw {}", acl::rules(role, names).join(" "));
    format!("user default off\n{}\n{}\n", user("fleet-worker", Role::Worker), user("fleet-client", Role::Client))
}

async fn refused(conn: &mut redis::aio::MultiplexedConnection, command: &mut redis::Cmd) {
    let outcome: redis::RedisResult<redis::Value> = command.query_async(conn).await;
    let error = outcome.expect_err("a command the user may not run was allowed");
    assert!(error.to_string().to_lowercase().contains("noperm"), "refused for another reason: {error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_and_client_users_each_get_only_what_they_need() {
    let _serial = serial().await;
    let names = Namespace::default();
    let redis = Redis::start_with_config(&acl_config(&names));
    let (broker, model) = (Broker::start(), ModelName::parse("minilm").unwrap());
    broker.create_topics(&model, 2).await;
    let worker_url = format!("redis://fleet-worker:fleet-worker-pw@127.0.0.1:{}", redis.port);
    let client_url = format!("redis://fleet-client:fleet-client-pw@127.0.0.1:{}", redis.port);
    let worker = Worker::start("minilm", &broker, &redis, &["--redis", &worker_url]);
    worker.wait_until_serving(2).await;

    let results = ResultClient::connect(&client_url).await.unwrap();
    let text = vec!["Access control lists confine each side.".to_owned()];
    let mut ids = Vec::new();
    for round in ["acl-first", "acl-again"] {
        let id = send_texts(&broker, &model, round, &text, None).await.remove(0);
        let answers = results.wait(&id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        assert_eq!(answers["minilm"].status, Status::Ok);
        ids.push(id);
    }
    // The second identical text was a cache hit: the worker's user may use the cache.
    let hits = worker
        .wait_for_metric("fleet_feature_cache_hits_total", &[("model", "minilm")], 1.0, Duration::from_secs(5))
        .await;
    assert_eq!(hits, 1.0);

    // The client reads the workers' backlog reports (admission).
    let mut client =
        redis::Client::open(client_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let started = Instant::now();
    while admission::read_load(&mut client, &names.backlog_key(&model)).await.unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(30), "no backlog report readable by the client");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every write the client might try is refused.
    let id = &ids[0];
    let other = RequestId::parse("acl-forged").unwrap();
    let answer = r#"{"status":"ok","model":"minilm","version":1}"#;
    refused(&mut client, redis::cmd("HSET").arg(names.result_key(&other)).arg("minilm").arg(answer)).await;
    refused(&mut client, redis::cmd("HSET").arg(names.result_key(id)).arg("minilm").arg(answer)).await;
    refused(&mut client, redis::cmd("DEL").arg(names.result_key(id))).await;
    refused(&mut client, redis::cmd("RPUSH").arg(names.ready_key(&other)).arg("minilm")).await;
    refused(&mut client, redis::cmd("EVAL").arg("return 1").arg(0)).await;
    let feature = names.feature_key(&model, 1, "fp32", "0123456789abcdef0123456789abcdef");
    refused(&mut client, redis::cmd("SET").arg(&feature).arg("{}")).await;
    refused(&mut client, redis::cmd("MGET").arg(&feature)).await;
    refused(&mut client, redis::cmd("HSET").arg(names.backlog_key(&model)).arg("forged").arg("0 0 0")).await;
    refused(&mut client, &mut redis::cmd("FLUSHALL")).await;

    // The worker keeps its lost-data marker under its user; a client may not touch it.
    let mut as_worker =
        redis::Client::open(worker_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let marker: Option<String> = redis::cmd("SET")
        .arg(names.memory_marker_key())
        .arg("test")
        .arg("NX")
        .arg("GET")
        .query_async(&mut as_worker)
        .await
        .unwrap();
    assert!(marker.is_some_and(|m| m != "test"), "the worker did not set its lost-data marker");
    refused(&mut client, redis::cmd("SET").arg(names.memory_marker_key()).arg("forged")).await;

    // A client cancels a job: the one key it may SET, the worker's user
    // reads it (workers look cancels up with MGET).
    let job = JobId::parse("acl-backfill").unwrap();
    results.cancel(&job, Duration::from_secs(60)).await.expect("the client user may cancel a job");
    let cancelled: Vec<Option<String>> =
        redis::cmd("MGET").arg(names.cancel_key(&job)).query_async(&mut as_worker).await.unwrap();
    let cancelled_ms: u64 = cancelled[0].as_deref().expect("the worker user reads the cancel").parse().unwrap();
    assert!(cancelled_ms > 0 && cancelled_ms <= now_ms(), "cancel key holds {cancelled_ms}");
    // SET is granted on cancel keys only: not on an answer, a ready list
    // (which the client may pop), a cache entry; a cancel key is not
    // readable or deletable by the client (it ends on its TTL).
    refused(&mut client, redis::cmd("SET").arg(names.result_key(&other)).arg(answer)).await;
    refused(&mut client, redis::cmd("SET").arg(names.result_key(id)).arg(answer)).await;
    refused(&mut client, redis::cmd("SET").arg(names.ready_key(&other)).arg("minilm")).await;
    refused(&mut client, redis::cmd("SET").arg(&feature).arg("{}").arg("EX").arg(60)).await;
    refused(&mut client, redis::cmd("SET").arg(names.backlog_key(&model)).arg("0 0 0")).await;
    refused(&mut client, redis::cmd("GET").arg(names.cancel_key(&job))).await;
    refused(&mut client, redis::cmd("SET").arg(names.cancel_key(&job)).arg("1").arg("GET")).await;
    refused(&mut client, redis::cmd("DEL").arg(names.cancel_key(&job))).await;

    // The worker's user is confined to the prefix and to its commands.
    refused(&mut as_worker, redis::cmd("SET").arg("elsewhere:key").arg("x")).await;
    refused(&mut as_worker, &mut redis::cmd("FLUSHALL")).await;
    refused(&mut as_worker, redis::cmd("KEYS").arg("*")).await;

    // Without a password nothing is readable: refused by Redis, not failing
    // for some other reason.
    let anonymous = ResultClient::connect(&format!("redis://127.0.0.1:{}", redis.port)).await;
    let refusal = match anonymous {
        Ok(client) => client.poll(id).await.expect_err("the default user could read answers").to_string(),
        Err(e) => e.to_string(),
    };
    let refusal = refusal.to_lowercase();
    assert!(
        refusal.contains("noauth") || refusal.contains("noperm") || refusal.contains("authentication required"),
        "refused for another reason than authentication: {refusal}"
    );
}
