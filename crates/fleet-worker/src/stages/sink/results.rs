//! Answers into Redis: one atomic script per answer (see the [sink](super)
//! for why), the feature-cache entries of what was computed alongside, all
//! of a batch sent at once on the multiplexed connection (one round trip on
//! one server; one per node in a cluster, where one pipeline could not span
//! the slots of different requests).

use crate::job::Finished;
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

pub struct ResultSink {
    conn: Connection,
    namespace: Namespace,
    result_ttl_s: u64,
    feature_ttl_s: u64,
}

impl ResultSink {
    /// `redis` carries the URL, credentials, TLS settings and whether it is
    /// a cluster (fleet_connect::redis::RedisConfig::target).
    pub async fn connect(
        redis: &RedisTarget,
        namespace: Namespace,
        result_ttl_s: u64,
        feature_ttl_s: u64,
    ) -> Result<Self, redis::RedisError> {
        let conn = redis.managed(Duration::from_secs(2), Duration::from_secs(5)).await?;
        Ok(Self { conn, namespace, result_ttl_s, feature_ttl_s })
    }

    /// Writes every answer of a batch, and the feature-cache entries of what
    /// was computed: one result per answer (a Redis that cannot be reached
    /// fails each with a connection error). A feature-cache
    /// entry that cannot be stored costs a later hit, never the answer: its
    /// failure is logged, not returned.
    pub async fn write(&mut self, finished: &[Finished]) -> Vec<Result<(), redis::RedisError>> {
        let answers = finished.iter().map(|f| {
            let mut conn = self.conn.clone();
            let write = redis::cmd("EVAL")
                .arg(WRITE_ANSWER)
                .arg(2)
                .arg(self.namespace.result_key(&f.id))
                .arg(self.namespace.ready_key(&f.id))
                .arg(&f.answer.model)
                .arg(f.answer.to_json())
                .arg(self.result_ttl_s)
                .to_owned();
            async move { write.query_async::<redis::Value>(&mut conn).await.map(drop) }
        });
        let features =
            finished.iter().filter_map(|f| f.feature.as_ref().map(|entry| (f, entry))).map(|(f, (key, value))| {
                let mut conn = self.conn.clone();
                let store = redis::cmd("SET").arg(key).arg(value).arg("EX").arg(self.feature_ttl_s).to_owned();
                async move {
                    if let Err(e) = store.query_async::<redis::Value>(&mut conn).await {
                        tracing::warn!(error = %e, id = %f.id, "feature-cache entry not stored");
                    }
                }
            });
        let (outcomes, _) = futures::join!(join_all(answers), join_all(features));
        outcomes
    }
}
