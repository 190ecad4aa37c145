//! Fail-fast admission: refuse a send while the model's workers are too far
//! behind, so callers shed load or go elsewhere instead of queueing work that
//! would only expire. The 429 of this system.
//!
//! The backlog comes from the workers' own reports in Redis
//! (`fleet_proto::backlog`): each worker publishes every second what it
//! still owes, so one HGETALL gives a fresh total without asking the broker.
//! It is cached for `refresh` (default 250 ms) so a busy producer costs Redis
//! a few reads per second, not one per message. When Redis cannot be read
//! the check lets the send through (fail open) and says so in a warning: the
//! workers' own in-flight bounds keep them safe either way.

use fleet_proto::{backlog, ModelName};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, AsyncConnectionConfig};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{model} is overloaded: backlog {backlog} > limit {limit}; shed or retry later")]
pub struct Overloaded {
    pub model: String,
    pub backlog: u64,
    pub limit: u64,
}

pub struct BacklogGuard {
    conn: MultiplexedConnection,
    max_backlog: u64,
    refresh: Duration,
    cache: Mutex<HashMap<ModelName, (Instant, Option<u64>)>>,
}

impl BacklogGuard {
    pub async fn connect(redis_url: &str, max_backlog: u64) -> Result<Self, redis::RedisError> {
        Self::connect_client(redis::Client::open(redis_url)?, max_backlog).await
    }

    /// With a client built elsewhere, e.g. with TLS settings.
    pub async fn connect_client(client: redis::Client, max_backlog: u64) -> Result<Self, redis::RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_millis(500)));
        let conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        Ok(Self { conn, max_backlog, refresh: Duration::from_millis(250), cache: Mutex::new(HashMap::new()) })
    }

    pub fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    /// The model's current backlog as the workers reported it (`None`: no
    /// fresh report, e.g. no worker running).
    pub async fn backlog(&self, model: &ModelName) -> Option<u64> {
        if let Some((at, value)) = self.cached(model) {
            if at.elapsed() < self.refresh {
                return value;
            }
        }
        let reports: Result<HashMap<String, String>, _> = self.conn.clone().hgetall(backlog::backlog_key(model)).await;
        let value = match reports {
            Ok(reports) => backlog::fresh_total(reports.values().map(String::as_str), now_ms()),
            Err(e) => {
                tracing::warn!(error = %e, %model, "backlog unreadable; admitting");
                None
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(model.clone(), (Instant::now(), value));
        }
        value
    }

    /// `Err(Overloaded)` when the backlog is above the limit.
    pub async fn check(&self, model: &ModelName) -> Result<(), Overloaded> {
        match self.backlog(model).await {
            Some(backlog) if backlog > self.max_backlog => {
                Err(Overloaded { model: model.to_string(), backlog, limit: self.max_backlog })
            }
            _ => Ok(()),
        }
    }

    fn cached(&self, model: &ModelName) -> Option<(Instant, Option<u64>)> {
        self.cache.lock().ok()?.get(model).copied()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
