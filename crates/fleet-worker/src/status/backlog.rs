//! This worker's backlog in Redis, every second, for producers' fail-fast
//! admission (`fleet_proto::backlog`).

use fleet_connect::redis::{Connection, RedisTarget};
use redis::AsyncCommands;
use std::time::Duration;

/// Publishes this worker's backlog for producers' fail-fast admission
/// (`fleet_proto::backlog`).
pub struct BacklogPublisher {
    conn: Connection,
    key: String,
    worker_id: String,
    published: u64,
}

/// Every this many reports (about 30 s), the stale reports of workers that
/// stopped without withdrawing are deleted: otherwise the hash keeps one
/// field per crashed pod for as long as any worker of the model lives.
const PRUNE_EVERY: u64 = 30;

impl BacklogPublisher {
    pub async fn connect(redis: &RedisTarget, key: String, worker_id: String) -> Result<Self, redis::RedisError> {
        let conn = redis.managed(Duration::from_secs(2), Duration::from_secs(2)).await?;
        Ok(Self { conn, key, worker_id, published: 0 })
    }

    pub async fn publish(&mut self, backlog: u64, now_ms: u64, drain_per_s: f64) -> Result<(), redis::RedisError> {
        let value = fleet_proto::backlog::encode(backlog, now_ms, drain_per_s);
        redis::pipe()
            .hset(&self.key, &self.worker_id, value)
            .ignore()
            .expire(&self.key, 60)
            .ignore()
            .query_async::<()>(&mut self.conn)
            .await?;
        if self.published % PRUNE_EVERY == 0 {
            // The report is out; a failed cleanup of others' old reports
            // must not count as this worker failing to report.
            if let Err(e) = self.prune(now_ms).await {
                tracing::warn!(error = %e, "pruning stale backlog reports failed; next try in ~30 s");
            }
        }
        self.published += 1;
        Ok(())
    }

    /// Deletes the reports older than `STALE_REPORT_AGE_MS` (and values that
    /// are no report); returns how many. Any worker of the model may.
    pub async fn prune(&mut self, now_ms: u64) -> Result<usize, redis::RedisError> {
        let fields: Vec<(String, String)> = self.conn.hgetall(&self.key).await?;
        let stale = fleet_proto::backlog::stale_fields(fields.iter().map(|(f, v)| (f.as_str(), v.as_str())), now_ms);
        if !stale.is_empty() {
            tracing::info!(fields = ?stale, "deleting backlog reports of workers that stopped without withdrawing");
            redis::cmd("HDEL").arg(&self.key).arg(&stale).query_async::<()>(&mut self.conn).await?;
        }
        Ok(stale.len())
    }

    /// Removes this worker's entry (at shutdown: it no longer owes anything).
    pub async fn withdraw(&mut self) -> Result<(), redis::RedisError> {
        redis::cmd("HDEL").arg(&self.key).arg(&self.worker_id).query_async::<()>(&mut self.conn).await?;
        Ok(())
    }
}
