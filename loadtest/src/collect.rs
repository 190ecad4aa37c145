//! Reads answers back for thousands of requests at once: every poll asks
//! `HGET <prefix>result:{<id>} <model>` for each pending id, a chunk of them
//! sent together, instead of a blocking wait and a connection per request.
//! On one Redis server a chunk is one pipeline (one round trip); in a Redis
//! Cluster the ids' keys live in different slots, which one pipeline may not
//! span, so each `HGET` is its own command, all of a chunk sent at once on
//! the multiplexed connection (one round trip per node).
//! Answers live `result_ttl_s` (30 s by default), so the poll interval must
//! stay far below that.

use crate::ledger::Outcome;
use fleet_connect::redis::Connection;
use fleet_proto::{Answer, ModelName, Namespace, RequestId, Status};
use futures::future::join_all;
use redis::AsyncCommands;

/// Ids per chunk: big enough to amortise the round trip, small enough
/// that one reply stays a few MB (an answer carries a 384-float embedding).
const CHUNK: usize = 256;

/// What an answer said, in the load generator's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub outcome: Outcome,
    pub e2e_ms: f64,
    pub queue_ms: f64,
    pub infer_ms: f64,
}

impl Seen {
    pub fn from_answer(answer: &Answer) -> Self {
        let outcome = match answer.status {
            Status::Ok => Outcome::Ok,
            Status::Expired => Outcome::Expired,
            // A load run sends no job a cancel names; one that did sees it
            // as a request not served, by its status word.
            Status::Cancelled => Outcome::Error(Status::Cancelled.as_str().to_owned()),
            Status::Error => Outcome::Error(
                answer.error.as_ref().map_or_else(|| "unknown".to_owned(), |e| e.code.as_str().to_owned()),
            ),
        };
        let t = answer.timings_ms;
        Self { outcome, e2e_ms: t.total, queue_ms: t.queue, infer_ms: t.infer }
    }
}

/// One poll over `ids` (their result keys named by `names`): the answers
/// present now, by position in `ids`.
pub async fn poll(
    conn: &mut Connection,
    names: &Namespace,
    model: &ModelName,
    ids: &[RequestId],
) -> Result<Vec<Option<Seen>>, redis::RedisError> {
    let mut seen = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        let keys: Vec<String> = chunk.iter().map(|id| names.result_key(id)).collect();
        let replies = hget_each(conn, &keys, model.as_str()).await?;
        seen.extend(replies.into_iter().map(|reply| {
            let reply = reply?;
            Some(match serde_json::from_str::<Answer>(&reply) {
                Ok(answer) => Seen::from_answer(&answer),
                // Written, but not an answer the contract allows: counted,
                // and visible as its own error code in the report.
                Err(_) => Seen {
                    outcome: Outcome::Error("unreadable_answer".into()),
                    e2e_ms: 0.0,
                    queue_ms: 0.0,
                    infer_ms: 0.0,
                },
            })
        }));
    }
    Ok(seen)
}

/// `HGET <key> <field>` for every key, the replies in the keys' order: one
/// pipeline on one server; on a cluster one command per key (see the module
/// docs), sent together, so a chunk still costs a round trip per node, not
/// per key.
async fn hget_each(
    conn: &mut Connection,
    keys: &[String],
    field: &str,
) -> Result<Vec<Option<String>>, redis::RedisError> {
    if matches!(conn, Connection::Cluster(_)) {
        let reads = keys.iter().map(|key| {
            let mut conn = conn.clone();
            async move { conn.hget::<_, _, Option<String>>(key.as_str(), field).await }
        });
        return join_all(reads).await.into_iter().collect();
    }
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.hget(key.as_str(), field);
    }
    pipe.query_async(conn).await
}
