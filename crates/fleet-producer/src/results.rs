//! Reads answers back from Redis: `poll` looks once, `wait` blocks on the
//! request's ready list until every expected model has answered, and
//! `wait_all` waits for many requests at once over one connection.
//!
//! Any client can do the same with two commands: `BLPOP fleet:ready:{<id>} <s>`
//! until it has seen as many pushes as parts (or times out), then
//! `HGETALL fleet:result:{<id>}` for the answers, one field per model.
//! One Redis server or a Redis Cluster alike (`fleet_connect::redis`).
//! `cancel` marks a job cancelled, with the client's own Redis rights.

use fleet_connect::redis::{Connection, RedisTarget};
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, JobId, ModelName, Namespace, RequestId};
use futures::future::join_all;
use redis::AsyncCommands;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("request {id}: no answer within {timeout:?} from {missing:?} (have {present:?})")]
    Timeout { id: RequestId, timeout: Duration, missing: Vec<String>, present: Vec<String> },
    #[error("request {id}: Redis did not respond within {timeout:?}")]
    Unresponsive { id: RequestId, timeout: Duration },
    #[error("request {id}: answer of model {model} is not valid answer JSON: {reason}")]
    BadAnswer { id: RequestId, model: String, reason: String },
}

/// Answers of one request, by model name.
pub type Answers = BTreeMap<String, Answer>;

/// A result hash's fields as answers, by model.
fn parse_answers(id: &RequestId, raw: BTreeMap<String, String>) -> Result<Answers, ResultError> {
    raw.into_iter()
        .map(|(model, json)| {
            serde_json::from_str(&json).map(|answer| (model.clone(), answer)).map_err(|e| ResultError::BadAnswer {
                id: id.clone(),
                model,
                reason: e.to_string(),
            })
        })
        .collect()
}

pub struct ResultClient {
    target: RedisTarget,
    namespace: Namespace,
    conn: Connection,
    /// Connections for `wait`'s BLPOP, which holds its connection: one per
    /// `wait` in progress, kept for the next one when it ends cleanly.
    blocking: std::sync::Mutex<Vec<Connection>>,
}

/// How long a cancel lasts unless told otherwise: a week, Kafka's default
/// retention, so a cancelled job's messages are not computed when read late.
pub const DEFAULT_CANCEL_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);

/// At most this many idle BLPOP connections are kept.
const IDLE_BLOCKING_CONNECTIONS: usize = 16;

impl ResultClient {
    /// One server at a plain `redis://` URL, or `rediss://` trusting the
    /// system's roots; the default key prefix.
    pub async fn connect(url: &str) -> Result<Self, ResultError> {
        Self::connect_to(&RedisTarget::Server(redis::Client::open(url)?), Namespace::default()).await
    }

    /// With a target built elsewhere, e.g. with TLS settings or a cluster
    /// (`fleet_connect::redis::RedisConfig::target`), and the release's
    /// key prefix.
    pub async fn connect_to(target: &RedisTarget, namespace: Namespace) -> Result<Self, ResultError> {
        let conn = target.connection(Duration::from_secs(2), Some(Duration::from_secs(5))).await?;
        Ok(Self { target: target.clone(), namespace, conn, blocking: std::sync::Mutex::new(Vec::new()) })
    }

