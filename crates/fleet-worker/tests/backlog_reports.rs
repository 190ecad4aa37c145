//! Backlog reports of workers that stopped without withdrawing (a crash, a
//! killed pod) are deleted by the model's live workers, against a real Redis;
//! fresh reports, this worker's own among them, stay.

use fleet_connect::redis::RedisTarget;
use fleet_proto::backlog::{encode, STALE_REPORT_AGE_MS};
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace};
use fleet_testkit::Redis;
use fleet_worker::status::backlog::BacklogPublisher;
use redis::AsyncCommands;
use std::collections::HashMap;

#[tokio::test]
async fn the_reports_of_crashed_workers_are_deleted_and_the_live_ones_kept() {
    let redis = Redis::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let model = ModelName::parse("minilm").unwrap();
    let key = Namespace::default().backlog_key(&model);
    let now = now_ms();
    let crashed: Vec<(String, String)> =
        (0..5).map(|i| (format!("crashed-{i}"), encode(7, now - STALE_REPORT_AGE_MS - 60_000, 3.0))).collect();
    let _: () = conn.hset_multiple(&key, &crashed).await.unwrap();
    let _: () = conn.hset(&key, "live-other", encode(2, now, 4.0)).await.unwrap();

    let mut publisher =
        BacklogPublisher::connect(&RedisTarget::Server(client), key.clone(), "me".into()).await.unwrap();
    publisher.publish(1, now, 5.0).await.unwrap();

    let left: HashMap<String, String> = conn.hgetall(&key).await.unwrap();
    let mut fields: Vec<&str> = left.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, vec!["live-other", "me"], "the first report prunes; {left:?}");
    assert_eq!(publisher.prune(now).await.unwrap(), 0, "nothing stale is left");
}
