//! Answers into Redis: one atomic script per answer (see the [sink](super)
//! for why), the feature-cache entries of what was computed alongside, all
//! of a batch sent at once on the multiplexed connection (one round trip on
//! one server; one per node in a cluster, where one pipeline could not span
//! the slots of different requests).

use crate::core::job::Finished;
use crate::stages::handover::VersionTtls;
use fleet_connect::redis::{Connection, RedisTarget};
use fleet_proto::Namespace;
use futures::future::join_all;
use std::time::Duration;

/// KEYS: result hash, ready list. ARGV: model, answer JSON, TTL seconds.
/// Keys of another type are refused before anything is written, so a
/// refused answer leaves no half (a hash field nobody is woken for).
const WRITE_ANSWER: &str = r"
for i, want in ipairs({'hash', 'list'}) do
  local have = redis.call('TYPE', KEYS[i]).ok
  if have ~= want and have ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. have .. ', not a ' .. want)
  end
end
local fresh = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
if fresh == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return fresh
";

/// Whether answers are written for the first time or again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    First,
    Retry,
}

pub struct ResultSink {
    conn: Connection,
    namespace: Namespace,
    /// Each answer's TTLs are its version's.
    ttls: VersionTtls,
    replicas: Option<ReplicaWait>,
}

/// `--redis-wait-replicas`: how many replicas must hold an answer, and how
/// long to wait for them, before its offset may move on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    pub replicas: u32,
    pub timeout: Duration,
}

/// The outcome of each answer once WAIT said how many replicas hold it:
/// written answers count only when enough do. Short of them, each becomes
/// a transient failure (retried, rewritten: HSETNX makes that a no-op).
fn with_replicas(
    outcomes: Vec<Result<(), redis::RedisError>>,
    wanted: u32,
    acknowledged: Result<u32, redis::RedisError>,
) -> Vec<Result<(), redis::RedisError>> {
    let shortfall = match acknowledged {
        Ok(got) if got >= wanted => return outcomes,
        Ok(got) => format!("only {got} of {wanted} Redis replicas acknowledged the answers"),
        Err(e) => format!("WAIT for {wanted} Redis replicas failed: {e}"),
    };
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.and_then(|()| {
                Err(redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, shortfall.clone())))
            })
        })
        .collect()
}

impl ResultSink {
    /// `redis` carries the URL, credentials, TLS settings and whether it is
    /// a cluster (fleet_connect::redis::RedisConfig::target).
    pub async fn connect(
        redis: &RedisTarget,
        namespace: Namespace,
        ttls: VersionTtls,
    ) -> Result<Self, redis::RedisError> {
        let conn = redis.managed(Duration::from_secs(2), Duration::from_secs(5)).await?;
        Ok(Self { conn, namespace, ttls, replicas: None })
    }

    /// Waits for `wait.replicas` replicas after each batch of writes.
    pub fn with_replica_wait(self, wait: Option<ReplicaWait>) -> Self {
        Self { replicas: wait, ..self }
    }

    /// Writes every answer of a batch: one result per answer (a Redis that
    /// cannot be reached fails each with a connection error). `attempt`: a
    /// retry may find its own earlier try landed (a timeout after Redis
    /// wrote it), which is no duplicate.
    pub async fn write(&self, finished: &[&Finished], attempt: Attempt) -> Vec<Result<(), redis::RedisError>> {
        let answers = finished.iter().map(|&f| {
            let mut conn = self.conn.clone();
            let write = redis::cmd("EVAL")
                .arg(WRITE_ANSWER)
                .arg(2)
                .arg(self.namespace.result_key(&f.id))
                .arg(self.namespace.ready_key(&f.id))
                .arg(&f.answer.model)
                .arg(f.answer.to_json())
                .arg(self.ttls.of(f.answer.version).result_ttl_s)
                .to_owned();
            async move {
                // 0: the request already had this model's answer, which
                // stays (HSETNX). On a first try that is a message read
                // twice (a rebalance, a replay, a restart): work done
                // twice, which the ledger a soak keeps counts. The log
                // names the message, so a duplicate no fault explains can
                // be traced to its partition and offset.
                let fresh = write.query_async::<i64>(&mut conn).await?;
                if fresh == 0 && attempt == Attempt::First {
                    metrics::counter!(crate::metrics::DUPLICATE_ANSWERS_TOTAL).increment(1);
                    tracing::info!(
                        id = %f.id,
                        lane = %f.position.lane,
                        partition = f.position.partition,
                        offset = f.position.offset,
                        "this request was answered before: computed again"
                    );
                }
                Ok(())
            }
        });
        let outcomes = join_all(answers).await;
        let Some(wait) = self.replicas.filter(|_| outcomes.iter().any(Result::is_ok)) else {
            return outcomes;
        };
        // On the connection the answers went out on (a clone shares it):
        // WAIT covers every write sent on it before.
        let acknowledged = redis::cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout.as_millis() as u64)
            .query_async::<u32>(&mut self.conn.clone())
            .await;
        with_replicas(outcomes, wait.replicas, acknowledged)
    }

    /// Stores the feature-cache entries of what a batch computed, wherever
    /// its answers go. An entry that cannot be stored costs a later hit,
    /// never the answer: its failure is logged, not returned.
    pub async fn store_features(&self, finished: &[&Finished]) {
        let features = finished.iter().copied().filter_map(|f| f.feature.as_ref().map(|entry| (f, entry))).map(
            |(f, (key, value))| {
                let mut conn = self.conn.clone();
                let ttl_s = self.ttls.of(f.answer.version).feature_ttl_s;
                let store = redis::cmd("SET").arg(key).arg(value).arg("EX").arg(ttl_s).to_owned();
                async move {
                    if let Err(e) = store.query_async::<redis::Value>(&mut conn).await {
                        tracing::warn!(error = %e, id = %f.id, "feature-cache entry not stored");
                    }
                }
            },
        );
        join_all(features).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::sink::failure::{redis_error_class, FailureClass};

    fn written(n: usize) -> Vec<Result<(), redis::RedisError>> {
        (0..n).map(|_| Ok(())).collect()
    }

    #[test]
    fn enough_replicas_keep_the_outcomes() {
        assert!(with_replicas(written(3), 1, Ok(1)).iter().all(Result::is_ok));
        assert!(with_replicas(written(3), 1, Ok(2)).iter().all(Result::is_ok));
    }

    #[test]
    fn too_few_replicas_or_a_failed_wait_fail_each_written_answer_transiently() {
        let own = redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "its own"));
        let mut outcomes = written(2);
        outcomes.push(Err(own));
        let waited = with_replicas(outcomes, 2, Ok(1));
        assert!(waited[0].as_ref().unwrap_err().to_string().contains("only 1 of 2"));
        assert_eq!(redis_error_class(waited[0].as_ref().unwrap_err()), FailureClass::Transient);
        assert!(waited[2].as_ref().unwrap_err().to_string().contains("its own"), "its own error stays");
        let failed = redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"));
        assert!(with_replicas(written(1), 1, Err(failed)).iter().all(Result::is_err));
    }
}
