//! Reads answers back from Redis: `poll` looks once, `wait` blocks on the
//! request's ready list until every expected model has answered.
//!
//! Any client can do the same with two commands: `BLPOP fleet:ready:<id> <s>`
//! until it has seen as many pushes as parts (or times out), then
//! `HGETALL fleet:result:<id>` for the answers, one field per model.

use fleet_proto::{keys, Answer, ModelName, RequestId};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, AsyncConnectionConfig};
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

pub struct ResultClient {
    client: redis::Client,
    conn: MultiplexedConnection,
}

impl ResultClient {
    /// A plain `redis://` URL, or `rediss://` trusting the system's roots.
    pub async fn connect(url: &str) -> Result<Self, ResultError> {
        Self::connect_client(redis::Client::open(url)?).await
    }

    /// With a client built elsewhere, e.g. with TLS settings
    /// (`fleet_connect::redis::RedisConfig::client`).
    pub async fn connect_client(client: redis::Client) -> Result<Self, ResultError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        Ok(Self { client, conn })
    }

    /// The answers present now (possibly none, possibly partial).
    pub async fn poll(&self, id: &RequestId) -> Result<Answers, ResultError> {
        let raw: BTreeMap<String, String> = self.conn.clone().hgetall(keys::result_key(id)).await?;
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
        // BLPOP holds its connection: give it one of its own so that other
        // callers of this client are not stuck behind it.
        let mut blocking = self
            .client
            .get_multiplexed_async_connection_with_config(
                &AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(timeout + Duration::from_secs(1))),
            )
            .await?;
        let ready = keys::ready_key(id);
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
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
                return Ok(answers);
            }
        }
    }
}
