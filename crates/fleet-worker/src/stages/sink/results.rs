//! Answers into Redis: one round trip per batch, one atomic script per
//! answer (see the [sink](super) for why), the feature-cache entries of
//! what was computed alongside.

use crate::job::Finished;
use fleet_proto::keys;
use redis::aio::ConnectionManager;
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
    conn: ConnectionManager,
    result_ttl_s: u64,
    feature_ttl_s: u64,
}

impl ResultSink {
    /// `client` carries the URL, credentials and TLS settings
    /// (fleet_connect::redis::RedisConfig::client).
    pub async fn connect(
        client: redis::Client,
        result_ttl_s: u64,
        feature_ttl_s: u64,
    ) -> Result<Self, redis::RedisError> {
        let conn = fleet_connect::redis::managed(client, Duration::from_secs(2), Duration::from_secs(5)).await?;
        Ok(Self { conn, result_ttl_s, feature_ttl_s })
    }

    /// Writes every answer of a batch, and the feature-cache entries of what
    /// was computed, in one round trip. `Err` when the round trip itself
    /// failed (nothing is known to be written); else one result per answer.
    /// A feature-cache entry that cannot be stored costs a later hit, never
    /// the answer: its failure is logged and counted, not returned.
    pub async fn write(
        &mut self,
        finished: &[Finished],
    ) -> Result<Vec<Result<(), redis::RedisError>>, redis::RedisError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for f in finished {
            pipe.cmd("EVAL")
                .arg(WRITE_ANSWER)
                .arg(2)
                .arg(keys::result_key(&f.id))
                .arg(keys::ready_key(&f.id))
                .arg(&f.answer.model)
                .arg(f.answer.to_json())
                .arg(self.result_ttl_s);
            if let Some((key, value)) = &f.feature {
                pipe.cmd("SET").arg(key).arg(value).arg("EX").arg(self.feature_ttl_s);
            }
        }
        let mut replies = pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut self.conn).await?.into_iter();
        let mut outcomes = Vec::with_capacity(finished.len());
        for f in finished {
            let answer = replies.next().unwrap_or(Ok(redis::Value::Nil)).map(drop);
            if f.feature.is_some() {
                if let Some(Err(e)) = replies.next() {
                    tracing::warn!(error = %e, id = %f.id, "feature-cache entry not stored");
                }
            }
            outcomes.push(answer);
        }
        Ok(outcomes)
    }
}
