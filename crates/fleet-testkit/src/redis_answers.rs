//! Answers in Redis as a test reads them: many waited for at once, their
//! statuses, whether each was written exactly once, and a ledger of
//! statuses for runs longer than an answer lives. Apart from
//! [`crate::answers`], which reads the answers a worker sends to Kafka.

use crate::Redis;
use fleet_producer::ResultClient;
use fleet_proto::{Answer, ModelName, Namespace, RequestId, Status};
use redis::AsyncCommands;
use std::collections::BTreeMap;
use std::time::Duration;

/// Waits for `model`'s answer to each of `ids`, all at once, and returns
/// them in `ids`' order. They are polled, not popped: no ready-list entry
/// is taken, so [`wait_for_answers_once`] can count every write. Panics
/// on one not answered within `timeout`.
pub async fn wait_for_answers(redis: &Redis, model: &ModelName, ids: &[RequestId], timeout: Duration) -> Vec<Answer> {
    let results = ResultClient::connect(&redis.url()).await.expect("a result client");
    let waits = results.wait_all(ids, std::slice::from_ref(model), timeout).await;
    ids.iter()
        .zip(waits)
        .map(|(id, answers)| {
            let mut answers = answers.unwrap_or_else(|e| panic!("{id}: {e}"));
            answers.remove(model.as_str()).unwrap_or_else(|| panic!("{id}: no answer from {model}"))
        })
        .collect()
}

/// The statuses of [`wait_for_answers`], in `ids`' order.
pub async fn statuses(redis: &Redis, model: &ModelName, ids: &[RequestId], timeout: Duration) -> Vec<Status> {
    wait_for_answers(redis, model, ids, timeout).await.into_iter().map(|answer| answer.status).collect()
}

/// [`wait_for_answers`], then asserts each of `ids` was answered exactly
/// once: one answer field (one model) and one push onto its ready list
/// (each write pushes one, and the wait pops none). Checked right after
/// the wait: an answer lives only its TTL.
pub async fn wait_for_answers_once(
    redis: &Redis,
    model: &ModelName,
    ids: &[RequestId],
    timeout: Duration,
) -> Vec<Answer> {
    let answers = wait_for_answers(redis, model, ids, timeout).await;
    let names = Namespace::default();
    let mut conn = redis.connection().await;
    for id in ids {
        let fields: usize = conn.hlen(names.result_key(id)).await.unwrap();
        let writes: usize = conn.llen(names.ready_key(id)).await.unwrap();
        assert_eq!((fields, writes), (1, 1), "{id}: answer fields, ready-list pushes");
    }
    answers
}

/// How many of `ids` have an answer in Redis now.
pub async fn answered_now(redis: &Redis, ids: &[RequestId]) -> usize {
    let mut conn = redis.connection().await;
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.exists(Namespace::default().result_key(id));
    }
    let present: Vec<bool> = pipe.query_async(&mut conn).await.unwrap();
    present.into_iter().filter(|&p| p).count()
}

/// Waits for every id's answer; asserts each has exactly one answer field
/// and returns the status counts. The waits run together: an answer lives
/// only `result_ttl_s`, so waiting for one id after another could look for
/// an early answer after it has expired. Every wait starts at once (each
/// holds its own Redis connection) for the same reason.
pub async fn ledger(redis: &Redis, model: &ModelName, ids: &[RequestId], timeout: Duration) -> BTreeMap<String, usize> {
    use futures::StreamExt;
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let conn = redis.connection().await;
    let statuses: Vec<String> = futures::stream::iter(ids)
        .map(|id| {
            let (results, mut conn) = (&results, conn.clone());
            async move {
                let answers =
                    results.wait(id, std::slice::from_ref(model), timeout).await.unwrap_or_else(|e| panic!("{e}"));
                let fields: usize = conn.hlen(Namespace::default().result_key(id)).await.unwrap();
                assert_eq!(fields, 1, "{id} has {fields} answer fields");
                answers[model.as_str()].status.as_str().to_owned()
            }
        })
        .buffer_unordered(ids.len().max(1))
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    for status in statuses {
        *counts.entry(status).or_insert(0) += 1;
    }
    counts
}