    /// Cancels `job` (a `ce_fleetjob`; a request sent with its own id as
    /// its job can be cancelled alone): workers answer
    /// its requests `cancelled` instead of computing them from then on, for
    /// `keep` (long enough to outlive the job's messages in Kafka: the
    /// bulk topic's retention). `SET <prefix>cancel:{<job>} <now ms> EX`:
    /// cancelling twice, or a job no worker has seen, is harmless.
    pub async fn cancel(&self, job: &JobId, keep: Duration) -> Result<(), ResultError> {
        let seconds = keep.as_secs().max(1);
        // SET … EX, not SETEX: the client's ACL allows SET on cancel keys only.
        let set = redis::cmd("SET").arg(self.namespace.cancel_key(job)).arg(now_ms()).arg("EX").arg(seconds).clone();
        let _: () = set.query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The answers present now (possibly none, possibly partial).
    pub async fn poll(&self, id: &RequestId) -> Result<Answers, ResultError> {
        let raw: BTreeMap<String, String> = self.conn.clone().hgetall(self.namespace.result_key(id)).await?;
        parse_answers(id, raw)
    }

    /// Waits for many requests at once: every `POLL_EVERY` an `HGETALL` per
    /// request still open, sent together (in chunks) over this client's
    /// multiplexed connection (one round trip per chunk and node), until each has every model's answer or `timeout`
    /// passes. One result per id, in order. Cheaper than a `wait` per id
    /// (each holds a connection of its own while it blocks) when thousands
    /// are open, and each answer is taken as soon as it is seen, long before
    /// its TTL could end it.
    pub async fn wait_all(
        &self,
        ids: &[RequestId],
        models: &[ModelName],
        timeout: Duration,
    ) -> Vec<Result<Answers, ResultError>> {
        const POLL_EVERY: Duration = Duration::from_millis(20);
        const CHUNK: usize = 256;
        let started = Instant::now();
        let complete = |answers: &Answers| models.iter().all(|m| answers.contains_key(m.as_str()));
        let mut outcomes: Vec<Option<Result<Answers, ResultError>>> = (0..ids.len()).map(|_| None).collect();
        let mut seen: Vec<Answers> = vec![Answers::new(); ids.len()];
        let mut open: Vec<usize> = (0..ids.len()).collect();
        while !open.is_empty() {
            let mut still = Vec::with_capacity(open.len());
            for chunk in open.chunks(CHUNK) {
                // Not one pipeline: in a cluster the ids' keys live in
                // different slots, which one pipeline may not span.
                let reads = chunk.iter().map(|&i| {
                    let (mut conn, key) = (self.conn.clone(), self.namespace.result_key(&ids[i]));
                    async move { conn.hgetall::<_, BTreeMap<String, String>>(key).await }
                });
                let replies: Result<Vec<BTreeMap<String, String>>, _> = join_all(reads).await.into_iter().collect();
                let replies = match replies {
                    Ok(replies) => replies,
                    Err(e) => {
                        // Redis away: the chunk stays open, and is asked again.
                        tracing::debug!(error = %e, "polling answers failed");
                        still.extend_from_slice(chunk);
                        continue;
                    }
                };
                for (&i, raw) in chunk.iter().zip(replies) {
                    match parse_answers(&ids[i], raw) {
                        Ok(answers) => seen[i] = answers,
                        Err(e) => {
                            outcomes[i] = Some(Err(e));
                            continue;
                        }
                    }
                    if complete(&seen[i]) {
                        outcomes[i] = Some(Ok(std::mem::take(&mut seen[i])));
                    } else {
                        still.push(i);
                    }
                }
            }
            open = still;
            if open.is_empty() {
                break;
            }
            if started.elapsed() >= timeout {
                for &i in &open {
                    let missing =
                        models.iter().filter(|m| !seen[i].contains_key(m.as_str())).map(|m| m.to_string()).collect();
                    let present = seen[i].keys().cloned().collect();
                    outcomes[i] = Some(Err(ResultError::Timeout { id: ids[i].clone(), timeout, missing, present }));
                }
                break;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        outcomes.into_iter().map(|o| o.expect("every id has an outcome")).collect()
    }

    /// Blocks until every model in `models` has answered `id`, or `timeout`
    /// passes (then the error names the models still missing). Never waits
    /// much past `timeout`, even when Redis stops answering.
    pub async fn wait(&self, id: &RequestId, models: &[ModelName], timeout: Duration) -> Result<Answers, ResultError> {
        // The inner loop bounds its own waits; this bounds a Redis that
        // accepts the connection but stops answering.
        let slack = Duration::from_millis(500);
        match tokio::time::timeout(timeout + slack, self.wait_inner(id, models, timeout)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(ResultError::Unresponsive { id: id.clone(), timeout }),
        }
    }

    async fn wait_inner(
        &self,
        id: &RequestId,
        models: &[ModelName],
        timeout: Duration,
    ) -> Result<Answers, ResultError> {
        let started = Instant::now();
        let complete = |answers: &Answers| models.iter().all(|m| answers.contains_key(m.as_str()));
        let mut answers = self.poll(id).await?;
        if complete(&answers) {
            return Ok(answers);
        }
        // BLPOP holds its connection: it gets one of its own so that other
        // callers of this client are not stuck behind it, reused by later
        // waits. A wait that fails or is cancelled (`wait`'s bound) drops
        // its connection: a BLPOP may still be pending on it.
        let mut blocking = self.blocking_connection().await?;
        let ready = self.namespace.ready_key(id);
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                self.keep_blocking_connection(blocking);
                let missing =
                    models.iter().filter(|m| !answers.contains_key(m.as_str())).map(|m| m.to_string()).collect();
                return Err(ResultError::Timeout {
                    id: id.clone(),
                    timeout,
                    missing,
                    present: answers.keys().cloned().collect(),
                });
            }
            // BLPOP takes seconds as a float; 0 would mean "forever".
            let wait_s = left.as_secs_f64().max(0.01);
            let _: Option<(String, String)> = blocking.blpop(&ready, wait_s).await?;
            answers = self.poll(id).await?;
            if complete(&answers) {
                self.keep_blocking_connection(blocking);
                return Ok(answers);
            }
        }
    }

    /// An idle BLPOP connection, or a new one. No response timeout of its
    /// own: `wait` bounds the whole call.
    async fn blocking_connection(&self) -> Result<Connection, ResultError> {
        let idle = self.blocking.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            // No response timeout (the client's default is 500 ms, far
            // shorter than a BLPOP): `wait` bounds the whole call.
            None => Ok(self.target.connection(Duration::from_secs(2), None).await?),
        }
    }

    fn keep_blocking_connection(&self, conn: Connection) {
        let mut idle = self.blocking.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < IDLE_BLOCKING_CONNECTIONS {
            idle.push(conn);
        }
    }
}
