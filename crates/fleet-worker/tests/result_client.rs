//! `ResultClient::wait` against a real Redis: waits one after another reuse
//! one BLPOP connection instead of opening one each.

use fleet_producer::{ResultClient, ResultError};
use fleet_proto::{ModelName, RequestId};
use fleet_testkit::Redis;
use std::time::Duration;

async fn connections_received(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await.unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats names total_connections_received")
}

#[tokio::test]
async fn waits_one_after_another_reuse_their_blocking_connection() {
    let redis = Redis::start();
    let mut admin = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let model = ModelName::parse("minilm").unwrap();
    let before = connections_received(&mut admin).await;
    for n in 0..5 {
        // Nobody answers: each wait blocks on its ready list until it times
        // out, the last past the Redis client's default response timeout
        // (500 ms), which must not cut a BLPOP short.
        let id = RequestId::parse(&format!("never-{n}")).unwrap();
        let timeout = Duration::from_millis(if n == 4 { 1_200 } else { 100 });
        let outcome = results.wait(&id, std::slice::from_ref(&model), timeout).await;
        assert!(matches!(outcome, Err(ResultError::Timeout { .. })), "{outcome:?}");
    }
    let opened = connections_received(&mut admin).await - before;
    assert_eq!(opened, 1, "five waits opened {opened} connections");
}
