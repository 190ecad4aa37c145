//! This worker's backlog in Redis, every second, for producers' fail-fast
//! admission (`fleet_proto::backlog`).

use redis::aio::ConnectionManager;
use std::time::Duration;

/// Publishes this worker's backlog for producers' fail-fast admission
/// (`fleet_proto::backlog`).
pub struct BacklogPublisher {
    conn: ConnectionManager,
    key: String,
    worker_id: String,
}

impl BacklogPublisher {
    pub async fn connect(
        client: redis::Client,
        model: &fleet_proto::ModelName,
        worker_id: String,
    ) -> Result<Self, redis::RedisError> {
        let conn = fleet_connect::redis::managed(client, Duration::from_secs(2), Duration::from_secs(2)).await?;
        Ok(Self { conn, key: fleet_proto::backlog::backlog_key(model), worker_id })
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
        Ok(())
    }

    /// Removes this worker's entry (at shutdown: it no longer owes anything).
    pub async fn withdraw(&mut self) -> Result<(), redis::RedisError> {
        redis::cmd("HDEL").arg(&self.key).arg(&self.worker_id).query_async::<()>(&mut self.conn).await?;
        Ok(())
    }
}
