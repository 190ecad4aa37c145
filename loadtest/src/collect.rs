//! Reads answers back for thousands of requests at once: every poll is one
//! pipelined round trip of `HGET fleet:result:{<id>} <model>` per pending id
//! (in chunks), instead of a blocking wait and a connection per request.
//! Answers live `result_ttl_s` (30 s by default), so the poll interval must
//! stay far below that.

use crate::ledger::Outcome;
use fleet_proto::{Answer, ModelName, Namespace, RequestId, Status};
use redis::aio::MultiplexedConnection;

/// Ids per pipeline: big enough to amortise the round trip, small enough
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
            Status::Error => Outcome::Error(
                answer.error.as_ref().map_or_else(|| "unknown".to_owned(), |e| e.code.as_str().to_owned()),
            ),
        };
        let t = answer.timings_ms;
        Self { outcome, e2e_ms: t.total, queue_ms: t.queue, infer_ms: t.infer }
    }
}

/// One poll over `ids`: the answers present now, by position in `ids`.
pub async fn poll(
    conn: &mut MultiplexedConnection,
    model: &ModelName,
    ids: &[RequestId],
) -> Result<Vec<Option<Seen>>, redis::RedisError> {
    let mut seen = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(CHUNK) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.hget(Namespace::default().result_key(id), model.as_str());
        }
        let replies: Vec<Option<String>> = pipe.query_async(conn).await?;
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
